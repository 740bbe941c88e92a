"""Writes the rt_*.p4 / rt_*.stf packet-test cases of the engine's runtime (tables, externs, hashes).

Run it from anywhere: ``python tests/p4/rt_make_cases.py``. Expected packets are
computed here with references that do not use the engine (zlib's CRC-32, a
bit-by-bit CRC-16/ARC, a plain one's-complement sum), so the cases check the
engine against independent arithmetic. The P4 programs are plain v1model
programs that p4c + simple_switch accept; the STF files use bmv2stf's commands
plus, where BMv2's STF driver has no syntax (selector groups, direct meters),
the simple_switch_CLI-style commands the engine's runner adds.
"""
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------- independent references


def crc16_arc(data):
    reg = 0
    for byte in data:
        byte = int(f"{byte:08b}"[::-1], 2)
        for bit in range(7, -1, -1):
            msb = (reg >> 15) & 1
            reg = (reg << 1) & 0xFFFF
            if msb ^ ((byte >> bit) & 1):
                reg ^= 0x8005
    return int(f"{reg:016b}"[::-1], 2)


def crc32(data):
    return zlib.crc32(data) & 0xFFFFFFFF


def csum16(data):
    if len(data) % 2:
        data += b"\x00"
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def xor16(data):
    if len(data) % 2:
        data += b"\x00"
    out = 0
    for i in range(0, len(data), 2):
        out ^= (data[i] << 8) | data[i + 1]
    return out


def pack_bits(fields):
    bits = "".join(f"{v:0{w}b}" for v, w in fields)
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


# ---------------------------------------------------------------- packets


def eth(dst, src, etype):
    return bytes.fromhex(f"{dst:012x}{src:012x}{etype:04x}")


def ipv4(src, dst, proto=17, ttl=64, diffserv=0, total_len=46, ident=1, checksum=None):
    hdr = struct.pack("!BBHHHBBHII", 0x45, diffserv, total_len, ident, 0, ttl, proto, 0, src, dst)
    if checksum is None:
        checksum = csum16(hdr)
    return hdr[:10] + struct.pack("!H", checksum) + hdr[12:]


def udp(sport, dport, length=26, checksum=0):
    return struct.pack("!HHHH", sport, dport, length, checksum)


def hexs(data):
    return data.hex()


PAYLOAD = bytes(range(18))

# ---------------------------------------------------------------- P4 skeleton

PRELUDE = """#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
"""

PARSER = """
parser MyParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 0x0800: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) { 17: parse_udp; default: accept; }
    }
    state parse_udp { pkt.extract(hdr.udp); transition accept; }
}
"""

NO_CHECKSUMS = """
control MyVerifyChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }
"""

NO_EGRESS = """
control MyEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
"""

DEPARSER_MAIN = """
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.udp); }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
"""

STRUCTS = """
struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
"""


def program(title, metadata, ingress, egress=NO_EGRESS, checksums=NO_CHECKSUMS, parser=PARSER,
            decls="", structs=STRUCTS, deparser=DEPARSER_MAIN):
    return (f"// {title}\n// Written by tests/p4/rt_make_cases.py.\n" + PRELUDE + decls + structs
            + f"\nstruct metadata_t {{ {metadata} }}\n" + parser + checksums + ingress + egress
            + deparser)


CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn
    return register


def udp_packet(dst_mac=0x000000000002, src_ip=0x0A000001, dst_ip=0x0A000002, sport=1000, dport=2000,
               proto=17, ttl=64, diffserv=0):
    return (eth(dst_mac, 0x000000000001, 0x0800) + ipv4(src_ip, dst_ip, proto, ttl, diffserv)
            + udp(sport, dport) + PAYLOAD)


# ---------------------------------------------------------------- cases

@case("rt_tables_exact")
def tables_exact():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action forward(bit<9> port) { standard_metadata.egress_spec = port; }
    action drop() { mark_to_drop(standard_metadata); }
    action set_smac(bit<48> mac) { hdr.ethernet.srcAddr = mac; }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { forward; drop; }
        default_action = drop();
        size = 16;
    }
    table smac_rewrite {
        key = { standard_metadata.ingress_port: exact; hdr.ethernet.etherType: exact; }
        actions = { set_smac; NoAction; }
        default_action = NoAction();
    }
    apply {
        if (dmac.apply().hit) {
            smac_rewrite.apply();
        }
    }
}
"""
    p1 = udp_packet(dst_mac=0x000000000002)
    p2 = udp_packet(dst_mac=0x000000000003)
    p3 = udp_packet(dst_mac=0x0000000000FF)
    p4 = eth(0x000000000002, 0x000000000001, 0x88CC) + PAYLOAD
    rewritten = p1[:6] + bytes.fromhex("02aabbccddee") + p1[12:]
    stf = f"""# exact keys: one field, two fields; hit/miss; default action drops
