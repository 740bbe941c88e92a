"""Programs p4c and BMv2 accept that the engine once refused: contextual keywords used as names,
entry priorities, constant folding, structure-valued expressions, default parameters,
serializable enums. Each program is run and its output compared with what BMv2 sends."""
import pytest

from testbed.p4engine import P4Error, compile_source

HEADERS = """
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { eth_t eth; }
"""


def program(ingress, decls="", meta=""):
    """A v1model program parsing one Ethernet header; `ingress` is the ingress control's body."""
    return f"""
#include <core.p4>
#include <v1model.p4>
{HEADERS}
{decls}
struct metadata_t {{ {meta} }}
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(hdr.eth); transition accept; }}
}}
control V(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    {ingress}
}}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ pkt.emit(hdr.eth); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def frame(dst=0x0000000000AA, src=0x000000000001, ethertype=0x0800):
    return dst.to_bytes(6, "big") + src.to_bytes(6, "big") + ethertype.to_bytes(2, "big") + b"payload"


def run(src, data):
    return compile_source(src).new_pipeline().process(0, data)


def refused(src):
    with pytest.raises(P4Error) as e:
        compile_source(src)
    return str(e.value)


# ------------------------------------------------------------------ contextual keywords as names

def test_contextual_keywords_name_parameters_variables_fields_and_actions():
    src = program("""
        action state(bit<9> key, bit<16> priority) {
            sm.egress_spec = key;
            hdr.eth.type = priority;
        }
        action entries(in bit<48> actions, out bit<48> apply) { apply = actions + 1; }
        table t {
            key = { hdr.eth.dst : exact; }
            actions = { state; NoAction; }
            const entries = { 0xaa : state(3, 0x1234); }
        }
        apply {
            bit<48> type = 5;
            bit<48> result;
            entries(type, result);
            hdr.eth.src = result;
            t.apply();
        }""")
    out = run(src, frame())
    assert out == [(3, frame(src=6, ethertype=0x1234))]


def test_a_keyword_as_a_struct_field_and_named_argument():
    src = program("""
        action set(bit<9> key) { sm.egress_spec = key; }
        apply {
            meta.state = 7;
            meta.priority = meta.state + 1;
            set(key = (bit<9>)meta.priority);
        }""", meta="bit<8> state; bit<8> priority;")
    assert run(src, frame()) == [(8, frame())]


# ------------------------------------------------------------------ entry priorities

def priority_table(props, entries):
    return program(f"""
        action fwd(bit<9> port) {{ sm.egress_spec = port; }}
        table t {{
            key = {{ hdr.eth.type : ternary; }}
            actions = {{ fwd; }}
            default_action = fwd(9);
            {props}
            entries = {{
{entries}
            }}
        }}
        apply {{ t.apply(); }}""")


def test_entry_priorities_largest_wins_by_default_even_out_of_order():
    src = priority_table("", """
                priority = 10: 0x0800 &&& 0xff00 : fwd(1);
                priority = 30: 0x0800 &&& 0xffff : fwd(3);
                priority = 20: 0x0000 &&& 0x0000 : fwd(2);""")
    assert run(src, frame(ethertype=0x0800)) == [(3, frame(ethertype=0x0800))]
    assert run(src, frame(ethertype=0x0801)) == [(2, frame(ethertype=0x0801))]


def test_entry_priorities_smallest_wins_with_delta_for_entries_without_one():
    # 5, then 5 + 10 = 15 for the next: the entry given 12 sits between them
    src = priority_table("largest_priority_wins = false; priority_delta = 10;", """
                const priority = 5: 0x0800 &&& 0xff00 : fwd(1);
                                    0x0000 &&& 0x0000 : fwd(2);
                priority = 12:      0x0800 &&& 0xffff : fwd(3);""")
    assert run(src, frame(ethertype=0x0800)) == [(1, frame(ethertype=0x0800))]
    assert run(src, frame(ethertype=0x0900)) == [(2, frame(ethertype=0x0900))]
    src = priority_table("largest_priority_wins = false; priority_delta = 10;", """
                priority = 20: 0x0000 &&& 0x0000 : fwd(2);
                priority = 12: 0x0800 &&& 0xffff : fwd(3);""")
    assert run(src, frame(ethertype=0x0800)) == [(3, frame(ethertype=0x0800))]


def test_entry_priorities_p4c_refuses():
    const = priority_table("", "priority = 1: 0x0800 &&& 0xff00 : fwd(1);").replace("entries =", "const entries =")
    assert "'const' entries cannot have priorities" in refused(const)
    first = priority_table("", """
                0x0800 &&& 0xff00 : fwd(1);
                priority = 3: 0x0800 &&& 0xffff : fwd(3);""")
    assert "first entry must have a priority" in refused(first)
    exact = priority_table("", "priority = 1: 0x0800 : fwd(1);").replace("ternary", "exact")
    assert "do not need priorities" in refused(exact)


# ------------------------------------------------------------------ constants in entries

def test_entry_keys_and_action_arguments_fold_constant_expressions():
    src = program("""
        action set(bit<9> port, bit<48> src) { sm.egress_spec = port; hdr.eth.src = src; }
        table t {
            key = { hdr.eth.dst : exact; hdr.eth.type : ternary; }
            actions = { set; NoAction; }
            const entries = {
                {16w0 ++ 8w0xaa ++ 24w0, (bit<16>)0x08ab} :
                    set((bit<9>)(3 * 2 + 1), (8w0x20 ++ 8w0x02 ++ 32w0)[47:0] | 48w0xff);
                (48w0xbb, 16w0x0100 &&& (bit<16>)(0xff00 >> 4) & 0xff0) : set(2, ~48w0 - 1);
            }
        }
        apply { t.apply(); }""")
    assert run(src, frame(dst=0xaa000000, ethertype=0x08ab)) == \
        [(7, frame(dst=0xaa000000, src=0x2002000000ff, ethertype=0x08ab))]
    assert run(src, frame(dst=0xbb, ethertype=0x0105)) == \
        [(2, frame(dst=0xbb, src=0xfffffffffffe, ethertype=0x0105))]
    assert run(src, frame(dst=0xbb, ethertype=0x0223)) == [(0, frame(dst=0xbb, ethertype=0x0223))]   # a miss


# ------------------------------------------------------------------ structure-valued expressions

PAIRS = """
struct pair_t { bit<8> a; bit<8> b; }
struct nest_t { pair_t p; bit<16> c; }
header tag_t { bit<8> x; bit<8> y; }
"""


def test_structure_expressions_assign_by_field_name_nested_and_to_headers():
    src = program("""
        apply {
            pair_t p = {b = 2, a = 1};
            nest_t n;
            n = {c = 0x0304, p = {b = p.a, a = p.b}};
            tag_t t;
            t = {y = 9, x = 8};
            hdr.eth.dst = (bit<48>)(p.a ++ p.b ++ n.p.a ++ n.p.b ++ n.c);
            hdr.eth.type = t.x ++ t.y;
            if (t.isValid()) { sm.egress_spec = 5; }
        }""", decls=PAIRS)
    assert run(src, frame()) == [(5, frame(dst=0x010202010304, ethertype=0x0809))]


def test_structure_expressions_compare_with_structs_and_headers():
    src = program("""
        apply {
            pair_t p = {a = (bit<8>)hdr.eth.type, b = 7};
            tag_t t = {x = 1, y = 2};
            bit<9> port = 1;
            if (p == {b = 7, a = 0x34}) { port = port + 2; }
            if ({a = 0x34, b = 8} != p) { port = port + 4; }
            if (t == {y = 2, x = 1}) { port = port + 8; }
            if (p == {a = 0x34, b = 6}) { port = port + 16; }
            sm.egress_spec = port;
        }""", decls=PAIRS)
    assert run(src, frame(ethertype=0x1234)) == [(15, frame(ethertype=0x1234))]
    assert run(src, frame(ethertype=0x1235)) == [(13, frame(ethertype=0x1235))]


def test_structure_expression_with_wrong_fields_is_refused():
    src = program("apply { pair_t p = {a = 1, c = 2}; }", decls=PAIRS)
    assert "fields (a, c) are not those of" in refused(src)
    src = program("apply { pair_t p = {a = 1, a = 2}; }", decls=PAIRS)
    assert "given twice" in refused(src)


# ------------------------------------------------------------------ default parameter values

def test_missing_arguments_take_the_parameters_default_values():
    src = program("""
        action shift(out bit<8> x, in bit<8> y = 0x50) { x = y >> 2; }
        apply {
            bit<8> a; bit<8> b;
            shift(a, 0x0c);
            shift(b);
            hdr.eth.type = widen(a) | (bit<16>)widen(b, 0)[7:0];
            Sub.apply(hdr, 7);
            Sub.apply(hdr);
        }""", decls="""
        bit<16> widen(in bit<8> v, in bit<8> hi = 0xab) { return hi ++ v; }
        control Sub(inout headers_t h, in bit<48> add = 0x100) {
            apply { h.eth.src = h.eth.src + add; }
        }""")
    # a = 3, b = 0x14: 0xab03 | 0x0014; src 1 + 7 + 0x100
    assert run(src, frame()) == [(0, frame(src=0x108, ethertype=0xab17))]


def test_a_function_declared_inside_a_control_is_a_syntax_error_as_in_p4c():
    # p4c's grammar has no function among a control's local declarations: top level only
    src = program("""
        bit<8> twice(in bit<8> v) { return v + v; }
        apply { }""")
    message = refused(src)
    line = next(n for n, text in enumerate(src.splitlines(), 1) if "twice(" in text)
    assert message.startswith(f"<string>:{line}:21: error: syntax error"), message


def test_default_values_on_out_parameters_are_refused():
    src = program("""
        action set(out bit<8> x = 1) { x = 2; }
        apply { }""")
    assert "out parameters cannot have default values" in refused(src)


# ------------------------------------------------------------------ enums in registers and logs

ENUMS = """
enum bit<16> EtherKind { IPV4 = 0x0800, ARP = 0x0806, OTHER = 0xffff }
enum Colour { RED, GREEN, BLUE }
"""


def test_a_register_of_a_serializable_enum_stores_its_bits():
    src = program("""
        register<EtherKind>(2) kinds;
        apply {
            EtherKind previous;
            kinds.read(previous, 0);
            kinds.write(0, (EtherKind)hdr.eth.type);
            kinds.write(1, EtherKind.ARP);
            if (previous == EtherKind.IPV4) { sm.egress_spec = 4; } else { sm.egress_spec = 1; }
            hdr.eth.type = (bit<16>)previous;
        }""", decls=ENUMS)
    pipe = compile_source(src).new_pipeline()
    assert pipe.process(0, frame(ethertype=0x0800)) == [(1, frame(ethertype=0))]
    assert pipe.process(0, frame(ethertype=0x0806)) == [(4, frame(ethertype=0x0800))]
    register = pipe.registers["I.kinds"]
    assert (register.width, register.read(0), register.read(1)) == (16, 0x0806, 0x0806)


def test_register_of_a_serializable_enum_in_p4info_names_the_enum():
    src = program("register<EtherKind>(1) kinds; apply { kinds.write(0, EtherKind.OTHER); }", decls=ENUMS)
    p4info = compile_source(src).p4info
    assert p4info.registers[0].type_spec.serializable_enum.name == "EtherKind"
    spec = p4info.type_info.serializable_enums["EtherKind"]
    assert spec.underlying_type.bitwidth == 16
    assert [(m.name, m.value) for m in spec.members] == \
        [("IPV4", b"\x08\x00"), ("ARP", b"\x08\x06"), ("OTHER", b"\xff\xff")]


def test_log_msg_prints_enums_as_bmv2_does():
    # p4c-bm2-ss gives a plain enum its member's position (32 bits), a serializable one its value
    src = program("""
        apply {
            Colour c = Colour.BLUE;
            EtherKind k = EtherKind.ARP;
            log_msg("colour={} kind={}", {c, k});
        }""", decls=ENUMS)
    lines = []
    compile_source(src).new_pipeline(log=lines.append).process(0, frame())
    assert "colour=2 kind=2054" in lines


def test_digest_of_a_struct_with_enum_fields():
    src = program("""
        apply {
            meta.d.kind = EtherKind.IPV4;
            meta.d.colour = Colour.GREEN;
            meta.d.why = error.NoMatch;
            digest<learn_t>(1, meta.d);
        }""", decls=ENUMS + "struct learn_t { EtherKind kind; Colour colour; error why; }", meta="learn_t d;")
    program_ = compile_source(src)
    members = program_.p4info.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.WhichOneof("type_spec")) for m in members] == \
        [("kind", "serializable_enum"), ("colour", "enum"), ("why", "error")]
    assert list(program_.p4info.type_info.error.members)[:3] == ["NoError", "PacketTooShort", "NoMatch"]
    assert [m.name for m in program_.p4info.type_info.enums["Colour"].members] == ["RED", "GREEN", "BLUE"]
    pipe = program_.new_pipeline()
    sent = []
    pipe.digest_callback = lambda name, values: sent.append((name, values))
    pipe.process(0, frame())
    assert sent == [("learn_t", (0x0800, 1, 2))]


# ------------------------------------------------------------------ other table properties

def test_an_unknown_table_property_is_a_warning_and_ignored():
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table t {
            key = { hdr.eth.type : exact; }
            actions = { fwd; }
            const entries = { 0x0800 : fwd(6); }
            vendor_hint = 3 + 4;
        }
        apply { t.apply(); }""")
    program_ = compile_source(src)
    assert [w[3] for w in program_.compiled.warnings] == ["table t: unknown table property 'vendor_hint' ignored"]
    assert program_.new_pipeline().process(0, frame()) == [(6, frame())]
    assert "unknown name 'nowhere'" in refused(src.replace("3 + 4", "nowhere"))


