"""P4Runtime plumbing: P4Info lookups, Entry <-> protobuf, one connection per switch.

Built on p4runtime-shell's client (`p4runtime_sh.p4runtime.P4RuntimeClient`), not on
its shell API: the shell keeps one global connection, the controller needs one per
switch. Everything here runs in plain threads (never eventlet green threads).
"""
import logging
import queue
import threading
import time

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import (P4RuntimeClient, P4RuntimeException,
                                    SSLOptions)

from testbed.control.entries import CloneSession, Entry

LOG = logging.getLogger("rocelab.control")
WRITE_BATCH = 500
#: Seconds a switch has to answer a read or write: a switch that is alive but hung (stopped,
#: wedged, starved) must not block the controller, which holds its lock during the call.
DEFAULT_RPC_TIMEOUT = 5.0
#: SetForwardingPipelineConfig: the engine compiles the program (~1 s on an idle core, several
#: when a whole fabric compiles at once on a loaded machine).
DEFAULT_PIPELINE_TIMEOUT = 60.0
CLOSE_WAIT = 1.0           # seconds for a switch to end the stream before it is cancelled
#: Seconds close() waits for a packet-in handler still running (a BMv2 PFC punt runs the Thrift
#: CLI: seconds on a loaded machine) before it gives up on its thread, saying so.
HANDLER_WAIT = 30.0


class _BatchFailed(Exception):
    """A Write's per-update errors: [(index, p4.v1.Error)] for the failed ones. Parsed here, not
    by p4runtime-shell's P4RuntimeWriteException, whose iterator never ends once it meets the
    OK entries a batch with some successes carries."""

    def __init__(self, rpc_error):
        super().__init__()
        from google.rpc import status_pb2
        self.summary = rpc_error.details() or "Write failure"
        self.errors = []
        raw = dict(rpc_error.trailing_metadata() or ()).get("grpc-status-details-bin")
        for index, detail in enumerate(status_pb2.Status.FromString(raw).details if raw else ()):
            error = p4runtime_pb2.Error()
            if detail.Unpack(error) and error.canonical_code != code_pb2.OK:
                self.errors.append((index, error))


class ControlError(RuntimeError):
    """A switch refused, or could not be reached; the message names switch and entry."""


# --------------------------------------------------------------------------- P4Info

class P4InfoHelper:
    """Name -> P4Info object lookups (full names or aliases) and the Entry codec."""

    def __init__(self, p4info):
        self.p4info = p4info
        self._by_kind = {}
        for kind in ("tables", "actions", "counters", "direct_counters", "registers", "meters",
                     "controller_packet_metadata"):
            index = {}
            for obj in getattr(p4info, kind):
                index[obj.preamble.name] = obj
                index.setdefault(obj.preamble.alias, obj)
                index.setdefault(obj.preamble.name.rsplit(".", 1)[-1], obj)
            self._by_kind[kind] = index
        self.table_by_id = {t.preamble.id: t for t in p4info.tables}
        self.action_by_id = {a.preamble.id: a for a in p4info.actions}

    def get(self, kind, name):
        try:
            return self._by_kind[kind][name]
        except KeyError:
            raise ControlError(f"the P4 program on the switch has no {kind[:-1].replace('_', ' ')} "
                               f"{name!r}: is it running p4/fabric.p4?") from None

    # --- Entry -> TableEntry ---
    def table_entry(self, entry: Entry):
        table = self.get("tables", entry.table)
        te = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
        if entry.default:
            te.is_default_action = True
        else:
            if len(entry.match) != len(table.match_fields):
                raise ControlError(f"{entry.table}: {len(entry.match)} key values for "
                                   f"{len(table.match_fields)} key fields")
            for field, spec in zip(table.match_fields, entry.match):
                fm = te.match.add(field_id=field.id)
                if spec[0] == "exact":
                    fm.exact.value = encode(spec[1], field.bitwidth, f"{entry.table} key {field.name}")
                elif spec[0] == "lpm":
                    fm.lpm.value = encode(spec[1], field.bitwidth, f"{entry.table} key {field.name}")
                    fm.lpm.prefix_len = spec[2]
                else:
                    raise ControlError(f"{entry.table}: match kind {spec[0]!r} is not used by the controller")
        if entry.action:
            te.action.action.CopyFrom(self.action(entry.action, entry.params))
        return te

    def action(self, name, values):
        info = self.get("actions", name)
        action = p4runtime_pb2.Action(action_id=info.preamble.id)
        given = dict(values)
        for param in info.params:
            if param.name not in given:
                raise ControlError(f"action {name}: parameter {param.name!r} missing")
            action.params.add(param_id=param.id,
                              value=encode(given.pop(param.name), param.bitwidth, f"{name}({param.name})"))
        if given:
            raise ControlError(f"action {name} has no parameter(s) {', '.join(sorted(given))}")
        return action

    def table_read(self, name):
        return p4runtime_pb2.TableEntry(table_id=self.get("tables", name).preamble.id)

    # --- TableEntry -> Entry ---
    def entry_from(self, te):
        table = self.table_by_id.get(te.table_id)
        if table is None:
            raise ControlError(f"switch answered with unknown table id {te.table_id}")
        name = self._full(table)
        action_name, values = "", ()
        if te.action.HasField("action"):
            info = self.action_by_id[te.action.action.action_id]
            action_name = self._full(info)
            by_id = {p.id: p.name for p in info.params}
            values = tuple((by_id[p.param_id], decode(p.value)) for p in te.action.action.params)
        if te.is_default_action:
            return Entry(name, (), action_name, values, default=True)
        fields = {m.field_id: m for m in te.match}
        match = []
        for field in table.match_fields:
            m = fields.get(field.id)
            if m is None:
                match.append(None)
            elif m.HasField("exact"):
                match.append(("exact", decode(m.exact.value)))
            elif m.HasField("lpm"):
                match.append(("lpm", decode(m.lpm.value), m.lpm.prefix_len))
            else:
                match.append((m.WhichOneof("field_match"),))
        return Entry(name, tuple(match), action_name, values)

    @staticmethod
    def _full(obj):
        return obj.preamble.name

    def canonical(self, kind, name):
        """The full P4Info name for `name` (which may be an alias)."""
        return self.get(kind, name).preamble.name


