"""The P4Runtime server against a fake compiled program, driven by p4runtime-shell
(as a library) and by raw p4runtime stubs for the spec's corner cases."""
import queue
import socket
import time

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from switch_fake_engine import FAKE_P4INFO, FakeProgram, SocketPort, fake_p4info, ipv4_frame, frame_tag
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch

CPU_PORT = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def device(tmp_path):
    ports = {n: SocketPort(n) for n in (1, 2, 3)}
    switch = Switch(ports, cpu_port=CPU_PORT)
    switch.start()
    addr = f"127.0.0.1:{free_port()}"
    program = FakeProgram()
    server = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    p4info = tmp_path / "fake.p4info.txt"
    p4info.write_text(FAKE_P4INFO)
    source = tmp_path / "fake.p4"
    source.write_text("// the fake compiler ignores this\n")
    yield {"switch": switch, "ports": ports, "addr": addr, "server": server, "program": program,
           "p4info": str(p4info), "source": str(source)}
    server.stop()
    switch.close()


@pytest.fixture
def shell(device):
    from p4runtime_sh import shell as sh
    sh.setup(device_id=1, grpc_addr=device["addr"], election_id=(0, 1),
             config=sh.FwdPipeConfig(device["p4info"], device["source"]), verbose=False)
    yield sh
    sh.teardown()


def test_entries_written_with_p4runtime_shell_forward_and_read_back(device, shell):
    te = shell.TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
    te.match["standard_metadata.ingress_port"] = "1"
    te.action["port"] = "3"
    te.insert()
    device["ports"][1].peer.send(ipv4_frame(tag=42))
    got = device["ports"][3].receive_all()
    assert [frame_tag(f) for f in got] == [42]
    read = list(shell.TableEntry("MyIngress.fwd").read())
    assert len(read) == 1
    assert read[0].match["standard_metadata.ingress_port"].exact.value == b"\x01"
    assert read[0].action["port"].value == b"\x03"
    te.action["port"] = "2"
    te.modify()
    device["ports"][1].peer.send(ipv4_frame(tag=43))
    assert [frame_tag(f) for f in device["ports"][2].receive_all()] == [43]
    te.delete()
    assert list(shell.TableEntry("MyIngress.fwd").read()) == []


def test_every_match_kind_priorities_and_wildcard_read(device, shell):
    acl = shell.TableEntry("MyIngress.acl")(action="MyIngress.drop")
    acl.match["hdr.ethernet.etherType"] = "0x0800&&&0xff00"
    acl.match["hdr.udp.dstPort"] = "4791..4800"
    acl.match["standard_metadata.ingress_port"] = "2"
    acl.priority = 10
    acl.insert()
    acl2 = shell.TableEntry("MyIngress.acl")(action="MyIngress.to_cpu")
    acl2.match["hdr.udp.dstPort"] = "1..2"
    acl2.priority = 20
    acl2.insert()
    for member_id, port in ((1, "2"), (2, "3")):
        member = shell.ActionProfileMember("MyIngress.ecmp")(member_id=member_id, action="MyIngress.set_port")
        member.action["port"] = port
        member.insert()
    group = shell.ActionProfileGroup("MyIngress.ecmp")(group_id=7)
    group.add(1, weight=2).add(2, weight=1)
    group.insert()
    route = shell.TableEntry("MyIngress.routes")
    route.match["hdr.ipv4.dstAddr"] = "10.0.0.0/8"
    route.group_id = 7
    route.insert()
    table = device["switch"].pipeline.tables["MyIngress.acl"]
    forms = sorted((e.priority, [type(k).__name__ if k else None for k in e.keys]) for e in table.entries())
    assert forms == [(10, ["Ternary", "Range", "Optional"]), (20, [None, "Range", None])]
    engine_route = device["switch"].pipeline.tables["MyIngress.routes"].entries()[0]
    assert (engine_route.keys[0].value, engine_route.keys[0].prefix_len) == (10 << 24, 8)
    assert type(engine_route.action).__name__ == "GroupRef" and engine_route.action.id == 7
    # Wildcard read over every table returns all three entries with their priorities.
    client = shell.client
    req = p4runtime_pb2.Entity()
    req.table_entry.SetInParent()
    entries = [e.table_entry for resp in client.read_one(req) for e in resp.entities]
    assert sorted(e.priority for e in entries) == [0, 10, 20]
    routes = [e for e in entries if e.table_id == 33554435]
    assert routes[0].action.action_profile_group_id == 7
    assert routes[0].match[0].lpm.prefix_len == 8
    groups = list(shell.ActionProfileGroup("MyIngress.ecmp").read())
    assert [(m.member_id, m.weight) for m in groups[0].msg().members] == [(1, 2), (2, 1)]


