"""P4_16 1.2.x syntax p4c's front end takes that the engine refused: `+:` slices, bit<0>, tuple<>,
`T name[N]` declarators, `A = ...` in serializable enums, widths that are expressions without
'>'. Each program is run and its output compared with what BMv2 sends; what p4c or p4c-bm2-ss
refuses is refused at the same place, with p4c's reason."""
import pytest

from testbed.p4engine import P4Error, compile_source

from test_p4engine_accept import frame, program, refused, run
from test_p4engine_syntax_sugar import line_col

SRC_MAC = 0x123456789ABC


def refused_on(src, target):
    with pytest.raises(P4Error) as e:
        compile_source(src, target=target)
    return str(e.value)


# ------------------------------------------------------------------ x[lo +: w]

def test_a_plus_slice_with_a_constant_low_index_is_the_plain_slice():
    # p4c's StrengthReduction rewrites x[8 +: 16] to x[23:8]; on both sides of an assignment
    src = program("""
        const bit<8> LOW = 4;
        apply {
            hdr.eth.type = hdr.eth.src[8 +: 16];
            hdr.eth.dst[0 +: 8] = 0x55;
            hdr.eth.dst[LOW * 2 +: 4] = hdr.eth.src[LOW +: 4];
        }""")
    assert run(src, frame(src=SRC_MAC)) == [(0, frame(dst=0xB55, src=SRC_MAC, ethertype=0x789A))]
    compile_source(src, target="bmv2")      # and p4c-bm2-ss takes it


def test_a_plus_slice_with_a_variable_low_index_shifts_and_masks():
    # the spec's semantics: bits past the width read as 0 and are dropped on writes
    src = program("""
        apply {
            bit<8> lo = (bit<8>)hdr.eth.dst[7:0];
            hdr.eth.type = hdr.eth.src[lo +: 16];
            hdr.eth.dst[lo +: 8] = 0xff;
        }""")
    assert run(src, frame(dst=0x04, src=SRC_MAC)) == [(0, frame(dst=0xFF4, src=SRC_MAC, ethertype=0x89AB))]
    assert run(src, frame(dst=0x2C, src=SRC_MAC)) == [(0, frame(dst=0xF0000000002C, src=SRC_MAC, ethertype=0x1))]


def test_a_plus_slice_indexed_by_a_loop_variable():
    # p4c's forloop5a.p4: p4c unrolls the loop, making each index a constant; the engine runs it
    src = program("""
        apply {
            bit<16> sum = 0;
            for (bit<8> i = 0; i < 48; i = i + 8) { sum = sum + (bit<16>)hdr.eth.src[i +: 8]; }
            for (bit<8> i in 0 .. 1) { hdr.eth.dst[i +: 1] = 1; }
            hdr.eth.type = sum;
        }""")
    assert run(src, frame(src=0x010203040506)) == [(0, frame(dst=0xAB, src=0x010203040506, ethertype=21))]


def test_p4c_bm2_ss_refuses_a_plus_slice_with_a_variable_low_index():
    src = program("apply { bit<8> lo = 3; hdr.eth.type = hdr.eth.src[lo +: 16]; }")
    line, col = line_col(src, "hdr.eth.src[lo")
    message = refused_on(src, "bmv2")
    assert message.startswith(f"<string>:{line}:{col}: error: [bmv2 variable-slice] hdr.eth.src[lo+:16]: "
                              "the low index of a +: slice must be a compile-time constant")
    assert "Unhandled case" in message


def test_a_plus_slice_written_through_an_inout_argument():
    src = program("""
        action set_nibble(inout bit<4> n) { n = 0xa; }
        apply { bit<8> lo = 8; set_nibble(hdr.eth.src[lo +: 4]); set_nibble(hdr.eth.dst[0 +: 4]); }""")
    assert run(src, frame(src=SRC_MAC)) == [(0, frame(dst=0xAA, src=0x123456789ABC & ~0xF00 | 0xA00))]


