"""P4Runtime server against hostile or careless clients: idle StreamChannels cannot starve the
unary RPCs (they are capped with RESOURCE_EXHAUSTED), and status codes follow P4Runtime 1.4
(too-wide or empty bytestrings OUT_OF_RANGE, unknown role NOT_FOUND, a live stream changing
role FAILED_PRECONDITION, COMMIT without a saved config NOT_FOUND, replicas naming ports the
switch does not have INVALID_ARGUMENT)."""
import queue
import threading
import time

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from switch_fake_engine import FakeProgram, SocketPort, fake_p4info
from test_p4rt_server import CPU_PORT, free_port
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch

ELECTION = (0, 1)
FWD, SET_PORT, REGISTER = 33554433, 16777217, 369098753


@pytest.fixture
def server():
    ports = {n: SocketPort(n) for n in (1, 2, 3)}
    switch = Switch(ports, cpu_port=CPU_PORT)
    switch.start()
    addr = f"127.0.0.1:{free_port()}"
    program = FakeProgram()
    srv = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    srv.load_program(program, p4info=fake_p4info())
    channel = grpc.insecure_channel(addr)
    yield {"addr": addr, "server": srv, "stub": p4runtime_pb2_grpc.P4RuntimeStub(channel), "switch": switch}
    channel.close()
    srv.stop()
    switch.close()


class Stream:
    """A StreamChannel whose requests the test feeds (or never feeds: an idle stream)."""

    def __init__(self, addr):
        self.channel = grpc.insecure_channel(addr)
        self.requests = queue.Queue()
        self.done = threading.Event()
        stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)

        def feed():
            while True:
                item = self.requests.get()
                if item is None:
                    return
                yield item
        self.responses = stub.StreamChannel(feed())
        self.responses.add_done_callback(lambda _call: self.done.set())

    def arbitrate(self, election=ELECTION, role="", device_id=1):
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = election
        if role:
            req.arbitration.role.name = role
        self.requests.put(req)
        return next(self.responses)

    def collect(self):
        """From now on a thread reads the responses; next_update() takes them."""
        self.collected = queue.Queue()

        def read():
            try:
                for message in self.responses:
                    self.collected.put(message)
            except grpc.RpcError:
                pass
        threading.Thread(target=read, daemon=True).start()
        return self

    def next_update(self, kind, wait=20.0):
        """The next collected response of `kind` ("digest", ...), those of other kinds skipped."""
        while True:
            message = self.collected.get(timeout=wait)
            if message.WhichOneof("update") == kind:
                return getattr(message, kind)

    def close(self):
        self.requests.put(None)
        self.channel.close()


def _write(stub, *updates, role=""):
    req = p4runtime_pb2.WriteRequest(device_id=1, role=role)
    req.election_id.high, req.election_id.low = ELECTION
    req.updates.extend(updates)
    return stub.Write(req, timeout=20)


def _codes(err):
    """The per-update canonical codes of a failed Write."""
    status = status_pb2.Status.FromString(dict(err.trailing_metadata())["grpc-status-details-bin"])
    codes = []
    for detail in status.details:
        e = p4runtime_pb2.Error()
        detail.Unpack(e)
        codes.append(e.canonical_code)
    return codes


def _entry(port_value, param_value=b"\x02"):
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    te = update.entity.table_entry
    te.table_id = FWD
    te.match.add(field_id=1).exact.value = port_value
    te.action.action.action_id = SET_PORT
    te.action.action.params.add(param_id=1, value=param_value)
    return update


def _pre(kind, ident, replicas):
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    pre = update.entity.packet_replication_engine_entry
    entry = pre.multicast_group_entry if kind == "mc" else pre.clone_session_entry
    if kind == "mc":
        entry.multicast_group_id = ident
    else:
        entry.session_id = ident
    for port, instance in replicas:
        entry.replicas.add(egress_port=port, instance=instance)
    return update


def _wait_until(condition, deadline=20.0):
    """Poll `condition` until it holds or `deadline` seconds pass (a wait, not a timing test)."""
    end = time.monotonic() + deadline
    while not condition() and time.monotonic() < end:
        time.sleep(0.02)
    return condition()