add dmac hdr.ethernet.dstAddr:0x000000000002 MyIngress.forward(port:1)
add dmac hdr.ethernet.dstAddr:0x000000000003 forward(port:2)
add smac_rewrite ingress_port:4 etherType:0x0800 set_smac(mac:0x02aabbccddee)

packet 0 {hexs(p1)}
expect 1 {hexs(p1)}$
packet 4 {hexs(p1)}
expect 1 {hexs(rewritten)}$
packet 4 {hexs(p4)}
expect 1 {hexs(p4)}$
packet 0 {hexs(p2)}
expect 2 {hexs(p2)}$
# no entry: dropped by the default action
packet 0 {hexs(p3)}
"""
    return program("Exact-match tables.", "", ingress), stf


@case("rt_tables_lpm")
def tables_lpm():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_nhop(bit<48> dmac, bit<9> port) {
        hdr.ethernet.dstAddr = dmac;
        standard_metadata.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action drop() { mark_to_drop(standard_metadata); }
    action set_class(bit<8> cls) { hdr.ipv4.diffserv = cls; }
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; drop; }
        default_action = drop();
    }
    table src_class {
        key = { hdr.ipv4.protocol: exact; hdr.ipv4.srcAddr: lpm; }
        actions = { set_class; NoAction; }
        default_action = NoAction();
    }
    apply {
        if (hdr.ipv4.isValid()) {
            ipv4_lpm.apply();
            src_class.apply();
        } else {
            drop();
        }
    }
}
"""
    stf = ["# lpm: longest prefix wins, /0 default route, '*' and /len forms; exact+lpm keys",
           "add ipv4_lpm hdr.ipv4.dstAddr:0x0a000000/8 set_nhop(dmac:0x0000000000a8, port:1)",
           "add ipv4_lpm hdr.ipv4.dstAddr:0x0a01****  set_nhop(dmac:0x0000000000b0, port:2)",
           "add ipv4_lpm hdr.ipv4.dstAddr:0x0a010203/32 set_nhop(dmac:0x0000000000c0, port:3)",
           "add ipv4_lpm hdr.ipv4.dstAddr:0x00000000/0 set_nhop(dmac:0x0000000000d0, port:4)",
           "add src_class protocol:17 srcAddr:0xc0a80000/16 set_class(cls:0x2e)",
           "add src_class protocol:17 srcAddr:0xc0a80100/24 set_class(cls:0x0a)", ""]
    routes = [(0x0A010203, 0xC0, 3), (0x0A010204, 0xB0, 2), (0x0A020304, 0xA8, 1), (0x0B000001, 0xD0, 4)]
    for dst, mac, port in routes:
        pin = udp_packet(dst_ip=dst)
        out = eth(mac, 1, 0x0800) + ipv4(0x0A000001, dst, ttl=63, checksum=struct.unpack("!H", pin[24:26])[0]) \
            + pin[34:]
        stf += [f"packet 0 {hexs(pin)}", f"expect {port} {hexs(out)}$"]
    for src, cls in ((0xC0A80105, 0x0A), (0xC0A80205, 0x2E), (0xC0A90205, 0x00)):
        pin = udp_packet(src_ip=src, dst_ip=0x0B000001)
        cksum = struct.unpack("!H", pin[24:26])[0]
        out = eth(0xD0, 1, 0x0800) + ipv4(src, 0x0B000001, ttl=63, diffserv=cls, checksum=cksum) + pin[34:]
        stf += [f"packet 0 {hexs(pin)}", f"expect 4 {hexs(out)}$"]
    stf += ["# not IPv4: dropped", f"packet 0 {hexs(eth(2, 1, 0x0806) + PAYLOAD)}"]
    return program("Longest-prefix-match tables.", "", ingress), "\n".join(stf) + "\n"


