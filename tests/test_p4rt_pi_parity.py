"""The P4Runtime server answers as simple_switch_grpc's (p4lang/PI's DeviceMgr) where a client
would notice: status codes of refused writes, what reads return, the default entry's rules,
direct resources, meters, action profile groups, the packet replication engine and the pipeline
config. Each test names the PI behaviour it checks. The engine runs a real program with most
entity kinds; clients are raw p4runtime stubs (the corner cases) and p4runtime-shell."""
import threading
import time
import types

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from switch_fake_engine import SocketPort
from test_p4rt_hardening import Stream
from test_p4rt_server import CPU_PORT, free_port
from testbed.p4engine import compile_source, hashes
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl;
                bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
struct h_t { eth_t eth; ipv4_t ip; }
struct learn_t { bit<48> src; bit<9> port; }
struct m_t { }
parser P(packet_in p, out h_t h, inout m_t m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition select(h.eth.type) { 0x0800: ip; default: accept; } }
    state ip { p.extract(h.ip); transition accept; }
}
control VC(inout h_t h, inout m_t m) { apply { } }
control I(inout h_t h, inout m_t m, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) dc;
    direct_counter(CounterType.packets) const_dc;
    direct_meter<bit<2>>(MeterType.bytes) dm;
    meter(8, MeterType.packets) mtr;
    action_selector(HashAlgorithm.crc16, 32, 16) sel;
    bit<2> color;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action fwd_dc(bit<9> port) { sm.egress_spec = port; }
    action fwd_dm(bit<9> port) { sm.egress_spec = port; dm.read(color); }
    action drop() { mark_to_drop(sm); }
    action learn() { digest<learn_t>(1, {h.eth.src, sm.ingress_port}); }
    table exact_t { key = { h.eth.dst: exact; } actions = { fwd; drop; learn; @tableonly NoAction; }
                    default_action = drop(); }
    table lpm_t { key = { h.ip.dst: lpm; } actions = { fwd; drop; } }
    table dc_t { key = { h.eth.src: exact; } actions = { fwd_dc; NoAction; } counters = dc; }
    table dm_t { key = { h.eth.src: exact; } actions = { fwd_dm; NoAction; } meters = dm; }
    table sel_t { key = { h.ip.dst: exact; h.ip.src: selector; } actions = { fwd; drop; }
                  implementation = sel; }
    table const_t { key = { h.eth.type: exact; } actions = { drop; NoAction; } counters = const_dc;
                    const entries = { 0x86dd : drop(); } }
    apply {
        mtr.execute_meter(0, color);
        exact_t.apply(); lpm_t.apply(); dc_t.apply(); dm_t.apply(); sel_t.apply(); const_t.apply();
    }
}
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); p.emit(h.ip); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
ELECTION = (0, 1)


@pytest.fixture(scope="module")
def program():
    return compile_source(PROGRAM, "parity.p4")


def _ids(p4info):
    ids = {}
    for kind in ("tables", "actions", "action_profiles", "meters", "direct_counters", "direct_meters",
                 "digests"):
        for obj in getattr(p4info, kind):
            ids[obj.preamble.name.split(".")[-1]] = obj.preamble.id
    return ids


def _boot(program=None, compiler=None):
    ports = {n: SocketPort(n) for n in (1, 2, 3)}
    switch = Switch(ports, cpu_port=CPU_PORT)
    switch.start()
    addr = f"127.0.0.1:{free_port()}"
    kwargs = {"compiler": compiler} if compiler is not None else {}
    server = P4RuntimeServer(switch, device_id=1, address=addr, **kwargs).start()
    if program is not None:
        server.load_program(program, device_config=PROGRAM.encode())
    channel = grpc.insecure_channel(addr)
    return {"switch": switch, "ports": ports, "server": server, "addr": addr, "channel": channel,
            "stub": p4runtime_pb2_grpc.P4RuntimeStub(channel), "streams": []}


def _shutdown(dev):
    for stream in dev["streams"]:
        stream.close()
    dev["channel"].close()
    dev["server"].stop()
    dev["switch"].close()


@pytest.fixture
def dev(program):
    d = _boot(program, compiler=lambda config: compile_source(config.decode(), "parity.p4"))
    primary = Stream(d["addr"])
    d["streams"].append(primary)
    assert primary.arbitrate(ELECTION).arbitration.status.code == code_pb2.OK
    d["ids"] = _ids(program.p4info)
    yield d
    _shutdown(d)


def _update(op, text, **ids):
    update = p4runtime_pb2.Update(type=getattr(p4runtime_pb2.Update, op))
    text_format.Parse(text.format(**ids), update.entity)
    return update


def _write(dev, *updates):
    """Per-update (code name, message) of a Write; [] when every update succeeded."""
    req = p4runtime_pb2.WriteRequest(device_id=1, updates=updates)
    req.election_id.high, req.election_id.low = ELECTION
    try:
        dev["stub"].Write(req, timeout=20)
        return []
    except grpc.RpcError as err:
        status = status_pb2.Status.FromString(dict(err.trailing_metadata())["grpc-status-details-bin"])
        out = []
        for detail in status.details:
            error = p4runtime_pb2.Error()
            detail.Unpack(error)
            out.append((code_pb2.Code.Name(error.canonical_code), error.message))
        return out


def _code(dev, op, text):
    """The canonical code name of one update ("OK" when it succeeded)."""
    result = _write(dev, _update(op, text, **dev["ids"]))
    return result[0][0] if result else "OK"


def _read(dev, text):
    entity = p4runtime_pb2.Entity()
    text_format.Parse(text.format(**dev["ids"]), entity)
    request = p4runtime_pb2.ReadRequest(device_id=1, entities=[entity])
    return [e for r in dev["stub"].Read(request, timeout=20) for e in r.entities]


def _read_code(dev, text):
    with pytest.raises(grpc.RpcError) as err:
        _read(dev, text)
    return err.value.code().name


FWD_ENTRY = ("table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} "
             "action {{ action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x02' }} }} }} }}")


