"""What public v1model programs the engine had never seen showed: each case is the construct
reduced to a small program, checked against what p4c-bm2-ss and simple_switch do with it
(frames out and their ports, P4Info, or where the refusal points)."""
import pytest

from testbed.p4engine import P4Error, compile_source

HEAD = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
struct H { h_t h; }
struct M { bit<8> x; }
"""
BLOCKS = """
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M meta) { apply { } }
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) {
%s
}
control E(inout H hdr, inout M meta, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M meta) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def program(top, ingress):
    return HEAD + top + BLOCKS % ingress


def located(text, target=None):
    with pytest.raises(P4Error) as err:
        compile_source(text, "prog.p4", target=target)
    return [(line, col, msg) for _, line, col, msg in err.value.diagnostics]


# ---------------------------------------------------------------- top-level actions
TOP_LEVEL_ACTIONS = program("""
counter(4, CounterType.packets_and_bytes) seen;
action drop_it() { mark_to_drop(); }
action count_it() { seen.count(2); }
""", """    apply {
        sm.egress_spec = 3;
        count_it();
        if (hdr.h.a == 1) { drop_it(); }
    }""")


def test_a_top_level_action_may_drop_and_count_with_standard_metadata_it_does_not_name():
    # p4pktgen's examples and older tutorials: `action my_drop() { mark_to_drop(); }` outside any
    # control. The engine compiled it before V1Switch placed standard_metadata (KeyError).
    prog = compile_source(TOP_LEVEL_ACTIONS, "prog.p4")
    pipe = prog.new_pipeline()
    assert pipe.process(0, bytes([1, 7, 9])) == []
    assert pipe.process(0, bytes([2, 7, 9])) == [(3, bytes([2, 7, 9]))]
    assert pipe.counters["seen"].read(2) == (2, 6)



def test_a_top_level_mark_to_drop_also_cancels_a_multicast_set_before_it():
    # BMv2's mark_to_drop resets mcast_grp too; compiled before standard_metadata was placed,
    # the top-level action used to leave it, and the packet was multicast instead of dropped
    text = program("action drop_it() { mark_to_drop(); }\n",
                   "    apply { sm.mcast_grp = 1; if (hdr.h.a == 1) { drop_it(); } }")
    pipe = compile_source(text, "prog.p4").new_pipeline()
    pipe.set_mc_group(1, [(4, 0)])
    assert pipe.process(0, bytes([1, 7, 9])) == []
    assert pipe.process(0, bytes([2, 7, 9])) == [(4, bytes([2, 7, 9]))]

def test_the_deprecated_forms_p4c_bm2_ss_cannot_convert_are_refused_for_bmv2_where_they_are_called():
    errors = located(TOP_LEVEL_ACTIONS, target="bmv2")
    line = TOP_LEVEL_ACTIONS.splitlines().index("action drop_it() { mark_to_drop(); }") + 1
    assert errors == [(line, 20, "[bmv2 deprecated-externs] mark_to_drop(): expected 1 argument on this "
                                 "target; use mark_to_drop(standard_metadata)")]
    text = program("", """    apply {
        resubmit({meta.x});
        clone3(CloneType.I2E, 5, {meta.x});
    }""")
    compile_source(text, "prog.p4")
    lines = text.splitlines()
    assert located(text, target="bmv2") == [
        (lines.index("        resubmit({meta.x});") + 1, 9,
         "[bmv2 deprecated-externs] resubmit: unknown extern function on this target; use "
         "resubmit_preserving_field_list with a @field_list index"),
        (lines.index("        clone3(CloneType.I2E, 5, {meta.x});") + 1, 9,
         "[bmv2 deprecated-externs] clone3: unknown extern function on this target; use "
         "clone_preserving_field_list with a @field_list index")]


# ---------------------------------------------------------------- an older v1model.p4
# Programs that ship the v1model.p4 they were written against (P4All's bmv2 examples carry
# 2018's, whose standard_metadata_t has no priority); simple_switch writes only the
# fields the program declares.
OLD_V1MODEL = """#ifndef _V1MODEL_P4_
#define _V1MODEL_P4_
#include "core.p4"
match_kind { range, selector }
struct standard_metadata_t {
    bit<9>  ingress_port;
    bit<9>  egress_spec;
    bit<9>  egress_port;
    bit<32> instance_type;
    bit<32> packet_length;
}
extern void mark_to_drop(inout standard_metadata_t standard_metadata);
parser Parser<H, M>(packet_in b, out H parsedHdr, inout M meta, inout standard_metadata_t standard_metadata);
control VerifyChecksum<H, M>(inout H hdr, inout M meta);
control Ingress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata);
control Egress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata);
control ComputeChecksum<H, M>(inout H hdr, inout M meta);
control Deparser<H>(packet_out b, in H hdr);
package V1Switch<H, M>(Parser<H, M> p, VerifyChecksum<H, M> vr, Ingress<H, M> ig, Egress<H, M> eg,
                       ComputeChecksum<H, M> ck, Deparser<H> dep);
#endif
"""