def encode(value, bitwidth, what):
    value = int(value)
    if value < 0 or (bitwidth and value >> bitwidth):
        raise ControlError(f"{what}: {value} does not fit in {bitwidth} bits")
    # Padded to the full width: accepted by every P4Runtime server (BMv2's PI and the engine).
    return value.to_bytes(max(1, (bitwidth + 7) // 8), "big")


def decode(data):
    return int.from_bytes(data, "big") if data else 0


def clone_session_entity(session: CloneSession):
    entity = p4runtime_pb2.Entity()
    cs = entity.packet_replication_engine_entry.clone_session_entry
    cs.session_id = session.session_id
    for port, instance in session.replicas:
        replica = cs.replicas.add()
        replica.egress_port = port
        replica.instance = instance
    cs.packet_length_bytes = session.truncate
    return entity


# --------------------------------------------------------------------------- connection

class _Client(P4RuntimeClient):
    """p4runtime-shell's client, minus its habit of calling sys.exit() on a failed handshake."""

    handshake_timeout = 3.0

    def __init__(self, *args, thread_name="p4rt-client", **kwargs):
        self.thread_name = thread_name
        super().__init__(*args, **kwargs)
        # Read with a request serialized once (SwitchConnection.read_request): sent as it is.
        self.read_serialized = self.channel.unary_stream(
            "/p4.v1.P4Runtime/Read", request_serializer=None,
            response_deserializer=p4runtime_pb2.ReadResponse.FromString)

    def handshake(self):
        self.stream_recv_thread.name = f"{self.thread_name}-recv"     # (the library names it Thread-N)
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high = self.election_id[0]
        req.arbitration.election_id.low = self.election_id[1]
        if self.role_name is not None:
            req.arbitration.role.name = self.role_name
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=self.handshake_timeout)
        if rep is None:
            # A hung server would keep the stream (and its non-daemon reader thread) forever.
            self.stream.cancel()
            self.channel.close()
            self.stream_recv_thread.join(CLOSE_WAIT)    # a failed attempt leaves no thread behind
            raise ConnectionError("no arbitration answer")
        self.is_primary = rep.arbitration.status.code == code_pb2.OK


class SwitchConnection:
    """One switch's P4Runtime session: arbitration, pipeline, batched writes, reads, packet-ins."""

    def __init__(self, name, address, device_id, election_id=(0, 1), role=None,
                 rpc_timeout=DEFAULT_RPC_TIMEOUT, pipeline_timeout=DEFAULT_PIPELINE_TIMEOUT):
        self.name = name
        self.rpc_timeout = rpc_timeout
        self.pipeline_timeout = pipeline_timeout
        self.address = address
        self.device_id = device_id
        self.election_id = tuple(election_id)
        self.role = role
        self.client = None
        self.helper = None
        self.packet_in_handler = None          # callable(switch name, payload bytes, {meta name: int})
        self._stop = threading.Event()
        self._drain = None

    # --- session ---
    def connect(self, timeout=10.0):
        """Open the stream and win (or join) arbitration, retrying until `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                self.client = _Client(self.device_id, self.address, self.election_id, self.role,
                                      SSLOptions(True), thread_name=f"p4rt-client-{self.name}")
                break
            except (ConnectionError, P4RuntimeException, OSError) as exc:
                last = exc
            except SystemExit:   # defensive: never let the library end the process
                last = "the client gave up"
            if time.monotonic() >= deadline:
                raise ControlError(f"{self.name}: no P4Runtime server answers at {self.address} "
                                   f"(device {self.device_id}): {last}") from None
            time.sleep(0.2)
        if not self.client.is_primary:
            LOG.warning("%s: another controller is primary (election id %s is lower); writes will fail",
                        self.name, self.election_id)
        self._stop.clear()
        self._drain = threading.Thread(target=self._drain_stream, name=f"p4rt-client-{self.name}-drain",
                                       daemon=True)
        self._drain.start()

    def close(self):
        self._stop.set()
        client, self.client = self.client, None
        if client is not None:
            client.stream_out_q.put(None)            # ends our side of the stream
            client.stream_recv_thread.join(CLOSE_WAIT)
            if client.stream_recv_thread.is_alive():   # a hung switch never ends its side
                client.stream.cancel()
            try:
                client.tear_down()
            except Exception as exc:   # closing must not mask the caller's own error
                LOG.debug("%s: tear down: %s", self.name, exc)
        drain, self._drain = self._drain, None
        if drain is not None and drain is not threading.current_thread():
            # It ends at its next look at _stop, or when the handler it is running returns:
            # after close() no thread of this connection runs on.
            drain.join(HANDLER_WAIT)
            if drain.is_alive():
                LOG.warning("%s: a packet-in handler still runs after %g s; its thread is left behind",
                            self.name, HANDLER_WAIT)

    @property
    def connected(self):
        return self.client is not None

    def _need(self):
        if self.client is None:
            raise ControlError(f"{self.name}: not connected (call connect() first)")
        return self.client

    def _no_answer(self, exc, timeout, what):
        """ControlError for a deadline that passed, else None (the caller reports the error)."""
        if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ControlError(f"switch {self.name}: no answer within {timeout:g} s ({what})")
        return None

    def _drain_stream(self):
        """Keep the stream's queues short; hand packet-ins to the handler."""
        client = self.client
        while not self._stop.is_set() and client is not None:
            try:
                msg = client.stream_in_q["packet"].get(timeout=0.5)
            except queue.Empty:
                msg = False
            if msg is None or self._stop.is_set():
                return   # stream closed, or the connection closing: no handler runs any more
            if msg:
                self._packet_in(msg.packet)
            for kind in ("arbitration", "digest", "idle_timeout_notification", "unknown"):
                q = client.stream_in_q[kind]
                while True:
                    try:
                        other = q.get_nowait()
                    except queue.Empty:
                        break
                    if other is None:
                        return
                    if kind == "arbitration":
                        client.is_primary = other.arbitration.status.code == code_pb2.OK

    def _packet_in(self, packet):
        handler = self.packet_in_handler
        if handler is None:
            return
        meta = {}
        if self.helper is not None:
            info = self.helper._by_kind["controller_packet_metadata"].get("packet_in")
            names = {m.id: m.name for m in info.metadata} if info is not None else {}
            meta = {names.get(m.metadata_id, str(m.metadata_id)): decode(m.value) for m in packet.metadata}
        try:
            handler(self.name, packet.payload, meta)
        except Exception:   # a handler bug must not kill the stream
            LOG.exception("%s: packet-in handler failed", self.name)

    # --- pipeline ---
    def set_pipeline(self, p4info, device_config):
        client = self._need()
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest()
        req.device_id = self.device_id
        if self.role is not None:
            req.role = self.role
        req.election_id.high, req.election_id.low = self.election_id
        req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        try:
            client.stub.SetForwardingPipelineConfig(req, timeout=self.pipeline_timeout)
        except Exception as exc:
            raise (self._no_answer(exc, self.pipeline_timeout, "set the pipeline")
                   or ControlError(f"{self.name}: the switch refused the pipeline: {_grpc_text(exc)}")) from None
        self.helper = P4InfoHelper(p4info)

    def load_p4info(self):
        """P4Info from the switch itself (for controllers that did not push the pipeline)."""
        client = self._need()
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        try:
            p4info = client.stub.GetForwardingPipelineConfig(req, timeout=self.rpc_timeout).config.p4info
        except Exception as exc:
            raise (self._no_answer(exc, self.rpc_timeout, "read the pipeline config")
                   or ControlError(f"{self.name}: cannot read the pipeline config: {_grpc_text(exc)}")) from None
        if not p4info.tables:
            raise ControlError(f"{self.name}: the switch has no P4 program yet (push the pipeline first)")
        self.helper = P4InfoHelper(p4info)
        return self.helper

    def info(self):
        return self.helper if self.helper is not None else self.load_p4info()

    # --- writes ---
    def write(self, updates, what=""):
        """Write [(type, entity, description)] in batches; type is INSERT, MODIFY or DELETE."""
        client = self._need()
        for start in range(0, len(updates), WRITE_BATCH):
            batch = updates[start:start + WRITE_BATCH]
            req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
            if self.role is not None:
                req.role = self.role
            req.election_id.high, req.election_id.low = self.election_id
            for kind, entity, _text in batch:
                update = req.updates.add()
                update.type = p4runtime_pb2.Update.Type.Value(kind)
                update.entity.CopyFrom(entity)
            try:
                try:
                    client.stub.Write(req, timeout=self.rpc_timeout)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.UNKNOWN:   # per-update errors in the details
                        raise _BatchFailed(exc) from None
                    raise
            except _BatchFailed as exc:
                details = "; ".join(
                    f"{batch[i][0]} {batch[i][2]}: {code_pb2.Code.Name(err.canonical_code)} "
                    f"{err.message}" for i, err in exc.errors if i < len(batch)) or exc.summary
                raise ControlError(f"{self.name}: write {what} failed: {details}") from None
            except Exception as exc:
                raise (self._no_answer(exc, self.rpc_timeout, f"write {what}".strip())
                       or ControlError(f"{self.name}: write {what} failed: {_grpc_text(exc)}")) from None

    def write_entries(self, kind, entries, what=""):
        info = self.info()
        updates = []
        for entry in entries:
            entity = p4runtime_pb2.Entity()
            entity.table_entry.CopyFrom(info.table_entry(entry))
            updates.append((kind, entity, describe_entry(entry)))
        self.write(updates, what)

    # --- reads ---
    def read_request(self, entities):
        """The ReadRequest for `entities`, serialized: read() sends it as often as it is needed
        (small beside thousands of entities as messages, and not serialized again each time)."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        if self.role is not None:
            req.role = self.role
        req.entities.extend(entities)
        return req.SerializeToString()

    def read(self, entities):
        """The entities the switch answers for `entities` (a list, or a read_request())."""
        client = self._need()
        req = entities if isinstance(entities, bytes) else self.read_request(entities)
        out = []
        try:
            for rep in client.read_serialized(req, timeout=self.rpc_timeout):   # the deadline covers the stream
                out.extend(rep.entities)
        except Exception as exc:
            raise (self._no_answer(exc, self.rpc_timeout, "read")
                   or ControlError(f"{self.name}: read failed: {_grpc_text(exc)}")) from None
        return out

    def read_table(self, name, with_counters=False):
        info = self.info()
        entity = p4runtime_pb2.Entity()
        entity.table_entry.CopyFrom(info.table_read(name))
        if with_counters:
            entity.table_entry.counter_data.SetInParent()
        return [e.table_entry for e in self.read([entity])]

    def read_default(self, name):
        info = self.info()
        entity = p4runtime_pb2.Entity()
        entity.table_entry.CopyFrom(info.table_read(name))
        entity.table_entry.is_default_action = True
        return [info.entry_from(e.table_entry) for e in self.read([entity])]


def describe_entry(entry):
    """'FabricIngress.ipv4_lpm 10.1.2.0/24 -> route_to_group(...)' for error messages."""
    if entry.default:
        where = f"{entry.table} (default action)"
    else:
        keys = []
        for spec in entry.match:
            if spec and spec[0] == "lpm":
                keys.append(f"{_ip(spec[1])}/{spec[2]}")
            elif spec:
                keys.append(str(spec[1]))
        where = f"{entry.table} [{', '.join(keys)}]"
    args = ", ".join(f"{n}={v}" for n, v in entry.params)
    return f"{where} -> {entry.action.rsplit('.', 1)[-1]}({args})" if entry.action else where


def _ip(value):
    return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))


def _grpc_text(exc):
    grpc_error = getattr(exc, "grpc_error", exc)
    code = getattr(grpc_error, "code", None)
    details = getattr(grpc_error, "details", None)
    if callable(code) and callable(details):
        try:
            return f"{code().name}: {details()}"
        except Exception:
            pass
    return str(exc)
