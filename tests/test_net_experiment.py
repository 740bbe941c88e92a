"""The experiment runner and the demo: `rocelab run` writes a summary.json that matches what
the fabric carried, plots and pcaps, rejects bad requests before creating anything, and
leaves nothing behind (also after Ctrl-C); the demo shows 5-tuple vs QPN hashing on the
engine.

Names are unique to this test process (interface prefix, P4Runtime ports, ledger dir).
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_net_boot import _engine_available, _marked_processes, _our_interfaces
from port_blocks import grpc_base

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths"),
]

PREFIX = f"rx{os.getpid() % 100000}"
GRPC_BASE = grpc_base(slot=1)
ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
SUMMARY_KEYS = {"schema", "name", "started", "duration_s", "traffic_s", "target", "config", "scale", "links",
                "queues", "hosts", "collective", "p4", "pcap_dir", "plots", "errors"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rocelab_run(tmp_path, *args, mark=None):
    env = dict(os.environ, ROCELAB_STATE_DIR=str(tmp_path / "state"))
    if mark:
        env["ROCELAB_TEST_MARK"] = mark
    cmd = [ROCELAB, "run", "--name-prefix", PREFIX, "--grpc-base-port", str(GRPC_BASE),
           "--out", str(tmp_path / "out"), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def _nothing_left(tmp_path):
    assert _our_interfaces(PREFIX) == []
    assert list((tmp_path / "state").glob("*.json")) == []


def test_kernel_run_summary_matches_what_the_fabric_carried(tmp_path):
    size = 128 * 1024
    proc = _rocelab_run(tmp_path, "--target", "kernel", "--size", "128K", "--qps-per-conn", "2")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "busbw" in out and "Traceback" not in out
    run = tmp_path / "out"
    s = json.loads((run / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(s)
    assert s["target"] == "kernel" and s["config"]["fabric"]["applied"] is False
    assert s["config"]["job"]["qps_per_connection"] == 2 and s["config"]["job"]["ranks"] == ["h1", "h2", "h3", "h4"]
    assert s["scale"]["time_dilation"] == 400e3 / 10

    c = s["collective"]
    assert c["status"] == "ok" and c["pattern"] == "ring_allreduce" and c["size_bytes"] == size
    assert c["busbw_gbps"] == pytest.approx(c["algbw_gbps"] * 1.5, rel=1e-3)      # 2(n-1)/n for n = 4
    assert c["busbw_gbps"] == pytest.approx(c["busbw_GBps"] * 8, rel=1e-3)
    # physics: nobody moves 1.5 x size through a 10 Mb/s NIC faster than the wire allows
    assert c["time_us"] * 1e-6 >= 1.5 * size * 8 / 10e6 * 0.95
    assert 0 < c["busbw_of_line_rate"] <= 1.0

    # links: every direction of every link, and what the hosts sent is what their leaf ports carried
    assert len(s["links"]) == 2 * 8
    assert {(l["from"], l["to"]) for l in s["links"]} >= {("h1", "leaf1"), ("leaf1", "h1"), ("leaf1", "spine1")}
    reports = {r["host"]: r for r in (json.loads(p.read_text()) for p in (run / "ranks").glob("rank*.json"))}
    for host in ("h1", "h2", "h3", "h4"):
        up = next(l for l in s["links"] if l["from"] == host)
        assert up["tx_bytes"] >= reports[host]["counters"]["data_tx_bytes"]          # payload + headers
        assert up["tx_packets"] >= reports[host]["counters"]["tx_packets"]
    # the ring crosses the spines twice (h2 -> h3 and h4 -> h1): each leaf sends >= size/2 * 1.5 up
    for leaf in ("leaf1", "leaf2"):
        uplinks = sum(l["tx_bytes"] for l in s["links"] if l["from"] == leaf and l["to"].startswith("spine"))
        assert uplinks >= 1.5 * size / 4
    hosts = {h["name"]: h for h in s["hosts"]}
    assert set(hosts) == {"h1", "h2", "h3", "h4"} and all(h["oos"] == 0 and h["status"] == "ok" for h in hosts.values())
    assert s["queues"] == []  # the kernel stand-in has no queues to report

    assert "link_load.png" in s["plots"] and (run / "link_load.png").read_bytes()[:8] == PNG_MAGIC
    assert s["pcap_dir"] == "pcap" and len(s["pcaps"]) == 12 and (run / "pcap" / s["pcaps"][0]).stat().st_size > 24
    _nothing_left(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--ecn", "5,2,0.1"], "--ecn 5,2,0.1: need 0 <= KMIN < KMAX"),
    (["--ecn", "lots"], "--ecn 'lots': expected KMIN,KMAX,PMAX"),
    (["--ranks", "9"], "placement: 9 ranks but only 4 hosts"),
    (["--rails", "2", "--leaves", "3"], "--rails 2 must divide --leaves 3"),
    (["--qps-per-conn", "0"], "argument --qps-per-conn: '0' must be between 1 and 64"),
    (["--flowlet-gap-us", "0"], "argument --flowlet-gap-us: '0' must be between"),
])
def test_bad_requests_are_rejected_before_anything_exists(tmp_path, args, message):
    proc = _rocelab_run(tmp_path, "--target", "kernel", *args)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    assert message in out and "Traceback" not in out
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists()
    assert _our_interfaces(PREFIX) == []


def _ledger_pids(tmp_path, role):
    """{node: pid} of the processes with `role` in the run's ledger (switch, rank)."""
    found = {}
    for path in (tmp_path / "state").glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue  # being rewritten
        for entry in data["entries"].get("pid", []):
            if entry.get("role") == role:
                found[entry.get("node")] = entry["name"]
    return found


