"""Namespaces and veths for the switch tests: host i sits in namespace <prefix>h<i> behind
veth <prefix>h<i> whose peer <prefix>s<i> is switch port i in the root namespace."""
import ctypes
import os
import socket
import subprocess
import threading
import time

from testbed.cleanup import Ledger

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def in_netns(netns, fn):
    """Run fn() on a thread that joined namespace `netns` (sockets made there stay there)."""
    result = {}

    def body():
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {netns}")
            result["value"] = fn()
        except BaseException as exc:   # handed back to the caller
            result["error"] = exc
        finally:
            os.close(fd)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


class HostPort:
    """A raw socket on a host's veth inside its namespace."""

    def __init__(self, netns, iface):
        def make():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
            s.bind((iface, 3))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            return s
        self.sock = in_netns(netns, make)

    def send(self, frame):
        self.sock.send(frame)

    def drain(self):
        self.sock.setblocking(False)
        try:
            while True:
                self.sock.recv(65536)
        except BlockingIOError:
            pass
        finally:
            self.sock.setblocking(True)

    def receive(self, accept, count=1, within=2.0):
        """Up to `count` frames for which accept(frame) is true, with arrival times."""
        got = []
        start = time.perf_counter()
        while len(got) < count:
            left = within - (time.perf_counter() - start)
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                frame, addr = self.sock.recvfrom(65536)
            except socket.timeout:
                break
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            if accept(frame):
                got.append((time.perf_counter() - start, frame))
        return got

    def close(self):
        self.sock.close()


class Topology:
    def __init__(self, prefix, nports):
        self.prefix = prefix
        self.ledger = Ledger(prefix)
        self.switch_ifaces = {}
        self.hosts = {}
        for i in range(1, nports + 1):
            ns, host_if, sw_if = f"{prefix}h{i}", f"{prefix}h{i}", f"{prefix}s{i}"
            self.ledger.add("netns", ns)
            sh("ip", "netns", "add", ns)
            self.ledger.add("link", sw_if)
            sh("ip", "link", "add", sw_if, "type", "veth", "peer", "name", host_if)
            sh("ip", "link", "set", host_if, "netns", ns)
            for args in (("ip", "link", "set", sw_if, "up"),
                         ("sysctl", "-q", "-w", f"net.ipv6.conf.{sw_if}.disable_ipv6=1")):
                subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for args in (("sysctl", "-q", "-w", f"net.ipv6.conf.{host_if}.disable_ipv6=1"),
                         ("ip", "link", "set", host_if, "up"), ("ip", "link", "set", "lo", "up")):
                subprocess.run(("ip", "netns", "exec", ns) + args, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            self.switch_ifaces[i] = sw_if
            self.hosts[i] = HostPort(ns, host_if)

    def close(self):
        for host in self.hosts.values():
            host.close()
        self.ledger.release()


def ipv4_frame(dscp=0, size=100, tag=0, src=1, dst=2):
    import struct
    eth = bytes.fromhex(f"0200000000{dst:02x}0200000000{src:02x}") + b"\x08\x00"
    ip = (bytes([0x45, dscp << 2]) + struct.pack("!HHHBBH", size - 14, 0, 0, 64, 17, 0)
          + bytes([10, 0, 0, src, 10, 0, 0, dst]))
    udp = struct.pack("!HHHH", 1234, 4791, size - 34, 0) + struct.pack("!I", tag)
    return (eth + ip + udp).ljust(size, b"\x00")


def tag_of(frame):
    import struct
    return struct.unpack("!I", frame[42:46])[0]


def is_test_frame(frame):
    return len(frame) >= 46 and frame[12:14] == b"\x08\x00" and frame[6:11] == bytes.fromhex("0200000000")


def wait_for_line(proc, text, timeout=20.0):
    """Read proc.stdout until a line containing `text`; returns the lines read."""
    import select
    lines = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if text in line:
                return lines
        if proc.poll() is not None:
            break
    raise AssertionError(f"no {text!r} from the switch; got {lines!r}; stderr: "
                         f"{proc.stderr.read() if proc.poll() is not None else ''}")