# ------------------------------------------------------------------ struct constants

def test_struct_constants_read_assign_and_compare():
    src = program("""
        const port_pair_t CPU = {9w5, 9w6};
        const nested_t NEST = {inner = {a = 9w1, b = 9w2}, tag = 8w0x77};
        apply {
            const port_pair_t LOCAL = {b = 9w4, a = 9w3};
            meta.p = CPU;
            if (meta.p == CPU && meta.p != LOCAL) { sm.egress_spec = CPU.b + NEST.inner.b; }
            meta.p = LOCAL;
            hdr.eth.type = (bit<8>)meta.p.a ++ NEST.tag;
        }""", decls="""
        struct port_pair_t { bit<9> a; bit<9> b; }
        struct nested_t { port_pair_t inner; bit<8> tag; }""", meta="port_pair_t p;")
    assert run(src, frame()) == [(8, frame(ethertype=0x0377))]


def test_struct_constants_cannot_be_assigned():
    decls = "struct port_pair_t { bit<9> a; bit<9> b; } const port_pair_t CPU = {9w5, 9w6};"
    assert "cannot be assigned to" in refused(program("apply { CPU.a = 1; }", decls=decls))
    assert "cannot be assigned to" in refused(program("apply { CPU = {1, 2}; }", decls=decls))


