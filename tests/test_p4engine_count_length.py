"""Byte counters and byte meters count the length the packet was received with, as BMv2's do
(its Counter and Meter take Packet::get_ingress_length()), not standard_metadata.packet_length:
a program may write that field, and it does not change what the counters see. A recirculated
packet is a new packet of its deparsed length."""
from testbed.p4engine import compile_source
from testbed.p4engine.tables import ActionCall, Exact

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
struct headers { h_t h; }
struct meta_t { @field_list(1) bit<8> pass; }
parser P(packet_in p, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { p.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout meta_t m) { apply { } }
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(4, CounterType.packets_and_bytes) c;
    direct_counter(CounterType.bytes) dc;
    meter(1, MeterType.bytes) mt;
    action fwd() { dc.count(); }
    table t { key = { hdr.h.a : exact; } actions = { fwd; } default_action = fwd(); counters = dc; }
    apply {
        sm.packet_length = 1000;
        c.count((bit<32>)m.pass);
        t.apply();
        bit<2> colour;
        mt.execute_meter(0, colour);
        hdr.h.b = (bit<8>)colour;
        sm.egress_spec = 1;
    }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(4, CounterType.bytes) ec;
    apply {
        sm.packet_length = 7;
        ec.count((bit<32>)m.pass);
        if (hdr.h.a == 9 && m.pass == 0) { m.pass = 1; hdr.h.setInvalid(); recirculate_preserving_field_list(1); }
    }
}
control CC(inout headers hdr, inout meta_t m) { apply { } }
control D(packet_out p, in headers hdr) { apply { p.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_counters_and_meters_count_the_received_length():
    pipe = compile_source(PROGRAM).new_pipeline()
    # 500 bytes/us committed and peak, bursts of 100 bytes: a 1000-byte packet would be red
    pipe.meters["I.mt"].set_config(0, 500_000_000, 100, 500_000_000, 100)
    entry = pipe.tables["I.t"].insert([Exact(1)], ActionCall("I.fwd", {}))
    out = pipe.process(0, bytes([1, 0]) + bytes(38), now_us=10)
    assert out == [(1, bytes([1, 0]) + bytes(38))]           # colour 0: green at 40 bytes
    assert pipe.counters["I.c"].read(0) == (1, 40)
    assert pipe.counters["E.ec"].read(0) == (1, 40)         # both counted, whatever the type
    assert pipe.tables["I.t"].find([Exact(1)]).counter == (1, 40)


def test_a_recirculated_packet_counts_its_new_length():
    pipe = compile_source(PROGRAM).new_pipeline()
    pipe.process(0, bytes([9, 0]) + bytes(8), now_us=10)
    assert pipe.counters["E.ec"].read(0) == (1, 10)
    assert pipe.counters["I.c"].read(1) == (1, 8)            # deparsed without the header
    assert pipe.counters["E.ec"].read(1) == (1, 8)
