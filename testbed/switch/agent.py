"""The switch agent: what P4Runtime does not cover (port rates, queue depths,
link impairments, PFC enablement, queue/pause/MAC state), behind one interface.

    EngineAgent(switch)            in-process, on a datapath.Switch
    RemoteEngineAgent("host:port") the same calls to a `rocelab switch` process
    Bmv2Agent(thrift_port)         simple_switch_CLI on a BMv2 target (testbed.switch.bmv2)

Rates are bits/s (0 = unlimited), depths packets, delays microseconds.
"""
import json
import logging
import math
import socket
import socketserver
import threading

AGENT_OPS = ("ports", "set_port_rate", "set_queue_depth", "set_impairments", "set_pfc",
             "queue_depth", "pause_state", "port_counters", "mirroring_add", "mirroring_delete",
             "buffer_status", "reset_watermarks", "set_watchdog")
MAX_REQUEST_BYTES = 64 * 1024     # one request line; a longer one is refused and skipped
MAX_CONNECTIONS = 32              # agent clients served at once
LOG = logging.getLogger("rocelab.agent")


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

    def buffer_status(self):
        """The shared buffer, lossless PG profiles, watchdog settings and measured loop lag."""
        raise NotImplementedError

    def reset_watermarks(self):
        """Restart the high-water marks (pg_max_bytes, max_queue_bytes) and loop-lag statistics."""
        raise NotImplementedError

    def set_watchdog(self, detect_ms=None, restore_ms=None, action=None):
        """PFC watchdog: detection time (ms; 0 off, -1 auto), restoration time (ms), drop|forward.
        None leaves a setting as it is."""
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

    def buffer_status(self):
        return self.switch.buffer_status()

    def reset_watermarks(self):
        self.switch.reset_watermarks()

    def set_watchdog(self, detect_ms=None, restore_ms=None, action=None):
        from dataclasses import replace
        config = self.switch.buffer.config
        changes = {}
        if detect_ms is not None:
            changes["watchdog_detect_s"] = None if detect_ms < 0 else detect_ms / 1000.0
        if restore_ms is not None:
            changes["watchdog_restore_s"] = restore_ms / 1000.0
        if action is not None:
            changes["watchdog_action"] = action
        with self.switch.lock:
            _checked(self.switch.buffer.configure, replace(config, **changes))

    def mirroring_add(self, session, port):
        pipeline = self._pipeline()
        if int(port) not in self.switch.egress_ports and int(port) != self.switch.cpu_port:
            raise AgentError(f"mirroring_add: switch has no port {port} "
                             f"(ports: {sorted(self.switch.egress_ports)}, cpu port: {self.switch.cpu_port})")
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

class _BoundedServer(socketserver.ThreadingTCPServer):
    """One thread per connection, at most MAX_CONNECTIONS of them: more are told so and closed
    (a client opening connections in a loop cannot grow the switch's threads without bound)."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address, handler):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(json.dumps({"ok": False, "error": f"the agent serves at most {MAX_CONNECTIONS} "
                                                                  "connections at once"}).encode() + b"\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class AgentServer:
    """Serves an agent's methods on `address` ("127.0.0.1:9659"), one JSON object per line."""

    def __init__(self, agent, address):
        host, port = parse_address(address)
        handler = _handler_for(agent)
        self._server = _BoundedServer((host, port), handler)
        self._server.daemon_threads = True
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="switch-agent", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        if self._thread.is_alive():      # shutdown() waits for serve_forever, which may never have run
            self._server.shutdown()
        self._server.server_close()


def _handler_for(agent):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                while True:
                    line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
                    if not line:
                        return
                    if len(line) > MAX_REQUEST_BYTES and not line.endswith(b"\n"):
                        reply = {"ok": False, "error": f"request longer than {MAX_REQUEST_BYTES} bytes "
                                                       "(one JSON object per line)"}
                        if not self._skip_line():
                            self._send(reply)
                            return
                    else:
                        reply = answer(agent, line)
                    self._send(reply)
            except (ConnectionError, OSError):
                return          # the client went away mid-request: nothing to answer

        def _skip_line(self):
            """Discard the rest of an overlong line in bounded chunks; False at end of stream."""
            while True:
                chunk = self.rfile.readline(MAX_REQUEST_BYTES)
                if not chunk:
                    return False
                if chunk.endswith(b"\n"):
                    return True

        def _send(self, reply):
            self.wfile.write(json.dumps(reply).encode() + b"\n")
            self.wfile.flush()
    return Handler


