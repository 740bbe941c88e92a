"""P4Info generation (testbed/p4engine/p4info.py) from compiler metadata.

The metadata objects here are built by hand with the fields compiler.py's TableInfo,
ActionInfo, ExternInfo, DigestInfo and controller_headers carry, so the P4Info rules
(ids, scopes, units, hidden objects, aliases) are checked independently of the compiler.
Known ids are the ones p4c-bm2-ss writes for the same names (e.g. NoAction = 21257015).
"""
from collections import OrderedDict
from types import SimpleNamespace as NS

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from testbed.p4engine import p4info as P
from testbed.p4engine.errors import Loc, P4Error
from testbed.p4engine.p4types import BitT, HeaderT
from testbed.p4engine.syntax import Node

HERE = Loc("prog.p4", 1, 1)
CORE = Loc("/x/include/core.p4", 1, 1)


def anno(name, *ints):
    return Node("annotation", HERE, name=name, args=[Node("int", HERE, value=v, width=None, signed=False)
                                                      for v in ints])


def anno_str(name, text):
    return Node("annotation", HERE, name=name, args=[Node("string", HERE, value=text)])


def action(name, params=(), annos=(), loc=HERE, param_annos=None):
    param_nodes = [Node("param", loc, name=p, direction=None, annos=(param_annos or {}).get(p, []))
                   for p, _ in params]
    return NS(name=name, annos=list(annos), decl=Node("action", loc, params=param_nodes, annos=list(annos)),
              runtime_params=list(params))


def extern(name, type_name, size=0, kind=None, width=None, annos=(), signed=False):
    return NS(name=name, type_name=type_name, size=size, kind_arg=kind, width=width, annos=list(annos),
              loc=HERE, obj=NS(signed=signed))


def table(name, keys, actions, default=None, const_default=False, size=1024, implementation=None,
          direct_counter=None, direct_meter=None, annos=(), key_annos=None, entries=None):
    props = [Node("tp_key", HERE, keys=[Node("key_elem", HERE, match_kind=k[1], annos=(key_annos or {}).get(k[0], []))
                                        for k in keys])]
    if entries is not None:
        props.append(Node("tp_entries", HERE, const=entries[0], entries=entries[1]))
    return NS(name=name, keys=[(n, mk, w, None) for n, mk, w in keys], actions=actions, size=size,
              default_action=default, const_default=const_default, implementation=implementation,
              direct_counter=direct_counter, direct_meter=direct_meter, annos=list(annos),
              decl=Node("table", HERE, props=props), const_entries=None, idle_timeout=False)


def compiled(tables=(), actions=(), externs=(), digests=(), headers=(), called=()):
    return NS(tables=OrderedDict((t.name, t) for t in tables), actions=OrderedDict((a.name, a) for a in actions),
              externs=OrderedDict((e.name, e) for e in externs),
              digests=OrderedDict((d.name, d) for d in digests), controller_headers=list(headers),
              called_actions=set(called))


def by_name(items):
    return {x.preamble.name: x for x in items}


# ---------------------------------------------------------------------------------- ids
def test_ids_are_p4c_hashes_with_the_resource_prefix():
    noaction = action("NoAction", loc=CORE)
    drop = action("IngressI.drop")
    selector = extern("IngressI.as", "action_selector", size=1024, kind="crc16")
    t = table("IngressI.indirect_ws", [("meta.hashed", "exact", 16)],
              [(drop, []), (noaction, [])], default=(noaction, {}), implementation=selector)
    info = P.build_p4info(compiled([t], [noaction, drop], [selector]))
    assert by_name(info.actions)["NoAction"].preamble.id == 21257015
    assert by_name(info.actions)["IngressI.drop"].preamble.id == 23455883
    assert info.tables[0].preamble.id == 38116258
    assert info.action_profiles[0].preamble.id == 291652621
    assert {x.preamble.id >> 24 for x in info.actions} == {p4info_pb2.P4Ids.ACTION}