def test_default_entry_counters_meters_registers(device, shell):
    default = shell.TableEntry("MyIngress.fwd")(is_default=True, action="MyIngress.set_port")
    default.action["port"] = "2"
    default.modify()
    device["ports"][3].peer.send(ipv4_frame(tag=5))
    assert [frame_tag(f) for f in device["ports"][2].receive_all()] == [5]
    read_default = list(shell.TableEntry("MyIngress.fwd")(is_default=True).read())
    assert read_default[0].action["port"].value == b"\x02"
    counter = shell.CounterEntry("MyIngress.port_pkts")
    counter.index = 3
    counter.packet_count, counter.byte_count = 7, 700
    counter.modify()
    assert device["switch"].pipeline.counters["MyIngress.port_pkts"].read(3) == (7, 700)
    cells = list(shell.CounterEntry("MyIngress.port_pkts").read())
    assert len(cells) == 16 and cells[3].msg().data.packet_count == 7
    meter = shell.MeterEntry("MyIngress.rate")
    meter.index = 1
    meter.cir, meter.cburst, meter.pir, meter.pburst = 1000, 100, 2000, 200
    meter.modify()
    assert device["switch"].pipeline.meters["MyIngress.rate"].get_config(1) == (1000, 100, 2000, 200)
    # Registers: p4runtime-shell 0.0.6 has no RegisterEntry class; use the raw client.
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    update.entity.register_entry.register_id = 369098753
    update.entity.register_entry.index.index = 4
    update.entity.register_entry.data.bitstring = (123456).to_bytes(4, "big")
    shell.client.write_update(update)
    assert device["switch"].pipeline.registers["MyIngress.last_seen"].read(4) == 123456
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = 369098753
    ent.register_entry.index.index = 4
    got = [e.register_entry for r in shell.client.read_one(ent) for e in r.entities]
    assert int.from_bytes(got[0].data.bitstring, "big") == 123456


def test_direct_counter_follows_entry(device, shell):
    acl = shell.TableEntry("MyIngress.acl")(action="MyIngress.drop")
    acl.match["hdr.udp.dstPort"] = "10..20"
    acl.priority = 5
    acl.insert()
    dc = shell.DirectCounterEntry("MyIngress.acl_hits")
    dc.table_entry.match["hdr.udp.dstPort"] = "10..20"
    dc.table_entry.priority = 5
    dc.packet_count, dc.byte_count = 3, 300
    dc.modify()
    entry = device["switch"].pipeline.tables["MyIngress.acl"].entries()[0]
    assert entry.counter == (3, 300)
    read = list(shell.DirectCounterEntry("MyIngress.acl_hits").read())
    assert read[0].msg().data.byte_count == 300


def test_multicast_and_clone_sessions(device, shell):
    mc = shell.MulticastGroupEntry(5).add(1, 1).add(2, 1)
    mc.insert()
    clone = shell.CloneSessionEntry(9).add(3, 0)
    clone.packet_length_bytes = 128
    clone.insert()
    pipeline = device["switch"].pipeline
    assert pipeline.mc_groups[5] == [(1, 1), (2, 1)]
    assert pipeline.clone_sessions[9] == ([(3, 0)], 128)
    groups = list(shell.MulticastGroupEntry(5).read())
    assert [(r.port, r.instance) for r in groups[0].replicas] == [(1, 1), (2, 1)] or \
        [(r.egress_port, r.instance) for r in groups[0].msg().packet_replication_engine_entry.multicast_group_entry.replicas] == [(1, 1), (2, 1)]
    from p4runtime_sh.p4runtime import P4RuntimeWriteException
    with pytest.raises(P4RuntimeWriteException) as err:
        shell.MulticastGroupEntry(5).add(3, 1).insert()
    assert "ALREADY_EXISTS" in str(err.value)
    mc.delete()
    assert 5 not in pipeline.mc_groups


