"""Parser value sets (`value_set<T>(N) vs;` as a select case label): the engine compiles them,
matches packets against their members as BMv2's parse_vsets do, lists them in P4Info as p4c
does, and lets the control plane fill them (Python API, STF pvs_* commands, P4Runtime
ValueSetEntry)."""
import io

import grpc
import pytest
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from testbed.p4engine import P4Error, compile_source
from testbed.p4engine.stf import run_stf_text
from testbed.p4engine.tables import Exact, Lpm, Range, TableError, Ternary

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<8> kind; bit<8> val; }
struct headers_t { eth_t eth; tag_t tag; }
struct metadata_t { }
struct tag_key_t { bit<8> kind; @match(ternary) bit<8> val; }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    value_set<bit<16>>(4) tagged_types;
    @name("special") value_set<tag_key_t>(2) special_tags;
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) {
            0x0800: accept;
            tagged_types: parse_tag;
            default: accept;
        }
    }
    state parse_tag {
        pkt.extract(hdr.tag);
        transition select(hdr.tag.kind, hdr.tag.val) {
            special_tags: accept;
            default: no_match;
        }
    }
    state no_match { verify(false, error.NoMatch); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply {
        if (sm.parser_error == error.NoMatch) {
            sm.egress_spec = 3;
        } else if (hdr.tag.isValid()) {
            sm.egress_spec = 2;
            hdr.tag.val = hdr.tag.val + 1;
        } else {
            sm.egress_spec = 1;
        }
    }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.tag); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

TAGGED, SPECIAL = "P.tagged_types", "P.special"


def frame(ethertype, tag=b""):
    return bytes.fromhex("0000000000aa") + bytes.fromhex("000000000001") + ethertype.to_bytes(2, "big") + tag + b"data"


@pytest.fixture(scope="module")
def program():
    return compile_source(PROGRAM, "pvs.p4")


def test_a_value_set_matches_its_members_and_nothing_while_empty(program):
    pipeline = program.new_pipeline()
    tagged = frame(0x88B5, b"\x07\x10")
    # empty: the case matches nothing, the next one (default) is taken
    assert pipeline.process(0, tagged) == [(1, tagged)]
    pipeline.value_sets[TAGGED].add(0x88B5)
    pipeline.value_sets[SPECIAL].add((7, 0x10))
    assert pipeline.process(0, tagged) == [(2, frame(0x88B5, b"\x07\x11"))]
    # a case before the set still wins for its own value
    pipeline.value_sets[TAGGED].add(0x0800)
    assert pipeline.process(0, frame(0x0800, b"\x07\x10")) == [(1, frame(0x0800, b"\x07\x10"))]
    # removing the member restores the default transition
    pipeline.value_sets[TAGGED].remove(0x88B5)
    assert pipeline.process(0, tagged) == [(1, tagged)]


def test_no_member_matching_takes_the_default_transition(program):
    pipeline = program.new_pipeline()
    pipeline.value_sets[TAGGED].add(0x88B5)
    # the tag header is extracted, then select finds no member: the default state's
    # error.NoMatch, ingress runs with the header valid (BMv2 keeps what was extracted)
    assert pipeline.process(0, frame(0x88B5, b"\x09\x10")) == [(3, frame(0x88B5, b"\x09\x10"))]


def test_struct_members_match_every_field_ternary_fields_under_their_mask(program):
    pipeline = program.new_pipeline()
    pipeline.value_sets[TAGGED].add(0x88B5)
    pipeline.value_sets[SPECIAL].replace([(Exact(7), Ternary(0x10, 0xF0))])
    assert pipeline.process(0, frame(0x88B5, b"\x07\x1e"))[0][0] == 2
    assert pipeline.process(0, frame(0x88B5, b"\x07\x2e"))[0][0] == 3      # val outside the mask
    assert pipeline.process(0, frame(0x88B5, b"\x08\x1e"))[0][0] == 3      # kind differs
    pipeline.value_sets[SPECIAL].replace([(8, None)])                     # any val
    assert pipeline.process(0, frame(0x88B5, b"\x08\xff"))[0][0] == 2


