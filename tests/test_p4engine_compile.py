"""The engine's compiler and pipeline: the rt_* STF cases (expected packets computed independently
by tests/p4/rt_make_cases.py), the project's programs, and v1model semantics checked packet by
packet (parser errors, PRE, clone/recirculate/resubmit, truncate, digests, fresh pipelines)."""
import io
from pathlib import Path

import pytest

from testbed.p4engine import P4Error, compile_file, compile_source
from testbed.p4engine.stf import run_stf, run_stf_text
from testbed.p4engine.tables import ActionCall, Exact

ROOT = Path(__file__).resolve().parent.parent
P4_DIR = ROOT / "tests" / "p4"
RT_CASES = sorted(p.stem for p in P4_DIR.glob("rt_*.p4"))


@pytest.mark.parametrize("case", RT_CASES)
def test_rt_stf_case(case):
    out = io.StringIO()
    rc = run_stf(P4_DIR / f"{case}.p4", P4_DIR / f"{case}.stf", out=out)
    assert rc == 0, out.getvalue()


def test_rt_cases_exist():
    assert len(RT_CASES) >= 10


@pytest.mark.parametrize("path", ["tests/p4/switch_basic.p4", "testbed/switch/bench_forward.p4",
                                  "p4/fabric.p4"])
def test_project_programs_compile(path):
    if not (ROOT / path).exists():
        pytest.skip(f"{path} is not in the tree")
    program = compile_file(ROOT / path)
    pipeline = program.new_pipeline()
    assert pipeline.tables, "every project program has tables"


HEADERS = """
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header tag_t { bit<8> a; bit<8> b; }
struct headers_t { ethernet_t ethernet; tag_t tag; }
"""

ETH = bytes.fromhex("0000000000aa0000000000010800")


def program(meta, parser, ingress, egress="", deparser="pkt.emit(hdr.ethernet); pkt.emit(hdr.tag);",
            verify="", compute=""):
    return HEADERS + f"""
struct metadata_t {{ {meta} }}
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {{
    {parser}
}}
control V(inout headers_t hdr, inout metadata_t meta) {{ apply {{ {verify} }} }}
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {{
    {ingress}
}}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {{
    apply {{ {egress} }}
}}
control C(inout headers_t hdr, inout metadata_t meta) {{ apply {{ {compute} }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ {deparser} }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


PARSE_ETH_TAG = """
    state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.etherType) {
        0x0800: parse_tag; default: accept; } }
    state parse_tag { pkt.extract(hdr.tag); transition accept; }