def test_sixteen_idle_streams_do_not_starve_write_and_capabilities(server):
    primary = Stream(server["addr"])
    assert primary.arbitrate().arbitration.status.code == code_pb2.OK
    idle = [Stream(server["addr"]) for _ in range(16)]
    allowed = server["server"].max_streams - 1          # the primary holds one slot
    # a refused stream ends at once; an accepted idle one never does
    _wait_until(lambda: sum(s.done.is_set() for s in idle) >= len(idle) - allowed)
    stub = server["stub"]
    assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=20).p4runtime_api_version
    _write(stub, _entry(b"\x01"))
    refused = [s for s in idle if s.done.is_set()]
    assert len(refused) == len(idle) - allowed
    assert {s.responses.code() for s in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    for stream in idle:
        stream.close()
    # the slots come back once the idle clients go away
    assert _wait_until(lambda: server["server"]._open_streams == 1)
    later = Stream(server["addr"])
    assert later.arbitrate(election=(0, 2)).arbitration.status.code == code_pb2.OK
    later.close()
    primary.close()


def test_bytestrings_too_wide_or_empty_are_out_of_range(server):
    primary = Stream(server["addr"])
    primary.arbitrate()
    with pytest.raises(grpc.RpcError) as err:
        _write(server["stub"], _entry(b"\x02\x00"), _entry(b""), _entry(b"\x01", b"\x7f\xff"),
               _entry(b"\x00\x00\x00\x03"))
    assert _codes(err.value) == [code_pb2.OUT_OF_RANGE] * 3 + [code_pb2.OK]
    primary.close()


def test_unknown_role_is_not_found_and_a_live_stream_keeps_its_role(server):
    primary = Stream(server["addr"])
    primary.arbitrate()
    with pytest.raises(grpc.RpcError) as err:
        _write(server["stub"], _entry(b"\x01"), role="nobody")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        primary.arbitrate(role="other")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    primary.close()
    # a backup of the default role is still PERMISSION_DENIED, not NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        _write(server["stub"], _entry(b"\x01"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_role_config_is_invalid_argument(server):
    stream = Stream(server["addr"])
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = 1
    req.arbitration.election_id.low = 1
    req.arbitration.role.name = "te"
    req.arbitration.role.config.type_url = "type.example.com/some.RoleConfig"
    stream.requests.put(req)
    with pytest.raises(grpc.RpcError) as err:
        next(stream.responses)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stream.close()


def test_commit_without_saved_config_is_not_found(server):
    primary = Stream(server["addr"])
    primary.arbitrate()
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.COMMIT)
    req.election_id.high, req.election_id.low = ELECTION
    with pytest.raises(grpc.RpcError) as err:
        server["stub"].SetForwardingPipelineConfig(req, timeout=20)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    req.config.p4info.CopyFrom(fake_p4info())
    with pytest.raises(grpc.RpcError) as err:
        server["stub"].SetForwardingPipelineConfig(req, timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    primary.close()


def test_replicas_must_name_ports_of_the_switch(server):
    primary = Stream(server["addr"])
    primary.arbitrate()
    with pytest.raises(grpc.RpcError) as err:
        _write(server["stub"], _pre("clone", 5, [(77, 0)]), _pre("mc", 6, [(1, 0), (9, 1)]),
               _pre("mc", 7, [(1, 0x10000)]), _pre("clone", 8, [(CPU_PORT, 0)]),
               _pre("mc", 9, [(1, 1), (3, 2)]))
    assert _codes(err.value) == [code_pb2.INVALID_ARGUMENT] * 3 + [code_pb2.OK, code_pb2.OK]
    pipeline = server["switch"].pipeline
    assert 5 not in pipeline.clone_sessions and 6 not in pipeline.mc_groups
    assert pipeline.mc_groups[9] == [(1, 1), (3, 2)]
    primary.close()


def test_negative_index_is_invalid_past_the_end_out_of_range(server):
    primary = Stream(server["addr"])
    primary.arbitrate()
    updates = []
    for index in (-1, 8, 7):
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
        entry = update.entity.register_entry
        entry.register_id = REGISTER
        entry.index.index = index
        entry.data.bitstring = b"\x05"
        updates.append(update)
    with pytest.raises(grpc.RpcError) as err:
        _write(server["stub"], *updates)
    assert _codes(err.value) == [code_pb2.INVALID_ARGUMENT, code_pb2.OUT_OF_RANGE, code_pb2.OK]
    primary.close()


def test_device_config_may_not_include_the_switchs_files(tmp_path):
    """A device config is compiled sandboxed: #include of a local file is refused, so no line of
    it can come back in the error message."""
    secret = tmp_path / "secret.p4"
    secret.write_text("TOP-SECRET-LINE\n")
    ports = {n: SocketPort(n) for n in (1, 2)}
    switch = Switch(ports)
    addr = f"127.0.0.1:{free_port()}"
    srv = P4RuntimeServer(switch, device_id=1, address=addr).start()
    channel = grpc.insecure_channel(addr)
    try:
        primary = Stream(addr)
        primary.arbitrate()
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        for include in (f'"{secret}"', '"../secret.p4"', f"<{secret}>"):
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
            req.election_id.high, req.election_id.low = ELECTION
            req.config.p4info.CopyFrom(fake_p4info())
            req.config.p4_device_config = f"#include <core.p4>\n#include {include}\n".encode()
            with pytest.raises(grpc.RpcError) as err:
                stub.SetForwardingPipelineConfig(req, timeout=120)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "may include only the bundled files" in err.value.details()
            assert "TOP-SECRET" not in err.value.details()
        primary.close()
    finally:
        channel.close()
        srv.stop()
        switch.close()


def test_a_bmv2_json_device_config_is_named_as_such():
    """p4lang/tutorials' controllers push p4c-bm2-ss's JSON: the answer says what to send instead
    of a P4 syntax error at its first brace."""
    from testbed.p4rt.errors import P4RuntimeError
    from testbed.p4rt.server import compile_device_config
    bmv2_json = b'{\n  "header_types" : [], "headers" : [], "pipelines" : []\n}\n'
    with pytest.raises(P4RuntimeError) as err:
        compile_device_config(bmv2_json)
    assert err.value.code == code_pb2.INVALID_ARGUMENT
    assert "is a BMv2 JSON" in err.value.message and "P4_16 source" in err.value.message
    with pytest.raises(P4RuntimeError) as err:           # a P4 program stays a P4 program
        compile_device_config(b"{ this is not P4 }")
    assert "does not compile" in err.value.message


def test_packet_out_flood_is_bounded_and_told_resource_exhausted():
    """Packet-outs wait in a bounded queue for the data path: past it they are refused with a
    RESOURCE_EXHAUSTED stream error instead of growing the switch's memory."""
    from testbed.switch.datapath import MAX_INJECTED
    ports = {n: SocketPort(n) for n in (1, 2)}
    switch = Switch(ports, cpu_port=CPU_PORT)       # not started: nothing drains the queue
    addr = f"127.0.0.1:{free_port()}"
    program = FakeProgram()
    srv = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    srv.load_program(program, p4info=fake_p4info())
    try:
        primary = Stream(addr)
        primary.arbitrate()
        for _ in range(MAX_INJECTED + 3):
            out = p4runtime_pb2.StreamMessageRequest()
            out.packet.payload = b"\x00" * 60
            out.packet.metadata.add(metadata_id=1, value=b"\x01")
            primary.requests.put(out)
        errors = [next(primary.responses).error for _ in range(3)]
        assert {e.canonical_code for e in errors} == {code_pb2.RESOURCE_EXHAUSTED}
        assert len(switch._injected) == MAX_INJECTED
        primary.close()
    finally:
        srv.stop()
        switch.close()


def test_a_wildcard_read_lets_go_of_the_switch_lock_between_chunks():
    """Reading every cell of a big counter takes seconds of protobuf work: the switch lock is
    taken a chunk at a time, so the data path and Writes get in between."""
    import os
    from testbed.p4engine import compile_source
    from testbed.p4rt.entities import READ_CHUNK, DeviceState, EntityHandler
    from testbed.p4rt.p4info import P4InfoIndex

    class CountingLock:
        def __init__(self):
            self.holds = 0

        def __enter__(self):
            self.holds += 1

        def __exit__(self, *exc):
            return False

    source = open(os.path.join(os.path.dirname(__file__), "p4", "rt_externs.p4")).read()
    program = compile_source(source.replace("counter(8,", "counter(4096,"), "big_counter.p4")
    lock = CountingLock()
    handler = EntityHandler(P4InfoIndex(program.p4info), program.new_pipeline(), DeviceState(), lock)
    counter = next(c for c in program.p4info.counters if c.size == 4096)
    entity = p4runtime_pb2.Entity()
    entity.counter_entry.counter_id = counter.preamble.id
    cells = handler.read(entity)
    assert [e.counter_entry.index.index for e in cells] == list(range(4096))
    assert lock.holds >= 4096 // READ_CHUNK


def test_a_controller_that_stops_reading_does_not_grow_the_switch():
    """Packet-ins for a primary that never reads its stream wait in a bounded queue; the rest
    are dropped and counted, and closing the stream still gets through."""
    from testbed.p4rt.server import Controller
    ctl = Controller("ipv4:127.0.0.1:1")
    for i in range(Controller.MAX_PENDING + 50):
        ctl.send(i)
    assert ctl.out.qsize() == Controller.MAX_PENDING and ctl.dropped == 50
    ctl.close(code_pb2.CANCELLED, "bye")
    items = []
    while not ctl.out.empty():
        items.append(ctl.out.get_nowait())
    assert items[-1] == ("end", code_pb2.CANCELLED, "bye")


def test_a_p4info_whose_widths_differ_from_the_program_is_refused():
    """Values are checked against the P4Info's widths: one that does not match the program (a
    key or param wider than the program's) is INVALID_ARGUMENT at SetForwardingPipelineConfig."""
    import os
    from testbed.p4engine import compile_file
    program = compile_file(os.path.join(os.path.dirname(__file__), "p4", "rt_tables_exact.p4"))
    switch = Switch({n: SocketPort(n) for n in (1, 2)})
    addr = f"127.0.0.1:{free_port()}"
    srv = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    try:
        primary = Stream(addr)
        primary.arbitrate()
        stub = p4runtime_pb2_grpc.P4RuntimeStub(grpc.insecure_channel(addr))
        for damage in ("key", "param", None):
            p4info = type(program.p4info)()
            p4info.CopyFrom(program.p4info)
            if damage == "key":
                p4info.tables[0].match_fields[0].bitwidth = 2 ** 31 - 1
            elif damage == "param":
                next(a for a in p4info.actions if a.params).params[0].bitwidth += 1
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY)
            req.election_id.high, req.election_id.low = ELECTION
            req.config.p4info.CopyFrom(p4info)
            req.config.p4_device_config = b"(the fake compiler ignores this)"
            if damage is None:
                stub.SetForwardingPipelineConfig(req, timeout=60)
                continue
            with pytest.raises(grpc.RpcError) as err:
                stub.SetForwardingPipelineConfig(req, timeout=60)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "bits" in err.value.details()
        primary.close()
    finally:
        srv.stop()
        switch.close()


