// hash() results, BMv2-exact.
// Written by tests/p4/rt_make_cases.py.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }

header hashes_t {
    bit<16> crc16; bit<32> crc32; bit<16> crc16c; bit<32> crc32c;
    bit<16> csum; bit<16> xor; bit<48> ident; bit<16> modulo; bit<8> odd;
}

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; hashes_t h; }

struct metadata_t {  }

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

control MyVerifyChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }

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

control MyEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.udp); pkt.emit(hdr.h); }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
