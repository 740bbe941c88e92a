"""`rocelab switch` as a process on real veths: agent, PFC at the MAC, pcaps, robustness,
clean SIGTERM. Needs no P4 program (the MAC and agent work before a pipeline is set)."""
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from switch_netns import Topology, ipv4_frame, is_test_frame, wait_for_line
from testbed.switch import pfc
from testbed.switch.agent import AgentError, RemoteEngineAgent
from testbed.switch.pcap import read_pcap

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def topo():
    t = Topology(f"rlsp{os.getpid() % 100000}", 2)
    yield t
    t.close()


def test_switch_process_agent_pfc_pcap_garbage_and_sigterm(topo, tmp_path):
    grpc_addr, agent_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    cmd = [ROCELAB, "switch", "-i", f"1@{topo.switch_ifaces[1]}", "-i", f"2@{topo.switch_ifaces[2]}",
           "--grpc-server-addr", grpc_addr, "--agent-addr", agent_addr, "--pcap", str(tmp_path),
           "--pfc", "3", "--rate", "10M"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    topo.ledger.add("pid", proc.pid)
    agent = RemoteEngineAgent(agent_addr)
    try:
        wait_for_line(proc, "rocelab switch: ports")
        assert agent.ports() == [1, 2]
        assert agent.port_counters(2)["rate_bps"] == 10_000_000
        agent.set_port_rate(2, 1_000_000)
        agent.set_queue_depth(2, 16, priority=5)
        counters = agent.port_counters(2)
        assert counters["rate_bps"] == 1_000_000 and counters["queue_limit"][5] == 16
        with pytest.raises(AgentError, match="priority"):
            agent.set_queue_depth(2, 16, priority=9)
        with pytest.raises(AgentError, match="no port 7"):
            agent.port_counters(7)

        for i in range(5):
            topo.hosts[1].send(ipv4_frame(tag=i))
        # PFC for priority 3 at 10 Mb/s reference: 0xFFFF quanta = 3.36 s at 10M (port 2 is 1M now).
        topo.hosts[2].send(pfc.build_pfc("02:00:00:00:00:02", {3: 1000, 4: 1000}))
        time.sleep(0.2)
        paused = agent.pause_state(2)
        assert set(paused) == {3}                        # 4 is not PFC-enabled on this port
        assert 0 < paused[3] <= pfc.pause_seconds(1000, 1_000_000) * 1e6
        counters = agent.port_counters(2)
        assert counters["pfc_rx"][3] == 1 and counters["pfc_rx"][4] == 1 and counters["pfc_consumed"] == 1

        rng = random.Random(4)
        sent = 0
        for _ in range(10_000):
            junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 200)))
            try:
                topo.hosts[1].send(junk)
                sent += 1
            except OSError:
                pass
        time.sleep(0.5)
        assert proc.poll() is None
        assert agent.port_counters(1)["rx_packets"] >= 5 + sent * 0.9
    finally:
        agent.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
            topo.ledger.discard("pid", proc.pid)
    assert proc.returncode == 0, proc.stderr.read()
    captured = read_pcap(tmp_path / f"{topo.switch_ifaces[1]}_in.pcap")
    ours = [f for _, f in captured if is_test_frame(f)]
    assert len(ours) >= 5
    assert os.path.exists(tmp_path / f"{topo.switch_ifaces[2]}_out.pcap")


def test_bad_command_lines_are_explained():
    for args, text in ((["-i", "x@"], "PORT@IFACE"), (["--pfc", "8"], "not in 0..7"),
                       (["--rate", "fast"], "bits/s"), (["-i", "1@a", "-i", "1@b"], "twice"),
                       (["/nonexistent.p4"], "no such file")):
        res = subprocess.run([ROCELAB, "switch", *args], capture_output=True, text=True, timeout=30)
        assert res.returncode != 0
        assert text in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_pcap_makes_its_directory_and_refuses_a_file(tmp_path):
    # the README's `rocelab switch -i 1@veth1 -i 2@veth2 --pcap pcaps PROG.p4` stopped at
    # "directory 'pcaps' does not exist" on a first run
    pcaps = tmp_path / "pcaps"
    grpc_addr, agent_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([ROCELAB, "switch", "--grpc-server-addr", grpc_addr, "--agent-addr", agent_addr,
                             "--pcap", str(pcaps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "rocelab switch: ports")
        assert pcaps.is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert proc.returncode == 0, proc.stderr.read()
    res = subprocess.run([ROCELAB, "switch", "--pcap", __file__], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"rocelab switch: --pcap: {__file__!r} exists and is not a directory"]


def test_a_taken_agent_port_stops_the_switch_before_p4runtime_answers():
    """The fabric takes an answering P4Runtime port for a switch that is up: a switch whose agent
    cannot listen must exit without its P4Runtime port ever having answered (it used to open
    P4Runtime first, so a fabric could see it ready and then find nothing there)."""
    grpc_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        agent_addr = f"127.0.0.1:{taken.getsockname()[1]}"
        proc = subprocess.Popen([ROCELAB, "switch", "--grpc-server-addr", f"127.0.0.1:{grpc_port}",
                                 "--agent-addr", agent_addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        answered = 0
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", grpc_port), timeout=0.2):
                    answered += 1
            except OSError:
                time.sleep(0.002)
        proc.wait(timeout=10)
    assert proc.returncode == 1 and answered == 0
    err = proc.stderr.read()
    assert "rocelab switch:" in err and "Address already in use" in err and "Traceback" not in err, err
