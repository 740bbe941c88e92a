"""Digest values leave the P4Runtime server typed as the program's P4Info says: a struct
for `digest<T>(...)` with a named struct, a tuple for a digest of an unnamed field list."""
from testbed.p4engine import compile_source
from testbed.p4rt.entities import digest_data
from testbed.p4rt.p4info import P4InfoIndex

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct h_t { eth_t eth; }
struct m_t { }
struct learn_t { bit<48> src; bit<9> port; }
parser P(packet_in p, out h_t h, inout m_t m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition accept; }
}
control VC(inout h_t h, inout m_t m) { apply { } }
control I(inout h_t h, inout m_t m, inout standard_metadata_t sm) {
    apply {
        digest<learn_t>(1, {h.eth.src, sm.ingress_port});
        digest(2, {h.eth.type, h.eth.dst});
    }
}
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def _digests():
    p4info = compile_source(PROGRAM, "digests.p4").p4info
    return P4InfoIndex(p4info), {d.preamble.name: d for d in p4info.digests}


def test_struct_digest_is_a_struct():
    index, digests = _digests()
    data = digest_data(index, digests["learn_t"], (0x020000000001, 3))
    assert data.WhichOneof("data") == "struct"
    assert [int.from_bytes(m.bitstring, "big") for m in data.struct.members] == [0x020000000001, 3]


def test_field_list_digest_is_a_tuple_with_every_value():
    index, digests = _digests()
    (name,) = [n for n in digests if n != "learn_t"]
    data = digest_data(index, digests[name], (0x0800, 0xFFFFFFFFFFFF))
    assert data.WhichOneof("data") == "tuple"
    assert [int.from_bytes(m.bitstring, "big") for m in data.tuple.members] == [0x0800, 0xFFFFFFFFFFFF]