def test_a_plus_slice_key_needs_a_name_as_p4c_names_keys_before_rewriting_slices():
    # p4c's TableKeyNames runs before StrengthReduction: it cannot name x[8 +: 8]
    table = """
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table t { key = { hdr.eth.src[8 +: 8] : exact NAME; } actions = { fwd; } const entries = { 0x9a : fwd(4); } }
        apply { t.apply(); }"""
    src = program(table.replace(" NAME", ""))
    line, col = line_col(src, "hdr.eth.src[8")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: hdr.eth.src[8+:8]: complex key expression "
                                   "requires a @name annotation")
    named = compile_source(program(table.replace("NAME", '@name("src_byte")')), target="bmv2")
    assert [(m.name, m.bitwidth) for m in named.p4info.tables[0].match_fields] == [("src_byte", 8)]
    assert named.new_pipeline().process(0, frame(src=SRC_MAC)) == [(4, frame(src=SRC_MAC))]


@pytest.mark.parametrize("expression, marker, message", [
    ("hdr.eth.src[4 +: w]", "w]", "slice bit index values must be constants"),
    ("hdr.eth.src[40 +: 16]", "hdr.eth.src[40", "slice [55:40] is out of range for bit<48>"),
    ("hdr.eth.src[-1 +: 16]", "hdr.eth.src[-1", "slice [14:-1] is out of range for bit<48>"),
    ("hdr.eth.src[s +: 16]", "s +:", "the low index of a +: slice must be bit<W> when it is not a "
                                     "compile-time constant, not int<8>"),
])
def test_plus_slices_p4c_refuses(expression, marker, message):
    src = program(f"apply {{ bit<8> w = 3; int<8> s = 1; hdr.eth.type = (bit<16>){expression}; }}")
    line, col = line_col(src, marker)
    assert refused(src).startswith(f"<string>:{line}:{col}: error: {message}")


def test_a_slice_assigned_into_a_signed_value_keeps_it_signed():
    src = program("""
        apply {
            int<8> x = -1;
            x[3:0] = 0;
            int<8> y = -1;
            bit<4> lo = 4;
            y[lo +: 4] = 0;
            hdr.eth.type = (bit<16>)(int<16>)x;
            hdr.eth.src = (bit<48>)(int<48>)y;
        }""")
    assert run(src, frame()) == [(0, frame(src=0x00000000000F, ethertype=0xFFF0))]


# ------------------------------------------------------------------ bit<0>

BIT0 = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header zero_t { bit<0> before; bit<8> b8; bit<0> after; }
struct headers_t { eth_t eth; zero_t z; }
struct metadata_t { bit<0> nothing; }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); pkt.extract(hdr.z); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    action fwd(bit<0> zero, bit<9> port) { sm.egress_spec = port; hdr.z.after = zero; }
    table t {
        key = { hdr.z.b8 : exact; hdr.z.before : exact; meta.nothing : ternary; }
        actions = { fwd; NoAction; }
        const entries = { (0x42, 0, _) : fwd(0, 3); }
    }
    apply {
        bit<0> tmp = 1;             // p4c warns and keeps 0: bit<0>'s one value
        hdr.z.before = tmp;
        hdr.eth.type = (bit<16>)hdr.z.before + (bit<16>)(bit<0>)hdr.eth.type + (bit<16>)(tmp + 1);
        hdr.eth.src = hdr.eth.src[47:8] ++ tmp ++ hdr.z.b8;
        t.apply();
    }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.z); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_bit0_fields_variables_parameters_and_keys_take_no_bits():
    pipe = compile_source(BIT0, target="bmv2").new_pipeline()
    data = frame(src=SRC_MAC)[:14] + b"\x42rest"
    assert pipe.process(0, data) == [(3, frame(src=0x123456789A42, ethertype=0)[:14] + b"\x42rest")]
    other = frame(src=SRC_MAC)[:14] + b"\x41rest"
    assert pipe.process(0, other) == [(0, frame(src=0x123456789A41, ethertype=0)[:14] + b"\x41rest")]


def test_bit0_keys_and_parameters_have_no_bitwidth_in_p4info():
    # as p4c writes them (p4-guide's p4runtime-issue-428): bitwidth 0, left out of the text
    info = compile_source(BIT0).p4info
    table = info.tables[0]
    assert [(m.name, m.bitwidth) for m in table.match_fields] == [
        ("hdr.z.b8", 8), ("hdr.z.before", 0), ("meta.nothing", 0)]
    fwd = next(a for a in info.actions if a.preamble.name == "I.fwd")
    assert [(p.name, p.bitwidth) for p in fwd.params] == [("zero", 0), ("port", 9)]