def answer(agent, line):
    """The reply to one request line: {"ok": true, "result": ...} or {"ok": false, "error": ...};
    never raises (a bad request must not end the connection or print a traceback)."""
    op = "request"
    try:
        op, args = check_request(line)
        return {"ok": True, "result": getattr(agent, op)(**args)}
    except AgentError as exc:
        return {"ok": False, "error": str(exc)}
    except NotImplementedError:
        return {"ok": False, "error": f"{op} is not supported by this target"}
    except Exception as exc:  # noqa: BLE001 - the agent's fault, answered and logged, never fatal
        LOG.error("agent %s failed: %s: %s", op, type(exc).__name__, exc)
        return {"ok": False, "error": f"internal error in {op}: {type(exc).__name__}: {exc}"}


def _shown(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _port(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF:
        raise AgentError(f"{name}: {_shown(value)} is not a port number")
    return value


def _whole(lo, hi):
    def check(name, value):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise AgentError(f"{name}: {_shown(value)} is not a whole number from {lo} to {hi}")
        return value
    return check


def _number(lo, hi):
    def check(name, value):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not lo <= value <= hi):
            raise AgentError(f"{name}: {_shown(value)} is not a finite number from {lo:g} to {hi:g}")
        return value
    return check


def _optional(check):
    return lambda name, value: None if value is None else check(name, value)


def _choice(*allowed):
    def check(name, value):
        if value not in allowed:
            raise AgentError(f"{name}: {_shown(value)} is not one of {', '.join(allowed)}")
        return value
    return check


def _priorities(name, value):
    if not isinstance(value, list) or len(value) > 8:
        raise AgentError(f"{name}: {_shown(value)} is not a list of priorities 0..7")
    return [_whole(0, 7)(name, p) for p in value]


def _request_rules():
    from testbed.switch.cli import MAX_DELAY_US, MAX_QUEUE_DEPTH, MAX_RATE_BPS
    priority = _whole(0, 7)
    delay = _number(0, MAX_DELAY_US)
    session = _whole(0, 0xFFFFFFFF)
    # op -> {argument: (check, required)}
    return {
        "ports": {},
        "set_port_rate": {"port": (_port, True), "rate_bps": (_number(0, MAX_RATE_BPS), True)},
        "set_queue_depth": {"port": (_port, True), "depth": (_whole(1, MAX_QUEUE_DEPTH), True),
                            "priority": (_optional(priority), False)},
        "set_impairments": {"port": (_port, True), "delay_us": (delay, False), "jitter_us": (delay, False),
                            "loss": (_number(0, 1), False)},
        "set_pfc": {"port": (_port, True), "priorities": (_priorities, True)},
        "queue_depth": {"port": (_port, True), "priority": (priority, True)},
        "pause_state": {"port": (_port, True)},
        "port_counters": {"port": (_port, True)},
        "mirroring_add": {"session": (session, True), "port": (_port, True)},
        "mirroring_delete": {"session": (session, True)},
        "buffer_status": {},
        "reset_watermarks": {},
        "set_watchdog": {"detect_ms": (_optional(_number(-1, 3_600_000)), False),
                         "restore_ms": (_optional(_number(0, 3_600_000)), False),
                         "action": (_optional(_choice("drop", "forward")), False)},
    }


_RULES = None


def check_request(line):
    """(op, checked keyword arguments) of one JSON request line; AgentError says what is wrong."""
    global _RULES
    if _RULES is None:
        _RULES = _request_rules()
    try:
        request = json.loads(line)
    except RecursionError:
        raise AgentError("request nests too deeply") from None
    except ValueError as exc:          # bad JSON or bad UTF-8
        raise AgentError(f"request is not a JSON object: {exc}") from None
    if not isinstance(request, dict):
        raise AgentError(f"request must be a JSON object like {{\"op\": \"ports\"}}, got {type(request).__name__}")
    op = request.get("op")
    if not isinstance(op, str) or op not in _RULES:
        raise AgentError(f"unknown agent operation {_shown(op)} (one of {', '.join(AGENT_OPS)})")
    args = request.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise AgentError(f"{op}: args must be a JSON object, got {type(args).__name__}")
    rules = _RULES[op]
    unknown = [name for name in args if name not in rules]
    if unknown:
        raise AgentError(f"{op}: unknown argument {_shown(unknown[0])} (takes {', '.join(rules) or 'none'})")
    missing = [name for name, (_, required) in rules.items() if required and name not in args]
    if missing:
        raise AgentError(f"{op}: missing argument {missing[0]}")
    return op, {name: rules[name][0](f"{op} {name}", value) for name, value in args.items()}


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

    def buffer_status(self):
        return self._call("buffer_status")

    def reset_watermarks(self):
        return self._call("reset_watermarks")

    def set_watchdog(self, detect_ms=None, restore_ms=None, action=None):
        args = {k: v for k, v in (("detect_ms", detect_ms), ("restore_ms", restore_ms), ("action", action))
                if v is not None}
        return self._call("set_watchdog", **args)

    def mirroring_add(self, session, port):
        return self._call("mirroring_add", session=session, port=port)

    def mirroring_delete(self, session):
        return self._call("mirroring_delete", session=session)
