"""Both targets behind one interface: the BMv2 command line and agent (Thrift CLI commands,
PFC applied as queue-rate pauses), the engine target as a process, and BMv2 for real
where its binaries exist."""
import os
import socket
import time

import pytest

from switch_netns import Topology, ipv4_frame, is_test_frame, tag_of
from testbed.switch import pfc
from testbed.switch.agent import AgentError
from testbed.switch.bmv2 import (SIMPLE_SWITCH_CLI, SIMPLE_SWITCH_GRPC, Bmv2Agent, binaries_missing,
                                  simple_switch_command)
from testbed.switch.targets import Bmv2Target, EngineTarget, make_target

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_simple_switch_grpc_command_line():
    cmd = simple_switch_command({2: "s1-eth2", 1: "s1-eth1"}, "prog.json", "127.0.0.1:50001", 3, 255,
                                "/tmp/caps", True, 9091)
    assert cmd[0] == "simple_switch_grpc"
    assert cmd[cmd.index("-i") + 1] == "1@s1-eth1" and "2@s1-eth2" in cmd
    after = cmd[cmd.index("--") + 1:]
    assert after[after.index("--priority-queues") + 1] == "8"
    assert after[after.index("--grpc-server-addr") + 1] == "127.0.0.1:50001"
    assert after[after.index("--cpu-port") + 1] == "255"
    before = cmd[:cmd.index("--")]
    assert "--log-console" in before and before[before.index("--pcap") + 1] == "/tmp/caps"
    assert before[-1] == "prog.json"
    assert "--no-p4" in simple_switch_command({1: "a"})


def test_bmv2_agent_translates_rates_and_applies_pfc_pauses():
    issued = []
    agent = Bmv2Agent(9090, ports=[1, 2], mean_packet_bytes=1000, runner=lambda cmds: issued.extend(cmds))
    agent.set_port_rate(2, 8_000_000)                        # 1000 packets/s of 1000 bytes
    assert issued == [f"set_queue_rate 1000 2 {p}" for p in range(8)]
    issued.clear()
    agent.set_queue_depth(2, 32, priority=3)
    assert issued == ["set_queue_depth 32 2 3"]
    issued.clear()
    agent.set_pfc(2, [3])
    quanta = 3000                                            # 3000*512 / 8 Mb/s = 192 ms
    acted = agent.handle_pfc_frame(2, pfc.build_pfc("02:00:00:00:00:01", {3: quanta, 5: quanta}))
    assert acted == [3]
    assert issued == ["set_queue_rate 1 2 3"]
    remaining = agent.pause_state(2)[3]
    assert 0.15e6 < remaining <= pfc.pause_seconds(quanta, 8_000_000) * 1e6
    time.sleep(pfc.pause_seconds(quanta, 8_000_000) + 0.1)
    assert issued[-1] == "set_queue_rate 1000 2 3" and agent.pause_state(2) == {}
    agent.handle_pfc_frame(2, pfc.build_pfc("02:00:00:00:00:01", {3: 0xFFFF}))
    agent.handle_pfc_frame(2, pfc.build_pfc("02:00:00:00:00:01", {3: 0}))      # XON resumes now
    assert issued[-2:] == ["set_queue_rate 1 2 3", "set_queue_rate 1000 2 3"]
    counters = agent.port_counters(2)
    assert counters["pfc_rx"][3] == 3 and counters["pfc_rx"][5] == 1
    assert counters["paused_us"][3] >= 0.15e6
    agent.mirroring_add(5, 2)
    assert issued[-1] == "mirroring_add 5 2"
    with pytest.raises(AgentError, match="no delay"):
        agent.set_impairments(2, delay_us=10)
    with pytest.raises(AgentError, match="queue occupancy"):
        agent.queue_depth(2, 0)


def test_make_target_names_the_choices():
    assert isinstance(make_target("engine", {1: "x"}), EngineTarget)
    with pytest.raises(ValueError, match="engine, bmv2"):
        make_target("tofino", {})