def _wait_for_traffic(tmp_path, proc, ranks=4):
    """Until every rank passed its start barrier (its log says so): data is moving."""
    def started():
        logs = list((tmp_path / "out" / "ranks").glob("rank*.log"))
        return len(logs) == ranks and all("barrier" in p.read_text(errors="replace") for p in logs)
    deadline = time.monotonic() + 120
    while not started() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.3)
    assert proc.poll() is None, proc.stdout.read()


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_traffic_writes_an_interrupted_summary_and_leaves_nothing(tmp_path, signum, status):
    mark = f"{PREFIX}-sig{signum}"
    proc = _rocelab_run(tmp_path, "--target", "kernel", "--size", "4M", "--no-pcap", mark=mark)
    _wait_for_traffic(tmp_path, proc)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == status, out
    assert "Traceback" not in out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["interrupted_by"] == signal.Signals(signum).name
    assert s["collective"]["status"] == "failed" and s["faults"] == []
    assert len(s["hosts"]) == 4  # every rank was stopped and reported
    time.sleep(0.1)
    assert _marked_processes(f"ROCELAB_TEST_MARK={mark}".encode()) == []
    _nothing_left(tmp_path)


# `rocelab run` whose SIGINT arrives while the second of four ranks is being started
_CTRL_C_AT_RANK_START = """
import os, signal, sys
from testbed.net import experiment
real_start, started = experiment._start_in_host, []

def start_in_host(*args, **kwargs):
    started.append(args[1].name)
    if len(started) == 2:
        os.kill(os.getpid(), signal.SIGINT)        # the user's Ctrl-C, while the ranks start
    return real_start(*args, **kwargs)

experiment._start_in_host = start_in_host
from testbed.cli import main
sys.exit(main(["run", *sys.argv[1:]]))
"""