def test_explicit_ids_get_their_prefix_and_push_colliding_hashes_up():
    hashed_id = (1 << 24) | (P.jenkins_hash("c.b") & 0xFFFFFF)
    a = action("c.a", annos=[anno("id", hashed_id & 0xFFFFFF)])   # @id without prefix
    b = action("c.b")
    info = P.build_p4info(compiled(actions=[a, b], called=["c.a", "c.b"]))
    ids = {x.preamble.name: x.preamble.id for x in info.actions}
    assert ids["c.a"] == hashed_id
    assert ids["c.b"] == hashed_id + 1


def test_wrong_prefix_and_duplicate_ids_are_errors():
    with pytest.raises(P4Error, match="wrong 8-bit prefix"):
        P.build_p4info(compiled(actions=[action("a", annos=[anno("id", 0x02000001)])], called=["a"]))
    with pytest.raises(P4Error, match="also given to a"):
        P.build_p4info(compiled(actions=[action("a", annos=[anno("id", 5)]), action("b", annos=[anno("id", 5)])],
                                called=["a", "b"]))


def test_field_ids_count_from_one_and_skip_explicit_ones():
    assert P.field_ids([None, None, None]) == [1, 2, 3]
    assert P.field_ids([None, [anno("id", 1)], None]) == [2, 1, 3]
    assert P.field_ids([[anno("id", 7)], None]) == [7, 2]
    with pytest.raises(P4Error):
        P.field_ids([[anno("id", 0)]])


def test_aliases_are_shortest_unique_suffixes():
    aliases = P.shortest_unique_suffixes(["d.a.c", "e.b.c", "x.y", "NoAction"])
    assert aliases == {"d.a.c": "a.c", "e.b.c": "b.c", "x.y": "y", "NoAction": "NoAction"}


# ---------------------------------------------------------------------------------- tables
def test_table_fields_refs_scopes_defaults_and_resources():
    noaction = action("NoAction", loc=CORE)
    fwd = action("MyIngress.fwd", [("port", 9), ("mac", 48)], param_annos={"mac": [anno("id", 1)]})
    drop = action("MyIngress.drop")
    counter = extern("MyIngress.hits", "direct_counter", kind="packets_and_bytes")
    meter = extern("MyIngress.rate", "direct_meter", kind="bytes")
    t = table("MyIngress.acl", [("hdr.ipv4.dstAddr", "lpm", 32), ("hdr.udp.dstPort", "range", 16),
                                ("hdr.ipv4.$valid$", "exact", 1)],
              [(fwd, []), (drop, [anno("defaultonly")]), (noaction, [anno("tableonly")])],
              default=(fwd, {"port": 3, "mac": 0x0A}), const_default=True, size=77,
              direct_counter=counter, direct_meter=meter,
              key_annos={"hdr.udp.dstPort": [anno("id", 9)]}, entries=(True, [object()]))
    info = P.build_p4info(compiled([t], [noaction, fwd, drop], [counter, meter]))
    ids = {x.preamble.name: x.preamble.id for x in list(info.actions) + list(info.direct_counters)
           + list(info.direct_meters)}
    tab = info.tables[0]
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in tab.match_fields] == [
        (1, "hdr.ipv4.dstAddr", 32, p4info_pb2.MatchField.LPM),
        (9, "hdr.udp.dstPort", 16, p4info_pb2.MatchField.RANGE),
        (2, "hdr.ipv4.$valid$", 1, p4info_pb2.MatchField.EXACT)]
    scopes = {r.id: r.scope for r in tab.action_refs}
    assert scopes == {ids["MyIngress.fwd"]: p4info_pb2.ActionRef.TABLE_AND_DEFAULT,
                      ids["MyIngress.drop"]: p4info_pb2.ActionRef.DEFAULT_ONLY,
                      ids["NoAction"]: p4info_pb2.ActionRef.TABLE_ONLY}
    assert tab.const_default_action_id == ids["MyIngress.fwd"]
    args = {a.param_id: a.value for a in tab.initial_default_action.arguments}
    assert args == {2: b"\x00\x03", 1: b"\x00\x00\x00\x00\x00\x0a"}
    assert set(tab.direct_resource_ids) == {ids["MyIngress.hits"], ids["MyIngress.rate"]}
    assert tab.size == 77 and tab.is_const_table and tab.has_initial_entries
    assert info.direct_counters[0].spec.unit == p4info_pb2.CounterSpec.BOTH
    assert info.direct_counters[0].direct_table_id == tab.preamble.id
    assert info.direct_meters[0].spec.unit == p4info_pb2.MeterSpec.BYTES
    fwd_info = by_name(info.actions)["MyIngress.fwd"]
    assert [(p.id, p.name, p.bitwidth) for p in fwd_info.params] == [(2, "port", 9), (1, "mac", 48)]


