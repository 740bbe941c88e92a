// Registers, counters, meters, direct counters and meters.
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

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }

struct metadata_t { bit<2> color; bit<2> flow_color; }

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

control MyEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.udp); }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