def test_a_program_with_its_own_older_v1model_runs_without_the_fields_that_v1model_lacks(tmp_path):
    (tmp_path / "v1model.p4").write_text(OLD_V1MODEL)
    text = program("", """    apply {
        sm.egress_spec = 4;
        if (hdr.h.a == 1) { mark_to_drop(sm); }
    }""").replace("#include <v1model.p4>", '#include "v1model.p4"')
    main = tmp_path / "prog.p4"
    main.write_text(text)
    from testbed.p4engine import compile_file
    pipe = compile_file(main).new_pipeline()
    assert pipe.process(1, bytes([2, 5, 6, 7])) == [(4, bytes([2, 5, 6, 7]))]
    assert pipe.process(1, bytes([1, 5])) == []


# ---------------------------------------------------------------- constructor parameters
def test_a_table_property_may_use_its_controls_constructor_parameter():
    # ebiken/p4srv6's switch.p4: control L2Fwd(...)(bit<32> table_size_dmac) { ... size = table_size_dmac; }
    text = program("""
control Fwd(inout H hdr, inout standard_metadata_t sm)(bit<32> n, bit<9> port) {
    action hit(bit<9> p) { sm.egress_spec = p; }
    action miss() { sm.egress_spec = port; }
    table t { key = { hdr.h.a : exact; } actions = { hit; miss; } const default_action = miss; size = n; }
    apply { t.apply(); }
}
""", """    Fwd(1024, 7) fwd;
    apply { fwd.apply(hdr, sm); }""")
    prog = compile_source(text, "prog.p4")
    assert [(t.preamble.name, t.size) for t in prog.p4info.tables] == [("I.fwd.t", 1024)]
    assert prog.new_pipeline().process(0, bytes([1, 2])) == [(7, bytes([1, 2]))]