def test_ctrl_c_while_the_ranks_start_writes_an_interrupted_summary_and_leaves_nothing(tmp_path):
    mark = f"{PREFIX}-rankstart"
    env = dict(os.environ, ROCELAB_STATE_DIR=str(tmp_path / "state"), ROCELAB_TEST_MARK=mark)
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_AT_RANK_START, "--name-prefix", PREFIX,
                           "--grpc-base-port", str(GRPC_BASE), "--out", str(tmp_path / "out"), "--target", "kernel",
                           "--size", "1M", "--no-pcap"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "interrupted" in out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["interrupted_by"] == "SIGINT"
    assert s["collective"]["status"] == "failed" and s["faults"] == []
    hosts = {h["name"]: h for h in s["hosts"]}
    assert sorted(hosts) == ["h1", "h2", "h3", "h4"]          # every rank is reported, started or not
    assert {h["status"] for h in hosts.values()} == {"interrupted"}
    assert not (tmp_path / "out" / "ranks" / "rank2.log").exists()   # nothing started after the Ctrl-C
    time.sleep(0.1)
    assert _marked_processes(f"ROCELAB_TEST_MARK={mark}".encode()) == []
    _nothing_left(tmp_path)


def test_a_rank_killed_mid_run_fails_the_run_naming_it(tmp_path):
    proc = _rocelab_run(tmp_path, "--target", "kernel", "--size", "8M", "--no-pcap")
    _wait_for_traffic(tmp_path, proc)
    ranks = _ledger_pids(tmp_path, "rank")
    assert len(ranks) == 4
    killed_at = time.monotonic()
    os.kill(ranks["h2"], signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    print(f"rank killed -> run ended in {time.monotonic() - killed_at:.1f} s")
    assert proc.returncode == 1, out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "failed"
    assert [f for f in s["faults"] if "(h2) process died without writing its report" in f], s["faults"]
    # the others were stopped by the watchdog, not left to run into their own timeouts
    others = [h for h in s["hosts"] if h["name"] != "h2"]
    assert all(h["status"] in ("interrupted", "ok") for h in others), others
    assert "h2" in out and "Traceback" not in out
    _nothing_left(tmp_path)


@pytest.mark.skipif(bool(_engine_available()), reason=f"engine missing: {_engine_available()}")
def test_a_switch_killed_mid_run_fails_the_run_naming_it(tmp_path):
    proc = _rocelab_run(tmp_path, "--target", "engine", "--size", "8M", "--no-pcap")
    _wait_for_traffic(tmp_path, proc)
    switches = _ledger_pids(tmp_path, "switch")
    assert "spine1" in switches
    killed_at = time.monotonic()
    os.kill(switches["spine1"], signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    print(f"switch killed -> run ended in {time.monotonic() - killed_at:.1f} s")
    assert proc.returncode == 1, out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "failed"
    assert s["faults"] == [f"switch spine1 (pid {switches['spine1']}) was killed by SIGKILL"]
    assert s["errors"][0] == s["faults"][0] and "spine1" in out
    assert all(h["status"] != "timeout" for h in s["hosts"]), s["hosts"]  # not left to time out
    _nothing_left(tmp_path)


# --- the demo on the engine ---------------------------------------------------------------

def _uplink_bytes(summary, leaf):
    return {l["to"]: l["tx_bytes"] for l in summary["links"] if l["from"] == leaf and l["to"].startswith("spine")}


def test_demo_shows_qpn_hashing_spreading_what_5tuple_keeps_on_one_spine(tmp_path, capsys):
    missing = _engine_available()
    if missing:
        pytest.skip("engine switch/controller not in this checkout yet: " + ", ".join(missing))
    from testbed.net.experiment import demo
    out = tmp_path / "demo"
    status = demo(target="engine", out=out, size=256 * 1024, name_prefix=PREFIX, grpc_base_port=GRPC_BASE,
                  state_dir=tmp_path / "state")
    printed = capsys.readouterr().out
    assert status == 0, printed
    table = (out / "demo.txt").read_text()
    assert "hash 5tuple  qps/conn 1" in table and "hash qpn  qps/conn 4" in table and "busbw x" in table
    assert "line 10 Mb/s  (x40000 slower than 400G)" in table and "(Mb/s)" in table     # lab rates read as such
    five, qpn = (json.loads((out / phase / "summary.json").read_text()) for phase in ("5tuple", "qpn"))
    for s in (five, qpn):
        assert s["target"] == "engine" and s["config"]["fabric"]["applied"] is True
        assert s["collective"]["status"] == "ok" and s["collective"]["busbw_gbps"] > 0
        assert (out / s["name"] / "link_load.png").read_bytes()[:8] == PNG_MAGIC
        # PFC is on: the lossless class loses nothing (tail, headroom or watchdog drops)
        assert s["config"]["fabric"]["effective"]["pfc"]["3"]["headroom"] > 0
        lost = [q for q in s["queues"] if q["priority"] == 3 and
                (q["drops"] or q["headroom_drops"] or q["watchdog_drops"])]
        assert lost == [], lost
        # the P4 program counted the lossless class and the agent the ports: both read back
        assert any(q["priority"] == 3 and q["tx_packets"] > 0 for q in s["queues"]) or \
            any(l["tx_bytes"] > 0 for l in s["links"] if l["from"].startswith("spine"))
    # 5-tuple, 1 QP per connection: each leaf's one cross-spine connection sits on one uplink
    for leaf in ("leaf1", "leaf2"):
        up = sorted(_uplink_bytes(five, leaf).values())
        assert up[-1] > 100_000 and up[0] < 0.1 * up[-1], up
    # QPN hashing over 4 QPs: both uplinks of some leaf carry bulk data
    spread = [sorted(_uplink_bytes(qpn, leaf).values()) for leaf in ("leaf1", "leaf2")]
    assert any(up[0] > 0.15 * sum(up) for up in spread), spread
    pcaps = sorted((out / "pcap").glob("*.pcap"))
    assert len(pcaps) == 2 * (4 + 4 + 2 + 2)         # in and out of every port: leaves 4, spines 2
    res = subprocess.run(["tshark", "-n", "-r", str(out / "pcap" / next(p.name for p in pcaps if "_out" in p.name)),
                          "-c", "5"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    _nothing_left(tmp_path)


def test_bmv2_punted_pfc_frames_reach_the_punting_switchs_agent():
    """On BMv2 the controller's packet-ins carry PFC frames to the agent of the switch that
    punted them (ports there have no MAC); other packet-ins and switches are left alone."""
    from testbed.control.program_names import PUNT_MAC_CONTROL, PUNT_PFC
    from testbed.net.agents import pfc_punt_handler
    from testbed.switch import pfc
    from testbed.switch.bmv2 import Bmv2Agent
    issued = {"leaf1": [], "leaf2": []}
    agents = {name: Bmv2Agent(9090, ports=[1, 2], runner=cmds.extend) for name, cmds in issued.items()}
    for agent in agents.values():
        agent.set_port_rate(2, 8_000_000)
        agent.set_pfc(2, [3])
    issued_before = {n: list(c) for n, c in issued.items()}
    handle = pfc_punt_handler(agents)
    frame = pfc.build_pfc("02:00:00:00:00:01", {3: 0xFFFF})
    handle("leaf1", frame, {"ingress_port": 2, "reason": PUNT_MAC_CONTROL})   # not PFC: ignored
    handle("spine9", frame, {"ingress_port": 2, "reason": PUNT_PFC})          # not ours: ignored
    assert issued == issued_before
    handle("leaf1", frame, {"ingress_port": 2, "reason": PUNT_PFC})
    assert issued["leaf1"][-1] == "set_queue_rate 1 2 3" and issued["leaf2"] == issued_before["leaf2"]
    assert agents["leaf1"].port_counters(2)["pfc_rx"][3] == 1 and 3 in agents["leaf1"].pause_state(2)
    handle("leaf1", pfc.build_pfc("02:00:00:00:00:01", {3: 0}), {"ingress_port": 2, "reason": PUNT_PFC})
    assert agents["leaf1"].pause_state(2) == {}