@case("rt_tables_ternary")
def tables_ternary():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_port(bit<9> port) { standard_metadata.egress_spec = port; }
    action drop() { mark_to_drop(standard_metadata); }
    action mark(bit<8> tos) { hdr.ipv4.diffserv = tos; }
    table acl {
        key = { hdr.ipv4.srcAddr: ternary; hdr.ipv4.protocol: ternary; }
        actions = { set_port; drop; }
        default_action = set_port(9);
    }
    table tos_map {
        key = { hdr.ipv4.dstAddr: ternary; }
        actions = { mark; NoAction; }
        const entries = {
            0x0a000002 &&& 0xffffffff : mark(1);
            0x0a000000 &&& 0xff000000 : mark(2);
            _ : mark(3);
        }
    }
    apply {
        acl.apply();
        tos_map.apply();
    }
}
"""
    stf = ["# ternary: a higher STF priority wins; const entries: the first listed wins",
           "add acl 10 hdr.ipv4.srcAddr:0x0a0000** protocol:0x**  set_port(port:1)",
           "add acl 20 srcAddr:0x0a000001&&&0xffffffff protocol:0x11 set_port(port:2)",
           "add acl 5 srcAddr:0x******** protocol:0x06 drop()",
           "add acl 30 srcAddr:0b00001010000000000000000000000011 protocol:0x**  set_port(port:3)", ""]
    def out(pin, port, tos):
        cks = struct.unpack("!H", pin[24:26])[0]
        src, dst = struct.unpack("!II", pin[26:34])
        return port, pin[:14] + ipv4(src, dst, pin[23], 64, tos, checksum=cks) + pin[34:]
    trials = [
        (udp_packet(src_ip=0x0A000001), 2, 1),             # both 10 and 20 match: 20 wins
        (udp_packet(src_ip=0x0A000001, proto=6)[:34] + PAYLOAD, 1, 1),   # 20 needs UDP: 10
        (udp_packet(src_ip=0x0A000003), 3, 1),             # 30 beats 10
        (udp_packet(src_ip=0x0B000003, dst_ip=0x0A990000), 9, 2),    # default; tos from 2nd const
        (udp_packet(src_ip=0x0B000003, dst_ip=0x0B990000), 9, 3),
    ]
    for pin, port, tos in trials:
        p, o = out(pin, port, tos)
        stf += [f"packet 0 {hexs(pin)}", f"expect {p} {hexs(o)}$"]
    stf += ["# TCP from outside 10.0.0.0/24: priority-5 drop", f"packet 0 {hexs(udp_packet(src_ip=0x0C000001, proto=6)[:34])}"]
    return program("Ternary tables, priorities and const entries.", "", ingress), "\n".join(stf) + "\n"


@case("rt_tables_range_optional")
def tables_range_optional():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_port(bit<9> port) { standard_metadata.egress_spec = port; }
    table ports {
        key = { hdr.udp.dstPort: range; hdr.ipv4.protocol: optional; }
        actions = { set_port; }
        default_action = set_port(7);
    }
    apply {
        if (hdr.udp.isValid()) {
            ports.apply();
        } else {
            standard_metadata.egress_spec = 6;
        }
    }
}
"""
    stf = ["# range and optional keys (engine syntax: LOW->HIGH; optional VALUE or *)",
           "add ports 10 hdr.udp.dstPort:1000->1999 hdr.ipv4.protocol:17 set_port(port:1)",
           "add ports 20 dstPort:1500->1600 protocol:* set_port(port:2)",
           "add ports 5 dstPort:0->65535 protocol:17 set_port(port:3)", ""]
    for dport, port in ((1200, 1), (1550, 2), (1999, 1), (2000, 3), (999, 3)):
        p = udp_packet(dport=dport)
        stf += [f"packet 0 {hexs(p)}", f"expect {port} {hexs(p)}$"]
    nonudp = udp_packet(proto=6)[:34] + PAYLOAD
    stf += [f"packet 0 {hexs(nonudp)}", f"expect 6 {hexs(nonudp)}$"]
    return program("Range and optional match kinds.", "", ingress), "\n".join(stf) + "\n"