def test_a_pipeline_with_an_action_selector_is_pushed_over_p4runtime(tmp_path):
    """SetForwardingPipelineConfig compiles in a child process and pickles the program back: a
    program with a crc16 action_selector was refused with INTERNAL (its hash did not pickle)."""
    from p4runtime_sh import shell as sh
    program = compile_source(PROGRAM, "parity.p4")
    p4info = tmp_path / "parity.p4info.txt"
    p4info.write_text(text_format.MessageToString(program.p4info))
    source = tmp_path / "parity.p4"
    source.write_text(PROGRAM)
    dev = _boot()          # the switch's own compiler: the isolated child process
    try:
        sh.setup(device_id=1, grpc_addr=dev["addr"], election_id=ELECTION,
                 config=sh.FwdPipeConfig(str(p4info), str(source)), verbose=False)
        for member_id, port in ((1, "2"), (2, "3")):
            member = sh.ActionProfileMember("I.sel")(member_id=member_id, action="I.fwd")
            member.action["port"] = port
            member.insert()
        sh.ActionProfileGroup("I.sel")(group_id=1).add(1).add(2).insert()
        entry = sh.TableEntry("I.sel_t")
        entry.match["h.ip.dst"] = "10.0.0.1"
        entry.group_id = 1
        entry.insert()
        (group,) = list(sh.ActionProfileGroup("I.sel").read())
        assert sorted(m.member_id for m in group.msg().members) == [1, 2]
        # the selector still hashes with crc16 after its trip through pickle
        selector = dev["switch"].pipeline.action_profiles["I.sel"]
        key = types.SimpleNamespace(width=32)
        assert selector.selector_hash([key], [0x0a000001]) == hashes.crc16(b"\x0a\x00\x00\x01")
    finally:
        sh.teardown()
        _shutdown(dev)


def test_ids_the_p4info_lacks_are_invalid_argument(dev):
    """PI: "Invalid P4 id" is INVALID_ARGUMENT (the spec asks it of action ids) for tables,
    actions, action profiles, meters...; its digest manager alone answers NOT_FOUND."""
    assert _code(dev, "INSERT", "table_entry {{ table_id: 12345 }}") == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", "table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} "
                                "action {{ action {{ action_id: 999 }} }} }}") == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", "action_profile_member {{ action_profile_id: 999 member_id: 1 }}") == "INVALID_ARGUMENT"
    assert _code(dev, "MODIFY", "meter_entry {{ meter_id: 999 index {{ index: 0 }} }}") == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", "digest_entry {{ digest_id: 999 config {{ max_list_size: 1 }} }}") == "NOT_FOUND"
    assert _read_code(dev, "table_entry {{ table_id: 5 }}") == "INVALID_ARGUMENT"
    assert _read_code(dev, "counter_entry {{ counter_id: 5 }}") == "INVALID_ARGUMENT"
    # entities that do not exist stay NOT_FOUND
    assert _code(dev, "DELETE", "table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x09' }} }} }}") \
        == "NOT_FOUND"


def test_default_entry_rules_and_reads(dev):
    """PI and the spec: the default entry takes priority 0; an indirect table's default cannot
    be set or reset; a table_id 0 read of default entries returns every table's; default entries
    do not age (time_since_last_hit refused); controller_metadata is kept until a reset."""
    default = ("table_entry {{ table_id: {exact_t} is_default_action: true priority: {priority} "
               "controller_metadata: 7 action {{ action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x03' }} }} }} }}")
    ids = dev["ids"]
    assert _write(dev, _update("MODIFY", default, priority=4, **ids))[0][0] == "INVALID_ARGUMENT"
    assert _write(dev, _update("MODIFY", default, priority=0, **ids)) == []
    (read,) = _read(dev, "table_entry {{ table_id: {exact_t} is_default_action: true }}")
    assert read.table_entry.action.action.action_id == ids["fwd"] and read.table_entry.controller_metadata == 7
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {sel_t} is_default_action: true "
                                "action {{ action {{ action_id: {drop} }} }} }}") == "INVALID_ARGUMENT"
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {sel_t} is_default_action: true }}") == "INVALID_ARGUMENT"
    every = _read(dev, "table_entry {{ is_default_action: true }}")
    assert sorted(e.table_entry.table_id for e in every) == sorted(t.preamble.id for t in dev["server"].installed.index.p4info.tables)
    assert all(e.table_entry.is_default_action for e in every)
    assert _read_code(dev, "table_entry {{ table_id: {exact_t} is_default_action: true time_since_last_hit {{ }} }}") \
        == "INVALID_ARGUMENT"
    # a reset restores the program's default action and clears the metadata (spec, "Default Entry")
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {exact_t} is_default_action: true }}") == "OK"
    (read,) = _read(dev, "table_entry {{ table_id: {exact_t} is_default_action: true }}")
    assert read.table_entry.action.action.action_id == ids["drop"] and read.table_entry.controller_metadata == 0


def test_action_scope_and_read_only_fields(dev):
    """PI and the spec: an action used outside its P4Info scope (@defaultonly in an entry,
    @tableonly as the default) is PERMISSION_DENIED; time_since_last_hit in a Write is
    INVALID_ARGUMENT (the server alone fills it in)."""
    # p4c scopes the NoAction it adds to lpm_t as DEFAULT_ONLY
    assert _code(dev, "INSERT", "table_entry {{ table_id: {lpm_t} match {{ field_id: 1 lpm {{ value: '\\x0a\\x00\\x00\\x00' "
                                "prefix_len: 8 }} }} action {{ action {{ action_id: {NoAction} }} }} }}") == "PERMISSION_DENIED"
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {exact_t} is_default_action: true "
                                "action {{ action {{ action_id: {NoAction} }} }} }}") == "PERMISSION_DENIED"
    assert _code(dev, "INSERT", FWD_ENTRY[:-2] + "time_since_last_hit {{ elapsed_ns: 1 }} }}") == "INVALID_ARGUMENT"
    assert _read(dev, "table_entry {{ table_id: {exact_t} }}") == []


def test_direct_resources_are_checked_before_the_entry_changes(dev):
    """PI validates counter_data / meter_config before it writes: a table without the direct
    resource is INVALID_ARGUMENT and a refused update leaves no entry behind (it was inserted, then
    reported failed). DirectCounterEntry on such a table is INVALID_ARGUMENT too."""
    assert _code(dev, "INSERT", FWD_ENTRY[:-2] + "counter_data {{ packet_count: 1 }} }}") == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", FWD_ENTRY[:-2] + "meter_config {{ cir: 1 cburst: 1 pir: 1 pburst: 1 }} }}") \
        == "INVALID_ARGUMENT"
    assert _read(dev, "table_entry {{ table_id: {exact_t} }}") == []
    dm_entry = ("table_entry {{ table_id: {dm_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} "
                "action {{ action {{ action_id: {fwd_dm} params {{ param_id: 1 value: '\\x02' }} }} }} ")
    assert _code(dev, "INSERT", dm_entry + "meter_config {{ cir: 10 cburst: 1 pir: 5 pburst: 1 }} }}") == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", dm_entry + "meter_config {{ cir: -2 cburst: 1 pir: 5 pburst: 1 }} }}") == "INVALID_ARGUMENT"
    assert _read(dev, "table_entry {{ table_id: {dm_t} }}") == []
    assert _code(dev, "MODIFY", "direct_counter_entry {{ table_entry {{ table_id: {exact_t} match {{ field_id: 1 "
                                "exact {{ value: '\\x01' }} }} }} data {{ packet_count: 1 }} }}") == "INVALID_ARGUMENT"


