"""Benchmark: emulated-NIC send rate (templates patched as bytes, raw socket) vs Scapy.

Two namespaces of our own joined by one veth pair; the sender runs in one of them
and sends RC WRITE packets (1024-byte payload, PSN/IP id/ICRC changing every
packet) as fast as it can. Figures, not assertions:

* ``scapy sendp``   : a plain loop of ``sendp(pkt, iface=...)`` with the PSN changed each time
* ``scapy L2socket``: Scapy reusing one socket (``conf.L2socket(...).send(pkt)``), for reference
* ``fastpath``      : :class:`traffic.fastpath.FrameTemplate` + :class:`traffic.fastpath.RawSocket`
"""
import json
import os
import subprocess
import sys
import time

PAYLOAD = 1024


def _frame(psn=0):
    from traffic import packets as P
    return P.roce("02:00:00:00:0a:01", "02:00:00:00:0a:02", "10.251.0.1", "10.251.0.2", 0xC001,
                  P.write_bth(P.RC_WRITE_MIDDLE, 0x1001, psn, payload=b"\x5a" * PAYLOAD))


def _inner(mode, iface, count):
    """Runs inside the sender namespace; prints {"pps": ...}."""
    if mode == "fastpath":
        from traffic.fastpath import FrameTemplate, RawSocket
        from scapy.compat import raw
        sock = RawSocket(iface, "02:00:00:00:0a:01")
        tmpl = FrameTemplate(raw(_frame()))
        render, send = tmpl.render, sock.send
        start = time.perf_counter()
        for i in range(count):
            while True:
                try:
                    send(render(i & 0xFFFFFF, i & 0xFFFF))
                    break
                except BlockingIOError:
                    pass
        elapsed = time.perf_counter() - start
    else:
        from scapy.config import conf
        from scapy.contrib.roce import BTH
        from scapy.layers.inet import IP
        from scapy.sendrecv import sendp
        pkt = _frame()
        if mode == "l2socket":
            s = conf.L2socket(iface=iface)
            start = time.perf_counter()
            for i in range(count):
                pkt[BTH].psn = i
                pkt[IP].id = i & 0xFFFF
                s.send(pkt)
            elapsed = time.perf_counter() - start
            s.close()
        else:
            start = time.perf_counter()
            for i in range(count):
                pkt[BTH].psn = i
                pkt[IP].id = i & 0xFFFF
                sendp(pkt, iface=iface, verbose=False)
            elapsed = time.perf_counter() - start
    print(json.dumps({"pps": count / elapsed, "count": count, "seconds": elapsed}))
    return 0


def _sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main(quick=False):
    if os.geteuid() != 0:
        print("   traffic bench needs root (namespaces and raw sockets)")
        return 2
    from testbed.cleanup import Ledger
    tag = f"rltb{os.getpid() % 100000}"
    ns_tx, ns_rx = f"{tag}t", f"{tag}r"
    veth_tx, veth_rx = f"{tag}t0", f"{tag}r0"
    counts = {"sendp": 200 if quick else 600, "l2socket": 1000 if quick else 5000,
              "fastpath": 30000 if quick else 300000}
    results = {}
    with Ledger("traffic-bench") as ledger:
        for ns in (ns_tx, ns_rx):
            ledger.add("netns", ns)
            _sh("ip", "netns", "add", ns)
        ledger.add("link", veth_tx)
        _sh("ip", "link", "add", veth_tx, "netns", ns_tx, "type", "veth", "peer", "name", veth_rx, "netns", ns_rx)
        for ns, dev in ((ns_tx, veth_tx), (ns_rx, veth_rx)):
            _sh("ip", "-n", ns, "link", "set", dev, "up")
        for mode in ("sendp", "l2socket", "fastpath"):
            out = subprocess.run(["ip", "netns", "exec", ns_tx, sys.executable, "-m", "traffic.bench",
                                  "--inner", mode, veth_tx, str(counts[mode])],
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                print(f"   {mode}: failed: {out.stderr.strip().splitlines()[-1:]}")
                return 1
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    for mode, label in (("sendp", "scapy sendp loop"), ("l2socket", "scapy L2socket.send loop"),
                        ("fastpath", "fastpath (template+raw socket)")):
        r = results[mode]
        print(f"   {label:34s} {r['pps']:>12,.0f} pkt/s  ({r['count']} packets, {r['seconds']:.2f} s)")
    ratio = results["fastpath"]["pps"] / results["sendp"]["pps"]
    ratio_l2 = results["fastpath"]["pps"] / results["l2socket"]["pps"]
    print(f"   ratio fastpath / scapy sendp: {ratio:.1f}x (target >= 20x); "
          f"fastpath / scapy L2socket: {ratio_l2:.1f}x")
    print(f"   packets: RC WRITE MIDDLE, {PAYLOAD}-byte payload, PSN + IP id + checksum + ICRC per packet")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--inner":
        sys.exit(_inner(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(main(quick="--quick" in sys.argv))