def test_structure_expressions_fill_headers_with_struct_and_empty_fields():
    src = f"""
#include <core.p4>
#include <v1model.p4>
struct none_t {{ }}
struct two_t {{ bit<8> f1; bit<8> f2; }}
header empty_t {{ }}
header holder_t {{ none_t nothing; two_t two; bit<8> tail; }}
{HEADERS.replace("struct headers_t { eth_t eth; }", "struct headers_t { eth_t eth; empty_t e; holder_t h; }")}
struct metadata_t {{ }}
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(hdr.eth); transition accept; }}
}}
control V(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{
    apply {{
        hdr.e = {{}};
        hdr.h.nothing = {{}};
        hdr.h = {{nothing = {{}}, tail = 9, two = {{f2 = 2, f1 = 1}}}};
        if (hdr.e.isValid() && hdr.h.two == {{f1 = 1, f2 = 2}}) {{ sm.egress_spec = 3; }}
    }}
}}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout headers_t hdr, inout metadata_t meta) {{ apply {{ }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ pkt.emit(hdr.eth); pkt.emit(hdr.e); pkt.emit(hdr.h); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    data = frame()
    assert run(src, data) == [(3, data[:14] + bytes([1, 2, 9]) + data[14:])]


def test_annotations_take_type_arguments():
    src = program("""
        apply { port_t p = (port_t)9w4; sm.egress_spec = (bit<9>)p; }""", decls="""
        @p4runtime_translation("example.org/port_t", bit<32>)
        type bit<9> port_t;
        @p4runtime_translation("example.org/name_t", string)
        type bit<8> name_t;""")
    assert run(src, frame()) == [(4, frame())]


def test_structured_annotations_are_accepted():
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        @Lists[1, "text", true, 2 * 3] @Pairs[label = "x", size = 4]
        table t {
            key = { hdr.eth.type : exact; }
            actions = { @tag[1] fwd; }
            const entries = { 0x0800 : fwd(2); }
        }
        apply { t.apply(); }""")
    assert run(src, frame()) == [(2, frame())]