def test_counter_data_only_for_tables_with_a_direct_counter(dev):
    """PI fills counter_data in a TableEntry read only where the table has a direct counter."""
    assert _code(dev, "INSERT", FWD_ENTRY) == "OK"
    assert _code(dev, "INSERT", "table_entry {{ table_id: {dc_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} "
                                "action {{ action {{ action_id: {fwd_dc} params {{ param_id: 1 value: '\\x02' }} }} }} }}") == "OK"
    entries = {e.table_entry.table_id: e.table_entry for e in _read(dev, "table_entry {{ counter_data {{ }} }}")}
    assert entries[dev["ids"]["dc_t"]].HasField("counter_data")
    assert not entries[dev["ids"]["exact_t"]].HasField("counter_data")


def test_meter_modify_without_config_resets_it(dev):
    """PI: a MeterEntry / DirectMeterEntry MODIFY without config sets the default (unmetered), and
    reads show no config; it read back as an all-zero config."""
    meter = "meter_entry {{ meter_id: {mtr} index {{ index: 1 }} {config} }}"
    ids = dev["ids"]
    assert _write(dev, _update("MODIFY", meter, config="config { cir: 10 cburst: 2 pir: 20 pburst: 4 }", **ids)) == []
    (read,) = _read(dev, "meter_entry {{ meter_id: {mtr} index {{ index: 1 }} }}")
    assert read.meter_entry.config.pir == 20
    assert _write(dev, _update("MODIFY", meter, config="", **ids)) == []
    (read,) = _read(dev, "meter_entry {{ meter_id: {mtr} index {{ index: 1 }} }}")
    assert not read.meter_entry.HasField("config")
    # PI's validate_meter_spec: a burst beyond 32 bits is UNIMPLEMENTED, before anything is written
    big = "config { cir: 10 cburst: 4294967296 pir: 20 pburst: 4 }"
    assert _write(dev, _update("MODIFY", meter, config=big, **ids))[0][0] == "UNIMPLEMENTED"
    (read,) = _read(dev, "meter_entry {{ meter_id: {mtr} index {{ index: 1 }} }}")
    assert not read.meter_entry.HasField("config")
    dm_key = "table_entry {{ table_id: {dm_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} }}"
    assert _code(dev, "INSERT", dm_key[:-2] + "action {{ action {{ action_id: {fwd_dm} params {{ param_id: 1 "
                                "value: '\\x02' }} }} }} meter_config {{ cir: 1 cburst: 2 pir: 3 pburst: 4 }} }}") == "OK"
    assert _code(dev, "MODIFY", "direct_meter_entry {{ " + dm_key + " }}") == "OK"
    (read,) = _read(dev, "direct_meter_entry {{ " + dm_key + " }}")
    assert not read.direct_meter_entry.HasField("config")


def test_action_profile_group_weights_and_max_size(dev):
    """PI's action profile manager and the spec: member weights are positive (0 was taken as 1),
    max_size is fixed at INSERT (a MODIFY changing it is INVALID_ARGUMENT), may not be negative,
    and is read back."""
    for member_id in (1, 2):
        assert _code(dev, "INSERT", "action_profile_member {{ action_profile_id: {sel} member_id: %d "
                     "action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x02' }} }} }}" % member_id) == "OK"
    group = "action_profile_group {{{{ action_profile_id: {{sel}} group_id: 1 max_size: {size} {members} }}}}"

    def code(op, size, members):
        return _code(dev, op, group.format(size=size, members=members))
    assert code("INSERT", 0, "members {{ member_id: 1 weight: 0 }}") == "INVALID_ARGUMENT"
    assert code("INSERT", -1, "members {{ member_id: 1 weight: 1 }}") == "INVALID_ARGUMENT"
    assert code("INSERT", 4, "members {{ member_id: 1 weight: 5 }}") == "RESOURCE_EXHAUSTED"
    assert code("INSERT", 4, "members {{ member_id: 1 weight: 2 }}") == "OK"
    assert code("MODIFY", 8, "members {{ member_id: 1 weight: 2 }}") == "INVALID_ARGUMENT"
    assert code("MODIFY", 4, "members {{ member_id: 1 weight: 2 }} members {{ member_id: 2 weight: 2 }}") == "OK"
    (read,) = _read(dev, "action_profile_group {{ action_profile_id: {sel} }}")
    assert [(m.member_id, m.weight) for m in read.action_profile_group.members] == [(1, 2), (2, 2)]
    assert read.action_profile_group.max_size == 4          # read back, as PI does
    assert code("DELETE", 0, "") == "OK"
    assert code("INSERT", 8, "members {{ member_id: 2 weight: 1 }}") == "OK"     # a new group, a new max_size


def test_packet_replication_engine_ids_and_reads(dev):
    """PI: multicast group ids from 2**15 up are OUT_OF_RANGE (kept for clone sessions), clone
    session ids from 2**15 up INVALID_ARGUMENT, a clone session class_of_service UNIMPLEMENTED,
    and a PRE read that names neither kind INVALID_ARGUMENT (it returned the multicast groups)."""
    mc = "packet_replication_engine_entry {{{{ multicast_group_entry {{{{ multicast_group_id: {id} " \
         "replicas {{{{ egress_port: 1 instance: 1 }}}} }}}} }}}}"
    clone = "packet_replication_engine_entry {{{{ clone_session_entry {{{{ session_id: {id} class_of_service: {cos} " \
            "replicas {{{{ egress_port: 2 }}}} }}}} }}}}"
    assert _code(dev, "INSERT", mc.format(id=32768)) == "OUT_OF_RANGE"
    assert _code(dev, "INSERT", mc.format(id=32767)) == "OK"
    assert _code(dev, "INSERT", clone.format(id=32768, cos=0)) == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", clone.format(id=5, cos=2)) == "UNIMPLEMENTED"
    assert _code(dev, "INSERT", clone.format(id=5, cos=0)) == "OK"
    assert _read_code(dev, "packet_replication_engine_entry {{ }}") == "INVALID_ARGUMENT"
    assert _read_code(dev, "packet_replication_engine_entry {{ multicast_group_entry {{ multicast_group_id: 40000 }} }}") \
        == "OUT_OF_RANGE"
    (group,) = _read(dev, "packet_replication_engine_entry {{ multicast_group_entry {{ }} }}")
    assert group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id == 32767
    (session,) = _read(dev, "packet_replication_engine_entry {{ clone_session_entry {{ }} }}")
    assert session.packet_replication_engine_entry.clone_session_entry.session_id == 5


