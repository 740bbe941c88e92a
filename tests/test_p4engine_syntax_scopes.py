"""p4c grammar forms about names and declarations that the engine refused: `.x` and `.T` naming
the top level's declaration past a local one that shadows it (p4c's prefixedNonTypeName and
prefixedType), a typedef of a struct, header or enum declared in place, actions sharing a
control-plane name while only one is used, and for loop variables named like a type. Each
program is run on frames and its output compared with what BMv2 sends."""
from test_p4engine_accept import frame, program, refused, run
from test_p4engine_syntax_sugar import line_col

from testbed.p4engine import compile_source


# ------------------------------------------------------------------ .x and .T: the top level

TOP_LEVEL = """
    const bit<16> X = 0x100;
    struct Version { bit<8> major; bit<8> minor; }
    action set(out bit<16> t) { t = 0x2222; }
"""


def test_a_leading_dot_names_the_top_level_declaration_past_a_local_one():
    src = program("""
        action set() { hdr.eth.type = 0x1111; }
        table t {
            key = { hdr.eth.dst : exact; }
            actions = { .set(hdr.eth.type); .NoAction; }
            const entries = { 0xaa : .set(hdr.eth.type); }
            default_action = .NoAction;
        }
        apply {
            bit<16> X = 7;
            t.apply();                              // 0xaa: the global set, type = 0x2222
            hdr.eth.src = (bit<48>)(X + .X);        // the local 7 and the global 0x100
            .Version v = { 1, 2 };
            hdr.eth.dst = (bit<48>)v.minor;
            if (hdr.eth.type == 0x0800) { set(); }  // a miss: the local set, type = 0x1111
            else { .set(hdr.eth.src[15:0]); }       // else the global one again
        }""", decls=TOP_LEVEL)
    assert run(src, frame(dst=0xaa)) == [(0, frame(dst=2, src=0x2222, ethertype=0x2222))]
    assert run(src, frame(dst=0xbb)) == [(0, frame(dst=2, src=0x107, ethertype=0x1111))]
    # P4Info as p4c writes it: the table refers to the global action, not I.set
    p4info = compile_source(src).p4info
    table = p4info.tables[0]
    by_id = {a.preamble.id: a.preamble.name for a in p4info.actions}
    assert sorted(by_id[r.id] for r in table.action_refs) == ["NoAction", "set"]


def test_a_leading_dot_does_not_see_local_declarations():
    src = program("""
        apply {
            bit<16> y = 1;
            hdr.eth.type = .y;
        }""")
    line, col = line_col(src, ".y;")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: unknown name '.y'")


# ------------------------------------------------------------------ typedef of a type declaration

def test_a_typedef_may_declare_the_struct_header_or_enum_it_names():
    # p4c's typedefDeclaration takes a derivedTypeDeclaration (spec-ex12: typedef struct Point {...} Pt;):
    # both names are types
    src = program("""
        apply {
            Pt p = { 3, 4 };
            Point q = p;
            TagD_t tag = { 0x5566 };
            tag_t t2 = tag;
            hdr.eth.type = (bit<16>)(bit<32>)(p.x + q.y) + t2.v;
            ColourD c = Colour.GREEN;
            if (c != Colour.RED) { hdr.eth.dst = 1; }
        }""", decls="""
        typedef struct Point { int<32> x; int<32> y; } Pt;
        typedef @lab header tag_t { bit<16> v; } TagD_t;
        typedef enum Colour { RED, GREEN } ColourD;
        """)
    assert run(src, frame()) == [(0, frame(dst=1, ethertype=0x556D))]


# ------------------------------------------------------------------ actions sharing a name

CLASHING_ACTIONS = """
        @noWarn("unused") @name(".NoAction") action NoAction_1() { }
        @noWarn("unused") @name(".NoAction") action NoAction_2() { }
        @name("fwd") action fwd_1() { sm.egress_spec = 1; }
        @name("fwd") action fwd_2() { sm.egress_spec = 2; }
        table t {
            key = { hdr.eth.dst : exact; }
            actions = { fwd_2; NoAction_1; %s }
            const entries = { 0xaa : fwd_2(); }
            default_action = NoAction_1();
        }
        apply { t.apply(); }"""