@pytest.mark.parametrize("annotations, message", [
    ("@twice[] @twice[]", "duplicate name for structured annotation"),
    ("@once(1) @once[]", "duplicate name for structured annotation"),
    ("@mixed[key = 4, 5]", "not both"),
    ("@listed[a = {2, 3}]", "illegal type for structured annotation"),
])
def test_structured_annotations_p4c_refuses(annotations, message):
    src = program(f"{annotations} action a() {{ }} apply {{ a(); }}")
    assert message in refused(src)


def test_free_form_annotations_hold_any_text_and_later_lines_stay_located():
    body = """@scrabble(
            - it's (nested (text)) "with a ) in a string" 0xdead $ #
        )"""
    src = program(f"""
        {body}
        @name("renamed") action fwd(bit<9> port) {{ sm.egress_spec = port; }}
        apply {{ fwd(5); }}""")
    program_ = compile_source(src)
    assert program_.new_pipeline().process(0, frame()) == [(5, frame())]
    assert "I.renamed" in [a.preamble.name for a in program_.p4info.actions]
    bad = src.replace("fwd(5);", "fwd(5)")
    line = bad.splitlines().index("        apply { fwd(5) }") + 1
    assert refused(bad).startswith(f"<string>:{line}:")


def test_a_new_type_after_a_free_form_annotation():
    src = program("apply { port_t p = (port_t)9w7; sm.egress_spec = (bit<9>)p; }",
                  decls='@custom("text") type bit<9> port_t;')
    assert run(src, frame()) == [(7, frame())]