# the frames _learn_frame builds hit it and raise a learn_t digest
LEARN_ENTRY = ("table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x0a\\x00\\x00\\x00\\x00\\x01' }} }} "
               "action {{ action {{ action_id: {learn} }} }} }}")


def _wait_until(condition):
    """Waits (20 s at most) for what another thread does: the switch, the stream's reader."""
    end = time.monotonic() + 20
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def _learn_frame(src):
    return bytes.fromhex("0a0000000001") + src.to_bytes(6, "big") + b"\x88\xb5" + bytes(50)


def test_digest_lists_are_deduplicated_until_acked_and_batched(dev):
    """The spec's digest cache, as PI's digest manager keeps it: with ack_timeout_ns a digest
    already sent and not acknowledged is not sent again (every packet made a list); an ack lets
    it through again; max_list_size digests go in one list (with max_timeout_ns as the bound);
    list ids count from 1. A read of a digest not configured is NOT_FOUND, as PI answers."""
    assert _read_code(dev, "digest_entry {{ digest_id: {learn_t} }}") == "NOT_FOUND"
    assert _code(dev, "INSERT", LEARN_ENTRY) == "OK"
    hour = 3600 * 10**9
    assert _code(dev, "INSERT", "digest_entry {{ digest_id: {learn_t} config {{ ack_timeout_ns: %d }} }}" % hour) == "OK"
    messages = dev["streams"][0].collect()
    port = dev["ports"][1].peer

    def sources(digest):
        return [int.from_bytes(d.struct.members[0].bitstring, "big") for d in digest.data]
    for src in (0xA, 0xA, 0xB):          # the second 0xA is still unacknowledged: dropped
        port.send(_learn_frame(src))
    first, second = messages.next_update("digest"), messages.next_update("digest")
    assert [(first.list_id, sources(first)), (second.list_id, sources(second))] == [(1, [0xA]), (2, [0xB])]
    ack = p4runtime_pb2.StreamMessageRequest()
    ack.digest_ack.digest_id, ack.digest_ack.list_id = dev["ids"]["learn_t"], 1
    dev["streams"][0].requests.put(ack)
    lists = dev["server"].state.digest_lists
    _wait_until(lambda: 0xA not in {v[0] for d in lists._digests.values() for v in d.cached})
    port.send(_learn_frame(0xA))        # acked: sent again
    third = messages.next_update("digest")
    assert (third.list_id, sources(third)) == (3, [0xA])
    # two digests a list; the hour-long max_timeout_ns never comes into it
    assert _code(dev, "MODIFY", "digest_entry {{ digest_id: {learn_t} config {{ max_list_size: 2 "
                                "max_timeout_ns: %d ack_timeout_ns: %d }} }}" % (hour, hour)) == "OK"
    for src in (0xC, 0xB, 0xD):         # 0xB: still cached from list 2
        port.send(_learn_frame(src))
    fourth = messages.next_update("digest")
    assert (fourth.list_id, sources(fourth)) == (4, [0xC, 0xD])
    (entry,) = _read(dev, "digest_entry {{ digest_id: {learn_t} }}")
    assert entry.digest_entry.config.max_list_size == 2


def test_a_digest_list_of_a_replaced_pipeline_is_not_sent(dev):
    """A list still buffered when a new pipeline takes over belongs to the old one: the old
    DigestLists' last sweep does not send it (it went out with the new pipeline's P4Info and
    took a list id of the new pipeline's)."""
    assert _code(dev, "INSERT", LEARN_ENTRY) == "OK"
    hour = 3600 * 10**9
    assert _code(dev, "INSERT", "digest_entry {{ digest_id: {learn_t} config {{ max_list_size: 10 "
                                "max_timeout_ns: %d }} }}" % hour) == "OK"
    messages = dev["streams"][0].collect()
    old = dev["server"].state.digest_lists
    dev["ports"][1].peer.send(_learn_frame(0xA))
    _wait_until(lambda: any(d.buffer for d in old._digests.values()))
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", PROGRAM) == "OK"
    old.sweep(now_ns=2 ** 62)           # the old timer's last sweep: its buffer is due
    assert _code(dev, "MODIFY", "digest_entry {{ digest_id: {learn_t} config {{ max_list_size: 1 }} }}") == "OK"
    dev["ports"][1].peer.send(_learn_frame(0xB))
    digest = messages.next_update("digest")
    assert (digest.list_id, int.from_bytes(digest.data[0].struct.members[0].bitstring, "big")) == (1, 0xB)


def test_digest_timeouts_on_a_clock_the_test_sets():
    """max_timeout_ns bounds how long a buffer waits; ack_timeout_ns how long a sent digest is
    held back without an ack (DigestLists on a set clock, swept by the test)."""
    from p4.v1 import p4runtime_pb2 as pb
    from testbed.p4rt.digests import DigestLists
    now = [0]
    sent = []
    lists = DigestLists(lambda digest_id, list_id, values: sent.append((list_id, values)), clock_ns=lambda: now[0])
    try:
        lists.configure(7, pb.DigestEntry.Config(max_timeout_ns=5, max_list_size=10, ack_timeout_ns=100))
        lists.learn(7, (1,))
        now[0] = 3
        lists.learn(7, (2,))
        assert lists.sweep(4) == 5 and sent == []           # waits for the first digest's 5 ns
        lists.sweep(5)
        assert sent == [(1, [(1,), (2,)])]
        now[0] = 50
        lists.learn(7, (1,))                                 # not acked, 45 ns after it was sent
        assert lists.sweep(104) == 105 and sent == [(1, [(1,), (2,)])]
        lists.sweep(105)                                     # list 1 expires from the cache
        now[0] = 106
        lists.learn(7, (1,))
        lists.sweep(111)
        assert sent[-1] == (2, [(1,)])
        lists.configure(7, None)                             # DELETE: nothing more is sent
        lists.learn(7, (3,))
        assert lists.sweep(10**6) is None and len(sent) == 2
    finally:
        lists.close()