# ---------------------------------------------------------------- P4Info as p4c writes it
# ONOS's fabric.p4 ships p4c's P4Info: its controller headers carry @controller_header, which the
# engine's P4Info left out (no annotation was ever copied into a preamble).
ANNOTATED = """
@controller_header("packet_in") header cpu_in_t { @my_field bit<16> port; }
struct HA { cpu_in_t cpu; h_t h; }
struct MA { }
parser P(packet_in pkt, out HA hdr, inout MA meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout HA hdr, inout MA meta) { apply { } }
control I(inout HA hdr, inout MA meta, inout standard_metadata_t sm) {
    @brief("sets the port") @my_anno(1,2) @noWarn("unused")
    action fwd(@unit("port") bit<9> port) { sm.egress_spec = port; }
    @max_group_size(8) action_selector(HashAlgorithm.crc16, 16, 32w10) sel;
    @__debug table t {
        key = { hdr.h.a : exact @hint; hdr.h.b : selector; }
        actions = { fwd; @defaultonly @keep NoAction; }
        implementation = sel;
    }
    apply { t.apply(); }
}
control E(inout HA hdr, inout MA meta, inout standard_metadata_t sm) { apply { } }
control C(inout HA hdr, inout MA meta) { apply { } }
control D(packet_out pkt, in HA hdr) { apply { pkt.emit(hdr.cpu); pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_p4info_carries_the_annotations_p4c_copies_into_it():
    info = compile_source(HEAD + ANNOTATED, "prog.p4").p4info
    header = info.controller_packet_metadata[0]
    assert list(header.preamble.annotations) == ['@controller_header("packet_in")']
    assert list(header.metadata[0].annotations) == ["@my_field"]
    fwd = next(a for a in info.actions if a.preamble.name == "I.fwd")
    # as p4c prints them back: parsed ones from their values, others token by token
    assert list(fwd.preamble.annotations) == ["@my_anno(1 , 2)", '@noWarn("unused")']
    assert fwd.preamble.doc.brief == "sets the port"
    assert list(fwd.params[0].annotations) == ['@unit("port")']
    table = info.tables[0]
    assert list(table.preamble.annotations) == ["@__debug"]
    assert list(table.match_fields[0].annotations) == ["@hint"]
    noaction = next(r for r in table.action_refs if r.annotations)
    assert list(noaction.annotations) == ["@defaultonly", "@keep"]
    # the selector's own fields say these; p4c leaves them out of its preamble
    assert list(info.action_profiles[0].preamble.annotations) == []
    assert info.action_profiles[0].max_group_size == 8


def test_a_string_literal_may_span_lines_and_hold_what_looks_like_a_comment():
    # PINS (p4c's pins_fabric.p4) writes constraints as multi-line strings with comments in them.
    # The engine cut each string at its line's end: it blanked the "comments" inside, and the
    # next annotation's quotes ran @p4runtime_role(...) into @entry_restriction's body. p4c's
    # lexer takes the newlines and the // lines as the string's text.
    top = """
        @p4runtime_translation_mappings({ {"CPU", 4}, {"", 0}, })
        type bit<9> port_id_t;
    """
    ingress = """
        @id(0x01000001) @action_restriction("
            // Disallow 0: it means 'none' (or '' in P4Runtime)
            port != 0;
          ") action fwd(port_id_t port) { sm.egress_spec = (bit<9>)port; }
        @entry_restriction("
            // a (b) c
            a != 0;
          ") @p4runtime_role("sdn_controller") table t {
            key = { hdr.h.a : exact; } actions = { fwd; }
        }
        apply { t.apply(); }"""
    info = compile_source(program(top, ingress)).p4info
    fwd = next(a for a in info.actions if a.preamble.name == "I.fwd")
    assert list(fwd.preamble.annotations) == [
        "@action_restriction(\"\n            // Disallow 0: it means 'none' (or '' in P4Runtime)\n"
        "            port != 0;\n          \")"]
    table = info.tables[0]
    assert list(table.preamble.annotations) == [
        '@entry_restriction("\n            // a (b) c\n            a != 0;\n          ")',
        '@p4runtime_role("sdn_controller")']
    # and a parsed annotation p4c leaves unparsed shows as written, token by token
    port_type = info.type_info.new_types["port_id_t"]
    assert list(port_type.annotations) == ['@p4runtime_translation_mappings({ { "CPU" , 4 } , { "" , 0 } , })']


def test_p4info_lists_actions_in_the_order_p4c_does():
    # p4c lists them control by control after copying each top-level action into the controls
    # that use it (its LocalizeAllActions): those a control's tables name, in their order (an
    # implicit NoAction default after the table's list), then those its apply calls, then its
    # own. The engine listed them as declared (NoAction, from core.p4, first): the order of 6 of
    # p4c's 447 recorded v1model P4Infos (std_meta_inlining.p4, v1model-special-ops-bmv2.p4, ...).
    src = HEAD + """
action tag(inout bit<8> x) { x = 1; }
action count_it(inout bit<8> x) { x = x + 1; }
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M meta) { apply { } }
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table ti { key = { hdr.h.a : exact; } actions = { fwd; tag(hdr.h.b); } }
    apply { ti.apply(); }
}
control E(inout H hdr, inout M meta, inout standard_metadata_t sm) {
    action mark() { hdr.h.b = 7; }
    table te { key = { hdr.h.a : exact; } actions = { mark; NoAction; } }
    apply { te.apply(); count_it(hdr.h.a); }
}
control C(inout H hdr, inout M meta) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    info = compile_source(src).p4info
    assert [a.preamble.name for a in info.actions] == ["tag", "NoAction", "I.fwd", "count_it", "E.mark"]


def test_an_unterminated_string_literal_is_located():
    src = program("", 'apply { @name("unfinished) { } }')
    line = src[:src.index('"unfinished')].count("\n") + 1
    col = src.index('"unfinished') - src.rfind("\n", 0, src.index('"unfinished'))
    with pytest.raises(P4Error) as e:
        compile_source(src)
    assert str(e.value).startswith(f"<string>:{line}:{col}: error: unterminated string literal")


def test_p4info_has_type_info_where_p4c_opens_it():
    # p4c's serializer opens type_info when it looks at a table, an action parameter, a
    # controller header, an extern instance, or an extern function a live control calls
    empty = program("", "    apply { }")
    assert not compile_source(empty, "prog.p4").p4info.HasField("type_info")
    drops = program("", "    apply { if (hdr.h.a == 0) { mark_to_drop(sm); } }")
    assert compile_source(drops, "prog.p4").p4info.HasField("type_info")
    folded = program("", "    apply { if (false) { mark_to_drop(sm); } }")
    assert not compile_source(folded, "prog.p4").p4info.HasField("type_info")