"""


def test_unparsed_payload_follows_emitted_headers_and_ttl_style_arithmetic_wraps():
    p = compile_source(program("", PARSE_ETH_TAG, """
        apply { standard_metadata.egress_spec = 3; hdr.tag.a = hdr.tag.a - 1; hdr.tag.b = hdr.tag.b + 1; }"""))
    out = p.new_pipeline().process(1, ETH + bytes([0, 0xFF]) + b"payload")
    assert out == [(3, ETH + bytes([0xFF, 0x00]) + b"payload")]


def test_parser_error_keeps_bytes_before_the_failing_extract_as_payload():
    p = compile_source(program("", PARSE_ETH_TAG, """
        apply {
            standard_metadata.egress_spec = 1;
            if (standard_metadata.parser_error == error.PacketTooShort) { standard_metadata.egress_spec = 2; }
            if (!hdr.tag.isValid()) { hdr.ethernet.src = 0xee; }
        }"""))
    out = p.new_pipeline().process(0, ETH + b"\x07")     # tag needs 2 bytes, 1 is there
    assert out == [(2, ETH[:6] + bytes.fromhex("0000000000ee") + ETH[12:] + b"\x07")]


def test_drop_by_mark_to_drop_and_mcast_grp_zeroed():
    p = compile_source(program("", PARSE_ETH_TAG, """
        apply { standard_metadata.mcast_grp = 5; mark_to_drop(standard_metadata); }"""))
    pl = p.new_pipeline()
    pl.set_mc_group(5, [(1, 0), (2, 0)])
    assert pl.process(0, ETH + b"\x00\x00") == []


def test_exit_stops_the_whole_ingress_and_return_only_the_action():
    p = compile_source(program("bit<8> x;", PARSE_ETH_TAG, """
        action a() { meta.x = 1; return; }
        apply {
            standard_metadata.egress_spec = 4;
            a();
            hdr.tag.a = meta.x;
            if (hdr.tag.b == 9) { exit; }
            hdr.tag.b = 0x42;
        }"""))
    pl = p.new_pipeline()
    assert pl.process(0, ETH + b"\x00\x01") == [(4, ETH + b"\x01\x42")]
    assert pl.process(0, ETH + b"\x00\x09") == [(4, ETH + b"\x01\x09")]


def test_resubmit_preserves_only_the_field_list_and_sets_instance_type_6():
    p = compile_source(program("@field_list(1) bit<8> kept; bit<8> lost;", PARSE_ETH_TAG, """
        apply {
            if (standard_metadata.instance_type == 0) {
                meta.kept = 7; meta.lost = 9;
                resubmit_preserving_field_list(1);
            } else {
                hdr.tag.a = meta.kept; hdr.tag.b = meta.lost;
                hdr.ethernet.etherType = (bit<16>) standard_metadata.instance_type;
                standard_metadata.egress_spec = 2;
            }
        }"""))
    out = p.new_pipeline().process(0, ETH + b"\x00\x00")
    assert out == [(2, ETH[:12] + b"\x00\x06" + b"\x07\x00")]


def test_e2e_clone_keeps_egress_headers_and_resets_metadata():
    p = compile_source(program("", PARSE_ETH_TAG, """
        apply { standard_metadata.egress_spec = 1; }""", egress="""
        if (standard_metadata.instance_type == 0) {
            hdr.tag.a = 0x11;
            clone(CloneType.E2E, 3);
            hdr.tag.b = 0x22;
        } else {
            hdr.tag.b = (bit<8>) standard_metadata.instance_type;
        }"""))
    pl = p.new_pipeline()
    pl.set_clone_session(3, [(5, 0)])
    out = pl.process(0, ETH + b"\x00\x00")
    assert out == [(1, ETH + b"\x11\x22"), (5, ETH + b"\x11\x02")]


def test_truncate_and_clone_session_truncation():
    p = compile_source(program("", PARSE_ETH_TAG, """
        apply { standard_metadata.egress_spec = 1; truncate(16); truncate(20); clone(CloneType.I2E, 4); }"""))
    pl = p.new_pipeline()
    pl.set_clone_session(4, [(2, 0)], truncate=6)
    out = dict(pl.process(0, ETH + b"\x01\x02" + b"x" * 20))
    assert out[1] == (ETH + b"\x01\x02")[:16]
    assert out[2] == ETH[:6]


def test_digest_is_delivered_with_struct_name_and_values():
    src = program("", PARSE_ETH_TAG, """
        apply { digest<learn_t>(1, {hdr.ethernet.src, standard_metadata.ingress_port}); }""")
    p = compile_source(src.replace("struct metadata_t", "struct learn_t { bit<48> src; bit<9> port; }\nstruct metadata_t"))
    pl = p.new_pipeline()
    got = []
    pl.digest_callback = lambda name, values: got.append((name, values))
    pl.process(6, ETH + b"\x00\x00")
    assert got == [("learn_t", (1, 6))]
    assert "learn_t" in p.compiled.digests


def test_each_pipeline_has_its_own_tables_and_registers():
    p = compile_source(program("", PARSE_ETH_TAG, """
        register<bit<32>>(4) seen;
        action fwd(bit<9> port) { standard_metadata.egress_spec = port; }
        table t { key = { hdr.ethernet.dst: exact; } actions = { fwd; NoAction; } }
        apply { seen.write(0, 5); t.apply(); }"""))
    a, b = p.new_pipeline(), p.new_pipeline()
    a.tables["I.t"].insert([Exact(0xAA)], ActionCall("I.fwd", {"port": 3}))
    assert a.process(0, ETH + b"\x00\x00") == [(3, ETH + b"\x00\x00")]
    assert b.process(0, ETH + b"\x00\x00") == [(0, ETH + b"\x00\x00")]
    assert a.registers["I.seen"].read(0) == 5
    assert b.registers["I.seen"].read(0) == 5
    b.registers["I.seen"].write(0, 1)
    assert a.registers["I.seen"].read(0) == 5


def test_each_pipeline_runs_its_own_copy_of_the_program_code():
    # The interpreter specializes a code object for the globals it last ran with; switches of one
    # fabric sharing code would undo each other's specializations on every frame.
    p = compile_source(program("", PARSE_ETH_TAG, "apply { standard_metadata.egress_spec = 1; }"))
    a, b = p.new_pipeline(), p.new_pipeline()
    functions = [name for name, v in a.namespace.items() if callable(v) and getattr(v, "__globals__", None) is a.namespace]
    assert functions
    for name in functions:
        assert a.namespace[name].__code__ is not b.namespace[name].__code__, name
        assert a.namespace[name].__code__.co_code == b.namespace[name].__code__.co_code, name
    assert a.process(0, ETH + b"\x00\x00") == b.process(0, ETH + b"\x00\x00") == [(1, ETH + b"\x00\x00")]


def test_header_stack_next_and_overflow_error():
    src = HEADERS.replace("struct headers_t { ethernet_t ethernet; tag_t tag; }",
                          "struct headers_t { ethernet_t ethernet; tag_t[2] tags; }") + """