def test_actions_shown_are_the_listed_the_default_and_the_directly_called():
    noaction = action("NoAction", loc=CORE)
    a = action("C.a")
    unused = action("C.unused")
    called = action("C.called", [("flag", 1)])
    t = table("C.t", [("x", "exact", 8)], [(a, [])], default=(a, {}))
    info = P.build_p4info(compiled([t], [noaction, a, unused, called]))
    assert [x.preamble.name for x in info.actions] == ["C.a"]   # p4c drops unused ones
    assert info.tables[0].const_default_action_id == 0
    assert info.tables[0].initial_default_action.action_id == info.actions[0].preamble.id
    assert not info.tables[0].is_const_table
    shown = by_name(P.build_p4info(compiled([t], [noaction, a, unused, called], called=["C.called"])).actions)
    assert set(shown) == {"C.a", "C.called"}
    assert not shown["C.called"].params          # the call binds them: not control-plane params


def test_implicit_noaction_default_is_a_defaultonly_ref():
    noaction = action("NoAction", loc=CORE)
    a = action("C.a")
    t = table("C.t", [("x", "exact", 8)], [(a, [])], default=(noaction, {}))
    info = P.build_p4info(compiled([t], [noaction, a]))
    ids = {x.preamble.name: x.preamble.id for x in info.actions}
    assert [(r.id, r.scope) for r in info.tables[0].action_refs] == [
        (ids["C.a"], p4info_pb2.ActionRef.TABLE_AND_DEFAULT), (21257015, p4info_pb2.ActionRef.DEFAULT_ONLY)]
    assert info.tables[0].initial_default_action.action_id == 21257015


def test_hidden_tables_and_actions_are_left_out():
    shown = action("C.shown")
    hidden = action("C.hidden", annos=[anno("hidden")])
    t1 = table("C.t1", [("x", "exact", 8)], [(shown, []), (hidden, [])])
    t2 = table("C.t2", [("x", "exact", 8)], [(shown, [])], annos=[anno("hidden")])
    info = P.build_p4info(compiled([t1, t2], [shown, hidden]))
    assert [x.preamble.name for x in info.tables] == ["C.t1"]
    assert [x.preamble.name for x in info.actions] == ["C.shown"]
    assert len(info.tables[0].action_refs) == 1


def test_tables_nothing_applies_are_left_out():
    a = action("C.a")
    used = table("C.used", [("x", "exact", 8)], [(a, [])])
    unused = table("C.unused", [("x", "exact", 8)], [(a, [])])
    c = compiled([used, unused], [a])
    assert [x.preamble.name for x in P.build_p4info(c).tables] == ["C.used", "C.unused"]  # no usage info
    c.applied_tables = {"C.used"}
    assert [x.preamble.name for x in P.build_p4info(c).tables] == ["C.used"]