@case("rt_selector")
def selector():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action_selector(HashAlgorithm.crc16, 32w1024, 32w14) ecmp_selector;
    action set_port(bit<9> port) { standard_metadata.egress_spec = port; }
    table ecmp {
        key = {
            hdr.ipv4.dstAddr: exact;
            hdr.ipv4.srcAddr: selector;
            hdr.udp.srcPort: selector;
        }
        actions = { set_port; NoAction; }
        implementation = ecmp_selector;
        default_action = NoAction();
    }
    apply {
        standard_metadata.egress_spec = 9;
        if (hdr.udp.isValid()) {
            ecmp.apply();
        }
    }
}
"""
    # Members are created 3, 1, 2 (ports): BMv2 orders a group by member handle,
    # i.e. creation order, so index h % 3 picks port [3, 1, 2][h % 3].
    stf = ["# action selector: member = crc16(srcAddr ++ srcPort) % 3, members in BMv2 handle order",
           "act_prof_create_member ecmp_selector set_port(port:3)",
           "act_prof_create_member ecmp_selector set_port(port:1)",
           "act_prof_create_member ecmp_selector set_port(port:2)",
           "act_prof_create_member ecmp_selector set_port(port:5)",
           "act_prof_create_group ecmp_selector",
           "act_prof_add_member_to_group ecmp_selector 0 0",
           "act_prof_add_member_to_group ecmp_selector 1 0",
           "act_prof_add_member_to_group ecmp_selector 2 0",
           "add ecmp hdr.ipv4.dstAddr:0x0a000002 $group(id:0)",
           "add ecmp hdr.ipv4.dstAddr:0x0a000009 $member(id:3)", ""]
    ports = [3, 1, 2]
    seen = set()
    for i in range(12):
        src, sport = 0x0A000100 + i * 7, 1000 + i * 13
        h = crc16_arc(struct.pack("!IH", src, sport))
        port = ports[h % 3]
        seen.add(port)
        p = udp_packet(src_ip=src, sport=sport)
        stf += [f"# crc16 = 0x{h:04x} -> index {h % 3}", f"packet 0 {hexs(p)}", f"expect {port} {hexs(p)}$"]
    assert seen == {1, 2, 3}
    p = udp_packet(dst_ip=0x0A000009)
    stf += ["# a direct member reference", f"packet 0 {hexs(p)}", f"expect 5 {hexs(p)}$"]
    p = udp_packet(dst_ip=0x0A000005)
    stf += ["# miss: NoAction, port 9 from before the table", f"packet 0 {hexs(p)}", f"expect 9 {hexs(p)}$"]
    return program("Action selector with crc16 member choice.", "", ingress), "\n".join(stf) + "\n"


@case("rt_externs")
def externs():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    register<bit<32>>(8) pkt_count;
    counter(8, CounterType.packets_and_bytes) port_counter;
    meter(4, MeterType.packets) port_meter;
    direct_counter(CounterType.packets) flow_counter;
    direct_meter<bit<2>>(MeterType.packets) flow_meter;

    action count_flow() {
        flow_meter.read(meta.flow_color);
    }
    table flows {
        key = { hdr.ipv4.dstAddr: exact; }
        actions = { count_flow; NoAction; }
        default_action = NoAction();
        counters = flow_counter;
        meters = flow_meter;
    }
    apply {
        bit<32> n;
        bit<32> port = (bit<32>)standard_metadata.ingress_port;
        pkt_count.read(n, port);
        n = n + 1;
        pkt_count.write(port, n);
        port_counter.count(port);
        port_meter.execute_meter(32w0, meta.color);
        meta.flow_color = 3;
        flows.apply();
        hdr.udp.checksum = n[15:0];
        hdr.ipv4.diffserv = meta.color ++ 4w0 ++ meta.flow_color;
        standard_metadata.egress_spec = 1;
    }
}
"""
    stf = ["# register read-modify-write, indexed counter, two-rate meter, direct counter/meter",
           "# rates are tiny (units per microsecond) so no refill happens during the test",
           "meter_set_rates MyIngress.port_meter 0 0.0000001:1 0.0000001:2",
           "add flows hdr.ipv4.dstAddr:0x0a000002 count_flow() = F",
           "meter_set_rates flow_meter 0 0.0000001:2 0.0000001:3",
           "register_write pkt_count 3 41", ""]
    colours = [0, 1, 2, 2]        # GREEN, YELLOW, RED, RED (peak bucket of 2, committed of 1)
    flow_colours = [0, 0, 1, 2]
    for i in range(4):
        pin = udp_packet()
        cks = struct.unpack("!H", pin[24:26])[0]
        diffserv = (colours[i] << 6) | flow_colours[i]
        out = pin[:14] + ipv4(0x0A000001, 0x0A000002, diffserv=diffserv, checksum=cks) \
            + udp(1000, 2000, checksum=i + 1) + PAYLOAD
        stf += [f"packet 0 {hexs(pin)}", f"expect 1 {hexs(out)}$"]
    pin = udp_packet(dst_ip=0x0A000003)
    cks = struct.unpack("!H", pin[24:26])[0]
    out = pin[:14] + ipv4(0x0A000001, 0x0A000003, diffserv=(2 << 6) | 3, checksum=cks) \
        + udp(1000, 2000, checksum=42) + PAYLOAD
    stf += ["# from port 3: the register started at 41; a table miss leaves the flow colour alone",
            f"packet 3 {hexs(pin)}", f"expect 1 {hexs(out)}$",
            "register_read pkt_count 0", "counter_read port_counter 0",
            "check_counter flow_counter($F) packets == 4",
            "check_counter port_counter(0) packets == 4",
            f"check_counter port_counter(0) bytes == {4 * len(pin)}",
            "check_counter port_counter(3) packets == 1"]
    return program("Registers, counters, meters, direct counters and meters.",
                   "bit<2> color; bit<2> flow_color;", ingress), "\n".join(stf) + "\n"


