"""The switch agent: what P4Runtime does not cover (port rates, queue depths,
link impairments, PFC enablement, queue/pause/MAC state), behind one interface.

    EngineAgent(switch)            in-process, on a datapath.Switch
    RemoteEngineAgent("host:port") the same calls to a `rocelab switch` process
    Bmv2Agent(thrift_port)         simple_switch_CLI on a BMv2 target (testbed.switch.bmv2)

Rates are bits/s (0 = unlimited), depths packets, delays microseconds.
"""
import json
import socket
import socketserver
import threading

AGENT_OPS = ("ports", "set_port_rate", "set_queue_depth", "set_impairments", "set_pfc",
             "queue_depth", "pause_state", "port_counters", "mirroring_add", "mirroring_delete")


class AgentError(Exception):
    pass


class SwitchAgent:
    """The interface; every target implements these."""

    def ports(self):
        raise NotImplementedError

    def set_port_rate(self, port, rate_bps):
        raise NotImplementedError

    def set_queue_depth(self, port, depth, priority=None):
        raise NotImplementedError

    def set_impairments(self, port, delay_us=0.0, jitter_us=0.0, loss=0.0):
        raise NotImplementedError

    def set_pfc(self, port, priorities):
        """Honour received PFC frames on `port` for these priorities (empty: PFC off)."""
        raise NotImplementedError

    def queue_depth(self, port, priority):
        raise NotImplementedError

    def pause_state(self, port):
        """{priority: microseconds of pause remaining} for paused priorities."""
        raise NotImplementedError

    def port_counters(self, port):
        raise NotImplementedError

    def mirroring_add(self, session, port):
        raise NotImplementedError

    def mirroring_delete(self, session):
        raise NotImplementedError


class EngineAgent(SwitchAgent):
    def __init__(self, switch):
        self.switch = switch

    def _port(self, port):
        try:
            return self.switch.egress_port(int(port))
        except ValueError as exc:
            raise AgentError(str(exc)) from None

    def ports(self):
        return sorted(self.switch.egress_ports)

    def set_port_rate(self, port, rate_bps):
        _checked(self._port(port).set_rate, rate_bps)

    def set_queue_depth(self, port, depth, priority=None):
        _checked(self._port(port).set_depth, depth, priority)

    def set_impairments(self, port, delay_us=0.0, jitter_us=0.0, loss=0.0):
        _checked(self._port(port).set_impairments, delay_us, jitter_us, loss)

    def set_pfc(self, port, priorities):
        _checked(self._port(port).set_pfc, list(priorities))

    def queue_depth(self, port, priority):
        return self._port(port).depth(priority)

    def pause_state(self, port):
        egress = self._port(port)
        now = self.switch.clock()
        return {p: round(egress.pause_remaining(p, now) * 1e6) for p in range(8)
                if egress.pause_remaining(p, now) > 0}

    def port_counters(self, port):
        self._port(port)
        return self.switch.port_status(int(port))

    def mirroring_add(self, session, port):
        pipeline = self._pipeline()
        with self.switch.lock:
            pipeline.set_clone_session(int(session), [(int(port), 0)])

    def mirroring_delete(self, session):
        pipeline = self._pipeline()
        with self.switch.lock:
            pipeline.delete_clone_session(int(session))

    def _pipeline(self):
        if self.switch.pipeline is None:
            raise AgentError("no P4 program is loaded")
        return self.switch.pipeline


def _checked(fn, *args):
    try:
        fn(*args)
    except (ValueError, TypeError) as exc:
        raise AgentError(str(exc)) from None


# -- the agent over TCP (JSON lines), for a switch running as its own process ----------------

class AgentServer:
    """Serves an agent's methods on `address` ("127.0.0.1:9659"), one JSON object per line."""

    def __init__(self, agent, address):
        host, port = parse_address(address)
        handler = _handler_for(agent)
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer((host, port), handler)
        self._server.daemon_threads = True
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="switch-agent", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


def _handler_for(agent):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    request = json.loads(line)
                    op = request.get("op")
                    if op not in AGENT_OPS:
                        raise AgentError(f"unknown agent operation {op!r}")
                    result = getattr(agent, op)(**request.get("args", {}))
                    reply = {"ok": True, "result": result}
                except (AgentError, TypeError, ValueError) as exc:
                    reply = {"ok": False, "error": str(exc)}
                except NotImplementedError:
                    reply = {"ok": False, "error": f"{request.get('op')} is not supported by this target"}
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
    return Handler


def parse_address(address):
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:9659")
    return host or "127.0.0.1", int(port)


class RemoteEngineAgent(SwitchAgent):
    """The agent of a `rocelab switch` process, reached at its --agent-addr."""

    def __init__(self, address, timeout=5.0):
        self.address = address
        self.timeout = timeout
        self._sock = None
        self._file = None
        self._lock = threading.Lock()

    def _call(self, op, **args):
        with self._lock:
            if self._sock is None:
                self._sock = socket.create_connection(parse_address(self.address), timeout=self.timeout)
                self._file = self._sock.makefile("rwb")
            self._file.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
        if not line:
            raise AgentError(f"switch agent at {self.address} closed the connection")
        reply = json.loads(line)
        if not reply["ok"]:
            raise AgentError(reply["error"])
        return reply["result"]

    def close(self):
        if self._sock is not None:
            self._file.close()
            self._sock.close()
            self._sock = None

    def ports(self):
        return self._call("ports")

    def set_port_rate(self, port, rate_bps):
        return self._call("set_port_rate", port=port, rate_bps=rate_bps)

    def set_queue_depth(self, port, depth, priority=None):
        return self._call("set_queue_depth", port=port, depth=depth, priority=priority)

    def set_impairments(self, port, delay_us=0.0, jitter_us=0.0, loss=0.0):
        return self._call("set_impairments", port=port, delay_us=delay_us, jitter_us=jitter_us, loss=loss)

    def set_pfc(self, port, priorities):
        return self._call("set_pfc", port=port, priorities=list(priorities))

    def queue_depth(self, port, priority):
        return self._call("queue_depth", port=port, priority=priority)

    def pause_state(self, port):
        return {int(k): v for k, v in self._call("pause_state", port=port).items()}

    def port_counters(self, port):
        return self._call("port_counters", port=port)

    def mirroring_add(self, session, port):
        return self._call("mirroring_add", session=session, port=port)

    def mirroring_delete(self, session):
        return self._call("mirroring_delete", session=session)