def test_control_plane_rules_duplicates_size_and_kinds(program):
    pipeline = program.new_pipeline()
    special = pipeline.value_sets[SPECIAL]
    with pytest.raises(TableError) as e:
        special.replace([(1, 2), (1, 2)])
    assert e.value.code == "ALREADY_EXISTS"
    with pytest.raises(TableError) as e:
        special.replace([(1, 1), (1, 2), (1, 3)])
    assert e.value.code == "RESOURCE_EXHAUSTED" and special.members() == []
    with pytest.raises(TableError) as e:
        special.replace([(Range(1, 2), 5)])           # field kind is exact
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(TableError) as e:
        special.add((256, 0))                          # kind is bit<8>
    assert e.value.code == "INVALID_ARGUMENT"
    # simple_switch_CLI's pvs_add: a duplicate is ignored, and BMv2 checks no size
    tagged = pipeline.value_sets[TAGGED]
    for value in (1, 2, 3, 4, 5, 5):
        tagged.add(value)
    assert [m[0].value for m in tagged.members()] == [1, 2, 3, 4, 5]
    tagged.clear()
    assert tagged.members() == []


def test_p4info_lists_used_value_sets_as_p4c_does(program):
    p4info = program.p4info
    by_name = {v.preamble.name: v for v in p4info.value_sets}
    assert list(by_name) == [TAGGED, SPECIAL]
    tagged, special = by_name[TAGGED], by_name[SPECIAL]
    assert tagged.preamble.id >> 24 == p4info_pb2.P4Ids.VALUE_SET and tagged.size == 4
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in tagged.match] == [
        (1, "", 16, p4info_pb2.MatchField.EXACT)]
    assert special.preamble.alias == "special" and special.size == 2
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in special.match] == [
        (1, "kind", 8, p4info_pb2.MatchField.EXACT), (2, "val", 8, p4info_pb2.MatchField.TERNARY)]


def test_a_non_exact_match_field_is_warned_about_as_p4c_bm2_ss_does(program):
    warnings = [w for w in program.compiled.warnings if "value set" in w[3]]
    assert [(w[1], w[2]) for w in warnings] == [(8, 33)]
    assert "BMv2 matches field 'val' exactly" in warnings[0][3]


def test_an_unused_value_set_is_left_out_like_p4c_does():
    src = PROGRAM.replace("value_set<bit<16>>(4) tagged_types;",
                          "value_set<bit<16>>(4) tagged_types; value_set<bit<4>>(1) unused;")
    program = compile_source(src, "pvs.p4")
    assert [v.preamble.name for v in program.p4info.value_sets] == [TAGGED, SPECIAL]
    assert list(program.new_pipeline().value_sets) == [TAGGED, SPECIAL]


SUB_PARSER = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header b_t { bit<8> v; }
struct headers_t { eth_t eth; b_t b1; b_t b2; }
struct metadata_t { }
parser Sub(packet_in pkt, inout b_t b) {
    value_set<bit<8>>(8) firsts;
    state start { transition select(pkt.lookahead<bit<8>>()) { firsts: take; default: accept; } }
    state take { pkt.extract(b); transition accept; }
}
parser P(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    Sub() s1;
    Sub() s2;
    value_set<bit<16>>(2) own;
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) { own: subs; default: accept; }
    }
    state subs { s1.apply(pkt, hdr.b1); s2.apply(pkt, hdr.b2); transition accept; }
}
control V(inout headers_t hdr, inout metadata_t meta) { apply { } }
control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = (bit<9>)(hdr.b1.isValid() ? 1w1 : 1w0) + (hdr.b2.isValid() ? 9w2 : 9w0); }
}
control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout metadata_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_each_sub_parser_instance_has_its_own_set_listed_after_its_parents():
    program = compile_source(SUB_PARSER, "sub.p4")
    names = [v.preamble.name for v in program.p4info.value_sets]
    assert names == ["P.own", "P.s1.firsts", "P.s2.firsts"]
    assert [v.preamble.alias for v in program.p4info.value_sets] == ["own", "s1.firsts", "s2.firsts"]
    pipeline = program.new_pipeline()
    data = frame(0x1234, b"\x05\x06")
    assert pipeline.process(0, data)[0][0] == 0
    pipeline.value_sets["P.own"].add(0x1234)
    pipeline.value_sets["P.s2.firsts"].add(5)       # s1 takes nothing; s2 sees 5 first
    assert pipeline.process(0, data)[0][0] == 2
    pipeline.value_sets["P.s1.firsts"].add(5)       # s1 takes 5, s2 then sees 6
    assert pipeline.process(0, data)[0][0] == 1
    pipeline.value_sets["P.s2.firsts"].add(6)
    assert pipeline.process(0, data)[0][0] == 3


