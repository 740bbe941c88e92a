"""Declarations nothing instantiates or calls: p4c's front end type-checks them all the same (an
error in one refuses the program), then its unused-declaration pass removes them (nothing of them
in P4Info or BMv2's JSON). The engine compiles them in a throwaway Compiler for their errors only."""
import pytest

from testbed.p4engine import P4Error, compile_source
from testbed.p4engine.tables import ActionCall, Exact

HEAD = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; }
struct H { h_t h; }
struct M { }
parser P(packet_in p, out H hdr, inout M m, inout standard_metadata_t sm) { state start { p.extract(hdr.h); transition accept; } }
control VC(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    %s
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table t { key = { hdr.h.a : exact; } actions = { fwd; NoAction; } }
    apply { t.apply(); }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control CC(inout H hdr, inout M m) { apply { } }
control D(packet_out p, in H hdr) { apply { p.emit(hdr.h); } }
"""
MAIN = "V1Switch(P(), VC(), I(), E(), CC(), D()) main;\n"


def program(unused, in_ingress=""):
    """The program with `unused` declared after the blocks main takes (their lines stay put)."""
    return HEAD % in_ingress + unused + "\n" + MAIN


def refusal(text):
    with pytest.raises(P4Error) as e:
        compile_source(text, "prog.p4")
    _, line, col, message = e.value.diagnostics[0]
    return text.splitlines()[line - 1][col - 1:], message


def test_an_error_in_a_control_nothing_instantiates_is_refused_where_it_is():
    # accepted before; p4c: "error: x: declaration not found"
    text = program("control Unused() { apply { x = 1; } }")
    at, message = refusal(text)
    assert at.startswith("x = 1;") and message == "unknown name 'x'"
    _, line, col, _ = pytest.raises(P4Error, compile_source, text, "prog.p4").value.diagnostics[0]
    assert (line, col) == (text.splitlines().index("control Unused() { apply { x = 1; } }") + 1, 28)


# (what, unused declarations, text in ingress, where the error is, words of its message)
REFUSED = [
    ("a parser's unknown state", "parser UP(packet_in p) { state start { transition nowhere; } }", "",
     "nowhere; }", ["unknown parser state"]),
    ("a parser's unknown name", "parser UP(packet_in p) { state start { q = 1; transition accept; } }", "",
     "q = 1", ["unknown name 'q'"]),
    ("a table's key names no field", "control U(inout H h) { table u { key = { h.h.zz : exact; } "
     "actions = { NoAction; } } apply { u.apply(); } }", "", "h.h.zz", ["no field 'zz'"]),
    ("a table's default action is not one of its actions", "control U(inout H h) { action a() { } "
     "table u { key = { h.h.a : exact; } actions = { a; } default_action = nope(); } apply { u.apply(); } }",
     "", "nope", ["nope"]),
    ("a value that is not callable", "control U(inout H h) { apply { h.h.a = h.h.a(1); } }", "",
     "h.h.a(1)", ["cannot be called"]),
    ("a type error", "control U(inout H h) { apply { bool b = h.h.a; } }", "", "h.h.a; }", ["bool"]),
    ("a sub-control only an unused control instantiates",
     "control S(inout H h) { apply { h.h.a = y; } }\ncontrol U(inout H h) { S() s; apply { s.apply(h); } }",
     "", "y; }", ["unknown name 'y'"]),
    ("a function nothing calls", "bit<8> f() { return y; }", "", "y; }", ["unknown name 'y'"]),
    ("a global instance of a control (p4c: only packages and externs are instantiated there)",
     "control C(inout H h)(bit<8> k) { apply { h.h.a = k; } }\nC(true) c;", "", "c;", ["cannot be instantiated at the top level"]),
]


@pytest.mark.parametrize("what,unused,in_ingress,at,words", REFUSED, ids=[c[0] for c in REFUSED])
def test_errors_in_unused_declarations_are_refused_where_they_are(what, unused, in_ingress, at, words):
    found, message = refusal(program(unused, in_ingress))
    assert found.startswith(at), (found, message)
    assert all(w in message for w in words), message


# (what, unused declarations p4c accepts): the program is the one without them, to P4Info and
# generated Python
ACCEPTED = [
    ("a control with a table, an action and a counter", """
control U(inout H h, inout standard_metadata_t sm) {
    counter(8, CounterType.packets) seen;
    action to(bit<9> port) { sm.egress_spec = port; seen.count(0); }
    table u { key = { h.h.a : exact; } actions = { to; NoAction; } default_action = to(3); }
    apply { u.apply(); }
}"""),
    ("a parser with a value set", """
parser UP(packet_in p, inout H h) {
    value_set<bit<8>>(4) vs;
    state start { p.extract(h.h); transition select(h.h.a) { vs: accept; default: reject; } }
}"""),
    ("a generic control (checked only where instantiated)", """
control G<T>(inout T x) { apply { x = x; } }"""),
    ("a control with constructor parameters and no instance", """
control K(inout H h)(bit<8> k) { table u { key = { h.h.a : exact; } actions = { NoAction; } size = k; }
    apply { u.apply(); } }"""),
    ("a control taking an extern instance, never applied", """
control X(inout H h, counter c) { apply { c.count(1); } }
control Y(inout H h) { counter(4, CounterType.packets) c; X() x; apply { } }"""),
    ("a table with the control-plane name of a used one (p4c checks names once unused ones are gone)", """
control U(inout H h) { @name("I.t") table u { key = { h.h.a : exact; } actions = { NoAction; } }
    @name("I.fwd") action a() { } apply { u.apply(); a(); } }"""),
    ("what p4c-bm2-ss or the engine cannot run (p4c removes it before its back end)", """
struct S { bit<8> f; }
header odd_t { bit<7> f; }
extern void unknown_fn(in bit<8> x);
control U(inout H h) { register<S>(4) r; apply { odd_t o; o.setValid(); unknown_fn(h.h.a); } }"""),
    ("a function taking an extern instance", """
void f(counter c) { c.count(1); }"""),
    ("parsers p4c's SimplifyParsers would refuse, which runs once unused ones are gone", """
parser NoStart(packet_in p) { state begin { transition accept; } }
parser Loops(packet_in p) { state start { transition start; } }"""),
    ("a parser instantiated in a control (p4c's Inline refuses it, after removing unused code)", """
parser Sub(packet_in p) { state start { transition accept; } }
control U(packet_in p) { Sub() s; apply { s.apply(p); } }"""),
    ("a header stack's .next read outside extract (the engine cannot run it; p4c accepts it)", """
header s_t { bit<8> v; }
struct SH { s_t[2] s; }
parser UP(packet_in p, inout SH h) {
    state start { p.extract(h.s.next); transition select(h.s.next.v) { 0: accept; default: start; } }
}"""),
]


def _outputs(text):
    prog = compile_source(text, "prog.p4")
    return prog.compiled.source, prog.p4info.SerializeToString(deterministic=True), prog


@pytest.mark.parametrize("what,unused", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_unused_declarations_p4c_accepts_leave_the_program_as_it_was(what, unused):
    source, p4info, prog = _outputs(program(unused))
    plain_source, plain_p4info, plain = _outputs(program(""))
    assert source == plain_source and p4info == plain_p4info
    assert [t.preamble.name for t in prog.p4info.tables] == ["I.t"]
    assert prog.compiled.template == plain.compiled.template
    pipe = prog.new_pipeline()
    pipe.tables["I.t"].insert([Exact(5)], ActionCall("I.fwd", {"port": 2}))
    assert pipe.process(0, bytes([5])) == [(2, bytes([5]))]
    assert pipe.process(1, bytes([6])) == [(0, bytes([6]))]      # a miss leaves egress_spec 0


def test_target_limits_are_not_applied_to_unused_code():
    # p4c-bm2-ss removes unused declarations before its back end looks for what BMv2 cannot run
    lpm2 = ("table u { key = { h.h.a : lpm; h.h.a : lpm; } actions = { NoAction; } }",
            "for (bit<8> i = 0; i < 2; i = i + 1) { h.h.a = i; } u.apply();")
    compile_source(program("control U(inout H h) { %s apply { %s } }" % lpm2), "prog.p4", target="bmv2")
    used = program("", lpm2[0].replace("h.h.a", "hdr.h.a").replace("table u", "table v"))
    with pytest.raises(P4Error, match="multiple lpm keys"):
        compile_source(used.replace("apply { t.apply(); }", "apply { t.apply(); v.apply(); }"), "prog.p4",
                       target="bmv2")
