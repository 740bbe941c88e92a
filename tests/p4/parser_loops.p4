// Parser loops: a state that transitions to itself without consuming input ends the parse with
// error.ParserTimeout after the engine's step budget (BMv2 would spin); a counted loop that ends by itself
// parses normally; SubParser can reach accept (p4c requires it) but never does. Used by test_parser_loops.py.
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header tag_t { bit<8> value; }

struct headers_t { ethernet_t ethernet; tag_t tag; }
struct metadata_t { bit<8> rounds; }

parser SubParser(packet_in pkt, inout headers_t hdr) {
    state start { transition again; }
    state again { transition select(hdr.tag.value) { 0xff: accept; default: start; } }
}

parser MyParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    SubParser() sub;
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x9001: spin;
            0x9002: count;
            0x9003: call_sub;
            default: accept;
        }
    }
    state spin { transition spin; }
    state count {
        meta.rounds = meta.rounds + 1;
        transition select(meta.rounds) { 200: parse_tag; default: count; }
    }
    state parse_tag { pkt.extract(hdr.tag); transition accept; }
    state call_sub { sub.apply(pkt, hdr); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout metadata_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        if (standard_metadata.parser_error == error.ParserTimeout) {
            standard_metadata.egress_spec = 2;
        }
        if (hdr.tag.isValid()) {
            hdr.tag.value = meta.rounds;
        }
    }
}

control MyEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.tag); }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
