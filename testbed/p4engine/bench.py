"""Engine benchmark: packets/s through a fabric-like pipeline, in-process, on one core.

The program is bench_fabric.p4 next to this file (Ethernet/IPv4/UDP/BTH parser, ternary ACL,
LPM route through an action selector, exact next-hop table, crc16 hash, register, IPv4
checksum verify and update). The tables hold a few hundred entries; 64 flows of 1 KB RoCEv2
packets (distinct source ports and destination QPs, so the selector spreads them) go through
`Pipeline.process` back to back. Printed: packets/s, microseconds per packet, and how many
packets came out where expected (a benchmark of a pipeline that drops everything would be
meaningless). Figures are printed, never asserted.
"""
import os
import time

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_fabric.p4")
PACKET_BYTES = 1024
FLOWS = 64
ROUTES = 256
NEXTHOPS = 16
TARGET_PPS = 50_000


def build_packets():
    from scapy.all import IP, UDP, Ether, Raw
    from scapy.contrib.roce import BTH
    packets = []
    for flow in range(FLOWS):
        header = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe") /
                  IP(src="10.0.0.1", dst=f"10.1.{flow % ROUTES}.2", tos=0x68, ttl=64) /
                  UDP(sport=49152 + flow, dport=4791) / BTH(opcode=4, dqpn=0x100 + flow, psn=flow))
        frame = bytes(header / Raw(b"\x00" * (PACKET_BYTES - len(header))))
        packets.append(frame[:PACKET_BYTES].ljust(PACKET_BYTES, b"\x00"))   # with or without an ICRC trailer
    return packets


def program_tables(pipeline):
    """Entries a leaf would hold: ACL classes, /24 routes to ECMP groups, next-hop MACs."""
    from testbed.p4engine.tables import ActionCall, Exact, GroupRef, Lpm, Ternary
    acl = pipeline.tables["FabricIngress.acl"]
    for dscp in range(64):
        acl.insert([Ternary(dscp, 0x3F), None, Ternary(4791, 0xFFFF)],
                   ActionCall("FabricIngress.set_class", {"prio": dscp >> 3}), priority=100 + dscp)
    route = pipeline.tables["FabricIngress.route"]
    selector = route.implementation
    for hop in range(NEXTHOPS):
        selector.insert_member(hop + 1, ActionCall("FabricIngress.set_nexthop",
                                                   {"nexthop": hop, "port": 1 + hop % 8}))
    for group in range(4):
        selector.insert_group(group + 1, [(m, 1) for m in range(1 + group * 4, 5 + group * 4)])
    for r in range(ROUTES):
        route.insert([Lpm((10 << 24) | (1 << 16) | (r << 8), 24)], GroupRef(1 + r % 4))
    macs = pipeline.tables["FabricIngress.nexthop_macs"]
    for hop in range(NEXTHOPS):
        macs.insert([Exact(hop)], ActionCall("FabricIngress.rewrite_macs",
                                             {"src": 0x020000000100 + hop, "dst": 0x020000000200 + hop}))


def measure(pipeline, packets, seconds):
    process = pipeline.process
    n = len(packets)
    sent = forwarded = 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    deadline = t0 + seconds
    while True:
        for i in range(256):
            out = process(1, packets[(sent + i) % n], sent + i)
            forwarded += len(out)
        sent += 256
        now = time.perf_counter()
        if now >= deadline:
            return sent, forwarded, now - t0, time.process_time() - cpu0


def check_output(pipeline, packet):
    """One packet through: out on a port 1..8, TTL one lower, IPv4 checksum still valid."""
    from testbed.p4engine.hashes import csum16
    out = pipeline.process(1, packet, 0)
    if len(out) != 1:
        return f"expected one packet out, got {len(out)}"
    port, data = out[0]
    ip = bytes(data[14:34])
    if not 1 <= port <= 8 or ip[8] != packet[22] - 1 or csum16(ip) not in (0, 0xFFFF):
        return f"unexpected output: port {port}, TTL {ip[8]}, IPv4 header {ip.hex()}"
    return None


def main(quick=False):
    from testbed.p4engine import P4Error, compile_file
    try:
        t0 = time.perf_counter()
        program = compile_file(PROGRAM)
        compile_s = time.perf_counter() - t0
    except P4Error as exc:
        print(f"   cannot compile the benchmark program:\n{exc}")
        return 1
    pipeline = program.new_pipeline()
    program_tables(pipeline)
    packets = build_packets()
    problem = check_output(pipeline, packets[0])
    if problem:
        print(f"   the pipeline does not forward as the benchmark expects: {problem}")
        return 1
    measure(pipeline, packets, 0.2)                       # warm-up (caches, branch paths)
    sent, forwarded, elapsed, cpu = measure(pipeline, packets, 1.0 if quick else 5.0)
    pps = sent / elapsed
    cpu_pps = sent / cpu if cpu > 0 else pps
    print(f"   program      {os.path.relpath(PROGRAM)} (compiled in {compile_s * 1000:.0f} ms)")
    print(f"   tables       acl 64 ternary, route {ROUTES} lpm -> 4 selector groups of 4, "
          f"nexthop_macs {NEXTHOPS} exact")
    print(f"   packets      {PACKET_BYTES} B RoCEv2, {FLOWS} flows, {sent} sent, {forwarded} forwarded")
    print(f"   throughput   {pps:,.0f} packets/s  ({1e6 / pps:.1f} us/packet, "
          f"{pps * PACKET_BYTES * 8 / 1e6:,.0f} Mb/s) on one core")
    # Wall-clock figures drop when other work shares the core; per CPU-second they do not.
    print(f"   per CPU s    {cpu_pps:,.0f} packets/s  (the process had the CPU "
          f"{100 * cpu / elapsed:.0f}% of the time; load average {os.getloadavg()[0]:.1f})")
    print(f"   target       {TARGET_PPS:,} packets/s on one core: "
          f"{'met' if cpu_pps >= TARGET_PPS else 'NOT met'}")
    return 0
