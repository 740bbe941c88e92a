/* The switch benchmark's program: parse Ethernet/IPv4/UDP, cross-connect ports 1 and 2
 * through an exact-match table with const entries, queue by DSCP, decrement the TTL. */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen; bit<16> identification;
    bit<3> flags; bit<13> fragOffset; bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
struct metadata_t { }

parser BenchParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 0x0800: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) { 17: parse_udp; default: accept; }
    }
    state parse_udp { packet.extract(hdr.udp); transition accept; }
}

control BenchVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control BenchIngress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    action drop() { mark_to_drop(standard_metadata); }
    action set_port(bit<9> port) { standard_metadata.egress_spec = port; }
    table cross_connect {
        key = { standard_metadata.ingress_port: exact; }
        actions = { set_port; drop; }
        const entries = { 1 : set_port(2); 2 : set_port(1); }
        default_action = drop();
    }
    apply {
        cross_connect.apply();
        if (hdr.ipv4.isValid()) {
            standard_metadata.priority = hdr.ipv4.diffserv[7:5];
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        }
    }
}

control BenchEgress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) { apply { } }

control BenchCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }

control BenchDeparser(packet_out packet, in headers_t hdr) {
    apply { packet.emit(hdr.ethernet); packet.emit(hdr.ipv4); packet.emit(hdr.udp); }
}

V1Switch(BenchParser(), BenchVerify(), BenchIngress(), BenchEgress(), BenchCompute(), BenchDeparser()) main;