@root_only
def test_engine_target_starts_serves_agent_and_stops():
    topo = Topology(f"rlst{os.getpid() % 100000}", 2)
    target = EngineTarget({1: topo.switch_ifaces[1], 2: topo.switch_ifaces[2]},
                          grpc_addr=f"127.0.0.1:{free_port()}", agent_addr=f"127.0.0.1:{free_port()}")
    try:
        target.start(ledger=topo.ledger)
        target.agent.set_pfc(1, [3])
        assert target.agent.port_counters(1)["pfc_enabled"] == [3]
    finally:
        target.stop()
        topo.close()
    assert target.process.returncode == 0


@pytest.mark.bmv2
@root_only
@pytest.mark.skipif(binaries_missing() is not None, reason=binaries_missing() or "")
def test_bmv2_forwards_per_p4runtime_entries(tmp_path):
    from p4runtime_sh import shell as sh
    program = os.path.join(os.path.dirname(__file__), "p4", "switch_basic.p4")
    topo = Topology(f"rlsb{os.getpid() % 100000}", 2)
    target = Bmv2Target({1: topo.switch_ifaces[1], 2: topo.switch_ifaces[2]}, grpc_addr=f"127.0.0.1:{free_port()}",
                        device_id=1, cpu_port=255, program=program, thrift_port=free_port(),
                        build_dir=str(tmp_path))
    try:
        json_path, p4info_path = target.compile()
        target.start(ledger=topo.ledger)
        sh.setup(device_id=1, grpc_addr=target.grpc_addr, election_id=(0, 1),
                 config=sh.FwdPipeConfig(p4info_path, json_path), verbose=False)
        try:
            te = sh.TableEntry("MyIngress.forward")(action="MyIngress.set_port")
            te.match["standard_metadata.ingress_port"] = "1"
            te.action["port"] = "2"
            te.insert()
            topo.hosts[1].send(ipv4_frame(tag=5))
            assert [tag_of(f) for _, f in topo.hosts[2].receive(is_test_frame)] == [5]
        finally:
            sh.teardown()
    finally:
        target.stop()
        topo.close()


def _bmv2_runtime_missing():
    return binaries_missing((SIMPLE_SWITCH_GRPC, SIMPLE_SWITCH_CLI))


@pytest.mark.bmv2
@pytest.mark.skipif(_bmv2_runtime_missing() is not None, reason=_bmv2_runtime_missing() or "")
def test_bmv2_agent_raises_what_simple_switch_cli_refuses():
    """simple_switch_CLI exits 0 after a refused command and words the refusal in several ways:
    each must reach the caller as an AgentError, and accepted commands must not."""
    target = Bmv2Target({}, grpc_addr=f"127.0.0.1:{free_port()}", thrift_port=free_port())   # --no-p4
    target.start()
    try:
        agent = target.agent
        agent.set_port_rate(1, 8_000_000)
        agent.set_queue_depth(1, 64, priority=3)
        agent.mirroring_add(5, 2)
        agent.mirroring_delete(5)
        with pytest.raises(AgentError, match=r"Invalid mirroring operation \(SESSION_NOT_FOUND\)"):
            agent.mirroring_delete(5)
        with pytest.raises(AgentError, match="Unknown syntax: no_such_command"):
            agent._run(["no_such_command 1"])
        with pytest.raises(AgentError, match="priority 8 not in 0..7"):
            agent.set_queue_depth(1, 64, priority=8)
    finally:
        target.stop()


class _SlowAgentTarget(EngineTarget):
    """A stand-in switch process that opens P4Runtime at once and its agent a second later."""

    def command(self):
        import sys
        grpc_port = self.grpc_addr.rsplit(":", 1)[1]
        agent_port = self.agent_addr.rsplit(":", 1)[1]
        script = ("import socket, time\n"
                  f"g = socket.create_server(('127.0.0.1', {grpc_port}))\n"
                  "time.sleep(1.0)\n"
                  f"a = socket.create_server(('127.0.0.1', {agent_port}))\n"
                  "time.sleep(60)\n")
        return [sys.executable, "-c", script]


def test_start_returns_only_once_the_agent_listens_too():
    # under load the engine's agent opened after start() returned, and a first set_pfc was refused
    target = _SlowAgentTarget({}, grpc_addr=f"127.0.0.1:{free_port()}", agent_addr=f"127.0.0.1:{free_port()}")
    try:
        target.start(timeout=30)
        host, port = target.agent_addr.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=2).close()
    finally:
        target.stop()