def test_a_digest_modify_sends_the_buffer_it_makes_due():
    """A MODIFY to max_timeout_ns 0 (or to a max_list_size the buffer already fills) sends the
    buffered digests at once; they waited for a digest that might never come."""
    from p4.v1 import p4runtime_pb2 as pb
    from testbed.p4rt.digests import DigestLists
    sent = []
    lists = DigestLists(lambda digest_id, list_id, values: sent.append((list_id, values)), clock_ns=lambda: 0)
    try:
        lists.configure(7, pb.DigestEntry.Config(max_timeout_ns=100, max_list_size=10))
        lists.learn(7, (1,))
        lists.learn(7, (2,))
        assert sent == []
        lists.configure(7, pb.DigestEntry.Config(max_timeout_ns=0, max_list_size=10))
        assert sent == [(1, [(1,), (2,)])]
        lists.configure(7, pb.DigestEntry.Config(max_timeout_ns=100, max_list_size=10))
        lists.learn(7, (3,))
        lists.learn(7, (4,))
        lists.configure(7, pb.DigestEntry.Config(max_timeout_ns=100, max_list_size=2))
        assert sent[1:] == [(2, [(3,), (4,)])]
        lists.learn(7, (5,))                         # one of two: held
        assert lists.sweep(50) == 100 and len(sent) == 2
    finally:
        lists.close()


def _set_pipeline(dev, action, source, cookie=None):
    Request = p4runtime_pb2.SetForwardingPipelineConfigRequest
    request = Request(device_id=1, action=getattr(Request, action))
    request.election_id.high, request.election_id.low = ELECTION
    request.config.p4info.CopyFrom(compile_source(source, "parity.p4").p4info)
    request.config.p4_device_config = source.encode()
    if cookie is not None:
        request.config.cookie.cookie = cookie
    try:
        dev["stub"].SetForwardingPipelineConfig(request, timeout=60)
        return "OK"
    except grpc.RpcError as err:
        return err.code().name


def _get_pipeline(dev, response_type):
    Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    return dev["stub"].GetForwardingPipelineConfig(Get(device_id=1, response_type=response_type), timeout=20).config


def test_reconcile_and_commit_keeps_the_forwarding_state(dev):
    """RECONCILE_AND_COMMIT carries the entries, members, groups, meter configs and PRE entries
    over to the new pipeline (as PI does, and the spec asks; it dropped them like a plain commit);
    if they do not fit the new program it is refused (UNKNOWN, as PI) and nothing changes."""
    writes = [FWD_ENTRY,
              "action_profile_member {{ action_profile_id: {sel} member_id: 1 action {{ action_id: {fwd} "
              "params {{ param_id: 1 value: '\\x02' }} }} }}",
              "action_profile_group {{ action_profile_id: {sel} group_id: 1 members {{ member_id: 1 weight: 1 }} }}",
              "table_entry {{ table_id: {sel_t} match {{ field_id: 1 exact {{ value: '\\x0a\\x00\\x00\\x01' }} }} "
              "action {{ action_profile_group_id: 1 }} }}",
              "packet_replication_engine_entry {{ multicast_group_entry {{ multicast_group_id: 3 "
              "replicas {{ egress_port: 1 instance: 1 }} }} }}",
              "digest_entry {{ digest_id: {learn_t} config {{ max_list_size: 1 }} }}"]
    for text in writes:
        assert _code(dev, "INSERT", text) == "OK", text
    assert _code(dev, "MODIFY", "meter_entry {{ meter_id: {mtr} index {{ index: 2 }} config {{ cir: 5 cburst: 1 "
                                "pir: 6 pburst: 1 }} }}") == "OK"
    before = sorted(e.SerializeToString(deterministic=True) for e in _state(dev))
    # a program where exact_t has no learn action: the state does not fit
    assert _code(dev, "INSERT", "table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x05' }} }} "
                                "action {{ action {{ action_id: {learn} }} }} }}") == "OK"
    narrower = PROGRAM.replace("actions = { fwd; drop; learn; @tableonly NoAction; }",
                               "actions = { fwd; drop; @tableonly NoAction; }")
    running = dev["server"].installed
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", narrower) == "UNKNOWN"
    assert dev["server"].installed is running
    assert _code(dev, "DELETE", "table_entry {{ table_id: {exact_t} match {{ field_id: 1 exact {{ value: '\\x05' }} }} }}") == "OK"
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", PROGRAM, cookie=0) == "OK"
    assert dev["server"].installed is not running
    assert sorted(e.SerializeToString(deterministic=True) for e in _state(dev)) == before
    # the cookie is returned as it was given, 0 included (PI: has_cookie)
    Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    config = _get_pipeline(dev, Get.COOKIE_ONLY)
    assert config.HasField("cookie") and config.cookie.cookie == 0 and not config.HasField("p4info")
    with pytest.raises(grpc.RpcError) as err:
        _get_pipeline(dev, 9)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # a plain commit starts from nothing
    assert _set_pipeline(dev, "VERIFY_AND_COMMIT", PROGRAM) == "OK"
    assert _read(dev, "table_entry {{ table_id: {exact_t} }}") == []
    assert not _get_pipeline(dev, Get.ALL).HasField("cookie")


def test_reconcile_and_commit_keeps_the_default_actions_the_controller_set(dev):
    """A default action the controller set is forwarding state too: RECONCILE_AND_COMMIT carries
    it, with its metadata, to the new pipeline (the new program's default took its place); a
    default never set, or reset, stays the new program's."""
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {exact_t} is_default_action: true controller_metadata: 7 "
                                "action {{ action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x03' }} }} }} }}") == "OK"
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {dc_t} is_default_action: true "
                                "action {{ action {{ action_id: {fwd_dc} params {{ param_id: 1 value: '\\x02' }} }} }} }}") == "OK"
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {dc_t} is_default_action: true }}") == "OK"
    other_defaults = PROGRAM.replace("default_action = drop(); }", "default_action = fwd(1); }") \
        .replace("counters = dc; }", "counters = dc; default_action = fwd_dc(5); }")
    assert other_defaults.count("default_action") == PROGRAM.count("default_action") + 1
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", other_defaults) == "OK"
    (kept,) = _read(dev, "table_entry {{ table_id: {exact_t} is_default_action: true }}")
    assert kept.table_entry.controller_metadata == 7
    assert kept.table_entry.action.action.params[0].value == b"\x03"
    (reset,) = _read(dev, "table_entry {{ table_id: {dc_t} is_default_action: true }}")
    assert reset.table_entry.action.action.action_id == dev["ids"]["fwd_dc"]
    assert reset.table_entry.action.action.params[0].value == b"\x05"
    # under the carried default lies the new program's: a reset brings it back
    assert _code(dev, "MODIFY", "table_entry {{ table_id: {exact_t} is_default_action: true }}") == "OK"
    (program_default,) = _read(dev, "table_entry {{ table_id: {exact_t} is_default_action: true }}")
    assert program_default.table_entry.action.action.params[0].value == b"\x01"


