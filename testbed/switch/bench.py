"""Switch benchmark: forwarded packets/s at zero loss through one switch between two hosts.

Host 1 and host 2 sit in namespaces of their own behind veth pairs; the switch
side of both veths is given in turn to the engine switch (`rocelab switch`),
to BMv2 (when installed) and to a Linux bridge (the kernel's own forwarding, the
upper bound here). Host 1 sends 1 KB RoCEv2 packets (UDP 4791, BTH) paced at a
rate; host 2 counts them. The rate is searched for the highest one with zero
loss. Figures are printed, never asserted. The sender is a Python raw socket,
so the bridge figure is also capped by what the sender can offer.
"""
import multiprocessing
import os
import socket
import subprocess
import sys
import time

PACKET_BYTES = 1024
MARK = b"RLBENCH!"


def roce_packet():
    from scapy.all import IP, UDP, Ether, Raw
    from scapy.contrib.roce import BTH
    header = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
              IP(src="10.0.0.1", dst="10.0.0.2", tos=0x68, ttl=64) /
              UDP(sport=49152, dport=4791) / BTH(opcode=4, dqpn=0x11, psn=1))
    payload_len = PACKET_BYTES - len(header) - 4      # BTH adds its 4-byte ICRC trailer
    return bytes(header / Raw(MARK + b"\x00" * (payload_len - len(MARK))))


def _enter(netns):
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:
        raise OSError(ctypes.get_errno(), f"setns {netns}")
    os.close(fd)


def _raw_socket(iface):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((iface, 3))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    return s


def _receiver(netns, iface, ready, stop, result):
    _enter(netns)
    s = _raw_socket(iface)
    s.settimeout(0.05)
    ready.set()
    count = 0
    offset = 58       # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ... the mark follows the BTH
    while not stop.is_set():
        try:
            frame = s.recv(4096)
        except socket.timeout:
            continue
        if frame[offset - 16:offset + 16].find(MARK) >= 0:
            count += 1
    result.value = count


def _sender(netns, iface, packet, rate, duration, result):
    _enter(netns)
    s = _raw_socket(iface)
    send = s.send
    sent = 0
    start = time.perf_counter()
    end = start + duration
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - start) * rate) - sent
        for _ in range(min(due, 256)):
            try:
                send(packet)
                sent += 1
            except OSError:
                break
        if due <= 0:
            time.sleep(0.0002)
    result.value = sent
    result_time = time.perf_counter() - start
    return result_time


def trial(topo, packet, rate, duration):
    """(sent, received) for `rate` packets/s offered for `duration` seconds."""
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    received, sent = ctx.Value("q", 0), ctx.Value("q", 0)
    rx = ctx.Process(target=_receiver, args=(topo.host_ns[2], topo.host_if[2], ready, stop, received))
    rx.start()
    ready.wait(5)
    tx = ctx.Process(target=_sender, args=(topo.host_ns[1], topo.host_if[1], packet, rate, duration, sent))
    tx.start()
    tx.join()
    time.sleep(0.25)          # let what is queued in the switch drain
    stop.set()
    rx.join()
    return sent.value, received.value


def zero_loss_rate(topo, packet, quick, start_rate=2000):
    """Highest achieved send rate (packets/s) with zero loss, by doubling then bisection."""
    duration = 0.6 if quick else 1.5
    best = 0.0
    low, high = 0, None
    rate = start_rate
    for _ in range(12):
        sent, got = trial(topo, packet, rate, duration)
        achieved = sent / duration
        ok = sent > 0 and got >= sent
        print(f"     offered {rate:>8.0f}/s sent {achieved:>8.0f}/s received {got / duration:>8.0f}/s"
              f"{'' if ok else '  (loss)'}", flush=True)
        if ok:
            best = max(best, achieved)
            low = rate
            if achieved < rate * 0.9:      # the sender itself is the limit
                break
        else:
            high = rate
        if high is None:
            rate *= 2
        else:
            if high - low <= max(500, high * (0.15 if quick else 0.06)):
                break
            rate = (low + high) / 2
    return best


class _CrossConnect:
    """A stand-in pipeline (port 1 <-> 2, no P4): measures the data path's own cost."""

    class Job:
        __slots__ = ("egress_port", "priority", "packet_length", "data")

    def ingress(self, port, data, now_us):
        job = self.Job()
        job.egress_port, job.priority, job.packet_length, job.data = 3 - port, 0, len(data), data
        return [job]

    def egress(self, job, now_us, enq_timestamp, enq_qdepth, deq_timedelta, deq_qdepth):
        return [(job.egress_port, job.data)], []