def test_more_constant_folding_in_entries_conditional_saturating_slices_casts():
    src = program("""
        action a(bit<9> p, bit<48> v) { sm.egress_spec = p; hdr.eth.src = v; }
        table t {
            key = { hdr.eth.type : ternary; }
            actions = { a; }
            const entries = {
                (bit<16>)(BASE[15:8] ++ 8w1) : a(BASE[3:0] == 0 ? 9w2 : 9w3, 48w1 << 47);
                BASE |+| 16w0xffff : a(1 << 3, (bit<48>)(8w3 - 8w5));
                (true ? BASE : 16w0) &&& ~16w0x00ff : a((bit<9>)(-2), (bit<8>)(8w255 + 1) ++ 40w0);
            }
        }
        apply { t.apply(); }""", decls="const bit<16> BASE = 0x0800;")
    assert run(src, frame(ethertype=0x0801)) == [(2, frame(src=1 << 47, ethertype=0x0801))]
    assert run(src, frame(ethertype=0xffff)) == [(8, frame(src=254, ethertype=0xffff))]
    assert run(src, frame(ethertype=0x0805)) == [(510, frame(src=0, ethertype=0x0805))]


def test_selector_keys_without_an_action_selector_are_left_out():
    from testbed.p4engine.tables import ActionCall, Exact
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table t {
            key = { hdr.eth.type : exact; hdr.eth.src : selector; }
            actions = { fwd; NoAction; }
        }
        apply { t.apply(); }""")
    program_ = compile_source(src)
    assert [f.name for f in program_.p4info.tables[0].match_fields] == ["hdr.eth.type"]
    assert not program_.p4info.tables[0].implementation_id
    assert "selector keys are ignored" in program_.compiled.warnings[0][3]
    pipe = program_.new_pipeline()
    pipe.tables["I.t"].insert([Exact(0x0800)], ActionCall("I.fwd", {"port": 3}))
    assert pipe.process(0, frame(src=77)) == [(3, frame(src=77))]


# ------------------------------------------------------------ @name on an action parameter

def test_an_action_parameter_is_known_to_the_control_plane_by_its_name_annotation():
    # p4c's P4Info (and BMv2's runtime data) call the parameter by its @name; the action's
    # body, a direct call and a const entry still use the P4 name
    from testbed.p4engine.tables import ActionCall, Exact
    src = program("""
        action fwd(@name("out_port") bit<9> port) { sm.egress_spec = port; }
        table by_dst {
            key = { hdr.eth.dst : exact; }
            actions = { fwd; }
            const entries = { 0xAA : fwd(3); }
        }
        table by_src {
            key = { hdr.eth.src : exact; }
            actions = { fwd; }
            default_action = fwd(port = 4);
        }
        apply {
            if (hdr.eth.type == 0x0801) { fwd(5); }
            else if (!by_dst.apply().hit) { by_src.apply(); }
        }""")
    compiled = compile_source(src)
    fwd = next(a for a in compiled.p4info.actions if a.preamble.name == "I.fwd")
    assert [(p.id, p.name, p.bitwidth) for p in fwd.params] == [(1, "out_port", 9)]
    by_src = next(t for t in compiled.p4info.tables if t.preamble.name == "I.by_src")
    assert [(a.param_id, int.from_bytes(a.value, "big")) for a in by_src.initial_default_action.arguments] == [(1, 4)]
    pipeline = compiled.new_pipeline()
    assert [port for port, _ in pipeline.process(0, frame(dst=0xAA))] == [3]       # const entry
    assert [port for port, _ in pipeline.process(0, frame(dst=0xBB))] == [4]       # default action
    assert [port for port, _ in pipeline.process(0, frame(ethertype=0x0801))] == [5]  # direct call
    pipeline.tables["I.by_src"].insert([Exact(0x000000000001)], ActionCall("I.fwd", {"out_port": 7}))
    assert [port for port, _ in pipeline.process(0, frame(dst=0xBB))] == [7]       # a control-plane entry


# ------------------------------------------------------------------ switch labels

def test_switch_labels_are_constant_expressions_enum_members_and_folded_values():
    src = program("""
        apply {
            EtherKind kind = (EtherKind)hdr.eth.type;
            switch (kind) {
                EtherKind.IPV4: { sm.egress_spec = 1; }
                EtherKind.ARP:
                default: { sm.egress_spec = 2; }
            }
            switch (hdr.eth.dst[7:0]) {
                8w0x50 + 8w0x5A: { hdr.eth.src = 0xAA; }     // 0xAA
                (8w0xBB): { hdr.eth.src = 0xBB; }
            }
        }""", decls=ENUMS)
    pipe = compile_source(src).new_pipeline()
    assert pipe.process(0, frame(dst=0xAA)) == [(1, frame(dst=0xAA, src=0xAA))]
    assert pipe.process(0, frame(dst=0xBB, ethertype=0x0806)) == [(2, frame(dst=0xBB, src=0xBB, ethertype=0x0806))]
    assert pipe.process(0, frame(dst=0xCC, ethertype=0x86DD)) == [(2, frame(dst=0xCC, ethertype=0x86DD))]


@pytest.mark.parametrize("labels, message", [
    ("8w1: { } 8w0 + 8w1: { }", "duplicate switch label"),
    ("hdr.eth.type[7:0]: { }", "switch labels must be constants"),
])
def test_switch_labels_p4c_refuses(labels, message):
    src = program(f"apply {{ switch (hdr.eth.dst[7:0]) {{ {labels} }} }}")
    assert message in refused(src)


def test_an_action_run_switch_takes_action_names_only():
    src = program("""
        action a() { }
        table t { key = { hdr.eth.dst : exact; } actions = { a; } }
        apply { switch (t.apply().action_run) { 8w1: { } } }""")
    assert "takes action names as labels" in refused(src)


def test_a_header_field_of_a_serializable_enum_has_the_enum_type():
    # p4lang/tutorials' flowcache passes such a field to an action parameter of the enum type
    src = program("""
        action classify(EtherKind kind) {
            sm.egress_spec = kind == EtherKind.ARP ? 9w2 : 9w1;
        }
        apply {
            classify(hdr.tag.kind);
            switch (hdr.tag.kind) {
                EtherKind.IPV4: { hdr.tag.kind = EtherKind.OTHER; }
            }
            hdr.eth.type = (bit<16>)hdr.tag.kind;
        }""", decls=ENUMS + "header tag_t { EtherKind kind; }\nstruct tagged_t { eth_t eth; tag_t tag; }")
    src = src.replace("struct headers_t { eth_t eth; }", "").replace("headers_t", "tagged_t")
    src = src.replace("pkt.extract(hdr.eth);", "pkt.extract(hdr.eth); pkt.extract(hdr.tag);")
    src = src.replace("pkt.emit(hdr.eth);", "pkt.emit(hdr.eth); pkt.emit(hdr.tag);")

    def tagged(ethertype, kind):
        return frame(ethertype=ethertype)[:14] + kind.to_bytes(2, "big") + b"payload"
    pipe = compile_source(src).new_pipeline()
    assert pipe.process(0, tagged(0x0800, 0x0806)) == [(2, tagged(0x0806, 0x0806))]
    assert pipe.process(0, tagged(0x0800, 0x0800)) == [(1, tagged(0xFFFF, 0xFFFF))]
    assert "cannot use a value of type bit<16> where EtherKind is expected" in refused(
        src.replace("classify(hdr.tag.kind);", "hdr.tag.kind = hdr.eth.type;"))


# ------------------------------------------------------------------ default parameter values

def test_a_default_value_reads_the_names_seen_where_the_parameter_is_declared():
    # p4c binds a default's names at the declaration: a caller's own K does not change it
    src = program("""
        const bit<16> K = 0x0202;
        action local_set(bit<16> v = K) { hdr.eth.type = v; }
        apply {
            const bit<16> K = 0x0303;
            local_set();
            hdr.eth.src[15:0] = pick();
            hdr.eth.dst[15:0] = pick(K);
        }""", decls="""
        const bit<16> K = 0x0101;
        bit<16> pick(in bit<16> v = K) { return v; }""")
    [(_, out)] = run(src, frame())
    assert out[12:14] == bytes([2, 2])          # the control's K, where local_set is declared
    assert out[10:12] == bytes([1, 1])          # the global K, where pick is declared
    assert out[4:6] == bytes([3, 3])            # an argument given is read where the call is


def test_a_size_on_a_table_of_constant_entries_is_a_warning_as_p4c_drops_it():
    # p4c's CheckTableSize warns and drops the size of tables the control plane cannot fill
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table by_dst {
            key = { hdr.eth.dst : exact; }
            actions = { fwd; }
            const entries = { 0xAA : fwd(3); 0xBB : fwd(4); }
            size = 1;
        }
        table keyless { actions = { fwd; } default_action = fwd(5); size = 16; }
        apply { if (!by_dst.apply().hit) { keyless.apply(); } }""")
    compiled = compile_source(src)
    messages = [w[3] for w in compiled.compiled.warnings]
    assert "table by_dst: size 1 specified for table with constant entries" in messages
    assert "table keyless: size 16 specified for table without keys" in messages
    assert [(t.preamble.name, t.size) for t in compiled.p4info.tables] == [("I.by_dst", 1), ("I.keyless", 16)]
    pipeline = compiled.new_pipeline()
    assert [port for port, _ in pipeline.process(0, frame(dst=0xBB))] == [4]
    assert [port for port, _ in pipeline.process(0, frame(dst=0xCC))] == [5]