@case("rt_hashes")
def hash_case():
    decls = """
header hashes_t {
    bit<16> crc16; bit<32> crc32; bit<16> crc16c; bit<32> crc32c;
    bit<16> csum; bit<16> xor; bit<48> ident; bit<16> modulo; bit<8> odd;
}
"""
    structs = "\nstruct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; hashes_t h; }\n"
    deparser = DEPARSER_MAIN.replace("pkt.emit(hdr.udp); }", "pkt.emit(hdr.udp); pkt.emit(hdr.h); }")
    # The results go into a header emitted after UDP.
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.h.setValid();
        hash(hdr.h.crc16, HashAlgorithm.crc16, 16w0,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.udp.srcPort }, 17w65536);
        hash(hdr.h.crc32, HashAlgorithm.crc32, 32w0,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.udp.srcPort }, 33w4294967296);
        hash(hdr.h.crc16c, HashAlgorithm.crc16_custom, 16w0,
             { hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl }, 17w65536);
        hash(hdr.h.crc32c, HashAlgorithm.crc32_custom, 32w0,
             { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.flags, hdr.udp.dstPort }, 33w4294967296);
        hash(hdr.h.csum, HashAlgorithm.csum16, 16w0,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol }, 17w65536);
        hash(hdr.h.xor, HashAlgorithm.xor16, 16w0,
             { hdr.udp.srcPort, hdr.udp.dstPort, hdr.ipv4.ttl }, 17w65536);
        hash(hdr.h.ident, HashAlgorithm.identity, 48w0,
             { hdr.ipv4.flags, hdr.ipv4.srcAddr }, 49w0x1000000000000);
        hash(hdr.h.modulo, HashAlgorithm.crc32, 16w100,
             { hdr.ipv4.srcAddr, hdr.udp.srcPort }, 32w7);
        hash(hdr.h.odd, HashAlgorithm.crc16, 8w0,
             { hdr.ipv4.version, hdr.ipv4.fragOffset }, 16w256);
    }
}
"""
    stf = ["# v1model hash() with every BMv2 algorithm the engine supports, over byte-aligned and",
           "# unaligned field lists; expected values from zlib.crc32, a bit-wise CRC-16/ARC and a",
           "# plain one's-complement sum (tests/p4/rt_make_cases.py)", ""]
    for src, dst, sport, dport, ttl in ((0x0A000001, 0x0A000002, 1000, 2000, 64),
                                        (0xC0A80001, 0x08080808, 4791, 4791, 3),
                                        (0xFFFFFFFE, 0x00000001, 65535, 1, 255)):
        pin = eth(2, 1, 0x0800) + ipv4(src, dst, 17, ttl) + udp(sport, dport) + bytes(29)
        flags, frag, version, ihl = 0, 0, 4, 5
        c16 = crc16_arc(struct.pack("!IIH", src, dst, sport))
        c32 = crc32(struct.pack("!IIH", src, dst, sport))
        c16c = crc16_arc(pack_bits([(flags, 3), (frag, 13), (ttl, 8)]))
        c32c = crc32(pack_bits([(version, 4), (ihl, 4), (flags, 3), (dport, 16)]))
        cs = csum16(struct.pack("!IIB", src, dst, 17))
        xr = xor16(struct.pack("!HHB", sport, dport, ttl))
        ident = int.from_bytes(pack_bits([(flags, 3), (src, 32)])[:8], "big") & ((1 << 48) - 1)
        modulo = (100 + crc32(struct.pack("!IH", src, sport)) % 7) & 0xFFFF
        odd = crc16_arc(pack_bits([(version, 4), (frag, 13)])) & 0xFF
        results = struct.pack("!HIHIHH", c16, c32, c16c, c32c, cs, xr) + ident.to_bytes(6, "big") \
            + struct.pack("!HB", modulo, odd)
        out = pin[:42] + results + pin[42:]
        stf += [f"# crc16 {c16:04x} crc32 {c32:08x} crc16_custom {c16c:04x} crc32_custom {c32c:08x} "
                f"csum16 {cs:04x} xor16 {xr:04x} identity {ident:012x} 100+crc32%7 {modulo} crc16&0xff {odd:02x}",
                f"packet 0 {hexs(pin)}", f"expect 1 {hexs(out)}$"]
    text = program("hash() results, BMv2-exact.", "", ingress, decls=decls, structs=structs,
                   deparser=deparser)
    return text, "\n".join(stf) + "\n"


@case("rt_checksums")
def checksums():
    checks = """
control MyVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}
control MyComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}
"""
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        if (standard_metadata.checksum_error == 1) {
            standard_metadata.egress_spec = 2;
        }
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
}
"""
    stf = ["# verify_checksum sets checksum_error on a bad IPv4 checksum (the packet goes on);",
           "# update_checksum rewrites it after the TTL decrement", ""]
    for src, ttl in ((0x0A000001, 64), (0xC0A80A0B, 1), (0x01020304, 200)):
        good = eth(2, 1, 0x0800) + ipv4(src, 0x0A000002, ttl=ttl) + udp(1, 2) + PAYLOAD
        out = eth(2, 1, 0x0800) + ipv4(src, 0x0A000002, ttl=(ttl - 1) & 0xFF) + udp(1, 2) + PAYLOAD
        stf += [f"packet 0 {hexs(good)}", f"expect 1 {hexs(out)}$"]
        bad = good[:24] + bytes([good[24] ^ 0x5A, good[25]]) + good[26:]
        stf += [f"packet 0 {hexs(bad)}", f"expect 2 {hexs(out)}$"]
    return program("verify_checksum / update_checksum with csum16.", "", ingress, checksums=checks), \
        "\n".join(stf) + "\n"


@case("rt_parser_errors")
def parser_errors():
    parser = """
parser MyParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            0x9000: reject_me;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4, error.BadVersion);
        transition select(hdr.ipv4.protocol) { 17: parse_udp; default: accept; }
    }
    state parse_udp { pkt.extract(hdr.udp); transition accept; }
    state reject_me { transition reject; }
}
"""
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        if (standard_metadata.parser_error == error.PacketTooShort) {
            standard_metadata.egress_spec = 2;
        } else if (standard_metadata.parser_error == error.BadVersion) {
            standard_metadata.egress_spec = 3;
        } else if (standard_metadata.parser_error == error.NoMatch) {
            standard_metadata.egress_spec = 4;
        }
        hdr.ethernet.srcAddr = 0x0000000000ee;
    }
}
"""
    good = udp_packet()
    short = good[:14 + 12]                                   # IPv4 header cut short
    bad_version = good[:14] + bytes([0x65]) + good[15:]
    rejected = eth(2, 1, 0x9000) + PAYLOAD
    def rewrite(p):
        return p[:6] + bytes.fromhex("0000000000ee") + p[12:]
    stf = ["# parser errors reach ingress in standard_metadata.parser_error; the packet goes on.",
           "# After a failed extract only the headers parsed so far are re-emitted, then the",
           "# unparsed rest of the packet follows.",
           f"packet 0 {hexs(good)}", f"expect 1 {hexs(rewrite(good))}$",
           f"packet 0 {hexs(short)}", f"expect 2 {hexs(rewrite(short))}$",
           f"packet 0 {hexs(bad_version)}", f"expect 3 {hexs(rewrite(bad_version))}$",
           "# 'transition reject' without verify: NoMatch is not set; parser_error stays NoError",
           f"packet 0 {hexs(rejected)}", f"expect 1 {hexs(rewrite(rejected))}$"]
    text = program("Parser errors: PacketTooShort, verify(), reject.", "", ingress, parser=parser,
                   decls="\nerror { BadVersion }\n")
    return text, "\n".join(stf) + "\n"


@case("rt_clone_mcast")
def clone_mcast():
    ingress = """
