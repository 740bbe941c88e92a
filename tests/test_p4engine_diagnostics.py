"""Rejected programs: ill-typed or outside the engine's subset -> file:line:col, the source line and
a caret under the offending construct; never a Python traceback."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.p4engine import P4Error, compile_file, compile_source

PRELUDE = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<16> b; }
struct headers_t { h_t h; }
struct meta_t { bit<8> m; }
"""
PRELUDE_LINES = PRELUDE.count("\n")

TAIL = """
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout headers_t hdr, inout meta_t meta) { apply { } }
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def ingress(body):
    return ("control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {\n"
            f"{body}\n}}\n")


# (what, program text after the prelude, marker: the text the caret must point at, message words)
CASES = [
    ("register of a struct (p4c-bm2-ss refuses it: issue907-bmv2)",
     "struct S { bit<32> f; }\n" + ingress("    register<S>(32w100) r;\n    apply { S s = { 0 }; r.write(0, s); }")
     + TAIL, "register<S>(32w100) r", ["register I.r", "bit<W> or int<W>, not S"]),
    ("width mismatch", ingress("    apply { hdr.h.a = hdr.h.b; }") + TAIL, "hdr.h.a = hdr.h.b", ["bit<16>", "bit<8>"]),
    ("unknown name", ingress("    apply { hdr.h.a = nosuch; }") + TAIL, "nosuch", ["unknown name", "nosuch"]),
    ("unknown field", ingress("    apply { hdr.h.c = 1; }") + TAIL, "hdr.h.c", ["no field", "'c'"]),
    ("non-bool condition", ingress("    apply { if (hdr.h.a) { hdr.h.a = 1; } }") + TAIL, "hdr.h.a)",
     ["condition must be bool"]),
    ("mixed widths in arithmetic", ingress("    apply { hdr.h.b = hdr.h.a + hdr.h.b; }") + TAIL,
     "hdr.h.a + hdr.h.b", ["different types"]),
    ("bad slice", ingress("    apply { hdr.h.a = hdr.h.a[9:2]; }") + TAIL, "hdr.h.a[9:2]", ["out of range"]),
    ("string as a slice bound (p4_16_errors/expr-bitslice-high-unsupported-type: was a TypeError)",
     ingress('    apply { hdr.h.a = hdr.h.b["x":0]; }') + TAIL, '"x":0]', ['"x": expected an integer value']),
    ("unknown action in table", ingress("""    table t { key = { hdr.h.a: exact; } actions = { nope; } }
    apply { t.apply(); }""") + TAIL, "nope", ["not an action"]),
    ("unknown match kind", ingress("""    action a() { }
    table t { key = { hdr.h.a: fuzzy; } actions = { a; } }
    apply { t.apply(); }""") + TAIL, "hdr.h.a: fuzzy", ["match kind", "fuzzy"]),
    ("varbit not in bytes", "header v_t { varbit<12> opts; }\n" + ingress("    apply { }") + TAIL, "varbit",
     ["varbit<12>", "multiple of 8"]),
    ("varbit header extracted without a length", "header v_t { varbit<32> opts; }\n"
     "struct hv_t { v_t v; }\n" + ingress("    apply { }") + TAIL.replace(
         "out headers_t hdr", "out headers_t hdr").replace("pkt.extract(hdr.h);", "hv_t x; pkt.extract(x.v);"),
     "pkt.extract(x.v)", ["varbit", "extract(hdr, length_in_bits)"]),
    ("header_union of a non-header", "header_union u_t { bit<8> x; }\n" + ingress("    apply { }") + TAIL,
     "bit<8> x", ["header_union", "must be a header"]),
    ("exit in a parser", ingress("    apply { }") + TAIL.replace("pkt.extract(hdr.h); transition",
                                                               "pkt.extract(hdr.h); exit; transition"),
     "exit;", ["exit", "parser"]),
    ("unknown parser state", ingress("    apply { }") + TAIL.replace("transition accept", "transition nowhere"),
     "nowhere", ["unknown parser state"]),
    ("syntax error", ingress("    apply { hdr.h.a = ; }") + TAIL, "; }", ["syntax error"]),
    ("extract into a scalar", ingress("    apply { }") + TAIL.replace("pkt.extract(hdr.h)", "pkt.extract(hdr.h.a)"),
     "hdr.h.a)", ["extract needs a header"]),
    ("clone type in the wrong control", ingress("    apply { clone(CloneType.E2E, 1); }") + TAIL,
     "CloneType.E2E", ["E2E", "ingress"]),
    ("unsupported hash algorithm", ingress(
        "    apply { hash(meta.m, HashAlgorithm.random, 8w0, { hdr.h.a }, 8w4); }") + TAIL,
     "HashAlgorithm.random", ["random"]),
    ("no main", ingress("    apply { }"), None, ["main"]),
    ("label after default", ingress("""    apply { switch (hdr.h.a) { 1: { } default: { } 2: { } } }""") + TAIL,
     "2: { } } }", ["default", "last"]),
    ("two default labels", ingress("""    apply { switch (hdr.h.a) { default: { } default: { } } }""") + TAIL,
     "default: { } } }", ["default", "last"]),
    ("'_' with no type to take", ingress("    apply { hdr.h.a = _; }") + TAIL, "_;", ["'_'"]),
    ("sub-parser in a control", ingress("    P() p;\n    apply { }") + TAIL, "P() p", ["parser"]),
    # rules of p4c's front end (its messages, located where p4c locates them)
    ("int parameter with a direction", ingress("""    action a(in int v) { hdr.h.a = 1; }
    apply { a(1); }""") + TAIL, "v) {", ["v: parameters with type int must be directionless"]),
    ("complex key without @name", ingress("""    action a() { }
    table t { key = { hdr.h.a + 1: exact; } actions = { a; } }
    apply { t.apply(); }""") + TAIL, "hdr.h.a + 1:", ["hdr.h.a + 1", "complex key expression requires a @name"]),
    ("cast in a key without @name", ingress("""    action a() { }
    table t { key = { hdr.h.b[7:0] & (bit<8>)meta.m: exact; } actions = { a; } }
    apply { t.apply(); }""") + TAIL, "(bit<8>)meta.m", ["complex key expression requires a @name"]),
    ("table applied in an action argument", ingress("""    action a(in bit<8> x) { hdr.h.a = x; }
    table t1 { key = { hdr.h.a: exact; } actions = { NoAction; } }
    table t2 { key = { hdr.h.b: exact; } actions = { a(t1.apply().hit ? 8w1 : 8w2); } }
    apply { t2.apply(); }""") + TAIL, "t1.apply()", ["t1.apply()", "table invocation in action argument"]),
    ("switch in a used action", ingress("""    action a() { switch (hdr.h.a) { 1: { meta.m = 2; } } }
    table t { key = { hdr.h.a: exact; } actions = { a; } }
    apply { t.apply(); }""") + TAIL, "switch (hdr.h.a)", ["switch statements are not supported in actions"]),
    ("switch in a function a used action calls", "void pick(inout bit<8> x) { switch (x) { 1: { x = 2; } } }\n"
     "void outer(inout bit<8> x) { pick(x); }\n" + ingress("""    action a() { outer(meta.m); }
    apply { a(); }""") + TAIL, "switch (x)", ["switch statements are not supported in actions (function pick, "
                                              "called from action I.a)"]),
    ("shift by a value of a new type", "type bit<8> amount_t;\n" + ingress("""    apply {
        amount_t n = (amount_t)2;
        hdr.h.b = hdr.h.b << n;
    }""") + TAIL, "n;", ["n: the right operand of a shift", "not amount_t"]),
    ("block with a parameter too many for V1Switch", ingress("    apply { }") + TAIL.replace(
        "control V(inout headers_t hdr, inout meta_t meta)",
        "control V(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm)"),
     "V(inout", ["V: the V1Switch verify block takes 2 parameter(s) (inout H hdr, inout M meta), not 3"]),
    ("block parameter in the wrong direction", ingress("    apply { }") + TAIL.replace(
        "control C(inout headers_t hdr", "control C(in headers_t hdr"),
     "hdr, inout meta_t meta) { apply { } }", ["C: parameter 'hdr' must be inout (not in)"]),
    ("block parameters swapped", ingress("    apply { }") + TAIL.replace(
        "control E(inout headers_t hdr, inout meta_t meta,", "control E(inout meta_t meta, inout headers_t hdr,"),
     "meta, inout headers_t", ["E: parameter 'meta' has type meta_t; the V1Switch egress block needs headers_t"]),
    ("parser that never ends", ingress("    apply { }") + TAIL.replace(
        "transition accept; }", "transition more; }\n    state more { pkt.extract(hdr.h); transition more; }"),
     "P(packet_in", ["parser P: parser never reaches accept or reject state"]),
]

# near misses of the front-end rules above: what p4c accepts must still compile
ACCEPTED = [
    ("@defaultonly as the default action, @tableonly in a const entry",
     ingress("""    action a() { }
    action b() { }
    table t { key = { hdr.h.a: exact; } actions = { @tableonly a; @defaultonly b; }
              const entries = { 3 : a(); } default_action = b; }
    apply { t.apply(); }""") + TAIL),
    ("int parameter without direction is fine outside actions; in bit<8> in an action",
     ingress("""    action a(in bit<8> v) { hdr.h.a = v; }
    apply { a(1); }""") + TAIL),
    ("complex key with @name; names, slices, & and isValid() need none",
     ingress("""    action a() { }
    table t { key = { hdr.h.a + 1: exact @name("a_plus_1"); hdr.h.b[7:0] & 8w0xf0: ternary;
                      hdr.h.isValid(): exact; meta.m: exact; 8w1 + 8w2: exact; } actions = { a; } }
    apply { t.apply(); }""") + TAIL),
    ("table applied in the apply block, actions list binds a field",
     ingress("""    action a(in bit<8> x) { hdr.h.a = x; }
    table t1 { key = { hdr.h.a: exact; } actions = { NoAction; } }
    table t2 { key = { hdr.h.b: exact; } actions = { a(hdr.h.a); } }
    apply { if (t1.apply().hit) { t2.apply(); } }""") + TAIL),
    ("switch in the apply block and in an action nothing uses",
     ingress("""    action unused() { switch (hdr.h.a) { 1: { meta.m = 2; } } }
    apply { switch (hdr.h.a) { 1: { meta.m = 2; } } }""") + TAIL),
    ("switch in a function the apply block calls, not an action",
     "void pick(inout bit<8> x) { switch (x) { 1: { x = 2; } } }\n" + ingress("""    action a() { meta.m = 1; }
    apply { pick(meta.m); a(); }""") + TAIL),
    ("shift by a typedef'd amount and by a new type cast to bit<8>",
     "typedef bit<8> alias_t;\ntype bit<8> amount_t;\n" + ingress("""    apply {
        alias_t k = 3;
        amount_t n = (amount_t)2;
        hdr.h.b = (hdr.h.b << k) >> (bit<8>)n;
    }""") + TAIL),
    ("shadowing in a nested block", ingress(
        "    apply { bit<8> x = 1; if (hdr.h.a == 0) { bit<8> x = 2; hdr.h.a = x; } hdr.h.b = (bit<16>)x; }") + TAIL),
    ("parser loop with an exit to accept", ingress("    apply { }") + TAIL.replace(
        "transition accept; }", "transition more; }\n    state more { pkt.extract(hdr.h); "
        "transition select(hdr.h.a) { 0: more; default: accept; } }")),
]


# Declared twice in one scope: p4c refuses it right after parsing (issue1932-1/-2: the engine
# compiled both actions `foo`, the second hiding the first), pointing at the second name.
TWICE = ["is declared twice in one scope (first at line"]
CASES += [
    ("two actions with one name in a control",
     ingress("    action foo(in bit<8> x, out bit<8> y) { y = x; }\n    action foo(inout bit<8> x) { x = 1; }\n"
             "    apply { foo(hdr.h.a); }") + TAIL, "foo(inout", ["'foo'"] + TWICE),
    ("two top-level actions with one name",
     "action foo() { }\naction foo(inout bit<8> x) { x = 1; }\n" + ingress("    apply { foo(hdr.h.a); }") + TAIL,
     "foo(inout", ["'foo'"] + TWICE),
    ("a variable declared twice in one block",
     ingress("    apply { bit<8> x = 1; bit<8> x = 2; hdr.h.a = x; }") + TAIL, "x = 2", ["'x'"] + TWICE),
    ("an action parameter named twice", ingress("    action a(bit<8> p, bit<8> p) { }\n    apply { }") + TAIL,
     "p) {", ["'p'"] + TWICE),
    ("a parser state declared twice", ingress("    apply { }") + TAIL.replace(
        "transition accept; }", "transition accept; }\n    state start { transition accept; }", 1),
     "start { transition accept; }", ["'start'"] + TWICE),
    ("an enum member declared twice", "enum Color { A, B,\n A }\n" + ingress("    apply { }") + TAIL, "A }",
     ["'A'"] + TWICE),
    ("functions overloaded by their number of parameters (p4c takes them: outside the subset)",
     "bit<8> f(in bit<8> x) { return x; }\nbit<8> f(in bit<8> x, in bit<8> y) { return x + y; }\n"
     + ingress("    apply { hdr.h.a = f(hdr.h.a) + f(1, 2); }") + TAIL, "f(in bit<8> x, in",
     ["function 'f' is overloaded (first declared at line", "not supported by this engine"]),
    ("an error declared in two error lists", "error { Oops }\nerror { Oops }\n" + ingress("    apply { }") + TAIL,
     "Oops }", ["'Oops'"] + TWICE),
    ("a @defaultonly action in a const entry (p4c issue1580: was refused at the table)",
     ingress("""    action a() { }
    table t { key = { hdr.h.a: exact; } actions = { @defaultonly a; NoAction; }
              const entries = { 3 : a(); } }
    apply { t.apply(); }""") + TAIL, "3 : a()", ["table I.t: action I.a is @defaultonly"]),
    ("a @tableonly action as the default (p4c issue1580: was refused at the table)",
     ingress("""    action a() { }
    table t { key = { hdr.h.a: exact; } actions = { @tableonly a; NoAction; } default_action = a; }
    apply { t.apply(); }""") + TAIL, "a; }", ["table I.t: action I.a is @tableonly"]),
    ("a control instantiated at the top level (p4c issue388)",
     "control S() { apply { } }\nS() s;\n" + ingress("    apply { s.apply(); }") + TAIL, "s;",
     ["s: a control cannot be instantiated at the top level"]),
]


def check(err, text, marker, words):
    rendered = str(err)
    first = rendered.splitlines()[0]
    m = re.match(r"^(.+):(\d+):(\d+): error: (.+)$", first)
    assert m, rendered
    for w in words:
        assert w in m.group(4), rendered
    assert err.diagnostics and err.diagnostics[0][3] == m.group(4)
    if marker is None:
        return
    line, col = int(m.group(2)), int(m.group(3))
    source_line = text.splitlines()[line - 1]
    assert source_line[col - 1:].startswith(marker), (rendered, source_line[col - 1:])
    lines = rendered.splitlines()
    assert lines[1] == source_line.expandtabs(8)
    assert lines[2] == " " * (col - 1) + "^"


@pytest.mark.parametrize("what,body,marker,words", CASES, ids=[c[0] for c in CASES])
def test_rejected_program_points_at_the_construct(what, body, marker, words):
    text = PRELUDE + body
    with pytest.raises(P4Error) as e:
        compile_source(text, filename="prog.p4")
    assert str(e.value).startswith("prog.p4:")
    check(e.value, text, marker, words)


@pytest.mark.parametrize("what,body", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_near_misses_of_front_end_rules_compile(what, body):
    compile_source(PRELUDE + body, filename="prog.p4")


@pytest.mark.parametrize("version,words", [
    ("20000101", ["20000101: unknown v1model version", "20180101", "20200408"]),
    ("-5", ["-5: expected v1model version to be a non-negative number"])])
def test_an_unknown_v1model_version_is_refused_where_v1model_declares_it(version, words):
    text = f"#define V1MODEL_VERSION {version}\n" + PRELUDE + ingress("    apply { }") + TAIL
    with pytest.raises(P4Error) as e:
        compile_source(text, filename="prog.p4")
    file, line, col, message = e.value.diagnostics[0]
    assert file.endswith("v1model.p4") and all(w in message for w in words), str(e.value)
    assert "__v1model_version = V1MODEL_VERSION" in str(e.value).splitlines()[1]


@pytest.mark.parametrize("version", ["20180101", "20200408"])
def test_known_v1model_versions_compile(version):
    compile_source(f"#define V1MODEL_VERSION {version}\n" + PRELUDE + ingress("    apply { }") + TAIL,
                   filename="prog.p4")


def test_error_in_an_included_file_names_that_file(tmp_path):
    (tmp_path / "lib.p4").write_text("const bit<8> X = 1;\nconst bit<8> Y = X + true;\n")
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include "lib.p4"\n')
    with pytest.raises(P4Error) as e:
        compile_file(main)
    first = str(e.value).splitlines()[0]
    assert first.startswith(f"{tmp_path / 'lib.p4'}:2:"), str(e.value)
    assert "const bit<8> Y = X + true;" in str(e.value)


def test_missing_include_is_a_diagnostic(tmp_path):
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include "absent.p4"\n')
    with pytest.raises(P4Error) as e:
        compile_file(main)
    assert str(e.value).startswith(f"{main}:2:1: error:") and "absent.p4" in str(e.value)


def test_check_command_prints_the_diagnostic_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.p4"
    bad.write_text(PRELUDE + ingress("    apply { hdr.h.a = hdr.h.b; }") + TAIL)
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "p4", "check", str(bad)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert f"{bad}:{PRELUDE_LINES + 2}:" in out and "Traceback" not in out


def test_empty_program_is_reported_against_its_own_file():
    with pytest.raises(P4Error) as e:
        compile_source("", filename="empty.p4")
    assert str(e.value).startswith("empty.p4:1:1: error:") and "main" in str(e.value)
