"""Must-show: `rocelab switch` running a real P4 program (the engine) on veths in the
test's own namespaces, programmed through p4runtime-shell."""
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from switch_netns import Topology, ipv4_frame, is_test_frame, tag_of, wait_for_line
from testbed.switch import pfc
from testbed.switch.agent import RemoteEngineAgent

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
PROGRAM = os.path.join(os.path.dirname(__file__), "p4", "switch_basic.p4")
CPU_PORT = 255


def _engine_missing():
    try:
        from testbed.p4engine import compile_file  # noqa: F401
    except ImportError as exc:
        return f"the P4 engine (testbed.p4engine.compile_file) is not available yet: {exc}"
    return None


pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths"),
              pytest.mark.skipif(_engine_missing() is not None, reason=_engine_missing() or "")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    from google.protobuf import text_format
    from p4runtime_sh import shell as sh
    from testbed.p4engine import compile_file

    tmp = tmp_path_factory.mktemp("switch_engine")
    p4info_path = tmp / "switch_basic.p4info.txt"
    p4info_path.write_text(text_format.MessageToString(compile_file(PROGRAM).p4info))
    topo = Topology(f"rlse{os.getpid() % 100000}", 3)
    grpc_addr, agent_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    cmd = [ROCELAB, "switch", *[a for i in (1, 2, 3) for a in ("-i", f"{i}@{topo.switch_ifaces[i]}")],
           "--grpc-server-addr", grpc_addr, "--agent-addr", agent_addr, "--device-id", "1",
           "--cpu-port", str(CPU_PORT)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    topo.ledger.add("pid", proc.pid)
    agent = None
    try:
        wait_for_line(proc, "rocelab switch: ports")
        sh.setup(device_id=1, grpc_addr=grpc_addr, election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(p4info_path), PROGRAM), verbose=False)
        agent = RemoteEngineAgent(agent_addr)
        yield {"topo": topo, "sh": sh, "agent": agent, "proc": proc}
        sh.teardown()
    finally:
        if agent:
            agent.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        topo.ledger.discard("pid", proc.pid)
        topo.close()


def forward(sh, in_port, out_port):
    te = sh.TableEntry("MyIngress.forward")(action="MyIngress.set_port")
    te.match["standard_metadata.ingress_port"] = str(in_port)
    te.action["port"] = str(out_port)
    te.insert()
    return te


def test_packet_goes_where_p4runtime_entries_say_and_read_returns_them(rig):
    sh, hosts = rig["sh"], rig["topo"].hosts
    entry = forward(sh, 1, 3)
    try:
        hosts[3].drain()
        hosts[1].send(ipv4_frame(tag=11))
        got = hosts[3].receive(is_test_frame)
        assert [tag_of(f) for _, f in got] == [11]
        assert hosts[2].receive(is_test_frame, within=0.2) == []
        read = list(sh.TableEntry("MyIngress.forward").read())
        assert len(read) == 1
        assert int.from_bytes(read[0].match["standard_metadata.ingress_port"].exact.value, "big") == 1
        assert int.from_bytes(read[0].action["port"].value, "big") == 3
    finally:
        entry.delete()
    hosts[1].send(ipv4_frame(tag=12))
    assert hosts[3].receive(is_test_frame, within=0.3) == []    # default action drops


def test_rate_limited_port_builds_queue_visible_as_enq_qdepth(rig):
    sh, hosts, agent = rig["sh"], rig["topo"].hosts, rig["agent"]
    entry = forward(sh, 1, 2)
    agent.set_port_rate(2, 8_000_000)
    try:
        hosts[2].drain()
        for i in range(40):
            hosts[1].send(ipv4_frame(size=1000, tag=i))
        got = hosts[2].receive(is_test_frame, count=40, within=3)
        assert len(got) == 40
        depths = [int.from_bytes(f[18:20], "big") for _, f in got]   # ipv4.identification
        assert max(depths) >= 10, depths
        assert depths[0] <= 2
        span = got[-1][0] - got[0][0]
        assert span >= 39 * 1000 * 8 / 8_000_000 * 0.8              # drained at ~8 Mb/s
    finally:
        agent.set_port_rate(2, 0)
        entry.delete()


def test_pfc_frame_pauses_exactly_the_named_priority_for_the_right_time(rig):
    sh, hosts, agent = rig["sh"], rig["topo"].hosts, rig["agent"]
    entry = forward(sh, 1, 2)
    rate = 10_000_000
    agent.set_port_rate(2, rate)
    agent.set_pfc(2, [3, 4])
    quanta = 6000
    expected = pfc.pause_seconds(quanta, rate)            # 307 ms
    agent.set_watchdog(detect_ms=0)                       # longer than the PFC watchdog's 200 ms
    try:
        hosts[2].drain()
        hosts[2].send(pfc.build_pfc("02:00:00:00:00:02", {3: quanta}))
        time.sleep(0.01)
        hosts[1].send(ipv4_frame(dscp=3 << 3, tag=3))
        hosts[1].send(ipv4_frame(dscp=4 << 3, tag=4))
        got = {tag_of(f): t for t, f in hosts[2].receive(is_test_frame, count=2, within=2)}
        assert set(got) == {3, 4}
        assert got[4] < 0.1
        assert expected - 0.04 <= got[3] <= expected + 0.15, (got, expected)
        counters = agent.port_counters(2)
        assert counters["pfc_rx"][3] == 1
        assert abs(counters["paused_us"][3] / 1e6 - expected) < 0.05
        assert counters["paused_us"][4] == 0
    finally:
        agent.set_watchdog(detect_ms=-1)
        agent.set_pfc(2, [])
        agent.set_port_rate(2, 0)
        entry.delete()


def test_ten_thousand_random_frames_leave_the_switch_running(rig):
    sh, hosts, proc = rig["sh"], rig["topo"].hosts, rig["proc"]
    entry = forward(sh, 1, 2)
    try:
        rng = random.Random(10)
        for n in range(10_000):
            size = rng.choice((14, 20, 34, 60, rng.randint(14, 300)))
            junk = bytearray(rng.getrandbits(8) for _ in range(size))
            if n % 3 == 0:
                junk[12:14] = b"\x08\x00"        # IPv4 with truncated or garbage header
            try:
                hosts[1].send(bytes(junk))
            except OSError:
                pass
        time.sleep(1.0)
        assert proc.poll() is None
        hosts[2].drain()
        hosts[1].send(ipv4_frame(tag=99))
        assert [tag_of(f) for _, f in hosts[2].receive(is_test_frame)] == [99]
    finally:
        entry.delete()


def test_packet_in_and_out_through_the_cpu_port(rig):
    sh, hosts = rig["sh"], rig["topo"].hosts
    te = sh.TableEntry("MyIngress.forward")(action="MyIngress.to_cpu")
    te.match["standard_metadata.ingress_port"] = "3"
    te.insert()
    try:
        packet_in = sh.PacketIn()
        hosts[3].send(ipv4_frame(tag=31))
        msgs = list(packet_in.sniff(timeout=1.5))
        assert msgs
        meta = {m.metadata_id: int.from_bytes(m.value, "big") for m in msgs[0].packet.metadata}
        assert 3 in meta.values()
        assert tag_of(msgs[0].packet.payload) == 31
        hosts[1].drain()
        sh.PacketOut(payload=ipv4_frame(tag=32), egress_port="1").send()
        assert [tag_of(f) for _, f in hosts[1].receive(is_test_frame)] == [32]
    finally:
        te.delete()