def _state(dev):
    queries = ["table_entry {{ }}", "action_profile_member {{ }}", "action_profile_group {{ }}",
               "meter_entry {{ meter_id: {mtr} index {{ index: 2 }} }}", "digest_entry {{ }}",
               "packet_replication_engine_entry {{ multicast_group_entry {{ }} }}"]
    return [e for q in queries for e in _read(dev, q)]


def test_writes_without_election_id_while_no_controller_is_connected(program):
    """simple_switch_grpc (PI) accepts Write and SetForwardingPipelineConfig without election_id
    while no controller has a StreamChannel open (grpc_cli, scripts); with an election_id, or once
    a controller has arbitrated, only the primary may write."""
    dev = _boot(program, compiler=lambda config: compile_source(config.decode(), "parity.p4"))
    dev["ids"] = _ids(program.p4info)
    try:
        stub = dev["stub"]
        bare = p4runtime_pb2.WriteRequest(device_id=1, updates=[_update("INSERT", FWD_ENTRY, **dev["ids"])])
        stub.Write(bare, timeout=20)
        assert len(_read(dev, "table_entry {{ table_id: {exact_t} }}")) == 1
        Request = p4runtime_pb2.SetForwardingPipelineConfigRequest
        request = Request(device_id=1, action=Request.VERIFY_AND_COMMIT)
        request.config.p4info.CopyFrom(program.p4info)
        request.config.p4_device_config = PROGRAM.encode()
        stub.SetForwardingPipelineConfig(request, timeout=60)
        assert _read(dev, "table_entry {{ table_id: {exact_t} }}") == []
        with_id = p4runtime_pb2.WriteRequest(device_id=1, updates=bare.updates)
        with_id.election_id.low = 1
        with pytest.raises(grpc.RpcError) as err:
            stub.Write(with_id, timeout=20)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        controller = Stream(dev["addr"])
        dev["streams"].append(controller)
        assert controller.arbitrate((0, 2)).arbitration.status.code == code_pb2.OK
        with pytest.raises(grpc.RpcError) as err:
            stub.Write(bare, timeout=20)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        _shutdown(dev)


def test_a_packet_out_before_arbitration_does_not_end_the_stream(dev):
    """PI ignores stream messages that come before the MasterArbitrationUpdate and keeps the
    stream (it was ended with FAILED_PRECONDITION); the packet is not sent, a StreamError says so,
    and the stream can still arbitrate."""
    stream = Stream(dev["addr"])
    dev["streams"].append(stream)
    early = p4runtime_pb2.StreamMessageRequest()
    early.packet.payload = _learn_frame(0xA)
    stream.requests.put(early)
    error = next(stream.responses).error
    assert error.canonical_code == code_pb2.FAILED_PRECONDITION and error.packet_out.packet_out.payload
    assert stream.arbitrate((0, 9)).arbitration.status.code == code_pb2.OK      # now the primary


def test_direct_resource_reads_name_the_entry_by_its_key(dev):
    """PI answers DirectCounterEntry / DirectMeterEntry reads with the entry's key (table id,
    match, priority) as table_entry, not the whole TableEntry with its action."""
    assert _code(dev, "INSERT", "table_entry {{ table_id: {dc_t} match {{ field_id: 1 exact {{ value: '\\x01' }} }} "
                                "action {{ action {{ action_id: {fwd_dc} params {{ param_id: 1 value: '\\x02' }} }} }} "
                                "counter_data {{ packet_count: 3 byte_count: 300 }} }}") == "OK"
    (read,) = _read(dev, "direct_counter_entry {{ table_entry {{ table_id: {dc_t} }} }}")
    entry = read.direct_counter_entry
    assert not entry.table_entry.HasField("action") and entry.table_entry.match[0].exact.value == b"\x01"
    assert (entry.data.packet_count, entry.data.byte_count) == (3, 300)


def test_one_shot_action_selector_programming(dev):
    """One-shot programming (spec; PI serves it, the engine answered UNIMPLEMENTED): an entry with
    an action set gets a group of its own in the selector, reads give the set back, member/group
    reads do not show the server's members; MODIFY and DELETE replace and remove the group;
    mixing with members/groups in one selector is INVALID_ARGUMENT, as in PI."""
    entry = ("table_entry {{{{ table_id: {{sel_t}} match {{{{ field_id: 1 exact {{{{ value: '\\x0a\\x00\\x00\\x01' }}}} }}}} "
             "action {{{{ action_profile_action_set {{{{ {actions} }}}} }}}} }}}}")
    one = ("action_profile_actions {{{{ action {{{{ action_id: {{fwd}} params {{{{ param_id: 1 value: '{port}' }}}} }}}} "
           "weight: {weight} }}}}")
    two_ports = one.format(port="\\x02", weight=2) + " " + one.format(port="\\x03", weight=1)
    assert _code(dev, "INSERT", entry.format(actions=two_ports)) == "OK"
    (read,) = _read(dev, "table_entry {{ table_id: {sel_t} }}")
    got = read.table_entry.action.action_profile_action_set.action_profile_actions
    assert [(a.action.params[0].value, a.weight) for a in got] == [(b"\x02", 2), (b"\x03", 1)]
    assert _read(dev, "action_profile_member {{ }}") == [] and _read(dev, "action_profile_group {{ }}") == []
    selector = dev["switch"].pipeline.action_profiles["I.sel"]
    assert len(selector.groups()) == 1 and len(selector.members()) == 2
    # the packet goes out by one of the set's ports
    frame = bytes.fromhex("0a0000000001020000000001") + b"\x08\x00" + bytes.fromhex(
        "45000014000000004000000000000000" "0a000001") + bytes(20)
    dev["ports"][1].peer.send(frame)
    assert len(dev["ports"][2].receive_all() + dev["ports"][3].receive_all()) == 1
    assert _code(dev, "INSERT", "action_profile_member {{ action_profile_id: {sel} member_id: 1 "
                                "action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x02' }} }} }}") \
        == "INVALID_ARGUMENT"
    assert _code(dev, "MODIFY", entry.format(actions=one.format(port="\\x01", weight=1))) == "OK"
    assert len(selector.groups()) == 1 and len(selector.members()) == 1       # the old group is gone
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", PROGRAM) == "OK"         # carried over as a set
    (read,) = _read(dev, "table_entry {{ table_id: {sel_t} }}")
    assert [a.weight for a in read.table_entry.action.action_profile_action_set.action_profile_actions] == [1]
    selector = dev["switch"].pipeline.action_profiles["I.sel"]
    assert _code(dev, "MODIFY", entry.format(actions=one.format(port="\\x01", weight=0))) == "INVALID_ARGUMENT"
    assert _code(dev, "MODIFY", entry.format(actions="")) == "UNIMPLEMENTED"
    assert _code(dev, "DELETE", "table_entry {{ table_id: {sel_t} match {{ field_id: 1 exact {{ value: '\\x0a\\x00\\x00\\x01' }} }} }}") \
        == "OK"
    assert selector.groups() == {} and selector.members() == {}
    # an empty selector takes either way again
    assert _code(dev, "INSERT", "action_profile_member {{ action_profile_id: {sel} member_id: 1 "
                                "action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x02' }} }} }}") == "OK"
    assert _code(dev, "INSERT", entry.format(actions=two_ports)) == "INVALID_ARGUMENT"