def test_zero_width_literals_are_bit0_values():
    # p4c takes 0w0 (and warns for 0w5, which keeps only its 0 bits); 0s0 would be an int<0>
    src = program("apply { bit<0> z = 0w5; hdr.eth.type = (bit<16>)(z + 0w0) + (bit<16>)0w0 + 16w7; }")
    assert run(src, frame()) == [(0, frame(ethertype=7))]
    src = program("apply { hdr.eth.type = (bit<16>)0s0; }")
    line, col = line_col(src, "0s0")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: integer literal '0s0' has a non-positive width")


def test_int0_is_refused_as_p4c_refuses_it():
    src = program("apply { int<0> nothing; }")
    line, col = line_col(src, "int<0>")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: int<0>: invalid type size")


# ------------------------------------------------------------------ tuple<>, enums, declarators

def test_empty_tuples():
    src = program("""
        action set(in tuple<bit<8>, tuple<>> pair) { hdr.eth.type = (bit<16>)pair[0]; }
        apply {
            empty_t t = {};
            tuple<> u;
            u = {};
            if (t == {} && !(t != u)) { set({7, {}}); }
        }""", decls="typedef tuple<> empty_t;")
    assert run(src, frame()) == [(0, frame(ethertype=7))]


def test_tuple_constants_at_the_top_level_and_in_a_control():
    # p4c's tuple3.p4 and issue3283.p4: a tuple constant, and a tuple indexed by a constant
    src = program("""
        const tuple<bit<16>, bool> local = {0x0102, true};
        apply {
            if (local[1] && PAIR[0] == 3) {
                hdr.eth.type = local[0] + (bit<16>){8w9, 8w4}[1];
                hash(hdr.eth.dst, HashAlgorithm.identity, 48w0, PAIR, 48w1 << 47);
            }
        }""", decls="const tuple<bit<8>, tuple<bit<8>, bit<8>>> PAIR = {3, {4, 5}};")
    assert run(src, frame()) == [(0, frame(dst=0x030405, ethertype=0x0106))]
    compile_source(src, target="bmv2")


@pytest.mark.parametrize("decl, marker, message", [
    ("const tuple<bit<8>, bit<8>> T = {1};", "{1}", "tuple<bit<8>, bit<8>> has 2 elements but the initializer has 1"),
    ("const tuple<bit<8>> T = {1}; const bit<8> U = T[1];", "1]", "index 1 is out of bounds for tuple<bit<8>>"),
])
def test_tuple_constants_of_the_wrong_shape_are_refused_where_they_are_written(decl, marker, message):
    src = program("apply { }", decls=decl)
    text = refused(src)
    line, col = line_col(src, marker)
    assert message in text and f":{line}:{col}:" in text


def test_tuple_and_struct_constants_compare_with_lists():
    # p4c's list-compare.p4: constants compare at compile time; against run-time values the
    # constant is compared as its declared type
    src = program("""
        apply {
            hdr.eth.type = 0;
            if (!DIFFERENT && SAME) { hdr.eth.type = 1; }
            if (X == {(bit<8>)hdr.eth.dst, 20}) { hdr.eth.type = hdr.eth.type + 2; }
            if (PS == {l = (bit<8>)hdr.eth.dst - 9, r = 2}) { hdr.eth.type = hdr.eth.type + 4; }
        }""", decls="""
        struct pair_s { bit<8> l; bit<8> r; }
        const tuple<bit<8>, bit<8>> X = {10, 20};
        const pair_s PS = {1, 2};
        const bool DIFFERENT = X == {30, 40};
        const bool SAME = X == X && X != {10, 21};""")
    assert run(src, frame(dst=10)) == [(0, frame(dst=10, ethertype=7))]
    assert run(src, frame(dst=11)) == [(0, frame(dst=11, ethertype=1))]

def test_match_kind_is_a_type_and_its_members_are_values():
    # p4c's issue3091.p4 declares `const tuple<match_kind> exact_once = {exact};` (for an extern
    # the engine does not have); the spec defines == and != on match_kind
    src = program("""
        apply {
            match_kind k = KINDS[1];
            if (k == lpm && KINDS[0] != k) { hdr.eth.type = 1; }
        }""", decls="const tuple<match_kind, match_kind> KINDS = {exact, lpm};")
    assert run(src, frame()) == [(0, frame(ethertype=1))]