control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action to_port(bit<9> port) { standard_metadata.egress_spec = port; }
    action to_group(bit<16> grp) { standard_metadata.mcast_grp = grp; }
    action fwd_and_clone(bit<9> port, bit<32> session) {
        standard_metadata.egress_spec = port;
        clone(CloneType.I2E, session);
    }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { to_port; to_group; fwd_and_clone; }
        default_action = to_port(0);
    }
    apply {
        if (standard_metadata.instance_type == 4) {
            // a recirculated packet: mark it and send it to port 2
            hdr.ethernet.etherType = 0x4321;
            standard_metadata.egress_spec = 2;
        } else {
            dmac.apply();
        }
    }
}
"""
    egress = """
control MyEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        // srcAddr carries instance type and replication id for the checks
        hdr.ethernet.srcAddr = 16w0 ++ standard_metadata.instance_type[15:0] ++ standard_metadata.egress_rid;
        if (hdr.ethernet.etherType == 0x1234 && standard_metadata.instance_type == 0) {
            recirculate_preserving_field_list(0);
        }
    }
}
"""
    def with_src(p, itype, rid, etype=None):
        out = p[:6] + (itype << 16 | rid).to_bytes(6, "big") + p[12:]
        if etype is not None:
            out = out[:12] + struct.pack("!H", etype) + out[14:]
        return out
    p_mc = eth(0x0000000000AA, 1, 0x0800) + PAYLOAD
    p_clone = eth(0x0000000000BB, 1, 0x0800) + PAYLOAD
    p_recirc = eth(0x0000000000CC, 1, 0x1234) + PAYLOAD
    stf = ["# multicast: nodes in association order, ports ascending, egress_rid per node,",
           "# instance_type 5 (replication); I2E clone: instance_type 1; recirculation: the",
           "# original is not sent, the recirculated copy comes back with instance_type 4",
           "# (its ingress sees 4; simple_switch sets instance_type to 0 for every unicast",
           "# packet at the end of ingress, so its egress writes 0 into srcAddr)",
           "mc_mgrp_create 7",
           "mc_node_create 400 3 1",
           "mc_node_create 401 2",
           "mc_node_associate 7 1",
           "mc_node_associate 7 0",
           "mirroring_add 5 6",
           "add dmac hdr.ethernet.dstAddr:0x0000000000aa to_group(grp:7)",
           "add dmac hdr.ethernet.dstAddr:0x0000000000bb fwd_and_clone(port:1, session:5)",
           "add dmac hdr.ethernet.dstAddr:0x0000000000cc to_port(port:3)", "",
           f"packet 0 {hexs(p_mc)}",
           f"expect 2 {hexs(with_src(p_mc, 5, 401))}$",
           f"expect 1 {hexs(with_src(p_mc, 5, 400))}$",
           f"expect 3 {hexs(with_src(p_mc, 5, 400))}$",
           f"packet 0 {hexs(p_clone)}",
           f"expect 1 {hexs(with_src(p_clone, 0, 0))}$",
           f"expect 6 {hexs(with_src(p_clone, 1, 0))}$",
           f"packet 0 {hexs(p_recirc)}",
           f"expect 2 {hexs(with_src(p_recirc, 0, 0, etype=0x4321))}$"]
    text = program("Multicast replication, I2E clone, recirculation.", "", ingress, egress=egress)
    return text, "\n".join(stf) + "\n"


def main():
    for name, make in CASES.items():
        p4_text, stf_text = make()
        (HERE / f"{name}.p4").write_text(p4_text)
        (HERE / f"{name}.stf").write_text(stf_text)
        print(f"wrote {name}.p4 and {name}.stf")


if __name__ == "__main__":
    main()
