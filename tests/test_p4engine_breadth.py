"""Language constructs beyond the core subset that others' programs use (p4c's samples among
them): `_` arguments, lookahead of a struct, bool header fields, sub-parsers, control instances
applied from another control, nested slice assignment, tuples -- and header layouts whose
fields straddle bytes (extract/emit go through struct.Struct chunks)."""
import pytest

from testbed.p4engine import P4Error, compile_source

ETH = bytes.fromhex("0000000000aa0000000000010800")


def v1switch(decls, parser, ingress, deparser, meta=""):
    """A whole program: `decls` declares headers_t; the other parts are control/parser bodies."""
    return f"""
#include <core.p4>
#include <v1model.p4>
{decls}
struct metadata_t {{ {meta} }}
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    {parser}
}}
control V(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    {ingress}
}}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ {deparser} }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def run(src, data, port=0):
    return compile_source(src).new_pipeline().process(port, data)


# ------------------------------------------------------------------ header layouts

ODD = """
header odd_t {
    bit<3> a; bit<21> b;          // a 3-byte chunk
    bit<40> c;                    // 5 bytes
    bit<4> d; int<4> e; bit<48> f; // 7 bytes
    bit<72> g;                    // longer than 8 bytes
    bool h; bit<7> i;
}
struct headers_t { odd_t odd; }
"""


def test_fields_straddling_bytes_round_trip_and_read_back_exactly():
    data = bytes(range(0xA0, 0xA0 + 25))
    src = v1switch(ODD, "state start { pkt.extract(hdr.odd); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            if (hdr.odd.a == 5 && hdr.odd.b == 0x00a1a2 && hdr.odd.c == 0xa3a4a5a6a7
                && hdr.odd.d == 0xa && hdr.odd.e == -8 && hdr.odd.f == 0xa9aaabacadae
                && hdr.odd.g == 0xafb0b1b2b3b4b5b6b7 && hdr.odd.h && hdr.odd.i == 0x38) {
                sm.egress_spec = 2;
            }
        }""", "pkt.emit(hdr.odd);")
    assert run(src, data) == [(2, data)]


