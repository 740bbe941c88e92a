"""leaf1 of tests/test_fabric_p4.py on real BMv2: simple_switch_grpc with one veth per switch
port (host side in its own namespace), programmed by the same FabricController over P4Runtime
with p4c-bm2-ss's output. `process` sends a frame in by one port and returns what leaves by the
others, as the engine's Pipeline.process does (packet-ins go to the controller, not here)."""
import os
import select
import socket
import time

from switch_netns import Topology

QUIET_S = 0.15      # no further frame this long after the last one: the switch is done
NOTHING_S = 1.0     # no frame at all this long: the packet was dropped


def bmv2_missing():
    """None where the bmv2 fabric tests can run here, else why not."""
    from testbed.switch.bmv2 import binaries_missing
    missing = binaries_missing()
    if missing:
        return missing
    if os.geteuid() != 0:
        return "BMv2 fabric tests need root (namespaces and veths for simple_switch_grpc's ports)"
    return None


class Bmv2Leaf:
    def __init__(self, leaf, cpu_port, build_dir):
        from testbed.switch.targets import Bmv2Target
        self.topo = Topology(f"rlfb{os.getpid() % 100000}", max(leaf.ports))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            thrift_port = s.getsockname()[1]
        self.target = Bmv2Target({p: self.topo.switch_ifaces[p] for p in leaf.ports}, grpc_addr=leaf.grpc_addr,
                                 device_id=leaf.device_id, cpu_port=cpu_port, thrift_port=thrift_port,
                                 build_dir=str(build_dir), log_path=str(build_dir / "simple_switch.log"))
        try:
            self.target.start(ledger=self.topo.ledger)
        except BaseException:
            self.topo.close()
            raise
        self._port_of = {host.sock.fileno(): port for port, host in self.topo.hosts.items()}

    def process(self, port, frame):
        """[(egress port, frame)] of what the switch sends out for `frame` arriving on `port`."""
        for host in self.topo.hosts.values():
            host.drain()
        self.topo.hosts[port].send(frame)
        socks = [host.sock for host in self.topo.hosts.values()]
        out = []
        deadline = time.monotonic() + NOTHING_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            ready, _, _ = select.select(socks, [], [], left)
            for sock in ready:
                data, addr = sock.recvfrom(65536)
                if addr[2] != socket.PACKET_OUTGOING:
                    out.append((self._port_of[sock.fileno()], data))
                    deadline = time.monotonic() + QUIET_S

    def close(self):
        try:
            self.target.stop()
        finally:
            self.topo.close()