# ---------------------------------------------------------------- the preprocessor
# P4ELTE/t4p4s's examples write macro calls over several lines and keep a stray '#4096' line;
# cpp (which p4c runs) reads both.


def test_a_macro_call_may_spread_its_arguments_over_several_lines():
    text = program("""#define SET(target, value) \\
    target = value
""", """    apply {
        SET(
            sm.egress_spec,
            (bit<9>)hdr.h.b);
        hdr.h.a = 7;
    }""").replace("#include <v1model.p4>", "#include <v1model.p4>\n#\n# 4096")
    pipe = compile_source(text, "prog.p4").new_pipeline()
    assert pipe.process(0, bytes([1, 3])) == [(3, bytes([7, 3]))]
    # a wrong line after the call is still reported where it is written
    broken = text.replace("hdr.h.a = 7;", "hdr.h.zz = 7;")
    line = broken.splitlines().index("        hdr.h.zz = 7;") + 1
    assert located(broken)[0][:2] == (line, 9)


def test_a_macro_call_left_open_is_refused_where_the_macro_is_named():
    text = program("#define SET(target, value) target = value\n", """    apply {
        SET(sm.egress_spec,
    }""")
    line = text.splitlines().index("        SET(sm.egress_spec,") + 1
    assert located(text) == [(line, 9, "unterminated argument list of a call of macro 'SET'")]


def test_p4info_pkg_info_comes_from_the_main_package_annotations():
    text = program("", "    apply { }").replace(
        "V1Switch(P(), V(), I(), E(), C(), D()) main;",
        '@pkginfo(name = "demo", version = "1.2", contact = "ops@example.org")\n'
        '@platform_property(multicast_group_table_size = 64)\n'
        '@brief("a demo") @owner("lab")\n'
        "V1Switch(P(), V(), I(), E(), C(), D()) main;")
    pkg = compile_source(text, "prog.p4").p4info.pkg_info
    assert (pkg.name, pkg.version, pkg.contact, pkg.arch) == ("demo", "1.2", "ops@example.org", "v1model")
    assert pkg.platform_properties.multicast_group_table_size == 64
    assert list(pkg.annotations) == ['@owner("lab")'] and pkg.doc.brief == "a demo"


def test_p4info_lists_a_new_types_annotations_but_its_translation():
    text = program("""@p4runtime_translation("example.org/port", bit<16>) @lab_only
type bit<9> port_id_t;
""", """    action to(port_id_t p) { sm.egress_spec = (bit<9>)p; }
    table t { key = { hdr.h.a : exact; } actions = { to; } }
    apply { t.apply(); }""")
    spec = compile_source(text, "prog.p4").p4info.type_info.new_types["port_id_t"]
    assert list(spec.annotations) == ["@lab_only"]
    assert spec.translated_type.uri == "example.org/port"


def test_an_annotation_without_arguments_may_precede_a_typedef_or_a_type():
    # `@lab typedef bit<8> byte_t;` was a syntax error at the type's name: the scan for type
    # names looked for typedef/type only after ';', '}' or ')'
    text = program("""@lab typedef bit<8> byte_t;
@lab type bit<9> port_t;
""", """    apply { byte_t x = hdr.h.a; sm.egress_spec = (bit<9>)(port_t)(bit<9>)x; }""")
    assert compile_source(text, "prog.p4").new_pipeline().process(0, bytes([5, 6])) == [(5, bytes([5, 6]))]


# ---------------------------------------------------------------- loops that never end
def test_a_for_loop_that_never_ends_faults_its_packet_instead_of_holding_it_for_ever():
    # p4c's forloop-bmv2 and p4-guide's loop tests, on a header byte of 255: i <= 255 holds for
    # every bit<8> i, so the loop never ends (BMv2 would never finish the packet either)
    from testbed.p4engine import P4RuntimeFault
    text = program("", """    apply {
        bit<8> n = 0;
        for (bit<8> i = 1; i <= hdr.h.a; i = i + 1) { n = n + 1; }
        hdr.h.b = n;
        sm.egress_spec = 2;
    }""")
    pipe = compile_source(text, "prog.p4").new_pipeline()
    assert pipe.process(0, bytes([3, 0])) == [(2, bytes([3, 3]))]
    line = text.splitlines().index("        for (bit<8> i = 1; i <= hdr.h.a; i = i + 1) { n = n + 1; }") + 1
    with pytest.raises(P4RuntimeFault, match=f"the for loop at prog.p4:{line} ran 1048576 passes"):
        pipe.process(0, bytes([255, 0]))


