"""lookahead<T>() of nested types p4c and BMv2 accept (p4c's issue2465-bmv2: a struct holding a
header stack): the bits are cut into the fields first to last, headers come out valid (p4c's
ExpandLookahead), and nothing is consumed."""
import pytest

from testbed.p4engine import P4Error, compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header h1_t { bit<8> f; }
struct inner_t { bit<4> a; bool b; bit<3> c; }
struct la_t { h1_t[2] hs; inner_t inner; h1_t solo; }
struct headers_t { eth_t eth; }
struct metadata_t { bit<32> v; bit<8> valid; bit<8> next; }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        la_t l = pkt.lookahead<la_t>();
        meta.v = l.hs[0].f ++ l.hs[1].f ++ l.inner.a ++ (l.inner.b ? 1w1 : 1w0) ++ l.inner.c ++ l.solo.f;
        meta.valid = (l.hs[0].isValid() && l.hs[1].isValid() && l.solo.isValid()) ? 8w1 : 8w0;
        transition accept;
    }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply { hdr.eth.src = 16w0 ++ meta.v; sm.egress_spec = (bit<9>)meta.valid; }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

ETH = bytes.fromhex("0000000000aa" "000000000001" "88b5")


def test_lookahead_of_a_struct_with_a_header_stack_a_struct_and_a_header():
    pipeline = compile_source(PROGRAM, "la.p4").new_pipeline()
    # after Ethernet: 11 | 22 | a=0xA b=1 c=3 | 33 -- read, not consumed
    rest = bytes.fromhex("1122ab33") + b"data"
    out = pipeline.process(0, ETH + rest)
    assert out == [(1, bytes.fromhex("0000000000aa" "00001122ab33" "88b5") + rest)]


def test_lookahead_past_the_end_is_packet_too_short():
    pipeline = compile_source(PROGRAM, "la.p4").new_pipeline()
    # 3 bytes where 4 are looked at: the parse ends with PacketTooShort, nothing was set
    assert pipeline.process(0, ETH + b"\x11\x22\xab") == [(0, bytes.fromhex("0000000000aa" "000000000000" "88b5") + b"\x11\x22\xab")]


def test_lookahead_of_a_type_with_a_header_union_is_refused_where_it_is_written():
    src = PROGRAM.replace("struct la_t { h1_t[2] hs; inner_t inner; h1_t solo; }",
                          "header_union u_t { h1_t x; h1_t y; }\n"
                          "struct la_t { h1_t[2] hs; inner_t inner; h1_t solo; u_t u; }")
    with pytest.raises(P4Error) as e:
        compile_source(src, "la.p4")
    first = str(e.value).splitlines()[0]
    assert first.startswith("la.p4:14:18: error: lookahead<la_t> is not supported"), first