def test_serializable_enum_values_are_their_underlying_type_in_operators():
    # p4c's issue3635.p4: the type checker reads a serializable enum as its underlying type in
    # arithmetic, bitwise and relational operators, concatenation, shifts, - and ~
    src = program("""
        apply {
            bit<8> both = Ea.a ++ Ea.b;
            if (Ea.a < Ea.b && Ea.b == Fb.y && (Ea.a & Ea.b) == 0) {
                hdr.eth.type = both ++ (Ea.a + Ea.b) ++ (~Ea.a);
                hdr.eth.dst = (bit<48>)((-Ea.b) ++ ((Ea.c << 2) | (bit<4>)Ea.a));
            }
        }""", decls="""
        enum bit<4> Ea { a = 1, b = 2, c = 3 }
        enum bit<4> Fb { y = 2 }""")
    assert run(src, frame()) == [(0, frame(dst=0xED, ethertype=0x123E))]

def test_a_serializable_enum_member_may_be_initialized_with_dots():
    src = program("apply { Kind k = Kind.A; hdr.eth.type = (bit<8>)k ++ (bit<8>)Kind.B; }",
                  decls="enum bit<8> Kind { A = ..., B = 2 }")
    assert run(src, frame()) == [(0, frame(ethertype=0x0002))]


def test_a_serializable_enum_member_may_be_initialized_from_the_members_before_it():
    # p4c's issue3616.p4: c = (bit<4>)a, d = a; the name is the member, not a constant outside
    src = program("apply { hdr.eth.type = (bit<8>)Kind.C ++ (bit<8>)Kind.D; hdr.eth.src = (bit<48>)(bit<8>)S.M; }",
                  decls="""
        const bit<8> A = 100;
        enum bit<8> Kind { A = 3, B = A + 1, C = (bit<8>)B << 2, D = A }
        enum int<8> S { N = -2, M = N * 3 }""")
    assert run(src, frame()) == [(0, frame(src=0xFA, ethertype=0x1003))]
    # a member names only those before it
    bad = program("apply { }", decls="enum bit<8> Kind { A = B, B = 2 }")
    line, col = line_col(bad, "B, B")
    assert refused(bad).startswith(f"<string>:{line}:{col}: error: unknown name 'B'")


@pytest.mark.parametrize("value, why", [
    ("300", "the value 300 requires 9 bits but the underlying unsigned type bit<8> only contains 8 bits"),
    ("-1", "the value -1 is negative, but the underlying type bit<8> is unsigned"),
])
def test_a_serializable_enum_value_out_of_its_types_range_is_refused(value, why):
    src = program("apply { }", decls=f"enum bit<8> Kind {{ A = {value}, B = 2 }}")
    line, col = line_col(src, value)
    assert refused(src).startswith(
        f"<string>:{line}:{col}: error: Kind.A: Serialized enum constant value {value} is out of bounds "
        f"of the underlying type bit<8>; {why}")


