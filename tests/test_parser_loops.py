"""Loops in the engine. Parser: a state that loops without consuming input ends the parse with
error.ParserTimeout after the engine's step budget (never spins), and `rocelab p4 check`
warns about such states, located. Egress: E2E clones count as passes, so a program cloning
every packet it sends cannot make packets forever."""
import os
import socket
import subprocess
import sys

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from switch_fake_engine import SocketPort
from testbed.p4engine import compile_file, compile_source
from testbed.p4engine.stf import run_stf
from testbed.p4rt.server import P4RuntimeServer
from testbed.switch.datapath import Switch

HERE = os.path.dirname(__file__)
PROGRAM = os.path.join(HERE, "p4", "parser_loops.p4")
ROOT = os.path.dirname(HERE)


def _frame(ether_type, payload=b"\xaa\xbb\xcc"):
    return bytes.fromhex("000000000002000000000001") + ether_type.to_bytes(2, "big") + payload


def test_stf_self_loop_times_out_counted_loop_finishes():
    assert run_stf(PROGRAM, os.path.join(HERE, "p4", "parser_loops.stf")) == 0


def test_jumbo_packet_on_a_self_loop_ends_with_parser_timeout():
    program = compile_file(PROGRAM)
    pipeline = program.new_pipeline()
    out = pipeline.process(0, _frame(0x9001, bytes(9000)))
    assert [port for port, _ in out] == [2]          # ingress saw error.ParserTimeout


def test_check_warns_located_on_nonconsuming_loops_only():
    program = compile_file(PROGRAM)
    located = {(line, message.split("'")[1]) for _, line, _, message in program.compiled.warnings}
    # spin (self-loop), count (counter loop: may stop), SubParser start <-> again
    assert located == {(30, "spin"), (31, "count"), (14, "start")}
    clean = compile_file(os.path.join(HERE, "p4", "rt_parser_errors.p4"))
    assert clean.compiled.warnings == []


def test_loops_that_consume_or_may_consume_are_not_warned():
    text = open(PROGRAM).read().replace("state spin { transition spin; }",
                                        "state spin { pkt.advance(16); transition spin; }")
    text = text.replace("state start { transition again; }",
                        "state start { pkt.extract(hdr.tag); transition again; }")
    text = text.replace("meta.rounds = meta.rounds + 1;",
                        "if (meta.rounds == 3) { pkt.extract(hdr.tag); } else { pkt.advance(8); }")
    assert compile_source(text, "consuming.p4").compiled.warnings == []


def test_p4_check_cli_prints_the_warning_with_file_line_col():
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "p4", "check", PROGRAM],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    assert f"{PROGRAM}:30:5: warning: parser MyParser: state 'spin' can loop" in done.stderr
    assert "Traceback" not in done.stderr


def test_switch_keeps_serving_p4runtime_while_fed_looping_packets():
    ports = {n: SocketPort(n) for n in (1, 2)}
    switch = Switch(ports)
    switch.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    server = P4RuntimeServer(switch, device_id=1, address=address)
    try:
        server.start()
        server.load_program(compile_file(PROGRAM), device_config=b"")
        for _ in range(20):
            ports[1].peer.send(_frame(0x9001, bytes(1400)))
        channel = grpc.insecure_channel(address)
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        reply = stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=30)
        assert reply.p4runtime_api_version
        read = list(stub.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[
            p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())]), timeout=30))
        assert read is not None
        channel.close()
        got = ports[2].receive_all(wait=5)
        assert len(got) == 20                         # every looping packet came out, timed out
    finally:
        server.stop()
        switch.close()


def test_switch_process_with_a_looping_parser_answers_and_stops_on_sigterm():
    """The issue's repro: packets that loop in the parser must neither hang the switch's
    P4Runtime nor make it ignore SIGTERM. Packets come in as PacketOuts on the CPU port."""
    import queue
    import signal
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "switch", PROGRAM, "--cpu-port", "64",
                             "--grpc-server-addr", address, "--agent-addr", "none", "--device-id", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert "rocelab switch:" in proc.stdout.readline()
        channel = grpc.insecure_channel(address)
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        requests = queue.Queue()
        responses = stub.StreamChannel(iter(requests.get, None))
        hello = p4runtime_pb2.StreamMessageRequest()
        hello.arbitration.device_id = 1
        hello.arbitration.election_id.low = 1
        requests.put(hello)
        next(responses)
        for _ in range(30):
            out = p4runtime_pb2.StreamMessageRequest()
            out.packet.payload = _frame(0x9001, bytes(9000))
            requests.put(out)
        assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=30).p4runtime_api_version
        assert list(stub.Read(p4runtime_pb2.ReadRequest(device_id=1, entities=[
            p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())]), timeout=30)) is not None
        requests.put(None)
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "rocelab switch: stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_egress_that_clones_every_packet_does_not_make_packets_forever():
    """E2E clones count as passes (like recirculations): a program cloning every packet it
    egresses, clones included, ends after MAX_PASSES copies instead of looping in the switch."""
    from testbed.p4engine.pipeline import MAX_PASSES
    text = open(PROGRAM).read().replace(
        "control MyEgress(inout headers_t hdr, inout metadata_t meta,\n"
        "                 inout standard_metadata_t standard_metadata) { apply { } }",
        "control MyEgress(inout headers_t hdr, inout metadata_t meta,\n"
        "                 inout standard_metadata_t standard_metadata) {\n"
        "    apply { clone(CloneType.E2E, 32w5); }\n}")
    assert "CloneType.E2E" in text
    pipeline = compile_source(text, "clones.p4").new_pipeline()
    pipeline.set_clone_session(5, [(3, 0)])
    jobs = pipeline.ingress(0, _frame(0x0800), 0)
    sent = 0
    while jobs and sent < 10 * MAX_PASSES:          # a traffic manager taking every job
        tx, more = pipeline.egress(jobs.pop(0), 0, 0, 0, 0, 0)
        sent += len(tx)
        jobs.extend(more)
    assert not jobs and sent == MAX_PASSES + 1


def test_sub_parser_loops_share_the_callers_budget():
    """A caller that loops calling a sub-parser which itself counts a long way: one budget for
    the packet, so the loops cannot multiply into hours (60000 x 73000 steps on a jumbo)."""
    text = open(PROGRAM).read().replace(
        "parser SubParser(packet_in pkt, inout headers_t hdr) {\n"
        "    state start { transition again; }\n"
        "    state again { transition select(hdr.tag.value) { 0xff: accept; default: start; } }\n}",
        "parser SubParser(packet_in pkt, inout headers_t hdr, inout bit<16> n) {\n"
        "    state start { n = n + 1; transition select(n) { 60000: accept; default: start; } }\n}").replace(
        "state call_sub { sub.apply(pkt, hdr); transition accept; }",
        "state call_sub { meta.k = 0; sub.apply(pkt, hdr, meta.k); transition call_sub; }").replace(
        "struct metadata_t { bit<8> rounds; }", "struct metadata_t { bit<8> rounds; bit<16> k; }")
    assert "transition call_sub; }" in text and "inout bit<16> n" in text
    pipeline = compile_source(text, "nested.p4").new_pipeline()
    out = pipeline.process(0, _frame(0x9003, bytes(9000)))
    assert [port for port, _ in out] == [2]          # ended by error.ParserTimeout
    assert [port for port, _ in pipeline.process(0, _frame(0x9002))] == [1]   # counted loop still fine