def test_emit_packs_modified_fields_including_signed_and_bool():
    src = v1switch(ODD, "state start { pkt.extract(hdr.odd); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            hdr.odd.a = 7; hdr.odd.b = 1; hdr.odd.e = -1; hdr.odd.f = 0xffffffffffff;
            hdr.odd.g = 1; hdr.odd.h = false; hdr.odd.i = 3;
        }""", "pkt.emit(hdr.odd);")
    out = run(src, bytes(25) + b"tail")
    expected = (bytes.fromhex("e00001") + bytes(5) + bytes.fromhex("0f") + b"\xff" * 6 +
                bytes(8) + b"\x01" + b"\x03" + b"tail")
    assert out == [(1, expected)]


# ------------------------------------------------------------------ `_`, lookahead, bool

TAG = """
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header tag_t { bit<8> a; bit<8> b; }
struct headers_t { ethernet_t ethernet; tag_t tag; }
"""


def test_dont_care_extract_skips_a_header_and_dont_care_out_argument():
    src = v1switch(TAG, """
        state start { pkt.extract<ethernet_t>(_); pkt.extract(hdr.tag); transition accept; }""", """
        action get(out bit<8> x, out bit<8> y) { x = 1; y = 2; }
        apply { sm.egress_spec = 1; get(hdr.tag.a, _); }""", "pkt.emit(hdr.ethernet); pkt.emit(hdr.tag);")
    assert run(src, ETH + b"\x07\x08rest") == [(1, b"\x01\x08rest")]


def test_lookahead_of_a_struct_of_bit_fields():
    src = v1switch("struct pair_t { bit<4> hi; bit<12> lo; }\n" + TAG, """
        state start {
            pair_t p = pkt.lookahead<pair_t>();
            hdr.tag.setValid(); hdr.tag.a = (bit<8>)p.hi; hdr.tag.b = p.lo[7:0];
            transition accept;
        }""", "apply { sm.egress_spec = 1; }", "pkt.emit(hdr.tag);")
    assert run(src, b"\x9a\xbc") == [(1, b"\x09\xbc\x9a\xbc")]


def test_bool_header_field_is_one_bit_on_the_wire():
    decls = "header flags_t { bool urgent; bit<7> rest; }\nstruct headers_t { flags_t f; }"
    src = v1switch(decls, "state start { pkt.extract(hdr.f); transition accept; }", """
        apply { sm.egress_spec = hdr.f.urgent ? 9w2 : 9w3; hdr.f.urgent = !hdr.f.urgent; }""",
                   "pkt.emit(hdr.f);")
    assert run(src, b"\x85") == [(2, b"\x05")]
    assert run(src, b"\x05") == [(3, b"\x85")]


def test_dont_care_where_no_type_is_known_is_a_located_error():
    src = v1switch(TAG, "state start { transition accept; }", """
        apply { bit<8> x = 1; x = _; }""", "")
    with pytest.raises(P4Error) as e:
        compile_source(src, filename="dc.p4")
    assert "dc.p4:" in str(e.value)


# ------------------------------------------------------------------ sub-parsers and sub-controls

SUBPARSER = """
parser TagParser(packet_in pkt, inout headers_t hdr, out bit<8> kind) {
    state start {
        pkt.extract(hdr.tag);
        kind = hdr.tag.a;
        transition select(hdr.tag.a) { 0xff: reject; default: accept; }
    }
}
""" + TAG


def test_sub_parser_runs_from_the_callers_offset_and_returns_its_out_argument():
    src = v1switch(SUBPARSER, """
        TagParser() sub;
        bit<8> kind;
        state start { pkt.extract(hdr.ethernet); sub.apply(pkt, hdr, kind); hdr.tag.b = kind + 1;
                      transition accept; }""", """
        apply { sm.egress_spec = 1;
                if (sm.parser_error == error.PacketTooShort) { sm.egress_spec = 2; } }""",
                   "pkt.emit(hdr.ethernet); pkt.emit(hdr.tag);")
    assert run(src, ETH + b"\x05\x00") == [(1, ETH + b"\x05\x06")]
    # an error inside the sub-parser is the whole parser's error; the packet goes on to ingress
    assert run(src, ETH + b"\x05") == [(2, ETH + b"\x05")]
    # the sub-parser's reject ends the caller's parse too (the caller's next statement never runs)
    assert run(src, ETH + b"\xff\x00") == [(1, ETH + b"\xff\x00")]


CTL_ARGS = """
control Adder(inout bit<8> x)(bit<8> amount) { apply { x = x + amount; } }
control Twice(inout bit<8> x)(Adder inner) { apply { inner.apply(x); inner.apply(x); } }
""" + TAG


def test_control_constructor_arguments_constants_and_instances():
    src = v1switch(CTL_ARGS, "state start { pkt.extract(hdr.tag); transition accept; }", """
        Adder(3) add3;
        Twice(add3) twice;
        apply { sm.egress_spec = 1; twice.apply(hdr.tag.a); add3.apply(hdr.tag.b); }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x10\x20") == [(1, b"\x16\x23")]


def test_direct_invocation_of_a_control_type():
    src = v1switch("control Inc(inout bit<8> x) { apply { x = x + 1; } }\n" + TAG,
                   "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply { sm.egress_spec = 1; Inc.apply(hdr.tag.a); Inc.apply(hdr.tag.a); Inc.apply(hdr.tag.b); }""",
                   "pkt.emit(hdr.tag);")
    assert run(src, b"\x10\x20") == [(1, b"\x12\x21")]


def test_constructor_argument_errors_are_located():
    src = v1switch(CTL_ARGS, "state start { transition accept; }", """
        Adder(3) add3;
        Twice(7) twice;
        apply { twice.apply(hdr.tag.a); }""", "")
    with pytest.raises(P4Error) as e:
        compile_source(src, filename="ctor.p4")
    assert "ctor.p4:" in str(e.value) and "instance" in str(e.value)


def test_nested_slices_read_and_assign_the_composed_bit_range():
    src = v1switch(TAG, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            bit<8> n = 8w0b11111111;
            n[7:4][2:1][0:0] = 1w0;              // bit 5
            hdr.tag.a = n;
            hdr.tag.b = (bit<8>)hdr.tag.b[6:1][3:2];   // bits 4:3 of b
        }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x00\x30") == [(1, b"\xdf\x02")]


# ------------------------------------------------------------------ tuples, aggregate returns

