"""The switch data path as a hostile wire sees it: 802.1Q tags survive the kernel's VLAN
offload (PCP 5 reaches the program and leaves tagged), frames the kernel refuses are
drops, not tx, and a data-path thread that dies takes the switch process down."""
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from switch_netns import Topology, ipv4_frame, is_test_frame, sh, wait_for_line
from testbed.switch.datapath import Switch
from testbed.switch.ports import RawPort, enable_vlan_auxdata, with_vlan_tag

pytestmark = [pytest.mark.netns, pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths")]

PROGRAM = os.path.join(os.path.dirname(__file__), "p4", "vlan_pcp.p4")
ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")


def tagged(frame, pcp, vid=10):
    return frame[:12] + struct.pack("!HH", 0x8100, pcp << 13 | vid) + frame[12:]


def receive_tagged(host, count, within=2.0):
    """Frames from the switch as they were on the wire (tag restored from PACKET_AUXDATA)."""
    sock = host.sock
    enable_vlan_auxdata(sock)
    got = []
    deadline = time.monotonic() + within
    while len(got) < count and time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        frame, ancillary, _flags, addr = sock.recvmsg(65536, socket.CMSG_SPACE(20))
        if addr[2] != socket.PACKET_OUTGOING:
            frame = with_vlan_tag(frame, ancillary)
            if frame[6:11] == bytes.fromhex("0200000000"):
                got.append(frame)
    return got


@pytest.fixture
def rig():
    from testbed.p4engine import compile_file
    topo = Topology(f"rlvh{os.getpid() % 100000}", 2)
    ports = {}
    switch = None
    try:
        ports = {n: RawPort(n, topo.switch_ifaces[n]) for n in (1, 2)}
        switch = Switch(ports)
        switch.set_pipeline(compile_file(PROGRAM).new_pipeline())
        switch.start()
        yield topo, switch
    finally:
        if switch is not None:
            switch.close()
        else:
            for port in ports.values():
                port.close()
        topo.close()


def test_vlan_pcp_5_reaches_the_program_tagged_and_leaves_tagged(rig):
    topo, switch = rig
    frames = [tagged(ipv4_frame(size=200, tag=i), pcp=5, vid=42) for i in range(20)]
    for frame in frames:
        topo.hosts[1].send(frame)
    got = receive_tagged(topo.hosts[2], 20)
    assert got == frames                                  # byte for byte: tag, PCP and VID kept
    status = switch.port_status(2)
    assert status["enqueued"][5] == 20 and status["enqueued"][0] == 0
    # an untagged frame stays untagged (no tag invented) and lands on priority 0
    plain = ipv4_frame(size=200, tag=99)
    topo.hosts[1].send(plain)
    assert receive_tagged(topo.hosts[2], 1) == [plain]
    assert switch.port_status(2)["enqueued"][0] == 1


def test_frames_the_interface_refuses_are_drops_not_tx(rig):
    topo, switch = rig
    sh("ip", "link", "set", topo.switch_ifaces[2], "mtu", "600")
    before = switch.port_status(2)
    topo.hosts[1].send(ipv4_frame(size=1000, tag=1))      # over port 2's MTU: EMSGSIZE on send
    topo.hosts[1].send(ipv4_frame(size=500, tag=2))       # fits
    got = topo.hosts[2].receive(is_test_frame, count=2, within=1.0)
    assert [len(f) for _, f in got] == [500]
    after = switch.port_status(2)
    assert after["tx_refused"] - before["tx_refused"] == 1
    assert after["tx_packets"] - before["tx_packets"] == 1 and after["tx_bytes"] - before["tx_bytes"] == 500


class ExplodingPort:
    """A port whose receive path hits a bug the loop does not expect."""

    def __init__(self):
        self.number = 1
        self.iface = "boom0"
        self.r, self.w = os.pipe()
        self.fd = self.r

    def recv(self, _n):
        raise RuntimeError("receive path bug")

    def send(self, frame):
        return True

    def close(self):
        os.close(self.r)
        os.close(self.w)


def test_a_dying_data_path_reports_why():
    port = ExplodingPort()
    switch = Switch({1: port})
    reasons = []
    switch.on_failure = reasons.append
    switch.start()
    os.write(port.w, b"x")
    switch._thread.join(5)
    try:
        assert not switch._thread.is_alive()
        assert len(reasons) == 1 and "RuntimeError: receive path bug" in reasons[0] and switch.failure == reasons[0]
    finally:
        switch.close()


def test_switch_process_exits_when_its_data_path_dies(tmp_path):
    """`rocelab switch` with a receive path that fails on the first frame: the process logs
    why and exits (status 1) instead of serving P4Runtime with nothing forwarding."""
    topo = Topology(f"rlvd{os.getpid() % 100000}", 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    script = textwrap.dedent("""
        import sys
        from testbed.switch import ports
        def broken(self, bufsize=65536):
            raise RuntimeError("injected receive fault")
        ports.RawPort.recv = broken
        from testbed.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    cmd = [sys.executable, "-c", script, "switch", "-i", f"1@{topo.switch_ifaces[1]}",
           "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--agent-addr", "none", PROGRAM]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    topo.ledger.add("pid", proc.pid)
    try:
        wait_for_line(proc, "rocelab switch: ports")
        topo.hosts[1].send(ipv4_frame(tag=1))
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert "data path failed: RuntimeError: injected receive fault" in err and "Traceback" not in err
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", grpc_port), timeout=1).close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        topo.ledger.discard("pid", proc.pid)
        topo.close()