def test_qid_is_the_priority_queue_when_the_v1model_declares_it(tmp_path):
    # Programs shipping their own v1model.p4 with queueing_metadata.qid (as nsg-ethz's
    # p4-learning multiqueueing example does): BMv2 sets it at egress to the queue's priority
    from pathlib import Path
    import testbed.p4engine as engine
    bundled = Path(engine.__file__).parent / "include" / "v1model.p4"
    text = bundled.read_text()
    anchor = 'bit<3> priority;'
    assert anchor in text
    (tmp_path / "v1model.p4").write_text(
        text.replace(anchor, anchor + '\n    @alias("queueing_metadata.qid") bit<5> qid;', 1))
    src = program("""
        apply { sm.egress_spec = 1; sm.priority = 5; }""").replace("#include <v1model.p4>", '#include "v1model.p4"')
    src = src.replace("control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }",
                      "control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) "
                      "{ apply { hdr.eth.type = (bit<16>)sm.qid; } }")
    (tmp_path / "qid.p4").write_text(src)
    assert engine.compile_file(str(tmp_path / "qid.p4")).new_pipeline().process(0, frame()) == [(1, frame(ethertype=5))]


# ------------------------------------------------------------------ literals wider than their width

def test_a_literal_too_wide_keeps_its_low_bits_with_a_warning_as_in_p4c():
    # p4c: "[--Wwarn=overflow] warning: 16w0x10005: value does not fit in 16 bits" (it was refused),
    # and the same for an integer implicitly cast (it was silently truncated); none in code p4c
    # folds away before it casts
    src = program("""
        apply {
            hdr.eth.type = 16w0x1_0005;
            hdr.eth.src[7:0] = (bit<8>)SMALL;
            hdr.eth.dst[15:8] = 300;
            if (false) { hdr.eth.dst[7:0] = 0x1FF; }
        }""", decls="const int<8> SMALL = 8s200;")
    compiled = compile_source(src, "wide.p4")
    lines = src.splitlines()
    messages = {(line, col): text for _, line, col, text in compiled.compiled.warnings}
    type_line = next(i for i, text in enumerate(lines, 1) if "16w0x1_0005" in text)
    c_line = next(i for i, text in enumerate(lines, 1) if "8s200" in text)
    assert messages[(type_line, lines[type_line - 1].index("16w") + 1)].startswith(
        "16w0x10005: value does not fit in 16 bits; bit<16> keeps 5")
    assert messages[(c_line, lines[c_line - 1].index("8s200") + 1)].startswith(
        "8s200: signed value does not fit in 8 bits; int<8> keeps -56")
    cast_line = next(i for i, text in enumerate(lines, 1) if "= 300;" in text)
    assert messages[(cast_line, lines[cast_line - 1].index("300") + 1)].startswith(
        "300: value does not fit in 8 bits; bit<8> keeps 44")
    assert len(messages) == 3
    [(_, out)] = compiled.new_pipeline().process(0, frame())
    assert out[12:14] == bytes([0, 5]) and out[11] == 200 and out[4] == 44


