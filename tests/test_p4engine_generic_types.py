"""Generic headers, structs and header unions (`header H<T> { T f; }`, used as `H<bit<8>>`), as
P4_16 1.2.2 defines them and p4c specializes them for BMv2 (p4c's issue4835-generic-struct)."""
import pytest

from testbed.p4engine import P4Error, compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header pair_t<A, B> { A first; B second; }
struct wrap_t<T> { pair_t<T, bit<8>> pair; pair_t<bit<16>, T> other; }
struct headers_t { wrap_t<bit<8>> w; pair_t<bit<8>, bit<8>>[2] stack; }
struct meta_t<T> { T seen; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t<bit<16>> meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.w.pair);
        pkt.extract(hdr.w.other);
        pkt.extract(hdr.stack.next);
        transition accept;
    }
}
control V(inout headers_t hdr, inout meta_t<bit<16>> meta) { apply { } }
control I(inout headers_t hdr, inout meta_t<bit<16>> meta, inout standard_metadata_t sm) {
    apply {
        pair_t<bit<8>, bit<8>> local = { hdr.w.pair.second, hdr.w.pair.first };   // swapped
        hdr.w.pair = local;
        meta.seen = hdr.w.other.first + (bit<16>)hdr.w.other.second;
        hdr.w.other.first = meta.seen;
        hdr.stack[0].second = hdr.stack[0].second + 1;
        sm.egress_spec = 2;
    }
}
control E(inout headers_t hdr, inout meta_t<bit<16>> meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t<bit<16>> meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.w); pkt.emit(hdr.stack); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_generic_types_are_specialized_where_used_and_run():
    pipe = compile_source(PROGRAM).new_pipeline()
    packet = bytes([0x11, 0x22]) + bytes([0x01, 0x00, 0x05]) + bytes([0x33, 0x44]) + b"tail"
    assert pipe.process(0, packet) == [
        (2, bytes([0x22, 0x11]) + bytes([0x01, 0x05, 0x05]) + bytes([0x33, 0x45]) + b"tail")]


@pytest.mark.parametrize("old, new, message", [
    ("struct headers_t { wrap_t<bit<8>> w;", "struct headers_t { wrap_t w;",
     "struct wrap_t is generic: give its type arguments (wrap_t<T>)"),
    ("struct headers_t { wrap_t<bit<8>> w;", "struct headers_t { wrap_t<bit<8>, bit<8>> w;",
     "struct wrap_t takes 1 type argument(s), got 2"),
    ("struct headers_t { wrap_t<bit<8>> w;", "struct headers_t { wrap_t<bit<4>> w;",
     "header pair_t<bit<4>, bit<8>> is 12 bits long; BMv2 needs a multiple of 8"),
    ("struct headers_t { wrap_t<bit<8>> w;", "struct headers_t { wrap_t<pair_t<bit<8>, bit<8>>> w;",
     "header field 'first' must be bit<W> or int<W>, not pair_t<bit<8>, bit<8>>"),
])
def test_misused_generic_types_are_refused_where_they_are(old, new, message):
    with pytest.raises(P4Error) as e:
        compile_source(PROGRAM.replace(old, new))
    assert message in str(e.value)
    assert str(e.value).startswith("<string>:")