def test_actions_may_share_a_control_plane_name_while_one_is_unused():
    # p4c's front-end dumps declare @name(".NoAction") NoAction_1, NoAction_2 next to core.p4's
    # NoAction: p4c removes the unused ones before DuplicateActionControlPlaneNameCheck
    src = program(CLASHING_ACTIONS % "")
    assert run(src, frame(dst=0xaa)) == [(2, frame(dst=0xaa))]     # fwd_2, not fwd_1
    assert run(src, frame(dst=0xbb)) == [(0, frame(dst=0xbb))]
    p4info = compile_source(src).p4info
    assert sorted(a.preamble.name for a in p4info.actions) == ["I.fwd", "NoAction"]


def test_two_used_actions_sharing_a_control_plane_name_are_refused():
    src = program(CLASHING_ACTIONS % "NoAction_2;")
    line, col = line_col(src, "@noWarn", 1)
    assert refused(src).startswith(f"<string>:{line}:{col}: error: two actions are both named 'NoAction'")


def test_of_two_used_actions_sharing_a_name_the_later_in_the_source_is_refused():
    # p4c's multicast-bmv2.p4 (p4_16_errors): egress's @name("._drop") comes first in the file,
    # and p4c refuses ingress's; the engine, which compiles ingress first, pointed at egress's
    src = program('''@name("._drop") action drop_in() { mark_to_drop(sm); }
    apply { drop_in(); }''')
    empty_egress = ("control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) "
                    "{ apply { } }")
    egress = ("control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {\n"
              '    @name("._drop") action drop_out() { mark_to_drop(sm); }\n'
              "    apply { drop_out(); }\n}\n")
    assert src.count(empty_egress) == 1
    src = src.replace(empty_egress, "").replace("control I(", egress + "control I(")
    line, col = line_col(src, '@name("._drop") action drop_in')
    assert refused(src).startswith(f"<string>:{line}:{col}: error: two actions are both named '_drop'")


def test_an_action_called_only_by_an_unused_action_is_unused_too():
    src = program(CLASHING_ACTIONS.replace("apply {", "action never() { NoAction_2(); fwd_1(); }\n        apply {")
                  % "")
    assert run(src, frame(dst=0xaa)) == [(2, frame(dst=0xaa))]
    # called from the apply block, fwd_1 is used: it and fwd_2 clash
    src = program(CLASHING_ACTIONS.replace("apply { t.apply(); }", "apply { t.apply(); fwd_1(); }") % "")
    line, col = line_col(src, '@name("fwd") action fwd_2')
    assert refused(src).startswith(f"<string>:{line}:{col}: error: two actions are both named 'I.fwd'")


# ------------------------------------------------------------------ loop variables named like types

def test_a_for_loop_variable_may_be_named_like_a_type():
    # p4c declares a C-style loop's variable in the enclosing block as it parses the header, so
    # `counter` (v1model's extern) is an identifier in the condition, the update and the body
    src = program("""
        apply {
            bit<16> sum = 0;
            for (bit<8> counter = 0, bit<8> meter = 10; counter < 4; counter = counter + 1, meter = meter - 1) {
                sum = sum + (bit<16>)counter + (bit<16>)meter;
            }
            hdr.eth.type = sum;
        }""")
    assert run(src, frame()) == [(0, frame(ethertype=0 + 1 + 2 + 3 + 10 + 9 + 8 + 7))]


def test_a_for_in_variable_named_like_a_type_stays_a_type_in_the_body():
    # p4c's forInStatement declares no object for its name (no declareObject), so its lexer
    # still reads `meter` in the body as v1model's type
    src = program("""
        apply {
            bit<16> sum = 0;
            for (bit<8> meter in 1 .. 3) { sum = sum + (bit<16>)meter; }
            hdr.eth.type = sum;
        }""")
    line, col = line_col(src, "meter; }")
    col += len("meter")
    assert refused(src).startswith(f"<string>:{line}:{col}: error: syntax error: unexpected ';'")