def _datapath_only(ports, ready, stop):
    from testbed.switch.datapath import Switch
    from testbed.switch.ports import RawPort
    switch = Switch({n: RawPort(n, iface) for n, iface in ports.items()})
    switch.set_pipeline(_CrossConnect())
    switch.start()
    ready.set()
    stop.wait()
    switch.close()


class BenchTopology:
    def __init__(self, ledger):
        tag = os.getpid() % 100000
        self.ledger = ledger
        self.host_ns, self.host_if, self.switch_if = {}, {}, {}
        for i in (1, 2):
            ns, host_if, sw_if = f"rlsb{tag}h{i}", f"rlsb{tag}h{i}", f"rlsb{tag}s{i}"
            ledger.add("netns", ns)
            _run("ip", "netns", "add", ns)
            ledger.add("link", sw_if)
            _run("ip", "link", "add", sw_if, "type", "veth", "peer", "name", host_if)
            _run("ip", "link", "set", host_if, "netns", ns)
            _quiet("sysctl", "-q", "-w", f"net.ipv6.conf.{sw_if}.disable_ipv6=1")
            _run("ip", "link", "set", sw_if, "up")
            _quiet("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{host_if}.disable_ipv6=1")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", host_if, "up")
            self.host_ns[i], self.host_if[i], self.switch_if[i] = ns, host_if, sw_if


def _run(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _quiet(*cmd):
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(quick=False):
    if os.geteuid() != 0:
        print("   switch bench needs root (namespaces and veths)", file=sys.stderr)
        return 2
    from testbed.cleanup import Ledger
    from testbed.switch.bmv2 import binaries_missing
    from testbed.switch.targets import Bmv2Target, EngineTarget

    program = os.path.join(os.path.dirname(__file__), "bench_forward.p4")
    packet = roce_packet()
    results = {}
    with Ledger("switch-bench") as ledger:
        topo = BenchTopology(ledger)
        ports = {1: topo.switch_if[1], 2: topo.switch_if[2]}

        print(f"   engine switch ({PACKET_BYTES}-byte RoCEv2 packets, port 1 -> port 2)", flush=True)
        engine = EngineTarget(ports, grpc_addr=f"127.0.0.1:{_free_port()}",
                              agent_addr=f"127.0.0.1:{_free_port()}", program=program)
        try:
            engine.start(ledger=ledger)
            results["engine"] = zero_loss_rate(topo, packet, quick)
        except RuntimeError as exc:
            print(f"   engine switch not measured: {exc}")
        finally:
            engine.stop()

        print("   switch data path alone (raw sockets + traffic manager, no P4 pipeline)", flush=True)
        ctx = multiprocessing.get_context("fork")
        ready, stop = ctx.Event(), ctx.Event()
        datapath = ctx.Process(target=_datapath_only, args=(ports, ready, stop))
        datapath.start()
        ledger.add("pid", datapath.pid)
        try:
            ready.wait(10)
            results["datapath"] = zero_loss_rate(topo, packet, quick)
        finally:
            stop.set()
            datapath.join(10)

        missing = binaries_missing()
        if missing:
            print(f"   bmv2: not measured -- {missing}")
        else:
            print("   bmv2 simple_switch_grpc", flush=True)
            bmv2 = Bmv2Target(ports, grpc_addr=f"127.0.0.1:{_free_port()}", program=program,
                              thrift_port=_free_port())
            try:
                bmv2.start(ledger=ledger)
                results["bmv2"] = zero_loss_rate(topo, packet, quick)
            except Exception as exc:   # a benchmark reports, it does not crash
                print(f"   bmv2 not measured: {exc}")
            finally:
                bmv2.stop()

        print("   Linux bridge", flush=True)
        bridge = f"rlsb{os.getpid() % 100000}br"
        ledger.add("bridge", bridge)
        _run("ip", "link", "add", bridge, "type", "bridge")
        for sw_if in ports.values():
            _run("ip", "link", "set", sw_if, "master", bridge)
        _run("ip", "link", "set", bridge, "up")
        results["bridge"] = zero_loss_rate(topo, packet, quick, start_rate=20000)
    print()
    print(f"   {'target':<10} {'pkts/s at zero loss':>20} {'Mb/s':>8} {'vs bridge':>10}")
    for name in ("engine", "datapath", "bmv2", "bridge"):
        if name in results:
            rate = results[name]
            ratio = rate / results["bridge"] if results.get("bridge") else float("nan")
            print(f"   {name:<10} {rate:>20.0f} {rate * PACKET_BYTES * 8 / 1e6:>8.1f} {ratio:>9.3f}x")
    print("   (bridge figure is capped by the single Python raw-socket sender)")
    return 0