def test_p4info_folds_a_structured_annotations_values_as_p4c_does():
    text = program("", """    @Limits[1, "x", 5 + 6, 1 == 2] @Ranges[low = 2 * 3, on = !false]
    table t { key = { hdr.h.a : exact; } actions = { NoAction; } }
    apply { t.apply(); }""")
    table = compile_source(text, "prog.p4").p4info.tables[0]
    limits, ranges = table.preamble.structured_annotations
    assert [e.WhichOneof("value") for e in limits.expression_list.expressions] == \
        ["int64_value", "string_value", "int64_value", "bool_value"]
    assert [e.int64_value for e in limits.expression_list.expressions][::2] == [1, 11]
    assert limits.expression_list.expressions[3].bool_value is False
    assert [(kv.key, kv.value.int64_value or kv.value.bool_value) for kv in ranges.kv_pair_list.kv_pairs] == \
        [("low", 6), ("on", True)]


def test_a_package_argument_naming_an_undeclared_control_is_an_unknown_name():
    # kevinbird61/p4-researching's NetCache forgets to include its checksum controls
    text = program("", "    apply { }").replace("V1Switch(P(), V(),", "V1Switch(P(), verify_checksums(),")
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "verify_checksums()" in l)
    col = text.splitlines()[line - 1].index("verify_checksums") + 1
    assert located(text) == [(line, col, "unknown name 'verify_checksums'")]


# ---------------------------------------------------------------- --target bmv2
def test_bmv2_takes_a_sub_control_of_checksum_updates_applied_in_compute_checksum():
    # ONOS fabric.p4 (WITH_SPGW) applies update_gtpu_checksum in its computeChecksum control;
    # p4c inlines it, so p4c-bm2-ss sees update_checksum calls only. Other statements stay refused.
    text = HEAD.replace("struct H { h_t h; }", "struct H { h_t h; h_t g; }") + """
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.g); transition accept; }
}
control V(inout H hdr, inout M meta) { apply { } }
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
control E(inout H hdr, inout M meta, inout standard_metadata_t sm) { apply { } }
control Sum(inout h_t x, in h_t y) {
    apply { update_checksum(x.isValid(), { y.a }, x.b, HashAlgorithm.csum16); }
}
control C(inout H hdr, inout M meta) {
    Sum() sum;
    apply { sum.apply(hdr.g, hdr.h); }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    pipe = compile_source(text, "prog.p4", target="bmv2").new_pipeline()
    assert pipe.process(0, bytes([0x0f, 0, 0, 0])) == [(1, bytes([0x0f, 0, 0, 0xff]))]
    direct = text.replace("    Sum() sum;\n", "").replace("sum.apply(", "Sum.apply(")     # (ONOS's form)
    pipe = compile_source(direct, "prog.p4", target="bmv2").new_pipeline()
    assert pipe.process(0, bytes([0x0f, 0, 0, 0])) == [(1, bytes([0x0f, 0, 0, 0xff]))]
    broken = text.replace("apply { update_checksum(x.isValid()", "apply { x.a = 1; update_checksum(x.isValid()")
    line = next(i for i, l in enumerate(broken.splitlines(), 1) if "x.a = 1;" in l)
    assert located(broken, target="bmv2") == [
        (line, 13, "[bmv2 checksum-control] only calls to update_checksum or update_checksum_with_payload "
                   "are allowed in computeChecksum on this target")]


def test_a_call_of_a_deprecated_extern_warns_as_p4c_does():
    prog = compile_source(TOP_LEVEL_ACTIONS, "prog.p4")
    line = TOP_LEVEL_ACTIONS.splitlines().index("action drop_it() { mark_to_drop(); }") + 1
    assert [w[1:] for w in prog.compiled.warnings] == [
        (line, 20, "mark_to_drop: Using deprecated feature mark_to_drop. "
                   "Please use mark_to_drop(standard_metadata) instead.")]
    assert compile_source(program("", "    apply { mark_to_drop(sm); }"), "prog.p4").compiled.warnings == []
