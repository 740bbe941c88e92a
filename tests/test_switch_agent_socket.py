"""The switch agent's socket (JSON lines) against bad clients: every bad request gets an error
reply on the same connection, nothing is printed, and an endless line is refused in bounded
memory instead of being buffered."""
import json
import socket

import pytest

from switch_fake_engine import SocketPort
from testbed.switch.agent import MAX_REQUEST_BYTES, AgentServer, EngineAgent
from testbed.switch.datapath import Switch


@pytest.fixture
def agent_socket():
    ports = {n: SocketPort(n) for n in (1, 2)}
    switch = Switch(ports)
    server = AgentServer(EngineAgent(switch), "127.0.0.1:0").start()
    sock = socket.create_connection(("127.0.0.1", int(server.address.rsplit(":", 1)[1])), timeout=20)
    stream = sock.makefile("rwb")

    def ask(raw):
        stream.write(raw if isinstance(raw, bytes) else raw.encode())
        stream.flush()
        line = stream.readline()
        assert line, "the agent closed the connection"
        return json.loads(line)
    yield ask, switch
    stream.close()
    sock.close()
    server.stop()
    switch.close()


BAD = [
    (b"[1, 2]\n", "JSON object"),
    (b"\"ports\"\n", "JSON object"),
    (b"not json\n", "not a JSON object"),
    (b"\xff\xfe\x00garbage\n", "not a JSON object"),
    (b"{}\n", "unknown agent operation"),
    (b'{"op": 5}\n', "unknown agent operation"),
    (b'{"op": "__init__"}\n', "unknown agent operation"),
    (b'{"op": "ports", "args": [1]}\n', "args must be a JSON object"),
    (b'{"op": "ports", "args": {"x": 1}}\n', "unknown argument"),
    (b'{"op": "set_port_rate", "args": {"port": 1}}\n', "missing argument rate_bps"),
    (b'{"op": "set_port_rate", "args": {"port": 1, "rate_bps": 1e400}}\n', "finite number"),
    (b'{"op": "set_port_rate", "args": {"port": 1, "rate_bps": NaN}}\n', "finite number"),
    (b'{"op": "set_port_rate", "args": {"port": 1, "rate_bps": -5}}\n', "finite number"),
    (b'{"op": "set_impairments", "args": {"port": 1, "delay_us": Infinity}}\n', "finite number"),
    (b'{"op": "set_impairments", "args": {"port": 1, "loss": 2}}\n', "finite number"),
    (b'{"op": "set_queue_depth", "args": {"port": 1, "depth": 0}}\n', "whole number"),
    (b'{"op": "set_queue_depth", "args": {"port": 1, "depth": 2.5}}\n', "whole number"),
    (b'{"op": "set_pfc", "args": {"port": 1, "priorities": [9]}}\n', "whole number"),
    (b'{"op": "set_pfc", "args": {"port": 1, "priorities": "3"}}\n', "list of priorities"),
    (b'{"op": "queue_depth", "args": {"port": "abc", "priority": 0}}\n', "not a port number"),
    (b'{"op": "queue_depth", "args": {"port": 1e30, "priority": 0}}\n', "not a port number"),
    (b'{"op": "queue_depth", "args": {"port": true, "priority": 0}}\n', "not a port number"),
    (b'{"op": "queue_depth", "args": {"port": 99, "priority": 0}}\n', "no port 99"),
    (b'{"op": "pause_state", "args": {"port": 123456789012345678901234567890}}\n', "not a port number"),
    (b'{"op": "mirroring_add", "args": {"session": 1, "port": 2}}\n', "no P4 program"),
    (b"[" * 30000 + b"\n", "nests too deeply"),
]


def test_bad_requests_get_error_replies_on_one_kept_connection(agent_socket, capfd):
    ask, _ = agent_socket
    for raw, message in BAD:
        reply = ask(raw)
        assert reply["ok"] is False and message in reply["error"], (raw[:60], reply)
        assert len(reply["error"]) < 400              # bad input is not echoed back in full
        assert ask(b'{"op": "ports"}\n') == {"ok": True, "result": [1, 2]}
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_good_requests_still_work(agent_socket):
    ask, switch = agent_socket
    assert ask(b'{"op": "set_port_rate", "args": {"port": 2, "rate_bps": 8000000.0}}\n')["ok"]
    assert switch.egress_port(2).rate_bps == 8_000_000
    assert ask(b'{"op": "set_pfc", "args": {"port": 2, "priorities": [3, 4]}}\n')["ok"]
    assert ask(b'{"op": "queue_depth", "args": {"port": 2, "priority": 3}}\n') == {"ok": True, "result": 0}


def test_mirroring_to_a_port_the_switch_lacks_is_refused(agent_socket):
    import os
    from testbed.p4engine import compile_file
    ask, switch = agent_socket
    program = compile_file(os.path.join(os.path.dirname(__file__), "p4", "rt_tables_exact.p4"))
    switch.set_pipeline(program.new_pipeline())
    reply = ask(b'{"op": "mirroring_add", "args": {"session": 5, "port": 77}}\n')
    assert reply["ok"] is False and "no port 77" in reply["error"]
    assert 5 not in switch.pipeline.clone_sessions
    assert ask(b'{"op": "mirroring_add", "args": {"session": 5, "port": 2}}\n')["ok"]
    assert switch.pipeline.clone_sessions[5][0] == [(2, 0)]


def test_endless_line_is_refused_in_bounded_chunks_and_the_connection_goes_on(agent_socket, capfd):
    ask, _ = agent_socket
    chunk = b"x" * 65536
    payload = chunk * (8 * 1024 * 1024 // len(chunk)) + b"\n"      # 8 MB, 128x the limit
    reply = ask(payload)
    assert reply["ok"] is False and f"longer than {MAX_REQUEST_BYTES} bytes" in reply["error"]
    assert ask(b'{"op": "ports"}\n')["ok"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_connections_beyond_the_cap_are_told_and_closed():
    import time
    from testbed.switch.agent import MAX_CONNECTIONS
    switch = Switch({1: SocketPort(1)})
    server = AgentServer(EngineAgent(switch), "127.0.0.1:0").start()
    port = int(server.address.rsplit(":", 1)[1])
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=20)
            stream = sock.makefile("rwb")
            stream.write(b'{"op": "ports"}\n')
            stream.flush()
            assert json.loads(stream.readline())["ok"]        # each one is being served
            held.append((sock, stream))
        extra = socket.create_connection(("127.0.0.1", port), timeout=20)
        reply = extra.makefile("rb").readline()
        assert f"at most {MAX_CONNECTIONS} connections" in json.loads(reply)["error"]
        extra.close()
        sock, stream = held.pop()
        stream.close()
        sock.close()
        for _ in range(200):                  # the freed slot comes back once its thread ends
            again = socket.create_connection(("127.0.0.1", port), timeout=20)
            f = again.makefile("rwb")
            try:
                f.write(b'{"op": "ports"}\n')
                f.flush()
                answer = json.loads(f.readline() or b"{}")
            except OSError:                   # refused and closed before the request went out
                answer = {}
            finally:
                f.close()
                again.close()
            if answer.get("ok"):
                break
            time.sleep(0.05)
        assert answer == {"ok": True, "result": [1]}
    finally:
        for sock, stream in held:
            stream.close()
            sock.close()
        server.stop()
        switch.close()