def test_a_declarator_with_a_size_declares_a_header_stack():
    # `eth_t tags[2]` is p4c's declarator for eth_t[2] tags
    src = """
#include <core.p4>
#include <v1model.p4>
header tag_t { bit<8> v; }
struct headers_t { tag_t tags[2]; }
struct metadata_t { }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.tags.next); pkt.extract(hdr.tags.next); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply {
        tag_t copies[2] = hdr.tags;
        hdr.tags[0].v = copies[1].v;
        hdr.tags[1].v = copies[0].v;
    }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.tags); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    assert compile_source(src, target="bmv2").new_pipeline().process(0, b"\x01\x02rest") == [(0, b"\x02\x01rest")]


@pytest.mark.parametrize("declaration, marker", [
    ("header data_t { bit<8> arr[16]; }", "[16]"),
    ("header data_t { bit<8>[16] arr; }", "bit<8>[16]"),
    ("struct s_t { bit<8> f; } header data_t { bit<8> f; } struct many_t { s_t[4] arr; }", "s_t[4]"),
])
def test_arrays_of_other_types_are_refused_naming_p4c_bm2_ss(declaration, marker):
    # P4_16 1.2.5 and p4c's front end allow them (p4c's array1.p4, array2.p4); p4c-bm2-ss does not
    src = program("apply { }", decls=declaration)
    line, col = line_col(src, marker)
    message = refused(src)
    assert message.startswith(f"<string>:{line}:{col}: error: ")
    assert "header stacks must hold headers or header unions" in message
    assert "p4c-bm2-ss produces no BMv2 JSON for arrays of other types" in message


# ------------------------------------------------------------------ more of p4c's grammar

def test_shift_right_assignment():
    # `>>` is two '>' tokens (to close type argument lists), so `>>=` was a syntax error
    src = program("""
        apply {
            bit<8> n = 4;
            hdr.eth.src >>= n;
            hdr.eth.dst >>=1;
            bit<16> t = hdr.eth.type;
            t <<= 4;
            t >>= 8w2;
            hdr.eth.type = t;
            bool b = hdr.eth.type >= 3 && t>=2;
            if (b) { hdr.eth.type = hdr.eth.type >> 1; }
        }""")
    assert run(src, frame(src=SRC_MAC)) == [(0, frame(dst=0x55, src=SRC_MAC >> 4, ethertype=0x1000))]


def test_a_serializable_enum_over_a_typedef_and_widths_named_by_constants():
    # p4c's issue2391.p4 and cfoldBitTypedefs.p4: enum EthT EthTypes { ... }, bit<v1>, bit<v4[7:0] - v1>
    src = program("""
        apply {
            EthTypes e = EthTypes.ARP;
            wide_t w = (wide_t)(bit<16>)e;
            narrow_t n = 3;
            hdr.eth.type = (bit<16>)w + (bit<16>)n;
            hdr.eth.src = (bit<48>)(bit<W_BITS * 2>)0xffffff;
        }""", decls="""
        typedef bit<16> base_t;
        typedef base_t EthT;
        enum EthT EthTypes { IPv4 = 0x0800, ARP = 0x0806 }
        const bit<8> W_BITS = 8;
        const bit<8> v1 = 24;
        typedef bit<v1> wide_t;
        typedef bit<v1[7:0] - W_BITS - 14> narrow_t;""")
    assert run(src, frame()) == [(0, frame(src=0xFFFF, ethertype=0x0809))]


def test_annotated_for_loops():
    # p4c's forloop8.p4 / forloop9.p4: @unroll and @no_unroll before a for statement
    src = program("""
        apply {
            bit<16> sum = 0;
            @unroll
            for (bit<8> i = 20; i != 0; i -= 2) { sum = sum + (bit<16>)i; }
            @no_unroll for (bit<8> j in 1 .. 3) { sum = sum + (bit<16>)j; }
            hdr.eth.type = sum;
        }""")
    assert run(src, frame()) == [(0, frame(ethertype=110 + 6))]


def test_pragma_is_an_annotation_to_the_end_of_the_line():
    # `@pragma name "x"` is p4c's spelling of @name("x"); `@pragma tableonly` of @tableonly
    src = program("""
        @pragma name "forward"
        action fwd(bit<9> port) { sm.egress_spec = port; }
        @pragma noSideEffects
        action other() { }
        table t {
            key = { hdr.eth.type : exact; }
            actions = {
                @pragma tableonly
                fwd;
                @pragma defaultonly
                other;
            }
            const entries = { 0x0800 : fwd(5); }
            default_action = other;
        }
        apply { t.apply(); }""")
    prog = compile_source(src)
    assert sorted(a.preamble.name for a in prog.p4info.actions) == ["I.forward", "I.other"]
    refs = {r.id: r.scope for r in prog.p4info.tables[0].action_refs}
    names = {a.preamble.id: a.preamble.name for a in prog.p4info.actions}
    assert {names[i]: s for i, s in refs.items()} == {"I.forward": 1, "I.other": 2}   # TABLE_ONLY, DEFAULT_ONLY
    assert prog.new_pipeline().process(0, frame()) == [(5, frame())]


def test_a_pragma_string_may_go_on_past_the_end_of_its_line():
    # p4c's pragma-string.p4: the string ends the pragma, not the newline inside it; a backslash
    # before a newline splices the lines with nothing between them, as cpp does everywhere
    src = program('''
        @pragma name "fwd with
newline"
        action fwd(bit<9> port) { sm.egress_spec = port; }
        @pragma name "other quoted \\
newline"
        action other() { }
        table t {
            key = { hdr.eth.type : exact; }
            actions = { fwd; other; }
            const entries = { 0x0800 : fwd(5); }
            default_action = other;
        }
        apply { t.apply(); }''')
    prog = compile_source(src)
    assert sorted(a.preamble.name for a in prog.p4info.actions) == ["I.fwd with\nnewline", "I.other quoted newline"]
    assert prog.new_pipeline().process(0, frame()) == [(5, frame())]
    # the lines after such a string keep their numbers
    bad = src.replace("action other() { }", "action other() { x = 1; }")
    line, col = line_col(bad, "x = 1")
    assert f":{line}:{col}:" in refused(bad)


def test_a_line_comment_ending_in_a_backslash_goes_on_over_the_next_line():
    # cpp splices backslash-newlines before it strips comments (gcc warns "multi-line comment"),
    # so p4c never sees the line after `// ... \`; the engine compiled it
    src = program('''
        // forward everything to port 5, \\
        this line is part of the comment above
        apply { sm.egress_spec = 5; }''')
    assert compile_source(src).new_pipeline().process(0, frame()) == [(5, frame())]
    assert compile_source(src.replace("\n", "\r\n")).new_pipeline().process(0, frame()) == [(5, frame())]
    # the lines after it keep their numbers
    bad = src.replace("sm.egress_spec = 5;", "sm.egress_spec = 5; x = 1;")
    line, col = line_col(bad, "x = 1")
    assert f":{line}:{col}:" in refused(bad)


def test_an_unterminated_string_after_a_block_comment_is_reported_on_its_own_line():
    src = "/* one\ntwo\nthree */\nconst bit<8> x = 1;\n@name(\"open\n"
    assert refused(src).startswith("<string>:5:7: error: unterminated string literal")


def test_a_parenthesized_mask_range_or_default_is_a_keyset_of_one():
    # p4c's reducedSimpleKeysetExpression (issue2514.p4): (a &&& m), (lo .. hi), (_), (default)
    src = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<8> v; }
struct headers_t { eth_t eth; tag_t tag; }
struct metadata_t { }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) { (0x0800 &&& 0xff00) : tag; (default) : accept; }
    }
    state tag { pkt.extract(hdr.tag); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table t {
        key = { hdr.eth.type : range; }
        actions = { fwd; }
        const entries = { (0x0800 .. 0x08ff) : fwd(2); (_) : fwd(3); }
    }
    apply { t.apply(); if (hdr.tag.isValid()) { hdr.tag.v = hdr.tag.v + 1; } }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.tag); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    pipe = compile_source(src, target="bmv2").new_pipeline()
    ipv4 = frame(ethertype=0x0842)
    assert pipe.process(0, ipv4) == [(2, ipv4[:14] + bytes([ipv4[14] + 1]) + ipv4[15:])]
    other = frame(ethertype=0x86DD)
    assert pipe.process(0, other) == [(3, other)]


def test_a_named_argument_may_be_left_out_with_an_underscore():
    # p4c's issue3274.p4: f(x = 1, y = _) for an out parameter
    src = program("""
        action two(in bit<16> x, out bit<16> y) { y = x + 1; hdr.eth.type = x; }
        apply { two(y = _, x = 7); bit<16> z; two(x = 9, y = z); hdr.eth.src = (bit<48>)z; }""")
    assert run(src, frame()) == [(0, frame(src=10, ethertype=9))]


def test_variables_and_parameters_may_be_named_like_types_in_their_scope():
    # p4c's shadow1.p4: `bit<16> counter;` makes counter an identifier where it is declared
    # (v1model declares extern counter and meter); struct fields do not (`t1 t1; t1 t2;`)
    src = program("""
        action set(bit<16> meter) { hdr.eth.type = meter; }
        apply {
            bit<16> counter = 3;
            counter = counter + 1;
            set(counter);
            pair_t p;
            p.pair_t.v = 1;
            p.lo.v = 2;
            hdr.eth.src = (bit<48>)(p.pair_t.v ++ p.lo.v);
        }""", decls="""
        struct inner_t { bit<8> v; }
        struct pair_t { inner_t pair_t; inner_t lo; }""")
    assert run(src, frame()) == [(0, frame(src=0x0102, ethertype=4))]


def test_a_type_named_like_a_variable_elsewhere_stays_a_type():
    src = program("""
        counter(4, CounterType.packets) counts;
        action set(bit<16> counter) { hdr.eth.type = counter; }
        apply { counts.count(1); set(9); bit<32> meter = 1; meter = meter + 1; hdr.eth.dst = (bit<48>)meter; }""")
    assert run(src, frame()) == [(0, frame(dst=2, ethertype=9))]


@pytest.mark.parametrize("label", ["0w0", "8w0x08", "16s0x800"])
def test_a_select_case_label_of_another_width_is_refused_as_p4c_refuses_it(label):
    # p4c's issue1986-1.p4 (0w0 for a bit<2> key): no implicit cast between bit widths
    src = program("apply { }").replace("transition accept; }",
                                      f"transition select(hdr.eth.type) {{ {label} : accept; default : reject; }} }}", 1)
    line, col = line_col(src, label)
    assert refused(src).startswith(f"<string>:{line}:{col}: error: 'match' case label has type")


def test_list_may_name_a_field_or_variable_as_in_p4c():
    # p4c's list.p4: `list` is a keyword p4c's grammar takes as a declared name (not in expressions)
    src = program("apply { bit<32> list = 3; meta.list = 4; hdr.eth.type = (bit<16>)meta.list; }",
                  meta="bit<32> list;")
    assert run(src, frame()) == [(0, frame(ethertype=4))]


def test_list_may_name_declarations_as_in_p4c():
    # DASH's v1model pipeline (p4c's dash-pipeline-v1model-bmv2.p4) declares `match_kind { list,
    # range_list }`: a syntax error here. p4c's `name` takes LIST wherever something is declared
    # or named after a dot: match kinds, errors, states, parameters, tables, named arguments.
    # (Not in an expression: `list` alone, `list.apply()` are syntax errors in p4c too.)
    src = program("""
        action fwd(bit<9> port, bit<8> list) { sm.egress_spec = port; }
        table list { key = { hdr.eth.dst : exact; } actions = { fwd; NoAction; } }
        apply {
            if (hdr.eth.src == 1) { fwd(list = 0, port = 3); }
            if (hdr.eth.src == 2) { hdr.eth.type = (bit<16>)(error.list == error.list ? 7 : 0); }
        }""", decls="match_kind { list, range_list }\nerror { list }")
    assert run(src, frame(src=1)) == [(3, frame(src=1))]
    assert run(src, frame(src=2)) == [(0, frame(src=2, ethertype=7))]
    compile_source(src, target="bmv2")


def test_list_names_no_action_a_table_lists_as_in_p4c():
    # p4c's actionRef is a prefixedNonTypeName, which has no LIST: an action named `list` is
    # declared but cannot be listed
    src = program("action list() { } table t { actions = { list; } } apply { t.apply(); }")
    line, col = line_col(src, "list; }")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: syntax error")


# ------------------------------------------------------------------ widths: expressions without '>'

def test_a_width_may_be_any_expression_without_a_greater_than():
    # p4c's nonGrtExpression: comparisons but '>', logic, bitwise operators, ?: (bitexpr1: bit<b^3>)
    src = program("""
        apply {
            bit<A < 3 ? 16 : 8> x = 0xffff;
            bit<B ^ 3> y = 0xff;
            bit<A == 2 && B != 0 ? 4 : 2> z = 0xf;
            bit<1 << 3 | 0> w = 0x1ff;
            hdr.eth.type = x;
            hdr.eth.dst = (bit<48>)y;
            hdr.eth.src = (bit<48>)(z ++ w);
        }""", decls="const bit<8> A = 2; const int B = 11;")
    assert run(src, frame()) == [(0, frame(dst=0xff, src=0xfff, ethertype=0xffff))]


def test_a_greater_than_closes_the_width_as_in_p4c():
    src = program("apply { bit<A > 3 ? 16 : 8> x = 0; }", decls="const bit<8> A = 2;")
    line, col = line_col(src, "3 ? 16")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: syntax error")
