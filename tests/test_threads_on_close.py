"""Closing joins the threads it owns: after FabricController.close() no thread of the
controller runs on (its stream receiver and drain, a packet-in handler in progress), after
DigestLists.close() no digest timer, after Bmv2Agent.close() no PFC resume timer. A thread
left running touched a fabric that was being torn down (and kept the process alive)."""
import threading
import time

import pytest
from p4.v1 import p4runtime_pb2

from testbed.clos import ClosSpec, build


def _engine_missing():
    try:
        from testbed.p4engine import compile_source  # noqa: F401
    except ImportError as exc:
        return f"the P4 engine is not available ({exc})"
    return None


@pytest.fixture
def virtual_fabric(tmp_path):
    """A booted 1x2 virtual fabric: engine P4Runtime servers in this process, the controller
    connected to each over gRPC."""
    if _engine_missing():
        pytest.skip(_engine_missing())
    from testbed.sim.fabric import SimFabric
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, link_rate_mbps=400_000, clock="virtual"))
    fabric = SimFabric(clos, out_dir=tmp_path, pcap=False)
    fabric.start()
    try:
        yield fabric
    finally:
        fabric.stop()


def _controller_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("p4rt-client-") and t.is_alive()]


def test_controller_close_joins_its_threads_even_with_a_packet_in_handler_running(virtual_fabric):
    ctl = virtual_fabric.controller
    assert len(_controller_threads()) == 2 * len(ctl.connections)      # a receiver and a drain each
    in_handler, release, ran = threading.Event(), threading.Event(), []

    def slow_handler(switch, payload, meta):
        ran.append(threading.current_thread())
        in_handler.set()
        release.wait(10)        # as a BMv2 PFC punt running the Thrift CLI on a loaded machine
        ran.append("done")

    ctl.packet_in_handler = slow_handler
    packet_in = p4runtime_pb2.StreamMessageResponse(packet=p4runtime_pb2.PacketIn(payload=b"x"))
    ctl.connections["leaf1"].client.stream_in_q["packet"].put(packet_in)
    assert in_handler.wait(10)
    threading.Timer(2.5, release.set).start()       # longer than close() used to wait for the drain
    ctl.close()
    virtual_fabric.controller = None
    assert ran[-1] == "done" and not ran[0].is_alive()
    assert _controller_threads() == []


def test_digest_timer_is_joined_on_close():
    from testbed.p4rt.digests import DigestLists
    sent = []
    lists = DigestLists(lambda *message: sent.append(message))
    lists.configure(1, p4runtime_pb2.DigestEntry.Config(max_timeout_ns=10**9, ack_timeout_ns=10**9))
    lists.learn(1, (7,))
    timer = lists._timer
    assert timer is not None and timer.is_alive()
    lists.close()
    assert not timer.is_alive()


def test_bmv2_agent_close_cancels_and_joins_its_pause_timers():
    from testbed.switch import pfc
    from testbed.switch.bmv2 import Bmv2Agent
    issued = []
    agent = Bmv2Agent(9090, ports=[1, 2], mean_packet_bytes=1000, runner=issued.extend)
    agent.set_pfc(2, [3, 5])
    agent.handle_pfc_frame(2, pfc.build_pfc("02:00:00:00:00:01", {3: 0xFFFF, 5: 0xFFFF}))   # ~4 s pauses
    timers = list(agent._timers.values())
    assert len(timers) == 2 and all(t.is_alive() for t in timers)
    agent.close()
    assert not any(t.is_alive() for t in timers)
    agent.handle_pfc_frame(2, pfc.build_pfc("02:00:00:00:00:01", {3: 0xFFFF}))   # after close: no new timer
    assert agent._timers == {}
    time.sleep(0.05)
    assert not any(t.is_alive() for t in timers)
