"""The report's plots stay readable at any fabric size (testbed/net/plots.py)."""
import struct

from testbed.net import plots


def _summary(leaves, spines, hosts_per_leaf):
    links = []
    for leaf in range(1, leaves + 1):
        for spine in range(1, spines + 1):
            load = 0.9 if (leaf, spine) == (1, 1) else 0.1
            links.append({"from": f"leaf{leaf}", "from_port": hosts_per_leaf + spine, "to": f"spine{spine}",
                          "to_port": leaf, "utilization": load})
        for h in range(hosts_per_leaf):
            links.append({"from": f"h{(leaf - 1) * hosts_per_leaf + h + 1}", "from_port": 0, "to": f"leaf{leaf}",
                          "to_port": h + 1, "utilization": 0.5})
    queues = [{"switch": f"leaf{leaf}", "port": p, "pfc_tx": leaf * p, "pfc_rx": 0, "ecn_marked": 1}
              for leaf in range(1, leaves + 1) for p in range(1, spines + hosts_per_leaf + 1)]
    return {"name": "t", "links": links, "queues": queues, "config": {"fabric": {"hash": "qpn"}},
            "scale": {"link_rate_mbps": 400_000.0}}


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_a_small_fabric_gets_a_bar_per_link(tmp_path):
    summary = _summary(leaves=2, spines=2, hosts_per_leaf=2)      # 8 link directions
    assert plots.link_load(summary, tmp_path) == "link_load.png"
    width, _ = _png_size(tmp_path / "link_load.png")
    assert width <= 12 * 110                                       # grows with the links, from 6 in


def test_a_128_host_fabric_keeps_its_plots_a_page_wide(tmp_path):
    summary = _summary(leaves=16, spines=16, hosts_per_leaf=8)    # 384 link directions, 384 ports
    assert plots.link_load(summary, tmp_path) == "link_load.png"
    assert plots.pfc_ecn(summary, tmp_path) == "pfc_ecn.png"
    for name in ("link_load.png", "pfc_ecn.png"):
        width, height = _png_size(tmp_path / name)
        assert width <= 40 * 110 and height <= 5 * 110, (name, width, height)   # was 0.35 in a link


def test_the_ranked_view_gives_each_tier_its_max_over_mean():
    summary = _summary(leaves=16, spines=16, hosts_per_leaf=8)
    links = summary["links"]
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    plots._ranked_load(ax, links, [100.0 * r["utilization"] for r in links])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    # leaf-spine: one direction at 90%, 255 at 10%: mean 10.3%, max/mean 8.73
    assert legend == ["host links: 128 link directions, max 50%, mean 50%, max/mean 1.00",
                      "leaf-spine: 256 link directions, max 90%, mean 10%, max/mean 8.73"]
