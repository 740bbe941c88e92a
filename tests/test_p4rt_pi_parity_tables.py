"""Table corners where the P4Runtime server answers as simple_switch_grpc (PI on BMv2): a table
without keys, and the default entry of a table with an action profile. A program of its own
(test_p4rt_pi_parity's covers the rest)."""
import pytest
from google.rpc import code_pb2

from test_p4rt_hardening import Stream
from test_p4rt_pi_parity import ELECTION, _boot, _code, _ids, _read, _shutdown
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
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table keyless_t { actions = { fwd; drop; } default_action = drop(); }
    table prof_t { key = { h.eth.dst: exact; } actions = { fwd; drop; } implementation = prof; }
    apply { keyless_t.apply(); prof_t.apply(); }
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
    d = _boot(program)
    primary = Stream(d["addr"])
    d["streams"].append(primary)
    assert primary.arbitrate(ELECTION).arbitration.status.code == code_pb2.OK
    d["ids"] = _ids(program.p4info)
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