struct metadata_t { }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition more; }
    state more { pkt.extract(hdr.tags.next); transition select(hdr.tags.last.a) { 0: accept; default: more; } }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (sm.parser_error == error.StackOutOfBounds) { sm.egress_spec = 2; }
        if (hdr.tags[1].isValid()) { hdr.tags[1].b = 0x55; }
    }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.tags); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    pl = compile_source(src).new_pipeline()
    assert pl.process(0, ETH + b"\x01\x00\x00\x00rest") == [(1, ETH + b"\x01\x00\x00\x55rest")]
    assert pl.process(0, ETH + b"\x01\x00\x02\x00\x03\x00") == [(2, ETH + b"\x01\x00\x02\x55\x03\x00")]


def test_stf_text_against_switch_basic_program():
    pl = compile_file(P4_DIR / "switch_basic.p4").new_pipeline()
    out = io.StringIO()
    rc = run_stf_text(pl, """
add forward standard_metadata.ingress_port:1 set_port(port:2)
packet 1 ffffffffffff 000000000001 0800 4500 0014 0000 0000 4011 0000 0a000001 0a000002
expect 2 ffffffffffff 000000000001 0800 4500 0014 0000 0000 4011 0000 0a000001 0a000002 $
""", out=out)
    assert rc == 0, out.getvalue()


def test_compile_errors_are_p4errors_with_location():
    with pytest.raises(P4Error) as e:
        compile_source(program("", PARSE_ETH_TAG, "apply { hdr.tag.a = hdr.ethernet.dst; }"),
                       filename="bad.p4")
    assert str(e.value).startswith("bad.p4:")
    assert "bit<48>" in str(e.value) and "^" in str(e.value)


def test_hash_leaves_out_fields_of_invalid_headers_like_bmv2():
    p = compile_source(program("bit<32> h;", PARSE_ETH_TAG, """
        apply {
            hash(meta.h, HashAlgorithm.identity, 32w0, { hdr.tag.a, hdr.ethernet.etherType }, 33w0x100000000);
            hdr.ethernet.src = (bit<48>) meta.h;
            standard_metadata.egress_spec = 1;
        }"""))
    pl = p.new_pipeline()
    with_tag = pl.process(0, ETH + b"\x12\x00")[0][1]
    assert with_tag[6:12] == (0x120800).to_bytes(6, "big")          # identity of 12 08 00
    eth_only = ETH[:12] + b"\x86\xdd"
    without_tag = pl.process(0, eth_only)[0][1]
    assert without_tag[6:12] == (0x86DD).to_bytes(6, "big")          # the tag's field left out


def test_function_like_macros_expand_with_arguments():
    src = program("", PARSE_ETH_TAG, """
        apply {
            standard_metadata.egress_spec = PORT_FOR(hdr.tag.a, 2);
            if (IS_TAGGED(hdr)) { hdr.tag.b = TWICE(TWICE(hdr.tag.b)); }
        }""")
    src = ("#define PORT_FOR(x, base) ((bit<9>)(x) + base)\n#define IS_TAGGED(h) (h.tag.isValid())\n"
           "#define TWICE(v) ((v) + (v))\n" + src)
    assert compile_source(src).new_pipeline().process(0, ETH + b"\x03\x05") == [(5, ETH + b"\x03\x14")]


def test_macros_paste_tokens_and_make_strings_as_cpp_does():
    # nsg-ethz p4-learning's count-min sketch declares its registers with `sketch##num`
    src = program("", PARSE_ETH_TAG, """
        COUNTER(0)
        COUNTER(1)
        NAMED(by "name") register<bit<8>>(1) unnamed;
        apply {
            BUMP(0, hdr.tag.a);
            BUMP(1, hdr.tag.b);
            standard_metadata.egress_spec = (bit<9>)(hdr.tag.a + WIDE(hdr.tag.b)[7:0]);
            unnamed.write(0, 1);
        }""")
    src = ("#define COUNTER(n) register<bit<8>>(4) count##n;\n"
           "#define BUMP(n, v) count##n.write(0, v + 1); count ## n.read(v, 0)\n"
           "#define WIDE(x) ((bit<16>)x)\n#define NAMED(x) @name(#x)\n" + src)
    compiled = compile_source(src)
    assert [r.preamble.name for r in compiled.p4info.registers] == ["I.count0", "I.count1", 'I.by "name"']
    assert compiled.new_pipeline().process(0, ETH + b"\x03\x05") == [(10, ETH + b"\x04\x06")]


@pytest.mark.parametrize("define, message", [
    ("#define BAD(x) # y\n", "'#' must be followed by a parameter"),
    ("#define BAD(x) ## x\n", "'##' cannot be at either end"),
])
def test_bad_paste_or_stringize_is_refused_on_its_line(define, message):
    with pytest.raises(P4Error) as e:
        compile_source(define + program("", PARSE_ETH_TAG, "apply { }"))
    assert message in str(e.value) and "<string>:1:" in str(e.value)