def test_write_errors_use_spec_codes_per_update(device, shell):
    from p4runtime_sh.p4runtime import P4RuntimeWriteException
    te = shell.TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
    te.match["standard_metadata.ingress_port"] = "1"
    te.action["port"] = "2"
    te.insert()
    with pytest.raises(P4RuntimeWriteException) as err:
        te.insert()
    assert "ALREADY_EXISTS" in str(err.value)
    missing = shell.TableEntry("MyIngress.fwd")(action="MyIngress.drop")
    missing.match["standard_metadata.ingress_port"] = "9"
    with pytest.raises(P4RuntimeWriteException) as err:
        missing.delete()
    assert "NOT_FOUND" in str(err.value)
    # A batch with one good and two bad updates: one Error per update, in order, OK for
    # the good one (as the spec asks; p4runtime-shell's own error iterator loops forever on
    # OK details, so the status is decoded here).
    req = p4runtime_pb2.WriteRequest(device_id=1)
    req.election_id.low = 1
    good = req.updates.add(type=p4runtime_pb2.Update.INSERT)
    good.entity.table_entry.table_id = 33554433
    good.entity.table_entry.match.add(field_id=1).exact.value = b"\x02"
    good.entity.table_entry.action.action.action_id = 16777219
    bad_prio = req.updates.add(type=p4runtime_pb2.Update.INSERT)
    bad_prio.entity.table_entry.table_id = 33554434
    bad_prio.entity.table_entry.action.action.action_id = 16777219
    bad_table = req.updates.add(type=p4runtime_pb2.Update.INSERT)
    bad_table.entity.table_entry.table_id = 12345
    with pytest.raises(grpc.RpcError) as err:
        shell.client.stub.Write(req)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    details = dict(err.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    codes = []
    for any_ in status.details:
        e = p4runtime_pb2.Error()
        any_.Unpack(e)
        codes.append(e.canonical_code)
    # an id the P4Info lacks is INVALID_ARGUMENT, as PI answers it
    assert codes == [code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT]
    assert len(device["switch"].pipeline.tables["MyIngress.fwd"].entries()) == 2
    # Values too wide for their field are rejected: OUT_OF_RANGE (spec 1.4, "Bytestrings").
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    update.entity.table_entry.table_id = 33554433
    update.entity.table_entry.match.add(field_id=1).exact.value = b"\x04\x00"   # 1024 > 9 bits
    update.entity.table_entry.action.action.action_id = 16777219
    with pytest.raises(P4RuntimeWriteException) as err:
        shell.client.write_update(update)
    assert "OUT_OF_RANGE" in str(err.value) and "9 bits" in str(err.value)


def test_packet_in_and_out_through_controller_header(device, shell):
    te = shell.TableEntry("MyIngress.fwd")(action="MyIngress.to_cpu")
    te.match["standard_metadata.ingress_port"] = "2"
    te.insert()
    packet_in = shell.PacketIn()
    device["ports"][2].peer.send(ipv4_frame(tag=77))
    msgs = []
    deadline = time.time() + 3
    while not msgs and time.time() < deadline:
        msgs = list(packet_in.sniff(timeout=0.5))
    assert msgs, "no packet-in"
    pkt = msgs[0].packet
    assert frame_tag(pkt.payload) == 77
    meta = {m.metadata_id: int.from_bytes(m.value, "big") for m in pkt.metadata}
    assert meta[1] == 2
    out = shell.PacketOut(payload=ipv4_frame(tag=78), egress_port="3")
    out.send()
    assert [frame_tag(f) for f in device["ports"][3].receive_all()] == [78]


def test_digests_after_digest_entry(device, shell):
    shell.DigestEntry("learn_t").insert()
    digests = shell.DigestList()
    te = shell.TableEntry("MyIngress.fwd")(action="MyIngress.drop")
    te.match["standard_metadata.ingress_port"] = "1"
    te.insert()
    device["ports"][1].peer.send(ipv4_frame(tag=1))
    msgs = list(digests.sniff(timeout=1.5))
    assert msgs
    d = msgs[0].digest
    assert d.digest_id == 385920000
    members = d.data[0].struct.members
    assert int.from_bytes(members[0].bitstring, "big") == 0x020000000001
    assert int.from_bytes(members[1].bitstring, "big") == 1


def _stream(addr, election, device_id=1):
    channel = grpc.insecure_channel(addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    out = queue.Queue()

    def requests():
        while True:
            item = out.get()
            if item is None:
                return
            yield item
    responses = stub.StreamChannel(requests())
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = device_id
    req.arbitration.election_id.high, req.arbitration.election_id.low = election
    out.put(req)
    return channel, stub, out, responses


def test_arbitration_primary_backup_and_failover(device):
    addr = device["addr"]
    ch1, stub1, out1, resp1 = _stream(addr, (0, 5))
    assert next(resp1).arbitration.status.code == code_pb2.OK
    ch2, stub2, out2, resp2 = _stream(addr, (0, 3))
    backup = next(resp2).arbitration
    assert backup.status.code == code_pb2.ALREADY_EXISTS and backup.election_id.low == 5
    # The backup may not set the pipeline or write.
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    req.election_id.low = 3
    req.config.p4info.CopyFrom(fake_p4info())
    with pytest.raises(grpc.RpcError) as err:
        stub2.SetForwardingPipelineConfig(req)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    req.election_id.low = 5
    stub1.SetForwardingPipelineConfig(req)
    # The primary leaves: the backup is told it is now primary.
    out1.put(None)
    ch1.close()
    promoted = next(resp2).arbitration
    assert promoted.status.code == code_pb2.OK and promoted.election_id.low == 3
    # A third controller with a used election id is refused.
    ch3, _stub3, out3, resp3 = _stream(addr, (0, 3))
    with pytest.raises(grpc.RpcError) as err:
        next(resp3)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for q, ch in ((out2, ch2), (out3, ch3)):
        q.put(None)
        ch.close()


def test_wrong_device_and_no_pipeline(device):
    channel = grpc.insecure_channel(device["addr"])
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.GetForwardingPipelineConfig(p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=1))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Read(p4runtime_pb2.ReadRequest(device_id=2)))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    ch, _stub, out, resp = _stream(device["addr"], (0, 1), device_id=7)
    with pytest.raises(grpc.RpcError) as err:
        next(resp)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    out.put(None)
    ch.close()
    assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version.startswith("1.")
    channel.close()


def test_get_pipeline_returns_p4info_and_source(device, shell):
    got = shell.client.stub.GetForwardingPipelineConfig(p4runtime_pb2.GetForwardingPipelineConfigRequest(
        device_id=1, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL))
    assert got.config.p4info.tables[0].preamble.name == "MyIngress.fwd"
    assert got.config.p4_device_config == open(device["source"], "rb").read()