def test_stf_pvs_commands_fill_a_set_with_concatenated_values(program):
    stf = """
packet 0 0000000000aa 000000000001 88b5 0710 64617461
expect 1 0000000000aa 000000000001 88b5 0710 64617461
pvs_add tagged_types 0x88b5
pvs_add special 0x0710
packet 0 0000000000aa 000000000001 88b5 0710 64617461
expect 2 0000000000aa 000000000001 88b5 0711 64617461
pvs_get special
pvs_remove special 0x0710
packet 0 0000000000aa 000000000001 88b5 0710 64617461
expect 3 0000000000aa 000000000001 88b5 0710 64617461
pvs_clear tagged_types
packet 0 0000000000aa 000000000001 88b5 0710 64617461
expect 1 0000000000aa 000000000001 88b5 0710 64617461
"""
    out = io.StringIO()
    assert run_stf_text(program.new_pipeline(), stf, out=out, filename="pvs.stf") == 0, out.getvalue()
    assert "P.special = {(0x7, 0x10)}" in out.getvalue()


def test_stf_pvs_add_of_a_value_wider_than_the_set_fails_the_line(program):
    out = io.StringIO()
    assert run_stf_text(program.new_pipeline(), "pvs_add special 0x10000\n", out=out, filename="pvs.stf") == 1
    assert "pvs.stf:1: error" in out.getvalue()


# ------------------------------------------------------------------ P4Runtime

@pytest.fixture
def p4rt(program):
    from test_p4rt_hardening import ELECTION, Stream
    from test_p4rt_server import free_port
    from testbed.p4rt.server import P4RuntimeServer
    from testbed.switch.datapath import Switch
    switch = Switch({})
    addr = f"127.0.0.1:{free_port()}"
    server = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    server.load_program(program)
    stream = Stream(addr)
    assert stream.arbitrate(election=ELECTION).arbitration.status.code == code_pb2.OK
    channel = grpc.insecure_channel(addr)
    yield {"stub": p4runtime_pb2_grpc.P4RuntimeStub(channel), "server": server,
           "ids": {v.preamble.name: v.preamble.id for v in program.p4info.value_sets}}
    channel.close()
    stream.close()
    server.stop()
    switch.close()


def _modify(value_set_id, members, op=p4runtime_pb2.Update.MODIFY):
    update = p4runtime_pb2.Update(type=op)
    entry = update.entity.value_set_entry
    entry.value_set_id = value_set_id
    for fields in members:
        member = entry.members.add()
        for field_id, kind, values in fields:
            fm = member.match.add(field_id=field_id)
            if kind == "exact":
                fm.exact.value = values
            else:
                fm.ternary.value, fm.ternary.mask = values
    return update


def _read(stub, value_set_id=0):
    req = p4runtime_pb2.ReadRequest(device_id=1)
    req.entities.add().value_set_entry.value_set_id = value_set_id
    return [e.value_set_entry for resp in stub.Read(req, timeout=20) for e in resp.entities]


def test_p4runtime_modify_replaces_the_set_and_read_returns_it(p4rt):
    from test_p4rt_hardening import _write
    stub, ids = p4rt["stub"], p4rt["ids"]
    pipeline = p4rt["server"].installed.pipeline
    _write(stub, _modify(ids[TAGGED], [[(1, "exact", b"\x88\xb5")], [(1, "exact", b"\x88\xb6")]]),
           _modify(ids[SPECIAL], [[(1, "exact", b"\x07"), (2, "ternary", (b"\x10", b"\xf0"))]]))
    assert pipeline.process(0, frame(0x88B6, b"\x07\x1f")) == [(2, frame(0x88B6, b"\x07\x20"))]
    read = {e.value_set_id: e for e in _read(stub)}
    assert [[m.match[0].exact.value for m in read[ids[TAGGED]].members]] == [[b"\x88\xb5", b"\x88\xb6"]]
    special = read[ids[SPECIAL]].members[0].match
    assert (special[0].exact.value, special[1].ternary.value, special[1].ternary.mask) == (b"\x07", b"\x10", b"\xf0")
    # MODIFY with the other members replaces the whole set; an empty one empties it
    _write(stub, _modify(ids[TAGGED], [[(1, "exact", b"\x99\x99")]]))
    assert pipeline.process(0, frame(0x88B6, b"\x07\x1f"))[0][0] == 1
    _write(stub, _modify(ids[TAGGED], []))
    assert [len(e.members) for e in _read(stub, ids[TAGGED])] == [0]