def test_a_program_without_tables_is_accepted(dev):
    """A P4Info with registers but no table or action (p4c's, for a program that only keeps state)
    is a good config, as PI takes it; it was refused as "config.p4info is empty"."""
    source = PROGRAM[:PROGRAM.index("control I(")] + """
control I(inout h_t h, inout m_t m, inout standard_metadata_t sm) {
    register<bit<32>>(4) seen;
    apply { seen.write(0, 1); }
}
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
    info = compile_source(source, "registers.p4").p4info
    assert not info.tables and not info.actions and info.registers
    assert _set_pipeline(dev, "VERIFY_AND_COMMIT", source) == "OK"
    assert len(_read(dev, "register_entry {{ }}")) == 4


def test_priorities_follow_each_tables_match_kinds(dev):
    """Every table takes priorities by its own keys; the engine's say (a table with two lpm keys
    matches as a ternary one) was applied to one table only, and a program with a controller
    header but no table failed with INTERNAL (p4c's issue3329-bmv2)."""
    source = PROGRAM.replace("table lpm_t { key = { h.ip.dst: lpm; }",
                             "table lpm_t { key = { h.ip.dst: lpm; h.ip.src: lpm; }")
    assert _set_pipeline(dev, "VERIFY_AND_COMMIT", source) == "OK"
    lpm = ("table_entry {{{{ table_id: {{lpm_t}} priority: {priority} match {{{{ field_id: 1 lpm {{{{ "
           "value: '\\x0a\\x00\\x00\\x00' prefix_len: 8 }}}} }}}} action {{{{ action {{{{ action_id: {{drop}} }}}} }}}} }}}}")
    assert _code(dev, "INSERT", lpm.format(priority=0)) == "INVALID_ARGUMENT"
    assert _code(dev, "INSERT", lpm.format(priority=3)) == "OK"
    assert _code(dev, "INSERT", FWD_ENTRY) == "OK"                     # exact_t: no priority
    headers_only = PROGRAM[:PROGRAM.index("control I(")].replace(
        "header eth_t", '@controller_header("packet_in") header pin_t { bit<16> port; }\nheader eth_t') + """
control I(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
    assert _set_pipeline(dev, "VERIFY_AND_COMMIT", headers_only) == "OK"


def _legacy_device_config(json_text):
    """What p4lang/tutorials' p4runtime_lib sends: p4.tmp.P4DeviceConfig(reassign=True,
    device_data=<BMv2 JSON>), serialised by hand (p4.tmp is not in the p4runtime package)."""
    from google.protobuf.internal.encoder import _VarintBytes
    data = json_text.encode()
    return b"\x08\x01" + b"\x1a" + _VarintBytes(len(data)) + data


def test_a_tutorials_controller_pushing_bmv2_json_gets_the_running_program(dev, program):
    """simple_switch_grpc runs the BMv2 JSON p4lang/tutorials' controllers push; the engine cannot,
    so when the switch already runs the program that P4Info describes, it takes the push for
    that program (it refused every JSON); a P4Info of another program is still refused."""
    bmv2_json = '{"header_types": [], "headers": [], "pipelines": [], "padding": "%s"}' % ("x" * 300)
    Request = p4runtime_pb2.SetForwardingPipelineConfigRequest
    request = Request(device_id=1, action=Request.VERIFY_AND_COMMIT)
    request.election_id.high, request.election_id.low = ELECTION
    request.config.p4info.CopyFrom(program.p4info)
    request.config.p4_device_config = _legacy_device_config(bmv2_json)
    assert _code(dev, "INSERT", FWD_ENTRY) == "OK"
    dev["stub"].SetForwardingPipelineConfig(request, timeout=20)
    assert _read(dev, "table_entry {{ table_id: {exact_t} }}") == []                       # a new pipeline, as a commit
    assert _code(dev, "INSERT", FWD_ENTRY) == "OK"
    other = request.config.p4info.tables.add()
    other.preamble.id, other.preamble.name = 0x02FFFFFF, "I.not_in_the_program"
    with pytest.raises(grpc.RpcError) as err:
        dev["stub"].SetForwardingPipelineConfig(request, timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "BMv2 JSON" in err.value.details()
    assert len(_read(dev, "table_entry {{ table_id: {exact_t} }}")) == 1                    # the running one is untouched
    # with no program to take it for, the wrapped JSON is named as such
    from testbed.p4rt.errors import P4RuntimeError
    from testbed.p4rt.server import compile_device_config
    with pytest.raises(P4RuntimeError) as err:
        compile_device_config(_legacy_device_config(bmv2_json))
    assert "is a BMv2 JSON" in err.value.message


def test_const_table_entries_take_direct_resource_modifies_only(dev):
    """The spec ("Constant Tables"): a const table's entries take a MODIFY of their direct
    resources without an action (it was PERMISSION_DENIED like any other write); with an action,
    or any INSERT/DELETE, it stays PERMISSION_DENIED."""
    key = "table_entry {{ table_id: {const_t} match {{ field_id: 1 exact {{ value: '\\x86\\xdd' }} }} "
    assert _code(dev, "MODIFY", key + "counter_data {{ packet_count: 5 }} }}") == "OK"
    (read,) = _read(dev, "direct_counter_entry {{ table_entry {{ table_id: {const_t} }} }}")
    assert read.direct_counter_entry.data.packet_count == 5
    assert _code(dev, "MODIFY", key + "action {{ action {{ action_id: {drop} }} }} counter_data {{ packet_count: 1 }} }}") \
        == "PERMISSION_DENIED"
    assert _code(dev, "DELETE", key + "}}") == "PERMISSION_DENIED"


def test_reconcile_keeps_parser_value_sets(dev):
    """RECONCILE_AND_COMMIT carries the members of parser value sets over too."""
    source = PROGRAM.replace("state start { p.extract(h.eth); transition select(h.eth.type) { 0x0800: ip; default: accept; } }",
                             "value_set<bit<16>>(4) types;\n"
                             "    state start { p.extract(h.eth); transition select(h.eth.type) { 0x0800: ip; types: ip; "
                             "default: accept; } }")
    assert source != PROGRAM
    assert _set_pipeline(dev, "VERIFY_AND_COMMIT", source) == "OK"
    vs_id = compile_source(source, "parity.p4").p4info.value_sets[0].preamble.id
    members = "value_set_entry {{ value_set_id: %d members {{ match {{ field_id: 1 exact {{ value: '\\x88\\xb5' }} }} }} }}" % vs_id
    assert _code(dev, "MODIFY", members) == "OK"
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", source) == "OK"
    (read,) = _read(dev, "value_set_entry {{ value_set_id: %d }}" % vs_id)
    assert [m.match[0].exact.value for m in read.value_set_entry.members] == [b"\x88\xb5"]


def test_a_write_during_reconcile_and_commit_is_not_lost(dev, monkeypatch):
    """A Write that arrives while RECONCILE_AND_COMMIT copies the running state waits for the
    new pipeline and lands in it: it used to go to the old pipeline after the copy was taken,
    and was gone once the new one took over."""
    server = dev["server"]
    copied, go_on = threading.Event(), threading.Event()
    reconciled_state = server._reconciled_state

    def slow_copy(prepared):
        state = reconciled_state(prepared)
        copied.set()
        assert go_on.wait(20)
        return state
    monkeypatch.setattr(server, "_reconciled_state", slow_copy)
    assert _code(dev, "INSERT", FWD_ENTRY) == "OK"
    result = {}
    reconcile = threading.Thread(target=lambda: result.update(
        code=_set_pipeline(dev, "RECONCILE_AND_COMMIT", PROGRAM)))
    reconcile.start()
    assert copied.wait(30)
    second = FWD_ENTRY.replace("\\x01", "\\x07", 1)       # another key
    writer = threading.Thread(target=lambda: result.update(write=_code(dev, "INSERT", second)))
    writer.start()
    writer.join(0.5)          # (without the fix the write completes here, into the old pipeline)
    go_on.set()
    reconcile.join(60)
    writer.join(20)
    assert result == {"code": "OK", "write": "OK"}
    keys = sorted(e.table_entry.match[0].exact.value for e in _read(dev, "table_entry {{ table_id: {exact_t} }}"))
    assert keys == [b"\x01", b"\x07"]


COUNTERS_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k; }
struct h_s { h_t h; }
struct m_t { }
parser P(packet_in p, out h_s h, inout m_t m, inout standard_metadata_t sm) {
    state start { p.extract(h.h); transition accept; }
}
control VC(inout h_s h, inout m_t m) { apply { } }
control I(inout h_s h, inout m_t m, inout standard_metadata_t sm) {
    counter(2, CounterType.packets) pc;
    counter(2, CounterType.bytes) bc;
    direct_counter(CounterType.packets) dc;
    action fwd() { sm.egress_spec = 1; }
    table t { key = { h.h.k: exact; } actions = { fwd; } counters = dc; }
    apply { pc.count(0); bc.count(0); t.apply(); }
}
control E(inout h_s h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_s h, inout m_t m) { apply { } }
control D(packet_out p, in h_s h) { apply { p.emit(h.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_counters_read_both_units_and_writes_change_only_the_declared_one():
    """BMv2 counts packets and bytes in every counter and simple_switch_grpc's PI reads both back
    (convert_to_counter_data marks both valid), whatever the counter's unit. A write takes only
    the declared unit from the message (DeviceMgr's counter_data_proto_to_pi): a CounterEntry or
    DirectCounterEntry write keeps the other count (merge_current_value in BMv2's
    PI/src/pi_counter_imp.cpp), a TableEntry's counter_data sets it to 0 (set_direct_resources)."""
    program = compile_source(COUNTERS_PROGRAM, "counters.p4")
    dev = _boot(program)
    try:
        primary = Stream(dev["addr"])
        dev["streams"].append(primary)
        assert primary.arbitrate(ELECTION).arbitration.status.code == code_pb2.OK
        ids = {c.preamble.name.split(".")[-1]: c.preamble.id
               for kind in ("counters", "direct_counters", "tables", "actions")
               for c in getattr(program.p4info, kind)}
        dev["ids"] = ids
        key = "table_entry {{ table_id: {t} match {{ field_id: 1 exact {{ value: '\\x07' }} }} "
        assert _code(dev, "INSERT", key + "action {{ action {{ action_id: {fwd} }} }} "
                                    "counter_data {{ packet_count: 3 byte_count: 500 }} }}") == "OK"
        dev["switch"].pipeline.process(0, bytes([7]) + bytes(19))

        def counts(text):
            (entity,) = _read(dev, text)
            data = getattr(entity, entity.WhichOneof("entity")).data
            return data.packet_count, data.byte_count
        direct = "direct_counter_entry {{ " + key + "}} }}"
        assert counts("counter_entry {{ counter_id: {pc} index {{ index: 0 }} }}") == (1, 20)
        assert counts("counter_entry {{ counter_id: {bc} index {{ index: 0 }} }}") == (1, 20)
        assert counts(direct) == (4, 20)        # the insert's 500 bytes were not taken
        cell = "counter_entry {{ counter_id: {id} index {{ index: 0 }} data {{ packet_count: 9 byte_count: 99 }} }}"
        assert _code(dev, "MODIFY", cell.replace("{id}", "{pc}")) == "OK"
        assert _code(dev, "MODIFY", cell.replace("{id}", "{bc}")) == "OK"
        assert counts("counter_entry {{ counter_id: {pc} index {{ index: 0 }} }}") == (9, 20)
        assert counts("counter_entry {{ counter_id: {bc} index {{ index: 0 }} }}") == (1, 99)
        assert _code(dev, "MODIFY", "direct_counter_entry {{ " + key + "}} "
                                    "data {{ packet_count: 5 byte_count: 77 }} }}") == "OK"
        assert counts(direct) == (5, 20)
    finally:
        _shutdown(dev)
