"""Virtual time: the same switches, NICs and ranks on a simulated clock (testbed/sim/).

Analytic checks (line rate, idle RTT), determinism per seed, 16:1 incast with and without
PFC, pcaps, and the command line: no root, bad input, Ctrl-C.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.clos import ClosSpec, build
from testbed.net.experiment import Experiment, FabricSettings, job_for
from testbed.sim import profile

ROCELAB = [sys.executable, "-m", "testbed.cli"]
RATE = 400_000.0  # Mb/s


def run_virtual(tmp_path, pattern="ring_allreduce", sizes=(1 << 20), settings=None, seed=0, pcap=False,
                spec=None, port_defaults=None, name="run", **job_kw):
    clos = build(spec or ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual"))
    job_kw.setdefault("mtu", profile.NIC_MTU)
    job = job_for(clos, pattern, list(sizes) if isinstance(sizes, (list, tuple)) else [sizes], **job_kw)
    out = tmp_path / name
    with Experiment(clos, out=out, pcap=pcap, clock="virtual", seed=seed, log=lambda m: None,
                    port_defaults=port_defaults) as exp:
        return exp.run_phase(name, job, settings or FabricSettings())


def test_one_flow_alone_reaches_line_rate_minus_headers(tmp_path):
    spec = ClosSpec(spines=1, leaves=1, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual")
    size = 4 << 20
    result = run_virtual(tmp_path, "stream", [size], spec=spec, cts=False, iterations=4)
    assert result["collective"]["status"] == "ok"
    report = json.loads((tmp_path / "run" / "ranks" / "rank0.json").read_text())
    measured = report["perftest"][0]["bw_avg_Gbps"]
    # Every packet carries Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 bytes of headers,
    # the first of a message also a RETH (16), the last its immediate (4) when it has one.
    mtu = profile.NIC_MTU
    packets = size // mtu
    frame_bytes = size + packets * 58 + 16
    expected = RATE / 1000 * size / frame_bytes
    assert measured == pytest.approx(expected, rel=0.01), (measured, expected)


def test_idle_rtt_is_serialization_plus_propagation(tmp_path):
    spec = ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual")
    result = run_virtual(tmp_path, "stream", [256], spec=spec, cts=False, iterations=1)
    rtt_us = result["hosts"][0]["ack_rtt_us"]["min"]
    rate = RATE * 1e6
    # h1 -> leaf1 -> spine1 -> leaf2 -> h2 and the ACK back: four wires each way, each frame
    # serialized at every hop (store and forward), the cables at 5 ns/m.
    data = 256 + 58 + 16 + 4            # WRITE ONLY with RETH and immediate
    ack = 14 + 20 + 8 + 12 + 4 + 4      # BTH + AETH
    prop = 2 * profile.HOST_CABLE_M + 2 * profile.FABRIC_CABLE_M
    expected_s = 4 * (data + ack) * 8 / rate + 2 * prop * profile.NS_PER_METER * 1e-9
    assert rtt_us == pytest.approx(expected_s * 1e6, abs=0.05), (rtt_us, expected_s * 1e6)


def test_a_phase_ends_two_rtts_after_its_last_rank_passed_the_final_barrier(tmp_path):
    # Ranks stayed 0.3 s after the final barrier (real time's wait for a lost UDP "go"): every
    # phase lasted 0.3 s of simulated time, 2000 times its 150 us collective, and the next
    # phase of a run began 300 ms later in the captures.
    from testbed.sim.fabric import LINGER_RTTS
    result = run_virtual(tmp_path, sizes=[1 << 20])
    assert result["collective"]["status"] == "ok"
    ranks = [json.loads(p.read_text()) for p in (tmp_path / "run" / "ranks").glob("rank*.json")]
    last_out = max(r["timing"]["total_s"] for r in ranks)      # the final barrier, since the phase began
    # the longest path, h -> leaf -> spine -> leaf -> h, a full frame stored and forwarded on each cable
    frame_s = profile.FRAME_BYTES * 8 / (RATE * 1e6)
    one_way = 2 * (frame_s + profile.HOST_CABLE_M * profile.NS_PER_METER * 1e-9) \
        + 2 * (frame_s + profile.FABRIC_CABLE_M * profile.NS_PER_METER * 1e-9)
    assert result["duration_s"] == pytest.approx(last_out + LINGER_RTTS * 2 * one_way, abs=1e-6)


def _uplinks(result):
    return [(l["from"], l["to"], l["tx_packets"]) for l in result["links"]
            if l["from"].startswith("leaf") and l["to"].startswith("spine")]


def test_same_seed_same_summary_other_seed_other_placement(tmp_path):
    a = run_virtual(tmp_path, name="a", seed=0)
    b = run_virtual(tmp_path, name="b", seed=0)
    c = run_virtual(tmp_path, name="c", seed=7)
    for r in (a, b, c):
        assert r["clock"] == "virtual" and "started" in r.pop("wall_clock")
        r.pop("name")
    assert a == b
    assert _uplinks(a) != _uplinks(c)
    on_disk = json.loads((tmp_path / "a" / "summary.json").read_text())
    on_disk.pop("wall_clock"), on_disk.pop("name"), on_disk.pop("plots")
    assert on_disk == json.loads(json.dumps({k: v for k, v in a.items() if k != "plots"}))


def _incast(tmp_path, pfc, name, size, headroom=None):
    spec = ClosSpec(spines=1, leaves=17, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual")
    # 8 MB per sender (with PFC) over 4 QPs: more than one QP's window (512 packets), so the leaves' uplink
    # queues pass XOFF once the spine pauses them, and the pause reaches the NICs.
    return run_virtual(tmp_path, "incast", [size], spec=spec, cts=False, name=name, qps_per_connection=4,
                       settings=FabricSettings(pfc=pfc, pfc_headroom=headroom), port_defaults={"queue_depth": 2048})


def test_incast_16_to_1_lossless_with_pfc_and_drops_without(tmp_path):
    on = _incast(tmp_path, True, "pfc-on", 128 << 20)
    assert on["collective"]["status"] == "ok"
    assert sum(q["drops"] for q in on["queues"] if q["priority"] == 3) == 0
    assert sum(q["pfc_tx"] for q in on["queues"]) > 0
    senders = [h for h in on["hosts"] if h["rank"] != 0]
    assert sum(h["pfc_rx"] for h in senders) > 0, "PFC must reach the sending NICs"
    assert sum(q["headroom_drops"] for q in on["queues"]) == 0
    off = _incast(tmp_path, False, "pfc-off", 32 << 20)
    assert sum(q["drops"] for q in off["queues"] if q["priority"] == 3) > 0
    # The buffer model is what makes it lossless: with no headroom behind XOFF, what the
    # upstreams still send after the pause was asked for has nowhere to go.
    bare = _incast(tmp_path, True, "no-headroom", 32 << 20, headroom=0)
    assert sum(q["headroom_drops"] for q in bare["queues"]) > 0


def _rocelab(args, **kw):
    env = {**os.environ, "MPLCONFIGDIR": kw.pop("mpl", "/tmp")}
    return subprocess.run(ROCELAB + args, capture_output=True, text=True, env=env, timeout=300, **kw)


def test_cli_runs_as_an_ordinary_user_without_mininet():
    import shutil
    import tempfile
    tmp_path = Path(tempfile.mkdtemp(prefix="rocelab-sim-user-"))   # pytest's own tmp is root-only
    tmp_path.chmod(0o777)
    try:
        _run_as_nobody(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run_as_nobody(tmp_path):
    out = tmp_path / "run"
    code = ("import sys, runpy; sys.argv = ['rocelab'] + sys.argv[1:]; "
            "from testbed.cli import main; status = main(); "
            "assert 'mininet' not in sys.modules, 'virtual time imported Mininet'; sys.exit(status)")
    cmd = [sys.executable, "-c", code, "run", "--clock", "virtual", "--spines", "1", "--leaves", "2",
           "--hosts-per-leaf", "1", "--pattern", "ring_allreduce", "--size", "64K", "--out", str(out)]
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MPLCONFIGDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clock"] == "virtual" and summary["collective"]["status"] == "ok"
    assert summary["scale"]["time_dilation"] == 1.0
    # production units, no time dilation: the nccl-tests line and its last column in Gb/s
    assert "line 400 Gb/s  (virtual time)" in res.stdout and "slower than" not in res.stdout
    assert "(Gb/s)" in res.stdout and "Mb/s" not in res.stdout, res.stdout


@pytest.mark.skipif(not __import__("shutil").which("tshark"), reason="tshark not installed (make setup installs it)")
def test_pcaps_have_nanosecond_simulated_timestamps_and_dissect(tmp_path):
    out = tmp_path / "run"
    res = _rocelab(["run", "--clock", "virtual", "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1",
                    "--pattern", "stream", "--size", "64K", "--dcqcn", "on", "--out", str(out)])
    assert res.returncode == 0, res.stderr
    pcap = out / "pcap" / "leaf1-eth1_in.pcap"
    from testbed.switch.pcap import MAGIC_NSEC, read_pcap
    assert int.from_bytes(pcap.read_bytes()[:4], "little") == MAGIC_NSEC
    times = [t for t, _ in read_pcap(pcap)]
    assert times and times[-1] < 1.0, "timestamps are simulated seconds from the start"
    tshark = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch", "-e",
                             "infiniband.bth.opcode", "-Y", "infiniband"], capture_output=True, text=True, timeout=60)
    rows = [r.split("\t") for r in tshark.stdout.splitlines() if r.strip()]
    assert rows, tshark.stderr
    assert any(len(r[0].split(".")[1]) == 9 for r in rows), "nanosecond resolution"
    # headers only: each record keeps the first 128 bytes and the frame's length on the wire
    lengths = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.cap_len", "-e", "frame.len",
                              "-Y", "infiniband && frame.len > 1000"], capture_output=True, text=True, timeout=60)
    caps = {tuple(int(x) for x in r.split("\t")) for r in lengths.stdout.splitlines() if r.strip()}
    assert caps and all(cap == profile.CAPTURE_SNAPLEN < full for cap, full in caps), caps


@pytest.mark.parametrize("args, words", [
    (["--clock", "virtual", "--hash", "crc"], "--hash"),
    (["--clock", "virtual", "--target", "bmv2"], "engine target only"),
    (["--clock", "virtual", "--spines", "16", "--leaves", "16", "--hosts-per-leaf", "8", "--size", "1G"],
     "budget"),
    (["--clock", "sundial"], "--clock"),
])
def test_cli_refuses_bad_input_in_one_line(tmp_path, args, words):
    res = _rocelab(["run", *args, "--out", str(tmp_path / "x")])
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x").exists(), "refused before anything was created"


def test_ctrl_c_writes_an_interrupted_summary(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(ROCELAB + ["run", "--clock", "virtual", "--spines", "1", "--leaves", "2",
                                       "--hosts-per-leaf", "2", "--pattern", "ring_allreduce", "--size", "256M",
                                       "--no-pcap", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MPLCONFIGDIR": str(tmp_path)})
    deadline = time.monotonic() + 120
    while not (out / "ranks" / "job.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert {h["status"] for h in summary["hosts"]} == {"interrupted"}
    assert not list(out.glob("*.tmp")), "nothing half-written"


def test_faults_at_simulated_times(tmp_path):
    from testbed.sim.faults import parse_fault
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual"))
    faults = [parse_fault(text, clos) for text in
              ("switch:spine2:down@100us", "nic:h4:slow=25%@0")]
    job = job_for(clos, "ring_allreduce", [16 << 20], mtu=profile.NIC_MTU)
    with Experiment(clos, out=tmp_path / "f", pcap=False, clock="virtual", log=lambda m: None) as exp:
        result = exp.run_phase("f", job, FabricSettings(), faults=faults)
    assert result["collective"]["status"] == "ok", result["errors"]
    assert [e["fault"] for e in result["fault_events"]] == ["nic:h4:slow=25%@0us", "switch:spine2:down@100us"]
    assert result["fault_events"][1]["t_s"] > result["fault_events"][0]["t_s"]
    # the slow receiver paused its leaf; after the spine died, only spine1 carried traffic on
    slow = next(h for h in result["hosts"] if h["name"] == "h4")
    assert slow["pfc_tx"] > 0
    with pytest.raises(ValueError, match="no link between"):
        parse_fault("link:leaf1-leaf2:down@1us", clos)
    with pytest.raises(ValueError, match="KIND:TARGET"):
        parse_fault("spine1 down", clos)


@pytest.mark.parametrize("text, says", [
    ("link:leaf9-spine1:down@1us", "no switch 'leaf9' (the fabric has spine1, spine2, leaf1, leaf2)"),
    ("link:leaf1-spine9:down@1us", "no switch 'spine9' (the fabric has spine1, spine2, leaf1, leaf2)"),
    ("link:leaf1:down@1us", "a link is SWITCH-SWITCH, e.g. leaf1-spine1"),
    ("switch:core1:down@1us", "no switch 'core1' (the fabric has spine1, spine2, leaf1, leaf2)"),
    ("nic:h9:stop@1us", "no host 'h9' (the fabric has h1, h2, h3, h4)"),
])
def test_a_fault_on_what_the_fabric_lacks_names_what_it_has(text, says):
    from testbed.sim.faults import FaultError, parse_fault
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual"))
    with pytest.raises(FaultError) as err:
        parse_fault(text, clos)
    assert str(err.value) == f"--fault {text!r}: {says}"


def test_a_fault_on_a_large_fabric_names_the_ends_of_its_hosts():
    from testbed.sim.faults import FaultError, parse_fault
    clos = build(ClosSpec(spines=1, leaves=4, hosts_per_leaf=4, link_rate_mbps=RATE, clock="virtual"))
    with pytest.raises(FaultError, match=r"no host 'h17' \(the fabric has h1, h2, \.\.\., h16\)$"):
        parse_fault("nic:h17:slow=50%@0", clos)


def test_incast_lossless_with_800g_uplinks(tmp_path):
    """1:2 subscription (800G uplinks): each switch's headroom is sized for its fastest port.
    (A headroom sized for 400G everywhere dropped 293 lossless packets here.)"""
    spec = ClosSpec(spines=1, leaves=17, hosts_per_leaf=1, link_rate_mbps=RATE, oversubscription=0.5,
                    clock="virtual")
    result = run_virtual(tmp_path, "incast", [102 << 20], spec=spec, cts=False)
    assert result["collective"]["status"] == "ok"
    lossless = [q for q in result["queues"] if q["priority"] == 3]
    assert sum(q["pfc_tx"] for q in lossless) > 0
    assert [q for q in lossless if q["drops"] or q["headroom_drops"] or q["watchdog_drops"]] == []


def test_a_stopped_receiver_storms_pfc_until_the_watchdog_fires_at_200ms(tmp_path):
    """The paper's watchdog: a NIC that stops draining keeps its leaf paused (its XOFF is
    refreshed while no frame arrives); after 200 ms without a break the leaf drops what the
    stormed queue holds; once the host drains again the queue is restored and the run ends."""
    from testbed.sim.faults import parse_fault
    spec = ClosSpec(spines=1, leaves=1, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual")
    clos = build(spec)
    stop_at, resume_at = 20e-6, 0.3
    faults = [parse_fault(f"nic:h2:stop@{stop_at * 1e6:g}us", clos), parse_fault(f"nic:h2:resume@{resume_at * 1e3:g}ms", clos)]
    job = job_for(clos, "stream", [8 << 20], mtu=profile.NIC_MTU, cts=False)
    with Experiment(clos, out=tmp_path / "w", pcap=False, clock="virtual", log=lambda m: None) as exp:
        result = exp.run_phase("w", job, FabricSettings(pfc=True), faults=faults)
        # a phase reports its own switch events, not the storm of the phase before it
        after = exp.run_phase("w2", job_for(clos, "stream", [1 << 20], mtu=profile.NIC_MTU, cts=False),
                              FabricSettings(pfc=True))
    assert after["collective"]["status"] == "ok" and after["switch_events"] == []
    assert result["collective"]["status"] == "ok", result["errors"]
    start = result["fault_events"][0]["t_s"] - stop_at
    storms = [e for e in result["switch_events"] if "stormed" in e["event"]]
    restored = [e for e in result["switch_events"] if "restored" in e["event"]]
    assert len(storms) == 1 and storms[0]["switch"] == "leaf1" and "priority 3" in storms[0]["event"]
    # the pause starts once the stopped NIC's buffer passes XOFF: within a few us of the stop
    assert storms[0]["t_s"] - start == pytest.approx(stop_at + 0.2, abs=50e-6)
    assert len(restored) == 1 and restored[0]["t_s"] > resume_at
    port = next(q for q in result["queues"] if q["switch"] == "leaf1" and q["priority"] == 3 and q["watchdog_storms"])
    assert port["watchdog_drops"] > 0
    # nothing else lost: the leaf's MAC kept the sender paused while no packet passed its PG
    lossless = [q for q in result["queues"] if q["priority"] == 3]
    assert [q for q in lossless if q["drops"] or q["headroom_drops"]] == []
    receiver = next(h for h in result["hosts"] if h["name"] == "h2")
    assert receiver["pfc_tx"] > 0.2 / 84e-6      # refreshed all along (an XOFF lasts 84 us at 400G)


def test_a_p4runtime_packet_out_is_forwarded_on_the_simulated_clock():
    """A PacketOut reaches the switch in its P4Runtime server's thread; the scheduler's thread
    takes it in (nothing else touches the data path) and the frame leaves by the named port."""
    from p4.v1 import p4runtime_pb2
    from testbed.sim.fabric import SimFabric
    clos = build(ClosSpec(spines=1, leaves=1, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual"))
    with SimFabric(clos, pcap=False) as fabric:
        node = fabric.switch("leaf1")
        port = next(n for n, p in clos.switches["leaf1"].ports.items() if p.peer == "h2")
        host = fabric.host("h2")
        frame = bytes.fromhex(host.clos_host.nics[0].mac.replace(":", "")) + bytes(6) + b"\x88\xb5" + bytes(50)
        request = p4runtime_pb2.StreamMessageRequest()
        request.packet.payload = frame
        request.packet.metadata.add(metadata_id=1, value=port.to_bytes(2, "big"))
        fabric.controller.connections["leaf1"].client.stream_out_q.put(request)
        deadline = time.monotonic() + 10
        while not node.switch._injected and time.monotonic() < deadline:
            time.sleep(0.01)                       # the server thread takes the request in
        assert len(node.switch._injected) == 1
        assert host.nic_port.counters.rx_packets == 0      # not forwarded outside the clock
        t0 = fabric.scheduler.now()
        fabric.scheduler.run(until=t0 + 1e-3)
        assert not node.switch._injected
        assert host.nic_port.counters.rx_packets == 1
        assert node.switch.counters[port].tx_packets == 1
        assert fabric.scheduler.now() > t0


def test_an_experiment_without_out_reports_where_rocelab_run_does():
    # the README's `Experiment(clos, clock="virtual", seed=1)` failed on Path(None)
    from testbed import REPO_ROOT
    clos = build(ClosSpec(spines=1, leaves=1, hosts_per_leaf=2, link_rate_mbps=RATE, clock="virtual"))
    exp = Experiment(clos, clock="virtual", seed=1)
    assert exp.out.parent == REPO_ROOT / "runs" and exp.out.name.startswith("run-")
    assert exp.fabric.out_dir == exp.out and not exp.out.exists()  # nothing written before it boots


def test_a_fault_timed_after_the_run_is_reported_not_reached(tmp_path):
    # `--fault link:leaf1-spine1:down@10s` (meant: 10us) ran as if no fault had been asked for
    from testbed.sim.faults import parse_fault
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual"))
    faults = [parse_fault(text, clos) for text in ("link:leaf1-spine1:down@10s", "nic:h2:slow=50%@0")]
    job = job_for(clos, "ring_allreduce", [1 << 20], mtu=profile.NIC_MTU)
    lines = []
    with Experiment(clos, out=tmp_path / "f", pcap=False, clock="virtual", log=lines.append) as exp:
        result = exp.run_phase("f", job, FabricSettings(), faults=faults)
    assert [e["fault"] for e in result["fault_events"]] == ["nic:h2:slow=50%@0us"]
    assert result["faults_not_reached"] == ["link:leaf1-spine1:down@10000000us"]
    assert any("--fault link:leaf1-spine1:down@10000000us not reached" in line for line in lines), lines


def test_a_fault_not_reached_in_its_phase_does_not_happen_in_the_next(tmp_path):
    # phase one's link failure at 150 us (its ring ended at ~60 us) took the link down 90 us
    # into phase two, which had asked for no fault, and phase two's summary listed it
    from testbed.sim.faults import parse_fault
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual"))
    late = parse_fault("link:leaf1-spine1:down@150us", clos)
    with Experiment(clos, out=tmp_path / "f", pcap=False, clock="virtual", log=lambda m: None) as exp:
        one = exp.run_phase("one", job_for(clos, "ring_allreduce", [1 << 20], mtu=profile.NIC_MTU),
                            FabricSettings(), out=tmp_path / "f" / "one", faults=[late])
        two = exp.run_phase("two", job_for(clos, "ring_allreduce", [4 << 20], mtu=profile.NIC_MTU),
                            FabricSettings(), out=tmp_path / "f" / "two")
        wires_up = all(w.up for _a, _b, w in exp.fabric.wires)
    assert one["fault_events"] == [] and one["faults_not_reached"] == [str(late)]
    assert two["duration_s"] > 150e-6 and two["fault_events"] == [] and two["status"] == "ok"
    assert wires_up


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_ctrl_c_while_a_finished_phase_is_reported_waits_for_its_summary(tmp_path, monkeypatch):
    # Ctrl-C in the second or so after the traffic, while counters were read and plots drawn,
    # lost the whole summary.json of a run whose collective had completed
    from testbed.net import plots
    drawn = plots.all_plots

    def plots_then_ctrl_c(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)       # lands in the middle of the report
        return drawn(*args, **kwargs)
    monkeypatch.setattr(plots, "all_plots", plots_then_ctrl_c)
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual"))
    job = job_for(clos, "ring_allreduce", [256 << 10], mtu=profile.NIC_MTU)
    lines = []
    with pytest.raises(KeyboardInterrupt):
        with Experiment(clos, out=tmp_path / "r", pcap=False, clock="virtual", log=lines.append) as exp:
            exp.run_phase("r", job, FabricSettings())
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert written["status"] == "ok" and written["plots"]          # whole: plots and all
    assert any("interrupted after its traffic; summary in" in line for line in lines), lines


def test_phases_are_apart_by_more_than_twice_the_flowlet_gap(tmp_path):
    # A rank stays only two RTTs after its last barrier, so without a quiet period between
    # phases a flow began the next phase on the path its flowlet had at the end of the last one
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual"))
    job = job_for(clos, "ring_allreduce", [1 << 20], mtu=profile.NIC_MTU)
    settings = FabricSettings(hash="flowlet", flowlet_gap_us=2048)
    with Experiment(clos, out=tmp_path / "g", pcap=False, clock="virtual", log=lambda m: None) as exp:
        starts, run_ranks = [], exp.fabric.run_ranks

        def recording(*args, **kwargs):
            starts.append(exp.fabric.clock())
            return run_ranks(*args, **kwargs)
        exp.fabric.run_ranks = recording
        first = exp.run_phase("one", job, settings, out=tmp_path / "g" / "one")
        second = exp.run_phase("two", job, settings, out=tmp_path / "g" / "two")
    assert first["status"] == second["status"] == "ok"
    assert starts[0] < 1e-3                       # the first phase starts at once
    assert starts[1] - (starts[0] + first["duration_s"]) >= 2 * 2048e-6 - 1e-9     # (duration_s is rounded)
    assert first["duration_s"] < 1e-3             # the quiet period is not the phase's
