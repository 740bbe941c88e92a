"""Table and counter corners of the P4Runtime server: where it answers as simple_switch_grpc
(PI on BMv2) -- a table without keys, the default entry of a table with an action profile --
and where it follows the spec over PI (a counter MODIFY without data). A program of its own
(test_p4rt_pi_parity's covers the rest)."""
import pytest
from google.rpc import code_pb2

from test_p4rt_hardening import Stream
from test_p4rt_pi_parity import ELECTION, _boot, _code, _ids, _read, _read_code, _set_pipeline, _shutdown
from testbed.p4engine import compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct h_t { eth_t eth; }
struct m_t { }
parser P(packet_in p, out h_t h, inout m_t m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition accept; }
}
control VC(inout h_t h, inout m_t m) { apply { } }
control I(inout h_t h, inout m_t m, inout standard_metadata_t sm) {
    action_profile(16) prof;
    counter(4, CounterType.packets_and_bytes) ctr;
    direct_counter(CounterType.packets_and_bytes) dc;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table keyless_t { actions = { fwd; drop; } default_action = drop(); }
    table prof_t { key = { h.eth.dst: exact; } actions = { fwd; drop; } implementation = prof; }
    direct_counter(CounterType.packets) init_dc;
    table dc_t { key = { h.eth.src: exact; } actions = { fwd; NoAction; } counters = dc; }
    table init_t { key = { h.eth.type: exact; } actions = { fwd; NoAction; } counters = init_dc;
                   entries = { 0x88b6 : fwd(2); } }
    apply { ctr.count(1); keyless_t.apply(); prof_t.apply(); dc_t.apply(); init_t.apply(); }
}
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
FRAME = bytes.fromhex("0a0000000001" "0a0000000002" "88b5") + bytes(50)


@pytest.fixture
def dev():
    program = compile_source(PROGRAM, "tables.p4")
    d = _boot(program, compiler=lambda config: compile_source(config.decode(), "tables.p4"))
    primary = Stream(d["addr"])
    d["streams"].append(primary)
    assert primary.arbitrate(ELECTION).arbitration.status.code == code_pb2.OK
    d["ids"] = dict(_ids(program.p4info), ctr=program.p4info.counters[0].preamble.id)
    yield d
    _shutdown(d)


def _forwarded_to(dev, port_number):
    dev["ports"][1].peer.send(FRAME)
    return dev["ports"][port_number].peer.recv(2048)


def test_a_keyless_table_takes_one_entry_that_every_packet_hits(dev):
    """BMv2 keeps a keyless table as an exact table with an empty key and PI passes the empty
    match through: one INSERT without match fields is taken (the engine refused it), every
    packet hits it, a second is ALREADY_EXISTS, and it reads back and deletes like any entry."""
    entry = ("table_entry {{ table_id: {keyless_t} action {{ action {{ action_id: {fwd} "
             "params {{ param_id: 1 value: '\\x03' }} }} }} }}")
    assert _code(dev, "INSERT", entry) == "OK"
    assert _forwarded_to(dev, 3) == FRAME
    assert _code(dev, "INSERT", entry) == "ALREADY_EXISTS"
    (read,) = _read(dev, "table_entry {{ table_id: {keyless_t} }}")
    assert not read.table_entry.match and not read.table_entry.is_default_action
    assert read.table_entry.action.action.action_id == dev["ids"]["fwd"]
    modified = entry.replace("\\x03", "\\x02")
    assert _code(dev, "MODIFY", modified) == "OK"
    assert _forwarded_to(dev, 2) == FRAME
    assert _code(dev, "DELETE", "table_entry {{ table_id: {keyless_t} }}") == "OK"
    assert _read(dev, "table_entry {{ table_id: {keyless_t} }}") == []


def test_the_default_entry_of_a_table_with_an_action_profile_has_no_action(dev):
    """p4c-bm2-ss gives BMv2 no default action for such a table, so PI reads its default entry
    back without an action (the engine showed NoAction); tables without one still show theirs."""
    (read,) = _read(dev, "table_entry {{ table_id: {prof_t} is_default_action: true }}")
    assert read.table_entry.is_default_action and not read.table_entry.HasField("action")
    (read,) = _read(dev, "table_entry {{ table_id: {keyless_t} is_default_action: true }}")
    assert read.table_entry.action.action.action_id == dev["ids"]["drop"]