def test_a_table_key_may_call_a_function():
    # p4c's issue2258-bmv2: the call's temporaries belong to the table's lookup (NameError before)
    from testbed.p4engine.tables import ActionCall, Exact
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        table t {
            key = { low_byte(hdr.eth.dst): exact @name("low"); }
            actions = { fwd; }
        }
        apply { t.apply(); }""", decls="bit<8> low_byte(in bit<48> v) { return v[7:0]; }")
    pipeline = compile_source(src).new_pipeline()
    pipeline.tables["I.t"].insert([Exact(0xAA)], ActionCall("I.fwd", {"port": 7}))
    assert [port for port, _ in pipeline.process(0, frame(dst=0x11AA))] == [7]
    assert [port for port, _ in pipeline.process(0, frame(dst=0x11AB))] == [0]


def test_a_header_stack_index_out_of_range_writes_nothing_and_touches_no_other_field():
    # P4_16: such a write has no effect, a read an unspecified value (p4c's gauntlet_index_5
    # STF expects the packet unchanged). Unchecked, hdr.tags[i] past the stack reached the
    # slots of the fields declared after it
    src = program("""
        apply {
            bit<8> i = hdr.eth.dst[7:0];
            hdr.tags[i].v = 0x77;
            hdr.eth.type = (bit<16>)hdr.tags[0].v;
            sm.egress_spec = 1;
        }""", decls="header tag_t { bit<8> v; }\nstruct tagged_t { eth_t eth; tag_t[2] tags; eth_t after; }")
    src = src.replace("struct headers_t { eth_t eth; }", "").replace("headers_t", "tagged_t")
    src = src.replace("pkt.extract(hdr.eth);", "pkt.extract(hdr.eth); pkt.extract(hdr.after);")
    src = src.replace("pkt.emit(hdr.eth);", "pkt.emit(hdr.eth); pkt.emit(hdr.after);")
    pipeline = compile_source(src).new_pipeline()

    def packet(index, ethertype=0x0800):     # eth, then the header declared after the stack
        return frame(dst=index, ethertype=ethertype)[:14] + frame(dst=0x0102030405FF)[:14] + b"tail"
    assert pipeline.process(0, packet(0)) == [(1, packet(0, ethertype=0x77))]
    for index in (2, 3, 200):
        assert pipeline.process(0, packet(index)) == [(1, packet(index, ethertype=0))]


def test_a_digest_of_one_value_is_named_as_p4c_names_it_and_sent_as_a_bitstring():
    # v1model-more-externs in p4-guide: digest(2, standard_metadata.ingress_port)
    from testbed.p4rt.entities import digest_data
    from testbed.p4rt.p4info import P4InfoIndex
    src = program("apply { digest(2, sm.ingress_port); sm.egress_spec = 1; }")
    compiled = compile_source(src)
    assert "digest of a bit<9> has no type name: named 'digest_0' (as p4c names it)" in \
        [w[3] for w in compiled.compiled.warnings]
    [digest] = compiled.p4info.digests
    assert (digest.preamble.name, digest.type_spec.bitstring.bit.bitwidth) == ("digest_0", 9)
    pipeline = compiled.new_pipeline()
    sent = []
    pipeline.digest_callback = lambda name, values: sent.append((name, values))
    pipeline.process(5, frame())
    assert sent == [("digest_0", (5,))]
    data = digest_data(P4InfoIndex(compiled.p4info), digest, sent[0][1])
    assert data.WhichOneof("data") == "bitstring" and int.from_bytes(data.bitstring, "big") == 5