def test_big_failing_batches_still_reach_the_client_and_the_controller_names_the_failure(server):
    """A Write's status travels in gRPC metadata, which clients cap: per-update messages are
    shortened, and a batch too big to list gets a summary (not 'Stream removed'). The fabric
    controller's writer reads partial failures without hanging (p4runtime-shell's iterator
    never ends on the OK entries)."""
    from testbed.control.p4runtime_io import ControlError, SwitchConnection
    primary = Stream(server["addr"])
    primary.arbitrate()
    for count in (100, 1000):
        with pytest.raises(grpc.RpcError) as err:
            _write(server["stub"], *[_entry(b"\x02\x00") for _ in range(count)])
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        codes = _codes(err.value) if count == 100 else None
        assert codes is None or codes == [code_pb2.OUT_OF_RANGE] * count
        if count == 1000:
            assert "1000 of 1000 updates failed" in err.value.details()
    primary.close()
    conn = SwitchConnection("s1", server["addr"], 1, election_id=(0, 9), rpc_timeout=20)
    conn.connect(timeout=20)
    try:
        good, bad = _entry(b"\x03"), _entry(b"\x02\x00")
        with pytest.raises(ControlError) as err:
            conn.write([("INSERT", good.entity, "good entry"), ("INSERT", bad.entity, "too wide")])
        assert "INSERT too wide: OUT_OF_RANGE" in str(err.value) and "good entry" not in str(err.value)
    finally:
        conn.close()
