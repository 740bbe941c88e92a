"""An in-process switch on real veths (raw sockets) with a fake compiled program,
programmed through p4runtime-shell: the path the must-show tests take, minus the engine."""
import os
import socket

import pytest

from switch_fake_engine import FAKE_P4INFO, FakeProgram
from switch_netns import Topology, ipv4_frame, is_test_frame, tag_of
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch
from testbed.switch.ports import RawPort

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths")


def test_raw_ports_forward_per_entries_written_with_p4runtime_shell(tmp_path):
    from p4runtime_sh import shell as sh
    topo = Topology(f"rlsf{os.getpid() % 100000}", 2)
    switch = server = None
    try:
        ports = {i: RawPort(i, topo.switch_ifaces[i]) for i in (1, 2)}
        switch = Switch(ports, cpu_port=64)
        switch.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"
        server = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: FakeProgram()).start()
        (tmp_path / "p4info.txt").write_text(FAKE_P4INFO)
        (tmp_path / "prog.p4").write_text("// fake\n")
        sh.setup(device_id=1, grpc_addr=addr, election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(tmp_path / "p4info.txt"), str(tmp_path / "prog.p4")), verbose=False)
        try:
            te = sh.TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
            te.match["standard_metadata.ingress_port"] = "1"
            te.action["port"] = "2"
            te.insert()
            topo.hosts[2].drain()
            for i in range(50):
                topo.hosts[1].send(ipv4_frame(size=1000, tag=i))
            got = topo.hosts[2].receive(is_test_frame, count=50)
            assert [tag_of(f) for _, f in got] == list(range(50))
            assert switch.port_status(1)["rx_packets"] >= 50
            assert topo.hosts[1].receive(is_test_frame, within=0.2) == []   # nothing reflected back
        finally:
            sh.teardown()
    finally:
        if server:
            server.stop()
        if switch:
            switch.close()
        topo.close()
