"""PNG plots of an experiment (matplotlib, Agg: no display needed).

    link_load.png     utilization of every link direction, grouped by tier (on a large
                      fabric: each tier's links ranked by load, with max/mean)
    queue_depth.png   sampled depth of every queue that held packets, over time
    pfc_ecn.png       PFC frames sent/received and ECN marks per switch port

Each function returns the file name it wrote, or None when there is nothing to draw
(e.g. no queue ever held a packet, or the kernel target has no queues to sample).
"""
from pathlib import Path

from testbed.units import rate_text


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


TIER_NAMES = ("host links", "leaf-spine", "spine-agg")
TIER_COLORS = ("tab:blue", "tab:orange", "tab:green")
MAX_BARS = 96      # past this many, one labelled bar per link is a strip nobody can read
MAX_PORT_GROUPS = MAX_BARS // 3     # pfc_ecn.png: three bars a port


def _tier(row):
    ends = {row["from"][:1], row["to"][:1]}
    if "h" in ends:
        return 0
    return 1 if "a" not in ends else 2


def _link_label(row):
    return f"{row['from']}:{row['from_port']}→{row['to']}"


def link_load(summary, out_dir, name="link_load.png", title=None):
    links = sorted(summary["links"], key=lambda r: (_tier(r), r["from"], r["to"]))
    if not links:
        return None
    plt = _pyplot()
    values = [100.0 * (r.get("utilization") or 0.0) for r in links]
    if len(links) > MAX_BARS:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        _ranked_load(ax, links, values)
    else:
        fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(links) + 2), 4.5))
        _bars_per_link(ax, links, values)
    ax.set_ylabel("load while the collective ran (% of link rate)")
    ax.set_ylim(0, max(105, max(values) * 1.05))
    ax.set_title(title or f"per-link load: {summary['name']} ({summary['config']['fabric']['hash']} hashing, "
                          f"{rate_text(summary['scale']['link_rate_mbps'])} host links)", fontsize=9)
    fig.tight_layout()
    fig.savefig(Path(out_dir) / name, dpi=110)
    plt.close(fig)
    return name


def _bars_per_link(ax, links, values):
    ax.bar(range(len(links)), values, color=[TIER_COLORS[_tier(r)] for r in links])
    ax.set_xticks(range(len(links)))
    ax.set_xticklabels([_link_label(r) for r in links], rotation=70, ha="right", fontsize=7)
    from matplotlib.patches import Patch
    tiers = sorted({_tier(r) for r in links})
    ax.legend(handles=[Patch(color=TIER_COLORS[t], label=TIER_NAMES[t]) for t in tiers], fontsize=7)


def _ranked_load(ax, links, values):
    """Each tier's link directions from busiest to idlest (x: rank as a share of the tier),
    with max/mean in the legend (the paper's measure of ECMP's imbalance) and the busiest
    link named."""
    for tier in sorted({_tier(r) for r in links}):
        ranked = sorted(((v, r) for v, r in zip(values, links) if _tier(r) == tier), key=lambda vr: -vr[0])
        loads = [v for v, _ in ranked]
        mean = sum(loads) / len(loads)
        x = [100.0 * (i + 0.5) / len(loads) for i in range(len(loads))]
        ratio = f"max/mean {loads[0] / mean:.2f}" if mean > 0 else "idle"
        ax.step(x, loads, where="mid", color=TIER_COLORS[tier],
                label=f"{TIER_NAMES[tier]}: {len(loads)} link directions, max {loads[0]:.0f}%, "
                      f"mean {mean:.0f}%, {ratio}")
        if loads[0] > 0:
            ax.annotate(_link_label(ranked[0][1]), (x[0], loads[0]), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=TIER_COLORS[tier])
    ax.set_xlim(0, 100)
    ax.set_xlabel("link directions of the tier, busiest first (% of the tier)")
    ax.legend(fontsize=7)


def queue_depth(summary, samples, out_dir, name="queue_depth.png"):
    """samples: [(t, switch, port, priority, depth)] with zero depths left out."""
    if not samples:
        return None
    plt = _pyplot()
    times = sorted({s[0] for s in samples})
    series = {}
    for t, sw, port, prio, depth in samples:
        series.setdefault((sw, port, prio), {})[t] = depth
    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = sorted(series, key=lambda k: -max(series[k].values()))[:12]  # a readable number of lines
    for key in top:
        ax.step(times, [series[key].get(t, 0) for t in times], where="post", label=f"{key[0]} port {key[1]} prio {key[2]}")
    ax.set_xlabel("time since traffic start (s)")
    ax.set_ylabel("queue depth (packets)")
    ax.set_title(f"queue depth over time: {summary['name']}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(out_dir) / name, dpi=110)
    plt.close(fig)
    return name


def pfc_ecn(summary, out_dir, name="pfc_ecn.png"):
    totals = {}
    for q in summary["queues"]:
        key = f"{q['switch']}:{q['port']}"
        t = totals.setdefault(key, [0, 0, 0])
        t[0] += q["pfc_tx"]
        t[1] += q["pfc_rx"]
        t[2] += q["ecn_marked"]
    totals = {k: v for k, v in totals.items() if any(v)}
    if not totals:
        return None
    plt = _pyplot()
    keys = sorted(totals)
    shown_of = ""
    if len(keys) > MAX_PORT_GROUPS:
        keys = sorted(sorted(totals, key=lambda k: -sum(totals[k]))[:MAX_PORT_GROUPS])
        shown_of = f" (the {MAX_PORT_GROUPS} ports with the most, of {len(totals)})"
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(keys) + 2), 4.5))
    width = 0.27
    for i, (label, color) in enumerate((("PFC sent", "tab:red"), ("PFC received", "tab:purple"),
                                        ("ECN marked", "tab:olive"))):
        ax.bar([x + (i - 1) * width for x in range(len(keys))], [totals[k][i] for k in keys], width,
               label=label, color=color)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(keys, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("frames / packets")
    ax.set_title(f"PFC and ECN per switch port: {summary['name']}{shown_of}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(out_dir) / name, dpi=110)
    plt.close(fig)
    return name


def all_plots(summary, samples, out_dir):
    written = [link_load(summary, out_dir), queue_depth(summary, samples, out_dir), pfc_ecn(summary, out_dir)]
    return [w for w in written if w]