def test_a_counter_modify_without_data_leaves_the_counter_as_it_is(dev):
    """The spec (CounterEntry, DirectCounterEntry): without `data` a MODIFY does not change the
    counter; PI writes zeroes. A direct counter's entry must still exist (NOT_FOUND, where PI
    answers INVALID_ARGUMENT)."""
    ctr_id = dev["ids"]["ctr"]      # (the packets of the other tests count at index 1)
    assert _code(dev, "MODIFY", "counter_entry {{ counter_id: %d index {{ index: 2 }} "
                                "data {{ packet_count: 7 byte_count: 70 }} }}" % ctr_id) == "OK"
    assert _code(dev, "MODIFY", "counter_entry {{ counter_id: %d index {{ index: 2 }} }}" % ctr_id) == "OK"
    assert _code(dev, "MODIFY", "counter_entry {{ counter_id: %d }}" % ctr_id) == "OK"
    (read,) = _read(dev, "counter_entry {{ counter_id: %d index {{ index: 2 }} }}" % ctr_id)
    assert (read.counter_entry.data.packet_count, read.counter_entry.data.byte_count) == (7, 70)
    assert _code(dev, "MODIFY", "counter_entry {{ counter_id: %d index {{ index: 9 }} }}" % ctr_id) == "OUT_OF_RANGE"
    # the spec over PI again: DELETE is INVALID_ARGUMENT (PI zeroes the counter)
    assert _code(dev, "DELETE", "counter_entry {{ counter_id: %d index {{ index: 2 }} }}" % ctr_id) == "INVALID_ARGUMENT"

    key = "table_entry {{ table_id: {dc_t} match {{ field_id: 1 exact {{ value: '\\x0a\\x00\\x00\\x00\\x00\\x02' }} }} }}"
    assert _code(dev, "MODIFY", "direct_counter_entry {{ %s }}" % key) == "NOT_FOUND"
    assert _read_code(dev, "direct_counter_entry {{ %s }}" % key) == "NOT_FOUND"     # (PI: INVALID_ARGUMENT)
    assert _code(dev, "INSERT", key[:-3] + "action {{ action {{ action_id: {NoAction} }} }} "
                                "counter_data {{ packet_count: 5 byte_count: 50 }} }}") == "OK"
    assert _code(dev, "MODIFY", "direct_counter_entry {{ %s }}" % key) == "OK"
    (read,) = _read(dev, "direct_counter_entry {{ table_entry {{ table_id: {dc_t} }} }}")
    assert (read.direct_counter_entry.data.packet_count, read.direct_counter_entry.data.byte_count) == (5, 50)


def test_a_preinitialized_table_is_immutable_as_on_bmv2_but_reconciles(dev):
    """A table with `entries` (not const) is kept immutable, as BMv2 keeps every table whose
    JSON has entries: writes are PERMISSION_DENIED as for a const table (README: the spec lets
    them be written; PI answers UNKNOWN/NOT_FOUND), its entries' direct counters take a MODIFY
    without an action, and RECONCILE_AND_COMMIT does not trip over the initial entries (it
    tried to INSERT them into the new pipeline and failed with UNKNOWN)."""
    key = "table_entry {{ table_id: {init_t} match {{ field_id: 1 exact {{ value: '\\x88\\xb6' }} }} "
    fwd = "action {{ action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x03' }} }} }} "
    assert _code(dev, "INSERT", key.replace("\\xb6", "\\xb7") + fwd + "}}") == "PERMISSION_DENIED"
    assert _code(dev, "MODIFY", key + fwd + "}}") == "PERMISSION_DENIED"
    assert _code(dev, "DELETE", key + "}}") == "PERMISSION_DENIED"
    assert _code(dev, "MODIFY", key + "counter_data {{ packet_count: 4 }} }}") == "OK"
    (read,) = _read(dev, "table_entry {{ table_id: {init_t} counter_data {{ }} }}")
    assert read.table_entry.counter_data.packet_count == 4
    assert _set_pipeline(dev, "RECONCILE_AND_COMMIT", PROGRAM) == "OK"
    (read,) = _read(dev, "table_entry {{ table_id: {init_t} }}")
    assert read.table_entry.match[0].exact.value == b"\x88\xb6"


def test_wildcard_reads_filter_on_action_controller_metadata_and_metadata(dev):
    """The spec's wildcard-read filters (PI ignores them and returns every entry): a set
    action_id (parameters are not compared), controller_metadata or metadata keeps the entries
    that have it; a filter on a member or group id is not one the spec offers (INVALID_ARGUMENT)."""
    def insert(src, action, cookie, metadata):
        text = ("table_entry {{ table_id: {dc_t} match {{ field_id: 1 exact {{ value: '%s' }} }} "
                "action {{ action {{ action_id: {%s} %s }} }} controller_metadata: %d metadata: '%s' }}"
                % (src, action, "params {{ param_id: 1 value: '\\x02' }}" if action == "fwd" else "",
                   cookie, metadata))
        assert _code(dev, "INSERT", text) == "OK"
    insert("\\x01", "fwd", 5, "a")
    insert("\\x02", "NoAction", 5, "b")
    insert("\\x03", "fwd", 6, "b")

    def sources(filters):
        return sorted(e.table_entry.match[0].exact.value[-1]
                      for e in _read(dev, "table_entry {{ table_id: {dc_t} %s }}" % filters))
    assert sources("") == [1, 2, 3]
    assert sources("action {{ action {{ action_id: {fwd} params {{ param_id: 1 value: '\\x09' }} }} }}") == [1, 3]
    assert sources("controller_metadata: 5") == [1, 2]
    assert sources("metadata: 'b'") == [2, 3]
    assert sources("action {{ action {{ action_id: {fwd} }} }} metadata: 'b'") == [3]
    assert _read_code(dev, "table_entry {{ table_id: {dc_t} action {{ action_profile_member_id: 1 }} }}") \
        == "INVALID_ARGUMENT"
