"""Idle timeout on the engine target, as simple_switch_grpc serves it: entries of a table with
support_timeout take idle_timeout_ns; those not hit for their TTL are reported to the primary in
an IdleTimeoutNotification (and stay in the table); reads give time_since_last_hit; tables
without support_timeout refuse both with INVALID_ARGUMENT.

The switch runs on a clock the test sets, so ages are exact; the sweeps are the server's own
(sweep_idle_entries), except where the switch's loop drives them. Clients: raw p4runtime stubs
for the corner cases, p4runtime-shell for the common path."""
import queue

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from switch_fake_engine import SocketPort
from test_p4rt_hardening import Stream, _codes, _write
from test_p4rt_server import CPU_PORT, free_port
from testbed.p4engine import compile_source
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch

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
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table flows {
        key = { h.eth.dst: exact; }
        actions = { fwd; drop; }
        default_action = drop();
        support_timeout = true;
    }
    table plain {
        key = { h.eth.src: exact; }
        actions = { fwd; NoAction; }
        default_action = NoAction();
    }
    apply { plain.apply(); flows.apply(); }
}
control E(inout h_t h, inout m_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout h_t h, inout m_t m) { apply { } }
control D(packet_out p, in h_t h) { apply { p.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

SECOND_NS = 1_000_000_000
START = 100.0          # the test clock's reading when the switch starts (seconds)


class SetClock:
    """The switch's clock: it moves only when the test says so."""

    def __init__(self):
        self.now = START

    def __call__(self):
        return self.now


class Notifications:
    """The primary's StreamChannel, its messages collected by a reader thread."""

    def __init__(self, addr):
        self.stream = Stream(addr)
        assert self.stream.arbitrate().arbitration.status.code == 0
        self.stream.collect()

    def next_idle(self, wait=20.0):
        return self.stream.next_update("idle_timeout_notification", wait)

    def close(self):
        self.stream.close()


@pytest.fixture(scope="module")
def program():
    return compile_source(PROGRAM, "idle.p4")


def _ids(p4info):
    tables = {t.preamble.name.split(".")[-1]: t.preamble.id for t in p4info.tables}
    actions = {a.preamble.name.split(".")[-1]: a.preamble.id for a in p4info.actions}
    return tables, actions


def _boot(program, idle_sweep_s, stream=True):
    ports = {n: SocketPort(n) for n in (1, 2, 3)}
    clock = SetClock()
    switch = Switch(ports, cpu_port=CPU_PORT, clock=clock)
    switch.start()
    addr = f"127.0.0.1:{free_port()}"
    server = P4RuntimeServer(switch, device_id=1, address=addr, idle_sweep_s=idle_sweep_s,
                             compiler=lambda config: program).start()
    server.load_program(program, device_config=PROGRAM.encode())
    channel = grpc.insecure_channel(addr)
    tables, actions = _ids(program.p4info)
    return {"switch": switch, "ports": ports, "clock": clock, "server": server, "channel": channel,
            "stub": p4runtime_pb2_grpc.P4RuntimeStub(channel), "tables": tables, "actions": actions,
            "stream": Notifications(addr) if stream else None, "addr": addr}


def _shutdown(dev):
    if dev["stream"] is not None:
        dev["stream"].close()
    dev["channel"].close()
    dev["server"].stop()
    dev["switch"].close()


@pytest.fixture
def dev(program):
    # sweeps only when the test calls them: the loop's period is longer than any test
    d = _boot(program, idle_sweep_s=10_000.0)
    yield d
    _shutdown(d)


def _flow(dev, dst, ttl_ns, op=p4runtime_pb2.Update.INSERT, port=2, cookie=0, table="flows"):
    update = p4runtime_pb2.Update(type=op)
    te = update.entity.table_entry
    te.table_id = dev["tables"][table]
    te.match.add(field_id=1).exact.value = dst.to_bytes(6, "big")
    te.action.action.action_id = dev["actions"]["fwd"]
    te.action.action.params.add(param_id=1, value=bytes([port]))
    te.idle_timeout_ns = ttl_ns
    te.controller_metadata = cookie
    return update


def _read(dev, table="flows", dst=None, elapsed=True):
    entity = p4runtime_pb2.Entity()
    te = entity.table_entry
    te.table_id = dev["tables"][table] if table else 0
    if dst is not None:
        te.match.add(field_id=1).exact.value = dst.to_bytes(6, "big")
    if elapsed:
        te.time_since_last_hit.SetInParent()
    request = p4runtime_pb2.ReadRequest(device_id=1, entities=[entity])
    return [e.table_entry for r in dev["stub"].Read(request, timeout=20) for e in r.entities]


def _send(dev, dst, tag):
    """A frame to `dst` in on port 1; returns once it came out of port 2 (so it was looked up)."""
    frame = dst.to_bytes(6, "big") + bytes.fromhex("020000000001") + b"\x88\xb5" + bytes([tag]) * 50
    dev["ports"][1].peer.send(frame)
    got = dev["ports"][2].receive_all(wait=5.0)
    assert [f[14] for f in got] == [tag]


def _dst_of(te):
    return int.from_bytes(te.match[0].exact.value, "big")


def _advance(dev, seconds):
    dev["clock"].now += seconds


A, B, C = 0x0A0000000001, 0x0A0000000002, 0x0A0000000003


def test_idle_entry_reported_once_hit_entry_not_and_entries_stay(dev):
    _write(dev["stub"], _flow(dev, A, 2 * SECOND_NS, cookie=11), _flow(dev, B, 2 * SECOND_NS, cookie=12),
           _flow(dev, C, 0))                       # TTL 0: never idle
    _advance(dev, 1.5)
    _send(dev, B, tag=7)                           # B hit at 1.5 s
    _advance(dev, 1.0)                             # 2.5 s: A idle 2.5 s, B 1.0 s, C 2.5 s (no TTL)
    sent = dev["server"].sweep_idle_entries()
    assert sent is not None
    got = dev["stream"].next_idle()
    assert got == sent.idle_timeout_notification
    assert [_dst_of(te) for te in got.table_entry] == [A]
    (entry,) = got.table_entry
    assert entry.table_id == dev["tables"]["flows"]
    assert entry.idle_timeout_ns == 2 * SECOND_NS and entry.controller_metadata == 11
    assert not entry.HasField("action")           # as PI: the key, metadata and TTL only
    assert got.timestamp > 0
    # the switch deleted nothing
    assert sorted(_dst_of(te) for te in _read(dev)) == [A, B, C]
    # a sweep right after has nothing new: A's timer restarted at its notification
    assert dev["server"].sweep_idle_entries() is None


def test_time_since_last_hit_and_ttl_read_back(dev):
    _write(dev["stub"], _flow(dev, A, 5 * SECOND_NS), _flow(dev, B, 0))
    _advance(dev, 1.0)
    _send(dev, B, tag=1)
    _advance(dev, 2.5)
    by_dst = {_dst_of(te): te for te in _read(dev)}
    assert by_dst[A].time_since_last_hit.elapsed_ns == 3_500_000_000
    assert by_dst[A].idle_timeout_ns == 5 * SECOND_NS
    # also for an entry without TTL (the spec; PI answers 0 there)
    assert by_dst[B].time_since_last_hit.elapsed_ns == 2_500_000_000
    (one,) = _read(dev, dst=A)
    assert one.time_since_last_hit.elapsed_ns == 3_500_000_000
    # not asked for, not given
    assert not _read(dev, dst=A, elapsed=False)[0].HasField("time_since_last_hit")


def test_renotified_one_ttl_after_notification_and_modify_restarts_timer(dev):
    _write(dev["stub"], _flow(dev, A, 2 * SECOND_NS), _flow(dev, B, 2 * SECOND_NS))
    _advance(dev, 1.5)
    _write(dev["stub"], _flow(dev, B, 2 * SECOND_NS, op=p4runtime_pb2.Update.MODIFY, port=3))
    _advance(dev, 1.0)                             # 2.5 s: A due; B modified 1.0 s ago
    assert [_dst_of(te) for te in dev["server"].sweep_idle_entries().idle_timeout_notification.table_entry] == [A]
    _advance(dev, 1.0)                             # 3.5 s: B 2.0 s after its MODIFY; A 1.0 after notification
    assert [_dst_of(te) for te in dev["server"].sweep_idle_entries().idle_timeout_notification.table_entry] == [B]
    _advance(dev, 1.0)                             # 4.5 s: A one TTL after its notification
    assert [_dst_of(te) for te in dev["server"].sweep_idle_entries().idle_timeout_notification.table_entry] == [A]
    got = [_dst_of(te) for _ in range(3) for te in dev["stream"].next_idle().table_entry]
    assert got == [A, B, A]


def test_tables_without_support_timeout_refuse_ttls(dev):
    with pytest.raises(grpc.RpcError) as err:
        _write(dev["stub"], _flow(dev, A, SECOND_NS, table="plain"))
    assert _codes(err.value) == [code_pb2.INVALID_ARGUMENT]
    _write(dev["stub"], _flow(dev, A, 0, table="plain"))   # TTL 0 is fine
    with pytest.raises(grpc.RpcError) as err:
        _read(dev, table="plain")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:               # a wildcard read too, as PI
        _read(dev, table=None)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # the default entry takes no TTL, even where the table supports idle timeout
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    te = update.entity.table_entry
    te.table_id, te.is_default_action, te.idle_timeout_ns = dev["tables"]["flows"], True, SECOND_NS
    te.action.action.action_id = dev["actions"]["drop"]
    with pytest.raises(grpc.RpcError) as err:
        _write(dev["stub"], update)
    assert _codes(err.value) == [code_pb2.INVALID_ARGUMENT]
    with pytest.raises(grpc.RpcError) as err:
        _write(dev["stub"], _flow(dev, B, -1))
    assert _codes(err.value) == [code_pb2.INVALID_ARGUMENT]
    # a DELETE is not checked (as PI): the entry written without TTL goes
    _write(dev["stub"], _flow(dev, A, SECOND_NS, op=p4runtime_pb2.Update.DELETE, table="plain"))
    assert not _read(dev, table="plain", elapsed=False)


def test_switch_loop_drives_the_sweeps(program):
    dev = _boot(program, idle_sweep_s=1.0)
    try:
        _write(dev["stub"], _flow(dev, A, 2 * SECOND_NS))
        # The loop (awake every half second at most) plans its first sweep one period after it
        # first sees the pipeline, which may be after any given step: keep the clock moving.
        got = None
        for _ in range(200):
            _advance(dev, 1.0)
            try:
                got = dev["stream"].next_idle(wait=0.1)
                break
            except queue.Empty:
                pass
        assert got is not None and [_dst_of(te) for te in got.table_entry] == [A]
    finally:
        _shutdown(dev)


def test_fabric_like_tables_record_nothing(program):
    """Only support_timeout tables are IdleTimeoutTables (the per-packet hit time)."""
    from testbed.p4engine import tables
    pipeline = program.new_pipeline()
    assert type(pipeline.tables["I.flows"]) is tables.IdleTimeoutTable
    assert type(pipeline.tables["I.plain"]) is tables.Table


def test_p4runtime_shell_sets_ttl_reads_age_and_gets_the_notification(program, tmp_path):
    from p4runtime_sh import shell as sh
    dev = _boot(program, idle_sweep_s=10_000.0, stream=False)
    p4info = tmp_path / "idle.p4info.txt"
    p4info.write_text(text_format.MessageToString(program.p4info))
    source = tmp_path / "idle.p4"
    source.write_text(PROGRAM)
    try:
        sh.setup(device_id=1, grpc_addr=dev["addr"], election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(p4info), str(source)), verbose=False)
        te = sh.TableEntry("I.flows")(action="I.fwd")
        te.match["h.eth.dst"] = str(A)
        te.action["port"] = "2"
        te.idle_timeout_ns = 2 * SECOND_NS
        te.insert()
        _advance(dev, 2.5)
        assert dev["server"].sweep_idle_entries() is not None
        got = sh.client.get_stream_packet("idle_timeout_notification", timeout=20)
        (entry,) = got.idle_timeout_notification.table_entry
        assert _dst_of(entry) == A and entry.idle_timeout_ns == 2 * SECOND_NS
        query = sh.TableEntry("I.flows")
        query.time_since_last_hit           # asks for it in the read
        (read,) = list(query.read())
        assert read.time_since_last_hit.elapsed_ns == 2_500_000_000
        assert read.idle_timeout_ns == 2 * SECOND_NS
    finally:
        sh.teardown()
        _shutdown(dev)