# ---------------------------------------------------------------------------------- externs
def test_profiles_counters_meters_registers():
    a = action("C.a", [("p", 9)])
    selector = extern("C.sel", "action_selector", size=64, kind="crc16",
                      annos=[anno("max_group_size", 8), anno_str("selector_size_semantics", "sum_of_members"),
                             anno("max_member_weight", 4000)])
    profile = extern("C.prof", "action_profile", size=32, annos=[anno("max_group_size", 8)])
    t1 = table("C.t1", [("x", "exact", 8)], [(a, [])], implementation=selector)
    t2 = table("C.t2", [("x", "exact", 8)], [(a, [])], implementation=selector)
    t3 = table("C.t3", [("x", "exact", 8)], [(a, [])], implementation=profile)
    externs = [selector, profile,
               extern("C.pkts", "counter", size=10, kind="packets"),
               extern("C.both", "counter", size=4, kind="packets_and_bytes"),
               extern("C.m", "meter", size=2, kind="packets"),
               extern("C.r", "register", size=16, width=48),
               extern("C.s", "register", size=1, width=8, signed=True),
               extern("C.orphan", "direct_counter", kind="packets")]   # on no table: not exposed
    info = P.build_p4info(compiled([t1, t2, t3], [a], externs))
    tids = {t.preamble.name: t.preamble.id for t in info.tables}
    profiles = by_name(info.action_profiles)
    assert profiles["C.sel"].with_selector and profiles["C.sel"].size == 64
    assert profiles["C.sel"].max_group_size == 8
    assert list(profiles["C.sel"].table_ids) == [tids["C.t1"], tids["C.t2"]]
    assert profiles["C.sel"].sum_of_members.max_member_weight == 4000
    assert not profiles["C.prof"].with_selector and list(profiles["C.prof"].table_ids) == [tids["C.t3"]]
    assert profiles["C.prof"].max_group_size == 0          # meaningless without a selector (p4c)
    assert {t.preamble.name: t.implementation_id for t in info.tables} == {
        "C.t1": profiles["C.sel"].preamble.id, "C.t2": profiles["C.sel"].preamble.id,
        "C.t3": profiles["C.prof"].preamble.id}
    counters = by_name(info.counters)
    assert (counters["C.pkts"].spec.unit, counters["C.pkts"].size) == (p4info_pb2.CounterSpec.PACKETS, 10)
    assert counters["C.both"].spec.unit == p4info_pb2.CounterSpec.BOTH
    assert info.meters[0].spec.unit == p4info_pb2.MeterSpec.PACKETS and info.meters[0].size == 2
    regs = by_name(info.registers)
    assert regs["C.r"].type_spec.bitstring.bit.bitwidth == 48 and regs["C.r"].size == 16
    assert regs["C.s"].type_spec.bitstring.int.bitwidth == 8
    assert not info.direct_counters
    assert {x.preamble.id >> 24 for x in info.counters} == {p4info_pb2.P4Ids.COUNTER}
    assert regs["C.r"].preamble.id >> 24 == p4info_pb2.P4Ids.REGISTER


def test_bad_counter_unit_is_a_p4_error():
    with pytest.raises(P4Error, match="unknown unit"):
        P.build_p4info(compiled(externs=[extern("C.c", "counter", size=1, kind="furlongs")]))


def test_digests_and_controller_headers():
    digest = NS(name="learn_t", type=object(), fields=[("srcAddr", 48), ("port", 9)])
    listed = NS(name="digest_0", type=None, fields=[("field_0", 48), ("field_1", 9)])
    packet_in = HeaderT("packet_in_header_t", [("ingress_port", BitT(9)), ("pad", BitT(7))],
                        {"pad": [anno("hidden")]})
    packet_out = HeaderT("packet_out_header_t", [("egress_port", BitT(9)), ("mcast", BitT(7))],
                         {"egress_port": [anno("id", 2)]})
    info = P.build_p4info(compiled(digests=[digest, listed], headers=[("packet_in", packet_in, [anno("controller_header")]),
                                                               ("packet_out", packet_out, [])]))
    d = info.digests[0]
    assert d.preamble.name == "learn_t" and d.preamble.id >> 24 == p4info_pb2.P4Ids.DIGEST
    assert d.type_spec.struct.name == "learn_t"
    members = info.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in members] == [("srcAddr", 48), ("port", 9)]
    t = info.digests[1].type_spec          # a list of fields with no type: a tuple, as p4c writes it
    assert [m.bitstring.bit.bitwidth for m in t.tuple.members] == [48, 9]
    assert "digest_0" not in info.type_info.structs
    headers = by_name(info.controller_packet_metadata)
    assert headers["packet_in"].preamble.id == (4 << 24) | (P.jenkins_hash("packet_in_header_t") & 0xFFFFFF)
    assert [(m.id, m.name, m.bitwidth) for m in headers["packet_in"].metadata] == [(1, "ingress_port", 9)]
    assert [(m.id, m.name) for m in headers["packet_out"].metadata] == [(2, "egress_port"), (3, "mcast")]   # p4c skips past an @id


