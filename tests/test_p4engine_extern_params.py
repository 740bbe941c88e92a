"""Extern instances passed to controls: as apply parameters (`control C(..., register<bit<8>> r)`,
`c.apply(hdr, regs)`) and as constructor parameters (`C(regs) c;`), as p4c accepts and inlines
them for BMv2 (p4c's issue1958.p4). The block uses the caller's instance: no copy, no new
P4Info entity."""
import pytest

from testbed.p4engine import P4Error, compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
struct headers { h_t h; }
struct meta_t { }
parser P(packet_in p, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { p.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout meta_t m) { apply { } }
control Bump(inout headers hdr, register<bit<8>> r, counter c) {
    apply {
        bit<8> v;
        r.read(v, (bit<32>)hdr.h.a);
        v = v + 1;
        r.write((bit<32>)hdr.h.a, v);
        hdr.h.b = v;
        c.count((bit<32>)hdr.h.a);
    }
}
control Mark()(register<bit<8>> marks) {
    apply { marks.write(0, 8w42); }
}
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<8>>(4) regs;
    register<bit<8>>(4) other;
    counter(4, CounterType.packets) hits;
    Bump() bump;
    Mark(other) mark;
    apply { sm.egress_spec = 1; APPLY }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout meta_t m) { apply { } }
control D(packet_out p, in headers hdr) { apply { p.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def program(apply="bump.apply(hdr, regs, hits); mark.apply();", extra=""):
    return PROGRAM.replace("APPLY", apply).replace("Bump() bump;", "Bump() bump;" + extra)


def test_a_control_uses_the_instances_its_caller_passes():
    compiled = compile_source(program())
    pipe = compiled.new_pipeline()
    outputs = [pipe.process(0, bytes([a, 0])) for a in (1, 1, 2, 1)]
    assert outputs == [[(1, bytes([1, 1]))], [(1, bytes([1, 2]))], [(1, bytes([2, 1]))], [(1, bytes([1, 3]))]]
    assert (pipe.registers["I.regs"].read(1), pipe.registers["I.regs"].read(2)) == (3, 1)
    assert pipe.registers["I.other"].read(0) == 42          # the constructor argument
    assert pipe.counters["I.hits"].read(1) == (3, 6)             # (packets, bytes: both counted)
    info = compiled.p4info
    assert sorted(r.preamble.name for r in info.registers) == ["I.other", "I.regs"]
    assert [c.preamble.name for c in info.counters] == ["I.hits"]


def test_the_same_block_applied_twice_with_the_same_instances():
    pipe = compile_source(program("bump.apply(hdr, regs, hits); bump.apply(hdr, regs, hits);")).new_pipeline()
    assert pipe.process(0, bytes([1, 0])) == [(1, bytes([1, 2]))]


@pytest.mark.parametrize("apply, extra, message", [
    ("bump.apply(hdr, other, hits); bump.apply(hdr, regs, hits);", "",
     "applied again with other extern instances"),
    ("bump.apply(hdr, hits, hits);", "", "argument for 'r' is a counter, not a register"),
    ("bit<8> x = 0; bump.apply(hdr, x, hits);", "", "argument for 'r' must name a register instance"),
    ("bump.apply(hdr, wide, hits);", " register<bit<16>>(4) wide;",
     "I.wide is a register<bit<16>>, not a register<bit<8>>"),
])
def test_wrong_extern_arguments_are_refused_where_they_are(apply, extra, message):
    src = program(apply, extra)
    with pytest.raises(P4Error) as e:
        compile_source(src)
    assert message in str(e.value)
    line = next(i for i, text in enumerate(src.splitlines(), 1) if "apply { sm.egress_spec" in text)
    assert f"<string>:{line}:" in str(e.value)
