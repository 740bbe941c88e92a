"""Helpers for the traffic tests: namespaces, veths and a bridge of our own, cleaned up by name."""
import ctypes
import os
import subprocess
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@contextmanager
def in_netns(name):
    """Run the body with this thread in namespace `name` (sockets opened inside stay there)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({name}) failed")
        yield
    finally:
        _libc.setns(home, CLONE_NEWNET)
        os.close(home)
        os.close(target)


class Lab:
    """Namespaces h0..hN-1, each with veth 'eth0' (10.77.0.(i+1)/24, MAC 02:77:..:i+1),
    joined by a Linux bridge in the test's own namespace — or, for two hosts with
    bridge=False, by one direct veth pair. Everything is named with `prefix` and
    recorded in a cleanup Ledger before it is created."""

    def __init__(self, prefix, hosts, bridge=True):
        from testbed.cleanup import Ledger
        self.prefix = prefix
        self.ledger = Ledger(f"traffic-test-{prefix}")
        self.hosts = []
        self.brns = f"{prefix}br"
        try:
            self._build(hosts, bridge)
        except BaseException:
            self.close()
            raise

    def _build(self, n, bridge):
        for i in range(n):
            ns = f"{self.prefix}h{i}"
            self.ledger.add("netns", ns)
            sh("ip", "netns", "add", ns)
            self.hosts.append({"ns": ns, "iface": "eth0", "ip": f"10.77.0.{i + 1}",
                               "mac": f"02:77:00:00:00:{i + 1:02x}"})
        if bridge:
            self.ledger.add("netns", self.brns)
            sh("ip", "netns", "add", self.brns)
            sh("ip", "-n", self.brns, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.brns, "link", "set", "br0", "up")
            for i, h in enumerate(self.hosts):
                sh("ip", "link", "add", "eth0", "netns", h["ns"], "type", "veth", "peer", "name",
                   f"p{i}", "netns", self.brns)
                sh("ip", "-n", self.brns, "link", "set", f"p{i}", "master", "br0", "up")
        else:
            assert n == 2
            sh("ip", "link", "add", "eth0", "netns", self.hosts[0]["ns"], "type", "veth", "peer", "name",
               "eth0", "netns", self.hosts[1]["ns"])
        for h in self.hosts:
            sh("ip", "-n", h["ns"], "link", "set", "eth0", "address", h["mac"])
            sh("ip", "-n", h["ns"], "addr", "add", h["ip"] + "/24", "dev", "eth0")
            sh("ip", "-n", h["ns"], "link", "set", "eth0", "up")
            sh("ip", "-n", h["ns"], "link", "set", "lo", "up")

    def close(self):
        self.ledger.release()
