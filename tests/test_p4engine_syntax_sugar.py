"""P4_16 syntax p4c accepts that the engine once refused: trailing commas (p4c's optTrailingComma)
and default initializers (`...`). Each program is run and its output compared with what BMv2
sends; what p4c refuses is refused at the same place."""
import pytest

from testbed.p4engine import P4Error, compile_source

from test_p4engine_accept import frame, program, refused, run


def line_col(src, needle, occurrence=0):
    """1-based line and column of the `occurrence`-th `needle` in `src`."""
    at = -1
    for _ in range(occurrence + 1):
        at = src.index(needle, at + 1)
    line = src.count("\n", 0, at) + 1
    return line, at - (src.rfind("\n", 0, at) + 1) + 1


# ------------------------------------------------------------------ trailing commas

def test_trailing_commas_in_list_and_structure_expressions():
    src = program("""
        apply {
            tuple<bit<16>, bit<16>> t = {0x1111, 0x2222,};
            pair_t p = {hi = 0x33, lo = 0x44,};
            pair_t q = (pair_t){hi = 0x55, lo = 0x66,};
            pair_t r = (pair_t){0x77, 0x88,};
            hdr.eth.type = t[1];
            hdr.eth.src = p.hi ++ p.lo ++ q.hi ++ q.lo ++ r.hi ++ r.lo;
        }""", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    assert run(src, frame()) == [(0, frame(src=0x334455667788, ethertype=0x2222))]


def test_trailing_commas_in_structured_annotations_and_translation_mappings():
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        @Lists[1, "text", true,] @Pairs[label = "x", size = 4,] @Empty[]
        table t {
            key = { hdr.eth.type : exact; }
            actions = { fwd; }
            const entries = { 0x0800 : fwd(2); }
        }
        apply { port_t p = (port_t)9w4; t.apply(); sm.egress_spec = sm.egress_spec + (bit<9>)p; }""",
                  decls="""
        @p4runtime_translation("example.org/port_t", string)
        @p4runtime_translation_mappings({ {"CPU", 4}, {"", 0}, })
        type bit<9> port_t;""")
    assert run(src, frame()) == [(6, frame())]


def test_a_trailing_comma_in_an_error_declaration_is_refused_as_p4c_does():
    src = program("apply { }", decls="error { Oops, }")
    line, col = line_col(src, "Oops, }")
    assert refused(src).startswith(f"<string>:{line}:{col + len('Oops, ')}: error: syntax error")


def test_an_empty_list_may_be_written_with_a_lone_comma_as_p4c_parses_it():
    src = program("""
        @Nothing[,] action fwd(in empty_t nothing) { sm.egress_spec = 3; }
        apply { empty_t e = {,}; fwd(e); }""", decls="struct empty_t { }")
    assert run(src, frame()) == [(3, frame())]


@pytest.mark.parametrize("text", ["{1, 2,,}", "{hi = 1,,}"])
def test_one_trailing_comma_only(text):
    src = program(f"apply {{ pair_t p = {text}; }}", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    line, col = line_col(src, ",,}")
    assert refused(src).startswith(f"<string>:{line}:{col + 1}: error: syntax error: unexpected ','")


# ------------------------------------------------------------------ header widths

PUNT_HEADER = """
@controller_header("packet_in")
header punt_t { bit<9> ingress_port; bit<9> target_egress_port; }"""


def test_a_header_type_no_instance_uses_may_have_any_width_as_p4c_bm2_ss_allows():
    # sonic-pins' SAI P4 declares its 18-bit packet_in header for other targets only
    src = program("apply { sm.egress_spec = 2; }", decls=PUNT_HEADER)
    prog = compile_source(src)
    assert prog.new_pipeline().process(0, frame()) == [(2, frame())]
    [punt] = prog.p4info.controller_packet_metadata
    assert [(m.name, m.bitwidth) for m in punt.metadata] == [("ingress_port", 9), ("target_egress_port", 9)]


@pytest.mark.parametrize("body, meta", [("apply { punt_t p; p.setValid(); }", ""),
                                        ("apply { }", "punt_t punt;")])
def test_an_instance_of_a_header_not_made_of_bytes_is_refused_at_its_type(body, meta):
    src = program(body, decls=PUNT_HEADER, meta=meta)
    line, col = line_col(src, "@controller_header")
    assert refused(src).startswith(
        f"<string>:{line}:{col}: error: header punt_t is 18 bits long; BMv2 needs a multiple of 8")


# ------------------------------------------------------------------ default initializers (...)

DEFAULTS_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<8> a; bit<8> b; }
header one_t { bit<8> v; }
header_union u_t { tag_t t; one_t o; }
header obs_t { bit<136> v; }
header obs2_t { bit<48> v; }
struct headers_t { eth_t eth; tag_t[2] tags; u_t u; tag_t last; obs_t obs; obs2_t obs2; }
enum E { X, Y, Z }
enum bit<8> SE { A = 3, B = 4 }
struct S { bit<8> a; bit<8> b; }
struct N { bool f; tag_t h; S s; E e; }
struct metadata_t { }
const bit<16> C = ...;
const S CS = {b = 9, ...};
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth); pkt.extract(hdr.tags[0]); pkt.extract(hdr.tags[1]);
        transition select(hdr.eth.type) { 0x0801: union; default: accept; }
    }
    state union { pkt.extract(hdr.u.o); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
bit<8> zero() { return ...; }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    action put(bit<8> v, in S s) { hdr.last.a = v; hdr.last.b = s.b; }
    apply {
        sm.egress_spec = 1;
        bit<8> x = 5; x = ...;
        int<8> i = -1; i = ...;
        bool b = true; b = ...;
        error e = error.NoMatch; e = ...;
        E en = E.Z; en = ...;
        SE se = SE.B; se = ...;
        S s0 = ...;
        S s1 = {2, ...};
        S s2 = (S){b = 7, ...};
        N n = {f = true, h = {3, ...}, ...};
        tag_t h0 = ...;
        tag_t h1 = {...};
        hdr.obs.setValid();
        hdr.obs.v = C ++ CS.a ++ CS.b ++ x ++ (bit<8>)i ++ (b ? 8w1 : 8w0) ++ (e == error.NoError ? 8w1 : 8w0)
                    ++ (en == E.X ? 8w1 : 8w0) ++ (bit<8>)se ++ s0.a ++ s0.b ++ s1.a ++ s1.b ++ s2.a ++ s2.b ++ zero();
        hdr.obs2 = {...};       // valid, all zeros
        hdr.obs2.v = hdr.obs2.v | ((n.f ? 8w1 : 8w0) ++ n.h.a ++ n.h.b ++ (n.h.isValid() ? 8w1 : 8w0)
                                   ++ (h0.isValid() ? 8w1 : 8w0) ++ (h1.isValid() ? 8w1 : 8w0));
        hdr.tags = {hdr.tags[1], ...};
        hdr.u = ...;
        hdr.last = (tag_t){b = 0x44, ...};
        if (hdr.u == {#} && {#} == hdr.tags[1]) { hdr.last.a = 0x55; }
        if (hdr.eth.dst == 1) {
            put(..., {a = 1, ...});
            hdr.tags[0] = (tag_t){#};
            hdr.eth = ...;
        }
    }
}
control Eg(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control Ck(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), Eg(), Ck(), D()) main;
"""


def eth(dst, ethertype):
    return dst.to_bytes(6, "big") + bytes(6) + ethertype.to_bytes(2, "big")


def test_default_initializers_give_each_type_its_default_value():
    pipe = compile_source(DEFAULTS_PROGRAM).new_pipeline()
    tags = bytes.fromhex("11223344")
    observed = bytes.fromhex("0000" "0009" "00" "00" "00" "01" "01" "00" "0000" "0200" "0007" "00")
    # n.f, n.h = {3, ...} (valid), h0 = ... (invalid), h1 = {...} (valid)
    observed2 = bytes.fromhex("01" "03" "00" "01" "00" "01")
    # tags = {tags[1], ...}: the second is invalid; the union is invalid (so equal to {#});
    # last = {b = 0x44, ...}
    assert pipe.process(0, eth(0, 0x0801) + tags + b"\x99rest") == [
        (1, eth(0, 0x0801) + tags[2:] + bytes.fromhex("5544") + observed + observed2 + b"rest")]
    # an action's arguments; {#} and a bare ... make headers invalid
    assert pipe.process(0, eth(1, 0x0800) + tags + b"rest") == [
        (1, bytes.fromhex("0000") + observed + observed2 + b"rest")]


@pytest.mark.parametrize("statement, marker, message", [
    ("hdr.eth.type = hdr.eth.type + ...;", "...;", "...: could not find default value"),
    ("if (...) { }", "...)", "...: could not find default value"),
    ("tuple<bit<8>, bit<8>> t = {..., 1};", "..., 1", "... must be the last element"),
    ("pair_t p = {1, 2, 3, ...};", "{1, 2", "pair_t has 2 fields but the list has 3 values"),
    ("pair_t p = {hi = 1, mid = 2, ...};", "{hi", "the structure expression's fields (hi, mid, lo) are not those of pair_t"),
    ("bit<8> x = {#};", "{#}", "{#} needs a header or header union type here"),
])
def test_default_initializers_p4c_refuses(statement, marker, message):
    src = program(f"apply {{ {statement} }}", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    line, col = line_col(src, marker)
    assert refused(src).startswith(f"<string>:{line}:{col}: error: {message}\n")


def test_a_header_compares_equal_to_the_invalid_header_when_it_is_invalid():
    src = program("""
        apply {
            sm.egress_spec = hdr.eth == {#} ? 9w9 : 9w2;
            if ({#} != hdr.eth) { sm.egress_spec = sm.egress_spec + 4; }
            hdr.eth.setInvalid();
            if (hdr.eth == {#}) { sm.egress_spec = sm.egress_spec + 1; }
        }""")
    assert run(src, frame()) == [(7, b"payload")]


def test_a_tuple_takes_defaults_for_the_elements_a_list_leaves_out():
    src = program("""
        apply {
            tuple<bit<16>, bool, eth_t> tp = {0x0801, ...};
            hdr.eth.type = tp[0] + (tp[1] ? 16w1 : 16w0) + (tp[2].isValid() ? 16w0x100 : 16w0);
            tp = {7, true, {...}};
            hdr.eth.src = (bit<48>)(tp[0] + (tp[1] ? 16w1 : 16w0) + (tp[2].isValid() ? 16w0x100 : 16w0));
            tp = ...;
            hdr.eth.dst = (bit<48>)(tp[0] + (tp[1] ? 16w1 : 16w0) + (tp[2].isValid() ? 16w0x100 : 16w0));
        }""")
    assert run(src, frame()) == [(0, frame(dst=0, src=0x108, ethertype=0x0801))]


# ------------------------------------------------------------------ structure expressions

def test_a_digest_of_a_structure_expression_sends_the_fields_in_the_structs_order():
    src = program("""
        apply {
            if (hdr.eth.type == 0x0800) { digest<pair_t>(1, {lo = 2, hi = 1}); }
            else if (hdr.eth.type == 0x86dd) { digest<pair_t>(1, {lo = 3, ...}); }
            else { digest<pair_t>(1, {4, 5}); }
        }""", decls="struct pair_t { bit<16> hi; bit<16> lo; }")
    pipe = compile_source(src).new_pipeline()
    sent = []
    pipe.digest_callback = lambda name, values: sent.append((name, values))
    pipe.process(0, frame())        # one digest a packet, as BMv2 sends
    pipe.process(0, frame(ethertype=0x86dd))
    pipe.process(0, frame(ethertype=0x0806))
    assert sent == [("pair_t", (1, 2)), ("pair_t", (0, 3)), ("pair_t", (4, 5))]


def test_a_nested_structure_expression_keeps_its_field_names_when_a_later_item_has_effects():
    src = program("""
        apply {
            bit<8> k = 5;
            outer_t o = {p = {lo = 1, hi = 2}, c = bump(k)};
            hdr.eth.type = o.p.hi ++ o.p.lo;
            hdr.eth.src = (bit<48>)(o.c ++ k);
        }""", decls="struct pair_t { bit<8> hi; bit<8> lo; } struct outer_t { pair_t p; bit<8> c; }\n"
                    "bit<8> bump(inout bit<8> v) { v = v + 1; return v; }")
    assert run(src, frame()) == [(0, frame(src=0x0606, ethertype=0x0201))]


def test_a_comparison_with_a_structure_expression_fills_its_other_fields_with_defaults():
    src = program("""
        apply {
            pair_t p = {hi = 1, lo = 0};
            tuple<bit<8>, bool> t = {1, false};
            if (p == {hi = 1, ...}) { sm.egress_spec = sm.egress_spec + 1; }
            if (p != {lo = 0, ...}) { sm.egress_spec = sm.egress_spec + 2; }
            if (t == {1, ...}) { sm.egress_spec = sm.egress_spec + 4; }
        }""", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    assert run(src, frame()) == [(7, frame())]
