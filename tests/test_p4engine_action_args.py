"""Constant action arguments (const entries, default_action) against their parameter's type, as
p4c's front end treats them: an integer literal is implicitly cast, keeping the parameter's low
bits with a warning (p4c: "[--Wwarn=overflow] warning: 8w5000: value does not fit in 8 bits");
a value of another type is an error."""
import pytest

from testbed.p4engine import P4Error, compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; int<8> c; }
struct H { h_t h; }
struct M { }
parser P(packet_in p, out H h, inout M m, inout standard_metadata_t s) {
    state start { p.extract(h.h); transition accept; }
}
control VC(inout H h, inout M m) { apply { } }
control I(inout H h, inout M m, inout standard_metadata_t s) {
    action set(bit<8> v) { h.h.b = v; }
    action set_signed(int<8> v) { h.h.c = v; }
    table t {
        key = { h.h.a : exact; }
        actions = { set; set_signed; }
        const entries = {
            1 : set(300);
            2 : set(-1);
            3 : set_signed(200);
            4 : set(8w7);
        }
        default_action = set(5000);
    }
    apply { t.apply(); }
}
control E(inout H h, inout M m, inout standard_metadata_t s) { apply { } }
control D(packet_out p, in H h) { apply { p.emit(h.h); } }
V1Switch(P(), VC(), I(), E(), VC(), D()) main;
"""


def column(line_text, arg):
    return line_text.index(arg) + 1


def test_too_wide_literal_arguments_keep_the_low_bits_with_a_located_warning():
    program = compile_source(PROGRAM, "args.p4")
    lines = PROGRAM.splitlines()
    found = {(line, col): message for _, line, col, message in program.compiled.warnings}

    def where(arg):
        line = next(i for i, text in enumerate(lines, 1) if arg in text)
        return line, column(lines[line - 1], arg.split("(")[1].rstrip(");"))
    assert "300: value does not fit in 8 bits" in found[where("set(300);")]
    assert "keeps 44" in found[where("set(300);")]
    assert "-1: negative value with unsigned type" in found[where("set(-1);")]
    assert "200: signed value does not fit in 8 bits" in found[where("set_signed(200);")]
    assert "5000: value does not fit in 8 bits" in found[where("set(5000);")]
    assert len(found) == 4                       # 8w7 fits: no warning
    pipe = program.new_pipeline()
    for a, b, c in ((1, 44, 0), (2, 255, 0), (3, 0, (200 - 256) & 0xFF), (4, 7, 0), (9, 5000 & 0xFF, 0)):
        [(_, out)] = pipe.process(0, bytes([a, 0, 0]) + b"x")
        assert bytes(out)[:3] == bytes([a, b, c])
    [table] = program.p4info.tables
    assert table.initial_default_action.arguments[0].value == bytes([5000 & 0xFF])


@pytest.mark.parametrize("arg, words", [
    ("16w300", "bit<16> where bit<8> is expected"),
    ("true", "bool where bit<8> is expected"),
])
def test_an_argument_of_another_type_is_refused_where_it_is_written(arg, words):
    source = PROGRAM.replace("set(8w7)", f"set({arg})")
    with pytest.raises(P4Error) as e:
        compile_source(source, "args.p4")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if f"set({arg})" in text)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"args.p4:{line}:{column(source.splitlines()[line - 1], arg)}: error:")
    assert words in first