# ---------------------------------------------------------------------------------- consumers
def _sample_info():
    noaction = action("NoAction", loc=CORE)
    fwd = action("MyIngress.fwd", [("port", 9)])
    t = table("MyIngress.fwd_table", [("standard_metadata.ingress_port", "exact", 9)],
              [(fwd, []), (noaction, [])], default=(noaction, {}))
    reg = extern("MyIngress.seen", "register", size=4, width=32)
    return P.build_p4info(compiled([t], [noaction, fwd], [reg]))


@pytest.mark.parametrize("fmt", P.FORMATS)
def test_serialised_forms_parse_back_identically(fmt):
    from google.protobuf import json_format
    info = _sample_info()
    data = P.serialize(info, fmt)
    back = p4info_pb2.P4Info()
    if fmt == "text":
        text_format.Parse(data.decode(), back)
    elif fmt == "binary":
        back.ParseFromString(data)
    else:
        json_format.Parse(data.decode(), back)
    assert back == info


def test_p4runtime_shell_and_the_server_index_read_it():
    from p4runtime_sh.context import Context, P4Type

    from testbed.p4rt.p4info import P4InfoIndex
    info = _sample_info()
    ctx = Context()
    ctx.set_p4info(text_format.Parse(P.serialize(info).decode(), p4info_pb2.P4Info()))
    assert ctx.get_obj_id(P4Type.table, "fwd_table") == info.tables[0].preamble.id
    assert ctx.get_param_id("fwd", "port") == 1
    assert ctx.get_mf_id("MyIngress.fwd_table", "standard_metadata.ingress_port") == 1
    index = P4InfoIndex(info)
    table = index.table_by_name["MyIngress.fwd_table"]
    assert table.match_fields[0].kind == "exact" and not table.needs_priority
    assert index.action_by_name["MyIngress.fwd"].param_by_name["port"].bitwidth == 9
    assert index.registers[info.registers[0].preamble.id].size == 4