def test_function_returning_a_header_built_from_a_list():
    decls = TAG + """
tag_t make(in bit<8> x) {
    if (x == 1) { return { 8w0x11, 8w0x12 }; }
    return { x, x + 1 };
}"""
    src = v1switch(decls, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply { sm.egress_spec = 1; hdr.tag = make(hdr.tag.a); }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x01\x00") == [(1, b"\x11\x12")]
    assert run(src, b"\x05\x00") == [(1, b"\x05\x06")]


def test_tuple_variables_assigned_from_lists_and_indexed():
    src = v1switch(TAG, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            tuple<bit<8>, bit<8>> t = { hdr.tag.b, hdr.tag.a };
            tuple<bit<8>, bit<8>> u = t;
            hdr.tag.a = u[0];
            hdr.tag.b = t[1] + 1;
        }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x01\x02") == [(1, b"\x02\x02")]


def test_list_items_are_read_left_to_right_around_a_call_with_side_effects():
    decls = TAG + "bit<8> bump(inout bit<8> v) { v = v + 10; return 7; }"
    src = v1switch(decls, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            tuple<bit<8>, bit<8>> t = { hdr.tag.a, bump(hdr.tag.a) };
            hdr.tag.b = t[0];
        }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x01\x00") == [(1, b"\x0b\x01")]


# ------------------------------------------------------------------ P4Info names as p4c gives them

NAMING = TAG + """
struct local_t { bit<8> flag; }
"""


def test_p4info_names_follow_p4c_for_annotated_declarations():
    src = v1switch(NAMING, "state start { pkt.extract(hdr.tag); transition accept; }", """
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table t {
            key = { hdr.tag.a & 0x0f : exact; meta.loc.flag : exact; meta.top.flag : exact; }
            actions = { fwd; NoAction; }
            @name("ap") @max_group_size(16) implementation = action_selector(HashAlgorithm.crc16, 32w64, 32w14);
        }
        apply { t.apply(); digest(1, { hdr.tag.a }); }""", "pkt.emit(hdr.tag);",
                   meta='@name("renamed") local_t loc; @name(".top_level") local_t top;')
    src = src.replace("control I(", '@name("altName")\ncontrol I(')
    p4info = compile_source(src).p4info
    table = p4info.tables[0]
    assert table.preamble.name == "I.t"                     # the instance's name, not the type's @name
    assert [m.name for m in table.match_fields] == [
        "hdr.tag.a & 0xf", "meta.renamed.flag", "top_level.flag"]
    (profile,) = p4info.action_profiles
    assert (profile.preamble.name, profile.max_group_size) == ("ap", 16)
    assert [d.preamble.name for d in p4info.digests] == ["digest_0"]


# ------------------------------------------------------------------ header unions

UNION = """
header byte_t { bit<8> data; }
header short_t { bit<16> data; }
header_union U { byte_t byte; short_t short; }
header sel_t { bit<8> kind; }
struct headers_t { sel_t sel; U u; U[2] us; }
"""


def test_header_union_member_valid_at_a_time_and_emitted():
    src = v1switch(UNION, """
        state start { pkt.extract(hdr.sel); transition select(hdr.sel.kind) { 1: one; 2: two; default: accept; } }
        state one { pkt.extract(hdr.u.byte); transition accept; }
        state two { pkt.extract(hdr.u.short); transition accept; }""", """
        apply {
            sm.egress_spec = hdr.u.isValid() ? 9w1 : 9w2;
            if (hdr.u.byte.isValid()) { hdr.u.short.setValid(); hdr.u.short.data = 0xabcd; }
        }""", "pkt.emit(hdr.sel); pkt.emit(hdr.u);")
    # the byte member is replaced by the short one: setValid on a member invalidates the others
    assert run(src, b"\x01\x07rest") == [(1, b"\x01\xab\xcdrest")]
    assert run(src, b"\x02\x12\x34") == [(1, b"\x02\x12\x34")]
    assert run(src, b"\x03") == [(2, b"\x03")]


def test_stack_of_header_unions_extracts_next_member():
    src = v1switch(UNION, """
        state start { pkt.extract(hdr.sel); transition select(hdr.sel.kind) { 1: b; default: s; } }
        state b { pkt.extract(hdr.us.next.byte); transition select(hdr.us.lastIndex) { 0: s; default: accept; } }
        state s { pkt.extract(hdr.us.next.short); transition accept; }""", """
        apply {
            sm.egress_spec = 1;
            if (hdr.us[0].byte.isValid() && hdr.us[1].short.isValid()) { sm.egress_spec = 3; }
        }""", "pkt.emit(hdr.sel); pkt.emit(hdr.us);")
    assert run(src, b"\x01\x07\x12\x34") == [(3, b"\x01\x07\x12\x34")]
    assert run(src, b"\x02\x12\x34") == [(1, b"\x02\x12\x34")]


def test_header_union_misuse_is_a_located_error():
    src = v1switch(UNION, "state start { pkt.extract(hdr.us.next); transition accept; }", "apply { }", "")
    with pytest.raises(P4Error) as e:
        compile_source(src, filename="u.p4")
    assert "u.p4:" in str(e.value) and "header" in str(e.value)


# ------------------------------------------------------------------ varbit

OPTS = """
header base_t { bit<8> len; bit<8> kind; }
header opts_t { bit<8> first; varbit<32> opts; bit<8> last; }
struct headers_t { base_t base; opts_t o; opts_t copy; }
"""
PARSE_OPTS = """state start { pkt.extract(hdr.base); pkt.extract(hdr.o, (bit<32>)hdr.base.len); transition accept; }"""


def test_varbit_extract_emit_and_compare():
    src = v1switch(OPTS, PARSE_OPTS, """
        apply {
            sm.egress_spec = 1;
            hdr.copy = hdr.o;
            if (hdr.copy.opts == hdr.o.opts && hdr.copy == hdr.o) { sm.egress_spec = 2; }
            hdr.copy.last = 0xee;
            if (hdr.copy == hdr.o) { sm.egress_spec = 3; }
        }""", "pkt.emit(hdr.base); pkt.emit(hdr.o); pkt.emit(hdr.copy);")
    # 16 option bits: first, 2 bytes of options, last; the copy carries the same bytes
    data = b"\x10\x00" + b"\xaa\x01\x02\xbb" + b"payload"
    assert run(src, data) == [(2, b"\x10\x00" + b"\xaa\x01\x02\xbb" + b"\xaa\x01\x02\xee" + b"payload")]
    assert run(src, b"\x00\x00\xaa\xbb") == [(2, b"\x00\x00\xaa\xbb" + b"\xaa\xee")]


def test_varbit_length_errors_follow_bmv2_order():
    src = v1switch(OPTS, PARSE_OPTS, """
        apply {
            sm.egress_spec = 1;
            if (sm.parser_error == error.PacketTooShort) { hdr.base.kind = 1; }
            if (sm.parser_error == error.HeaderTooShort) { hdr.base.kind = 4; }
            if (sm.parser_error == error.ParserInvalidArgument) { hdr.base.kind = 6; }
        }""",
                   "pkt.emit(hdr.base); pkt.emit(hdr.o);")
    code = {"PacketTooShort": 1, "HeaderTooShort": 4, "ParserInvalidArgument": 6}
    assert run(src, b"\x0c\x00" + bytes(8)) == [(1, bytes([0x0c, code["ParserInvalidArgument"]]) + bytes(8))]
    assert run(src, b"\x10\x00\xaa\x01") == [(1, bytes([0x10, code["PacketTooShort"]]) + b"\xaa\x01")]
    assert run(src, b"\x28\x00" + bytes(8)) == [(1, bytes([0x28, code["HeaderTooShort"]]) + bytes(8))]


def test_checksum_over_a_header_with_varbit_options():
    src = v1switch(OPTS, PARSE_OPTS, "apply { sm.egress_spec = 1; }", "pkt.emit(hdr.base); pkt.emit(hdr.o);")
    src = src.replace("control C(inout headers_t hdr, inout metadata_t meta) { apply { } }", """
control C(inout headers_t hdr, inout metadata_t meta) {
    apply { update_checksum(true, { hdr.o.first, hdr.o.opts, hdr.o.last }, hdr.base.kind, HashAlgorithm.xor16); }
}""")
    # xor16 over aa 01 02 bb (first, 16 option bits, last) = aa01 ^ 02bb = a8ba -> low 8 bits
    assert run(src, b"\x10\x00\xaa\x01\x02\xbb") == [(1, b"\x10\xba\xaa\x01\x02\xbb")]


# ------------------------------------------------------------------ for loops

def test_for_loops_with_break_continue_and_nesting():
    src = v1switch(TAG, "state start { pkt.extract(hdr.tag); transition accept; }", """
        action count(bit<8> n) {
            hdr.tag.a = 0;
            for (bit<8> i = 0, bit<8> j = 100; i < n; i = i + 1, j = j - 1) {
                if (i == 2) { continue; }
                if (j == 95) { break; }
                for (bit<8> k = 0; k < 2; k += 1) { hdr.tag.a = hdr.tag.a + 1; }
            }
        }
        apply { sm.egress_spec = 1; count(hdr.tag.b); }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x00\x03") == [(1, b"\x04\x03")]     # i = 0, 1 (2 skipped): 2 x 2
    assert run(src, b"\x00\x09") == [(1, b"\x08\x09")]     # i = 0, 1, 3, 4; j hits 95 at i = 5
    assert run(src, b"\x00\x00") == [(1, b"\x00\x00")]


def test_break_outside_a_loop_is_a_located_error():
    src = v1switch(TAG, "state start { transition accept; }", "apply { break; }", "")
    with pytest.raises(P4Error) as e:
        compile_source(src, filename="b.p4")
    assert "b.p4:" in str(e.value) and "break" in str(e.value)


# ------------------------------------------------------------------ named arguments

def test_named_arguments_for_the_package_and_extern_calls():
    src = v1switch(TAG, "state start { pkt.extract(hdr = hdr.tag); transition accept; }", """
        apply {
            hash(algo = HashAlgorithm.identity, result = hdr.tag.b, base = 8w0, data = { hdr.tag.a }, max = 16w256);
            mark_to_drop(standard_metadata = sm);
            sm.egress_spec = 4;
        }""", "pkt.emit(hdr = hdr.tag);")
    src = src.replace("V1Switch(P(), V(), I(), E(), C(), D()) main;",
                      "V1Switch(vr = V(), p = P(), ig = I(), eg = E(), ck = C(), dep = D()) main;")
    assert run(src, b"\x33\x00") == [(4, b"\x33\x33")]


def test_type_declarations_and_signed_serializable_enums():
    decls = TAG + """
type bit<8> Octet_t;
@p4runtime_translation("x.org/port", 32)
type bit<9> Port_t;
enum int<8> Delta { DOWN = -1, UP = 1 }
"""
    src = v1switch(decls, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply {
            Octet_t x = (Octet_t)hdr.tag.a;
            Port_t type = (Port_t)5;                 // `type` stays usable as a name
            sm.egress_spec = (bit<9>)type;
            hdr.tag.b = (bit<8>)x + (bit<8>)(int<8>)Delta.DOWN;
        }""", "pkt.emit(hdr.tag);")
    assert run(src, b"\x10\x00") == [(5, b"\x10\x0f")]


def test_top_level_blocks_take_constructor_arguments():
    src = v1switch(TAG, "state start { pkt.extract(hdr.tag); transition accept; }", """
        apply { sm.egress_spec = port; hdr.tag.a = hdr.tag.a + 1; }""", "pkt.emit(hdr.tag);")
    head = "control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm)"
    src = src.replace(head + " {", head + "(bit<9> port) {")
    src = src.replace("V1Switch(P(), V(), I(), E()", "V1Switch(P(), V(), I(7), E()")
    assert "(bit<9> port)" in src
    assert run(src, b"\x01\x02") == [(7, b"\x02\x02")]


def test_serializable_enum_header_fields_take_and_compare_enum_values():
    decls = """
enum bit<8> Kind { A = 1, B = 2 }
header k_t { Kind kind; bit<8> v; }
struct headers_t { k_t k; }
"""
    src = v1switch(decls, "state start { pkt.extract(hdr.k); transition accept; }", """
        apply {
            sm.egress_spec = 1;
            if (hdr.k.kind == Kind.A) { hdr.k.kind = Kind.B; sm.egress_spec = 2; }
        }""", "pkt.emit(hdr.k);")
    assert run(src, b"\x01\x09") == [(2, b"\x02\x09")]
    assert run(src, b"\x03\x09") == [(1, b"\x03\x09")]


def test_struct_fields_inside_a_header():
    decls = """
struct inner_t { bit<4> hi; bit<4> lo; }
struct row_t { bit<8> a; inner_t nib; bool flag; bit<7> pad; }
header row_h { bit<8> tag; row_t row; }
struct headers_t { row_h r; }
"""
    src = v1switch(decls, "state start { pkt.extract(hdr.r); transition accept; }", """
        apply {
            sm.egress_spec = hdr.r.row.flag ? 9w2 : 9w1;
            row_t copy = hdr.r.row;
            hdr.r.row.nib.hi = copy.nib.lo;
            hdr.r.row.a = copy.a + (bit<8>)hdr.r.minSizeInBytes();
        }""", "pkt.emit(hdr.r);")
    assert run(src, b"\x07\x10\x3c\x85") == [(2, b"\x07\x14\xcc\x85")]
