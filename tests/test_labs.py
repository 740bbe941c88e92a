"""The guided labs: `rocelab lab` rejects bad requests cleanly, every lab builds its table,
lab.json and plot from phase summaries (synthetic ones here), and one quick lab runs for
real on the smallest Clos and leaves nothing behind.
"""
import json
import os
import subprocess
import sys

import pytest

from testbed.labs import cli, metrics
from testbed.labs.base import SCHEMA, build_clos, run_lab
import port_blocks

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALLEST = dict(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=10.0, oversubscription=1.0)


def _rocelab(*args):
    return subprocess.run([ROCELAB, "lab", *args], capture_output=True, text=True, timeout=60)


# --- arguments --------------------------------------------------------------------------

def test_list_names_every_lab():
    done = _rocelab("list")
    assert done.returncode == 0
    for lab in ("ecmp", "qpscaling", "te", "incast", "flowlet"):
        assert lab in done.stdout


@pytest.mark.parametrize("args, message", [
    (["nosuch"], "invalid choice: 'nosuch'"),
    (["ecmp", "--name-prefix", "much-too-long"], "--name-prefix 'much-too-long' must be 1-7 letters or digits"),
    (["incast", "--grpc-base-port", "70000"], "argument --grpc-base-port: '70000' must be between 1 and 65535"),
    (["te", "--target", "kernel"], "invalid choice: 'kernel'"),
])
def test_bad_requests_are_one_line_errors(args, message):
    done = _rocelab(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


# --- synthetic summaries -> rows, lab.json, table, plot --------------------------------

def _summary(clos, uplink_bytes, oos=0, busbw_gbps=0.005, queues=(), status="ok"):
    """A summary.json as testbed/net/summary.py writes it, with chosen uplink loads."""
    links = []
    for sw in clos.switches.values():
        for port in sw.ports.values():
            tx = uplink_bytes.get((sw.name, port.number), 0) if sw.role == "leaf" and port.kind == "uplink" else 10
            links.append({"from": sw.name, "from_port": port.number, "to": port.peer, "to_port": port.peer_port,
                          "tx_packets": tx // 1000, "tx_bytes": tx, "rate_mbps": port.rate_mbps,
                          "utilization": tx * 8 / 1e6 / port.rate_mbps})
    hosts = [{"name": h, "rank": i, "status": status, "oos": oos, "retransmits": oos, "pfc_rx": 0, "pfc_tx": 0}
             for i, h in enumerate(clos.hosts)]
    return {"links": links, "queues": list(queues), "hosts": hosts, "scale": clos.scale, "errors": [],
            "collective": {"status": status, "busbw_gbps": busbw_gbps if status == "ok" else None,
                           "busbw_of_line_rate": busbw_gbps * 100 if status == "ok" else None,
                           "time_us": 800000.0 if status == "ok" else None}}


def _uplinks(clos, loads):
    """{(leaf, uplink port): bytes} from a list of per-uplink loads, leaf by leaf."""
    ports = [(leaf.name, p.number) for leaf in clos.leaves for p in sorted(leaf.ports.values(), key=lambda p: p.number)
             if p.kind == "uplink"]
    return dict(zip(ports, loads))


def _lab_from(lab, clos, summaries, facts=None):
    rows = []
    for phase, summary in zip(lab.phases(clos, True), summaries):
        rows.append({"phase": phase.name, "dir": phase.name, **phase.label,
                     **lab.row(phase, summary, facts or {}), "attempts": 1,
                     "status": summary["collective"]["status"]})
    return lab.build(clos, rows, True, "engine", clos.scale, [])


def test_ecmp_lab_reports_uplink_imbalance(tmp_path):
    lab = cli.load("ecmp")
    clos = build_clos(lab, True)
    even = _summary(clos, _uplinks(clos, [100_000] * 8))
    collided = _summary(clos, _uplinks(clos, [200_000, 0, 100_000, 100_000, 300_000, 0, 0, 100_000]))
    result = _lab_from(lab, clos, [even, collided])
    assert result["schema"] == SCHEMA and result["lab"] == "ecmp"
    assert [r["uplink_max_mean"] for r in result["phases"]] == [1.0, 3.0]
    assert [r["idle_uplinks"] for r in result["phases"]] == [0, 3]
    assert 1.5 < result["notes"]["expected_max_mean"] < 3.0     # 4 flows into 4 bins, 2 leaves
    table = lab.table(result)
    assert "uplink max/mean" in table and "3.00" in table and "1.00..3.00" in table
    assert lab.plot(result, tmp_path / "lab.png") == "lab.png"
    assert (tmp_path / "lab.png").read_bytes()[:8] == PNG_MAGIC
    json.dumps(result)  # lab.json is plain JSON


def test_qpscaling_gain_is_relative_to_the_5tuple_baseline():
    lab = cli.load("qpscaling")
    clos = build_clos(lab, True)
    phases = lab.phases(clos, True)
    assert [(p.settings.hash, p.job["qps_per_connection"]) for p in phases] == [("5tuple", 1), ("qpn", 4)]
    result = _lab_from(lab, clos, [_summary(clos, {}, busbw_gbps=0.005), _summary(clos, {}, busbw_gbps=0.007)])
    assert [r["gain"] for r in result["phases"]] == [0.0, 0.4]
    assert "+40% over 5-tuple with 1 QP" in result["conclusion"]


def test_te_lab_installs_one_override_per_cross_leaf_demand():
    lab = cli.load("te")
    clos = build_clos(lab, True)
    ecmp, te = lab.phases(clos, True)
    assert ecmp.job == te.job and te.before is not None
    from testbed.labs.te import ring_demands
    demands = ring_demands(clos, te.job)
    assert len(demands) == len(clos.hosts)   # interleaved ring: every hop crosses the spines

    class FakeController:
        def __init__(self):
            self.added = []

        def add_te_override(self, *entry):
            self.added.append(entry)

    class FakeExperiment:
        fabric = type("F", (), {"controller": FakeController()})()
        log = staticmethod(lambda *_: None)

    exp = FakeExperiment()
    facts = te.before(exp)
    added = exp.fabric.controller.added
    assert facts["overrides"] == len(added) == len(demands) and facts["predicted_max_util"] == 1.0
    # CSPF gives each leaf's four flows four different uplinks
    for leaf in clos.leaves:
        assert sorted(e[3] for e in added if e[0] == leaf.name) == sorted(
            p.number for p in leaf.ports.values() if p.kind == "uplink")
    result = _lab_from(lab, clos, [_summary(clos, _uplinks(clos, [2, 0, 1, 1, 1, 1, 2, 0])),
                                   _summary(clos, _uplinks(clos, [1] * 8))], facts)
    assert [r["uplink_max_mean"] for r in result["phases"]] == [2.0, 1.0]
    assert "TE with 8 overrides: uplink max/mean 2.00 -> 1.00" in result["conclusion"]


def test_incast_lab_compares_no_cts_per_connection_credit_and_a_receiver_wide_budget(tmp_path):
    lab = cli.load("incast")
    clos = build_clos(lab, True)
    off, per_conn, budget = lab.phases(clos, True)
    assert off.job["cts"]["enabled"] is False
    assert per_conn.job["cts"]["enabled"] is True and "budget_bytes" not in per_conn.job["cts"]
    # the budget admits less than the PFC XOFF threshold (packets of 1 KB) in total; eight
    # senders with per-connection credit may have more than that in flight
    from testbed.control.knobs import DEFAULT_PFC_XOFF
    assert budget.job["cts"]["budget_bytes"] < DEFAULT_PFC_XOFF <= 8 * per_conn.job["cts"]["buffer_bytes"]
    assert [p.label["cts"] for p in (off, per_conn, budget)] == ["off", "16 KB per sender", "receiver-wide 12 KB"]
    assert len(off.job["ranks"]) == 9 and off.label["incast"] == "8:1"
    from traffic.job import parse_job
    assert parse_job(budget.job).cts_budget_bytes == budget.job["cts"]["budget_bytes"]   # the runner takes it
    leaf, port = off.label["receiver_switch"], off.label["receiver_port"]

    def queue(sw, p, depth, pfc, paused, drops=0):
        return {"switch": sw, "port": p, "priority": 3, "drops": drops, "max_depth": depth, "ecn_marked": 0,
                "pfc_tx": pfc, "pfc_rx": 0, "paused_us": paused, "tx_packets": 100}

    result = _lab_from(lab, clos, [
        _summary(clos, {}, queues=[queue(leaf, port, 60, 40, 900_000, drops=5), queue("spine1", 1, 63, 0, 0)]),
        _summary(clos, {}, queues=[queue(leaf, port, 30, 4, 20_000)]),
        _summary(clos, {}, queues=[queue(leaf, port, 7, 0, 0)])])
    off_row, per_conn_row, budget_row = result["phases"]
    assert (off_row["receiver_queue_pkts"], off_row["peak_queue_pkts"], off_row["pfc_frames"]) == (60, 63, 40)
    assert off_row["paused_ms"] == 900.0 and off_row["drops"] == 5
    assert (budget_row["receiver_queue_pkts"], budget_row["pfc_frames"]) == (7, 0)
    assert "pfc-only 60 pkts, 40 PFC, 900 ms, 5 drops" in result["conclusion"]
    assert "cts-budget 7 pkts, 0 PFC, 0 ms, 0 drops" in result["conclusion"]
    assert "receiver-wide 12 KB" in lab.table(result)
    assert lab.plot(result, tmp_path / "lab.png") == "lab.png"


def test_flowlet_lab_states_the_rtt_and_sweeps_gaps(tmp_path):
    from testbed.labs.flowlet import base_rtt_us
    lab = cli.load("flowlet")
    clos = build_clos(lab, True)
    phases = lab.phases(clos, True)
    assert [p.settings.flowlet_gap_us for p in phases] == [1000, 40000]
    assert all(p.settings.hash == "flowlet" for p in phases)
    # four links of 10 Mb/s: 1098-byte frames 878 us each, 62-byte ACKs 50 us each
    assert base_rtt_us(10, 10, 1024) == pytest.approx(4 * 878.4 + 4 * 49.6)
    # the phases' measured RTT: the median over the ranks of each rank's median ACK RTT
    summaries = [_summary(clos, {}, oos=30), _summary(clos, {}, oos=1)]
    for summary, medians in zip(summaries, ([20000.0, 25000.0, 21000.0], [30000.0])):
        for host, m in zip(summary["hosts"], medians):
            host["ack_rtt_us"] = {"samples": 5, "min": m - 1000, "median": m, "max": m + 9000}
    assert metrics.ack_rtt_us(summaries[0]) == (21000.0, 19000.0)
    rows = []
    for phase, summary in zip(phases, summaries):
        rows.append({"phase": phase.name, "dir": phase.name, **phase.label, **lab.row(phase, summary, {}),
                     "attempts": 1, "status": "ok"})
    result = lab.build(clos, rows, True, "engine", clos.scale, [])
    assert [r["oos"] for r in result["phases"]] == [30 * 8, 8]
    assert [r["rtt_us"] for r in result["phases"]] == [21000.0, 30000.0]
    assert result["notes"]["rtt_us"] == pytest.approx(4 * 4392 + 4 * 248)      # 2 Mb/s links
    assert "half RTT 9280 us" in lab.table(result) and "measured RTT: 21000..30000 us" in lab.table(result)
    assert lab.plot(result, tmp_path / "lab.png") == "lab.png"


def test_failed_phase_shows_as_failed_not_as_a_figure():
    lab = cli.load("qpscaling")
    clos = build_clos(lab, True)
    result = _lab_from(lab, clos, [_summary(clos, {}), _summary(clos, {}, status="failed")])
    assert result["phases"][1]["status"] == "failed" and result["phases"][1]["gain"] is None
    assert result["phases"][1]["busbw_mbps"] is None
    assert "failed" in lab.table(result)


def test_interleaved_ring_crosses_leaves_at_every_hop():
    ranks = [{"host": f"h{i}", "leaf": f"leaf{1 + (i - 1) // 4}"} for i in range(1, 9)]
    for seed in range(3):
        ring = metrics.interleaved(ranks, seed)
        assert sorted(r["host"] for r in ring) == sorted(r["host"] for r in ranks)
        assert all(ring[i]["leaf"] != ring[(i + 1) % 8]["leaf"] for i in range(8))
    assert metrics.interleaved(ranks, 0) != metrics.interleaved(ranks, 1)


# --- one real lab on the smallest Clos ---------------------------------------------------

@pytest.mark.mininet
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths")
def test_quick_ecmp_lab_runs_for_real_and_cleans_up(tmp_path):
    from test_net_boot import _engine_available, _our_interfaces
    missing = _engine_available()
    if missing:
        pytest.skip(f"engine switch not available: {', '.join(missing)}")
    prefix = f"lb{os.getpid() % 100000}"
    grpc_base = port_blocks.grpc_base(slot=5)
    state = tmp_path / "state"
    out = tmp_path / "lab"
    result = run_lab(cli.load("ecmp"), out, quick=True, name_prefix=prefix, grpc_base_port=grpc_base,
                     state_dir=state, shape=SMALLEST, pcap=False, log=lambda *_: None)

    on_disk = json.loads((out / "lab.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert on_disk["schema"] == SCHEMA and on_disk["topology"]["spines"] == 2
    assert [r["phase"] for r in on_disk["phases"]] == ["placement0", "placement1"]
    for row in on_disk["phases"]:
        assert row["status"] == "ok", on_disk["errors"]
        assert row["uplink_max_mean"] >= 1.0          # max over mean can never be below 1
        assert len(row["uplink_bytes"]) == 4 and sum(row["uplink_bytes"].values()) > 0
        summary = json.loads((out / row["dir"] / "summary.json").read_text())
        # PFC is on in every phase: the lossless class loses nothing (tail, headroom, watchdog)
        assert summary["config"]["fabric"]["pfc"] is True and metrics.lossless_drops(summary) == 0
    assert (out / "lab.png").read_bytes()[:8] == PNG_MAGIC
    # nothing left: interfaces, ledgers (which list every process and namespace it made)
    assert _our_interfaces(prefix) == []
    assert list(state.glob("*.json")) == []


def test_qpscaling_rings_are_pipelined_and_raise_pfc_thresholds_before_traffic():
    from types import SimpleNamespace
    from testbed.labs.qpscaling import PFC_XOFF_XON
    lab = cli.load("qpscaling")
    phases = lab.phases(build_clos(lab, True), True)
    assert all(p.job["slicing"] and p.job["chunk_bytes"] == metrics.RING_SLICE_BYTES for p in phases)
    calls = []
    exp = SimpleNamespace(fabric=SimpleNamespace(controller=SimpleNamespace(set_pfc=lambda *a: calls.append(a))))
    assert phases[0].before(exp) == {"pfc_xoff_bytes": PFC_XOFF_XON[0], "pfc_xon_bytes": PFC_XOFF_XON[1]}
    assert calls == [PFC_XOFF_XON]


def test_summary_hosts_carry_each_ranks_ack_rtt():
    from testbed.net.summary import hosts
    rtt = {"samples": 3, "min": 900.0, "median": 1000.0, "max": 5000.0}
    rows = hosts([{"rank": 1, "host": "h2", "counters": {}}, {"rank": 0, "host": "h1", "ack_rtt_us": rtt}])
    assert [(h["name"], h["ack_rtt_us"]) for h in rows] == [("h1", rtt), ("h2", None)]


def test_te_lab_quotes_the_papers_balance_claim_which_its_table_measures():
    # measured for real: max link util 73% -> 75% with TE (the same bytes in less time), uplink
    # max/mean 3.62 -> 1.01, under a closing line crediting the paper with a "lower max link utilisation"
    lab = cli.load("te")
    clos = build_clos(lab, True)
    result = _lab_from(lab, clos, [_summary(clos, _uplinks(clos, [200_000, 0, 100_000, 100_000] * 2)),
                                   _summary(clos, _uplinks(clos, [205_000] * 8), busbw_gbps=0.008)],
                       {"overrides": 8})
    ecmp, te = result["phases"]
    assert te["max_link_util"] > ecmp["max_link_util"] and te["uplink_max_mean"] < ecmp["uplink_max_mean"]
    table = lab.table(result).splitlines()
    paper = table[-1]
    assert paper.startswith("# the paper: ") and "uplink max/mean" in paper and "max link util" not in paper
    assert "uplink max/mean 2.00 -> 1.00" in table[-2]
    assert any(line.startswith("# max link util: ") and "TE can raise it" in line for line in table)


def test_te_rows_keep_the_overrides_but_not_the_phase_directory():
    from pathlib import Path
    lab = cli.load("te")
    clos = build_clos(lab, True)
    row = lab.row(lab.phases(clos, True)[1], _summary(clos, {}), {"overrides": 8, "dir": Path("/tmp/x/te")})
    assert row["overrides"] == 8 and "dir" not in row
    json.dumps(row)                           # lab.json: a Path here failed the whole te lab


def test_lossless_drops_count_tail_headroom_and_watchdog_drops_of_the_pfc_priorities_only():
    def row(prio, drops=0, headroom=0, watchdog=0):
        return {"priority": prio, "drops": drops, "headroom_drops": headroom, "watchdog_drops": watchdog}
    summary = {"config": {"fabric": {"effective": {"pfc": {"3": {}}}}},
               "queues": [row(3, 1, 2, 3), row(3, headroom=4), row(0, drops=50), row(7, watchdog=9)]}
    assert metrics.lossless_drops(summary) == 10
    summary["config"]["fabric"]["effective"] = {"pfc": {}}       # PFC off: nothing is lossless
    assert metrics.lossless_drops(summary) == 0


def test_flowlet_path_queueing_takes_the_slowest_leaf_to_leaf_path():
    """A path's uplink peak plus its spine's peak toward the other leaf, at each port's rate;
    an uplink never pairs with the spine's port back to its own leaf, host ports do not count."""
    from testbed import clos as closmod
    from testbed.labs.flowlet import path_queueing_us
    clos = closmod.build(closmod.ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=400000,
                                          oversubscription=2.0, clock="virtual"))
    leaf1, spine1 = clos.switches["leaf1"], clos.switches["spine1"]
    up = next(p for p in leaf1.ports.values() if p.peer == "spine1")
    to_leaf2 = next(p for p in spine1.ports.values() if p.peer == "leaf2")
    to_leaf1 = next(p for p in spine1.ports.values() if p.peer == "leaf1")
    host = next(p for p in leaf1.ports.values() if p.kind == "host")
    assert path_queueing_us(clos, {}) is None
    assert up.rate_mbps == to_leaf2.rate_mbps == 200000     # 25,000 B take 1 us
    peaks = {("leaf1", up.number): 50000, ("spine1", to_leaf2.number): 25000,
             ("spine1", to_leaf1.number): 50000, ("leaf1", host.number): 10 ** 6}
    # leaf1 -> spine1 -> leaf2: 2 + 1 us; leaf2 -> spine1 -> leaf1: 0 + 2 us; not 2 + 2 (no such path)
    assert path_queueing_us(clos, peaks) == pytest.approx(3.0)


def test_flowlet_reordering_note_sets_reordering_gaps_against_the_queueing():
    from testbed.labs.flowlet import reordering_note
    rows = [{"gap_us": 1, "oos": 50, "rtt_us": 8.0, "path_queue_us": 20.0, "status": "ok"},
            {"gap_us": 16, "oos": 0, "rtt_us": 6.0, "path_queue_us": 18.0, "status": "ok"},
            {"gap_us": 256, "oos": 0, "rtt_us": 12.0, "path_queue_us": 12.0, "status": "ok"}]
    note = reordering_note(rows)
    assert note.startswith("OOS at gaps of 1 us; half the measured RTT (median over phases) 4.0 us")
    assert "peak path queueing 12.0..20.0 us: 1 of 2 gaps at or below it reordered, 0 of 1 above it" in note
    assert reordering_note([]) == "-"