# ---------------------------------------------------------------------------------- real programs
FULL = """#include <core.p4>
#include <v1model.p4>
@controller_header("packet_in") header packet_in_t { bit<9> ingress_port; bit<7> _pad; }
@controller_header("packet_out") header packet_out_t { @id(2) bit<9> egress_port; bit<7> _pad; }
header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct learn_t { bit<48> srcAddr; bit<9> port; }
struct headers_t { packet_out_t packet_out; ethernet_t ethernet; }
struct meta_t { bit<16> hash; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control V(inout headers_t hdr, inout meta_t meta) { apply { } }
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) hits;
    @max_group_size(16) action_selector(HashAlgorithm.crc16, 32w128, 32w14) sel;
    register<bit<32>>(8) seen;
    @id(0x01000042) action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action learn() { digest<learn_t>(1, { hdr.ethernet.srcAddr, sm.ingress_port }); }
    @name("smac") table src_mac {
        key = { hdr.ethernet.srcAddr: exact @name("mac"); }
        actions = { learn; @defaultonly NoAction; }
        counters = hits;
        const default_action = NoAction();
    }
    table ecmp {
        key = { hdr.ethernet.dstAddr: lpm; hdr.ethernet.etherType: selector; }
        actions = { fwd; drop; }
        implementation = sel;
        size = 64;
    }
    table unused { key = { hdr.ethernet.etherType: exact; } actions = { drop; } }
    apply {
        src_mac.apply();
        ecmp.apply();
        seen.write(0, 1);
        if (hdr.ethernet.etherType == 0) { drop(); }
    }
}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_a_compiled_program_gives_what_p4c_would():
    from testbed.p4engine import compile_source
    info = compile_source(FULL, "full.p4").p4info

    def pid(prefix, name):
        return (prefix << 24) | (P.jenkins_hash(name) & 0xFFFFFF)
    tables = by_name(info.tables)
    assert set(tables) == {"I.smac", "I.ecmp"}                        # 'unused' is never applied
    smac, ecmp = tables["I.smac"], tables["I.ecmp"]
    assert smac.preamble.id == pid(2, "I.smac") and smac.preamble.alias == "smac"
    assert [(m.name, m.bitwidth) for m in smac.match_fields] == [("mac", 48)]
    assert smac.const_default_action_id == 21257015
    assert {r.id: r.scope for r in smac.action_refs}[21257015] == p4info_pb2.ActionRef.DEFAULT_ONLY
    hits = info.direct_counters[0]
    assert hits.preamble.name == "I.hits" and list(smac.direct_resource_ids) == [hits.preamble.id]
    assert hits.direct_table_id == smac.preamble.id and hits.spec.unit == p4info_pb2.CounterSpec.BOTH
    assert [(m.name, m.match_type) for m in ecmp.match_fields] == [("hdr.ethernet.dstAddr", p4info_pb2.MatchField.LPM)]
    assert ecmp.size == 64
    sel = info.action_profiles[0]
    assert (sel.preamble.name, sel.with_selector, sel.size, sel.max_group_size) == ("I.sel", True, 128, 16)
    assert ecmp.implementation_id == sel.preamble.id and list(sel.table_ids) == [ecmp.preamble.id]
    actions = by_name(info.actions)
    assert actions["I.fwd"].preamble.id == 0x01000042
    assert [(p.id, p.name, p.bitwidth) for p in actions["I.fwd"].params] == [(1, "port", 9)]
    assert "I.drop" in actions and not actions["I.drop"].params      # listed by ecmp and called directly
    assert info.registers[0].preamble.name == "I.seen" and info.registers[0].size == 8
    assert info.registers[0].type_spec.bitstring.bit.bitwidth == 32
    assert info.digests[0].preamble.name == "learn_t"
    assert [(m.name, m.type_spec.bitstring.bit.bitwidth)
            for m in info.type_info.structs["learn_t"].members] == [("srcAddr", 48), ("port", 9)]
    headers = by_name(info.controller_packet_metadata)
    assert headers["packet_in"].preamble.id == pid(4, "packet_in_t")
    assert [(m.id, m.name, m.bitwidth) for m in headers["packet_in"].metadata] == [(1, "ingress_port", 9),
                                                                                 (2, "_pad", 7)]
    assert [(m.id, m.name) for m in headers["packet_out"].metadata] == [(2, "egress_port"), (3, "_pad")]


def test_a_name_in_any_script_reaches_p4info_as_written():
    # p4c keeps an @name's UTF-8 text; escapes (\n, \", \x41) are still decoded, one at a time
    from testbed.p4engine import compile_source
    source = FULL.replace('@name("smac") table src_mac', '@name("mac\\x41\\\\\u25d5\u203f\u25d5\U0001F600\u30c4") table src_mac')
    info = compile_source(source, "named.p4").p4info
    name = "I.macA\\\u25d5\u203f\u25d5\U0001F600\u30c4"
    table = by_name(info.tables)[name]
    assert table.preamble.id == (2 << 24) | (P.jenkins_hash(name) & 0xFFFFFF)