def test_p4runtime_value_set_errors_follow_the_spec(p4rt):
    from test_p4rt_hardening import _codes, _write
    stub, ids = p4rt["stub"], p4rt["ids"]
    too_many = [[(1, "exact", bytes([0x10, i]))] for i in range(5)]
    duplicate = [[(1, "exact", b"\x01")], [(1, "exact", b"\x00\x01")]]
    with pytest.raises(grpc.RpcError) as e:
        _write(stub, _modify(ids[TAGGED], [[(1, "exact", b"\x01")]], op=p4runtime_pb2.Update.INSERT),
               _modify(ids[TAGGED], too_many), _modify(ids[TAGGED], duplicate),
               _modify(ids[SPECIAL], [[(2, "ternary", (b"\x10", b"\xf0"))]]),      # exact field missing
               _modify(ids[TAGGED], [[(1, "exact", b"\x01\x00\x00")]]),
               _modify(0x03000001, []))
    # (the last: a value set id the P4Info lacks, INVALID_ARGUMENT as PI answers unknown ids)
    assert _codes(e.value) == [code_pb2.INVALID_ARGUMENT, code_pb2.RESOURCE_EXHAUSTED, code_pb2.ALREADY_EXISTS,
                               code_pb2.INVALID_ARGUMENT, code_pb2.OUT_OF_RANGE, code_pb2.INVALID_ARGUMENT]
    assert all(len(entry.members) == 0 for entry in _read(stub))


# ------------------------------------------------------------------ what is refused

def _refused(src):
    with pytest.raises(P4Error) as e:
        compile_source(src, "bad.p4")
    return str(e.value).splitlines()[0]


@pytest.mark.parametrize("change, where, message", [
    (("select(hdr.eth.type) {\n            0x0800", "select(hdr.eth.dst) {\n            0x0800"), "bad.p4:16:13",
     "select key of type bit<48> does not match value set 'P.tagged_types'"),
    (("select(hdr.tag.kind, hdr.tag.val)", "select(hdr.tag.kind)"), "bad.p4:23:13",
     "select has 1 key(s) but value set 'P.special' has 2 field(s)"),
    (("value_set<bit<16>>(4)", "value_set<bit<16>>(sm.ingress_port)"), "bad.p4:10:24",
     "value_set size must be a compile-time constant"),
    (("value_set<bit<16>>(4)", "value_set<int>(4)"), "bad.p4:10:15", "int: illegal type for value_set element type"),
    (("struct tag_key_t { bit<8> kind; @match(ternary) bit<8> val; }",
      "struct in_t { bit<8> val; } struct tag_key_t { bit<8> kind; in_t val; }"), "bad.p4:11:32",
     "this version of P4Runtime requires that all the fields of a struct be of type bit<W>"),
    (("@match(ternary)", "@match(selector)"), "bad.p4:8:33", "match kind 'selector' of field 'val' is not supported"),
    (("tagged_types: parse_tag;", "tagged_types &&& 0xff00: parse_tag;"), "bad.p4:16:13",
     "value set 'tagged_types' can only be a select case's whole label"),
    (("control V(inout headers_t hdr, inout metadata_t meta) { apply { } }",
      "control V(inout headers_t hdr, inout metadata_t meta) { value_set<bit<8>>(1) v; apply { } }"),
     "bad.p4:29:57", "a value_set can only be declared among a parser's locals"),
])
def test_misuses_are_refused_with_their_location(change, where, message):
    old, new = change
    assert old in PROGRAM
    first = _refused(PROGRAM.replace(old, new, 1))
    assert first.startswith(where + ": error: ") and message in first, first
