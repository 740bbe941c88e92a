"""The P4Runtime gRPC service of the engine target (p4.v1.P4Runtime, spec v1.4).

Arbitration: per role name, the connected controller with the highest election
id is primary; only it may Write, set the pipeline or send packets, and only it
receives packet-ins and digests. Every controller of the role hears when the
primary changes (status OK for the primary, ALREADY_EXISTS for backups,
NOT_FOUND when there is no primary).

Packet I/O: a PacketOut becomes a frame injected on the CPU port, its metadata
serialised (in P4Info order and widths) as the `packet_out` @controller_header
in front of the payload; a frame the program sends to the CPU port has its
`packet_in` header parsed off into PacketIn metadata.

Idle timeout (testbed/p4rt/idle_timeout.py): when the pipeline has tables with
support_timeout, the switch's real-time loop asks for a sweep every sweep interval
of its clock; the server's ager thread runs sweep_idle_entries(), and expired
entries reach the primary as IdleTimeoutNotification.
"""
from concurrent import futures
import functools
import itertools
import json
import logging
import queue
import threading
import time

from google.protobuf import empty_pb2, text_format
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from google.rpc import code_pb2, status_pb2
import grpc

from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from testbed.p4rt import idle_timeout
from testbed.p4rt.digests import DigestLists
from testbed.p4rt.entities import INSERT, MODIFY, DeviceState, EntityHandler, digest_data, is_immutable
from testbed.p4rt.errors import (GRPC_CODES, P4RuntimeError, abort_with_status, invalid, not_found,
                                 write_batch_status)
from testbed.p4rt.p4info import P4InfoIndex, decode_int, encode_int

API_VERSION = "1.4.1"
LOG = logging.getLogger("rocelab.p4rt")
Request = p4runtime_pb2.SetForwardingPipelineConfigRequest


def _is_bmv2_json(text):
    """What p4lang/tutorials' controllers send BMv2 (the p4c-bm2-ss output), not P4 source."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and ("pipelines" in doc or "header_types" in doc)


# p4.tmp.P4DeviceConfig's fields and wire types: reassign (bool), extras (message), device_data (bytes)
_LEGACY_CONFIG_FIELDS = {1: 0, 2: 2, 3: 2}


def _legacy_device_data(config):
    """device_data of a serialised p4.tmp.P4DeviceConfig, which p4lang/tutorials' controllers wrap
    the BMv2 JSON in; else None. (The p4runtime package has no p4.tmp module: the bytes are read as
    an Empty's unknown fields.)"""
    message = empty_pb2.Empty()
    try:
        message.ParseFromString(config)
    except DecodeError:
        return None
    found = None
    for field in UnknownFieldSet(message):
        if _LEGACY_CONFIG_FIELDS.get(field.field_number) != field.wire_type:
            return None
        if field.field_number == 3:
            found = field.data
    return found


def is_bmv2_device_config(config):
    """A BMv2 JSON (p4c-bm2-ss output), as it is or wrapped in the legacy P4DeviceConfig."""
    for data in (config, _legacy_device_data(config)):
        try:
            if data and _is_bmv2_json(data.decode("utf-8")):
                return True
        except UnicodeDecodeError:
            pass
    return False


# What RECONCILE_AND_COMMIT copies, as (update type, wildcard read): members and groups before
# the entries that name them; indexed arrays and value sets exist already, so they are modified
_RECONCILE_READS = [(op, text_format.Parse(text, p4runtime_pb2.Entity())) for op, text in (
    (INSERT, "action_profile_member {}"), (INSERT, "action_profile_group {}"),
    (INSERT, "table_entry { counter_data {} meter_config {} }"),
    (MODIFY, "meter_entry {}"), (MODIFY, "counter_entry {}"), (MODIFY, "register_entry {}"),
    (INSERT, "packet_replication_engine_entry { multicast_group_entry {} }"),
    (INSERT, "packet_replication_engine_entry { clone_session_entry {} }"),
    (INSERT, "digest_entry {}"), (MODIFY, "value_set_entry {}"))]


def compile_device_config(device_config, target=None):
    """Default compiler: the device config is P4_16 source, compiled by the engine in a child
    process (testbed/p4engine/isolated.py: the parse would leave ~18 MB in this one for good).
    target="bmv2" also refuses what p4c-bm2-ss would (rocelab switch --target bmv2)."""
    if is_bmv2_device_config(device_config):
        raise invalid("p4_device_config is a BMv2 JSON (p4c-bm2-ss output); this engine target "
                      "compiles P4_16 source: send the .p4 program's text instead, start the switch "
                      "with the program (rocelab switch PROG.p4) so that its JSON names it, or run "
                      "the BMv2 target for the JSON")
    try:
        text = device_config.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("p4_device_config must be P4_16 source text (the engine compiles it), "
                      "not a binary such as BMv2 JSON") from None
    try:
        from testbed.p4engine import P4Error
        from testbed.p4engine.isolated import compile_source_isolated
    except ImportError as exc:
        raise P4RuntimeError(code_pb2.UNAVAILABLE, f"the P4 engine is not available: {exc}") from None
    try:
        return compile_source_isolated(text, filename="<p4_device_config>", sandboxed=True, target=target)
    except P4Error as exc:
        raise invalid(f"P4 program does not compile:\n{exc}") from None


class Controller:
    """One StreamChannel and what arbitration knows about it. What waits to be sent is bounded
    (MAX_PENDING): a controller that stops reading loses packet-ins and digests (counted in
    `dropped`) instead of growing the switch's memory."""

    _ids = itertools.count(1)
    MAX_PENDING = 4096

    def __init__(self, peer):
        self.number = next(self._ids)
        self.peer = peer
        self.out = queue.Queue(self.MAX_PENDING)
        self.dropped = 0
        self.role = ""
        self.election_id = None        # (high, low) or None
        self.arbitrated = False

    def send(self, message):
        try:
            self.out.put_nowait(message)
        except queue.Full:
            self.dropped += 1

    def close(self, code=None, message=""):
        end = ("end", code, message)
        while True:                    # the end must get through: make room if need be
            try:
                self.out.put_nowait(end)
                return
            except queue.Full:
                try:
                    self.out.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass


class _ReadResponses:
    """A Read's answer: ReadResponses of up to 1000 entities, the entities made in them."""

    PER_RESPONSE = 1000

    def __init__(self):
        self.filled = [p4runtime_pb2.ReadResponse()]

    def new_entity(self):
        entities = self.filled[-1].entities
        if len(entities) >= self.PER_RESPONSE:
            self.filled.append(p4runtime_pb2.ReadResponse())
            entities = self.filled[-1].entities
        return entities.add()


class Pipeline_:
    """The installed forwarding pipeline config."""

    def __init__(self, program, pipeline, index, device_config, cookie):
        self.program = program
        self.pipeline = pipeline
        self.index = index
        self.device_config = device_config
        self.cookie = cookie
        self.idle_tables = idle_timeout.idle_tables(index)


class P4RuntimeServer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """max_streams: open StreamChannels allowed at once. Each holds one gRPC worker thread for
    its lifetime (grpc's synchronous server), so more are refused with RESOURCE_EXHAUSTED and
    the rest of the pool (max_workers - max_streams) always serves Write/Read/Capabilities.
    idle_sweep_s: seconds of the switch's clock between idle-timeout sweeps."""

    def __init__(self, switch, device_id=1, address="127.0.0.1:9559", compiler=compile_device_config,
                 max_workers=16, max_streams=8, idle_sweep_s=idle_timeout.SWEEP_S):
        if not 0 < max_streams < max_workers:
            raise ValueError(f"max_streams {max_streams} must leave workers for unary calls "
                             f"(max_workers {max_workers})")
        self.switch = switch
        self.device_id = device_id
        self.address = address
        self.compiler = compiler
        self.max_workers = max_workers
        self.max_streams = max_streams
        self.idle_sweep_s = idle_sweep_s
        self._sweep_wanted = threading.Event()
        self._ager = None                # the thread running sweeps the switch asks for
        self._stopping = False
        self._open_streams = 0
        self._roles = {""}               # roles ever arbitrated (the default role always exists)
        self.installed = None            # Pipeline_
        self.saved = None                # VERIFY_AND_SAVE result awaiting COMMIT
        self.state = DeviceState()
        self._controllers = []
        self._arb_lock = threading.Lock()
        # Pipeline changes and Writes one at a time: a Write racing RECONCILE_AND_COMMIT would
        # otherwise land in the pipeline being replaced, after its state was copied, and be lost.
        self._config_lock = threading.Lock()
        self._server = None
        switch.packet_in_handler = self._on_packet_in

    # -- lifecycle ---------------------------------------------------------------
    def start(self):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                        thread_name_prefix="p4rt"),
                             options=[("grpc.so_reuseport", 0)])
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self, server)
        try:
            port = server.add_insecure_port(self.address)
        except RuntimeError:
            port = 0
        if not port:
            raise OSError(f"P4Runtime server: cannot listen on {self.address} (in use or invalid address)")
        if self.address.endswith(":0"):      # an ephemeral port: say which one
            self.address = f"{self.address.rsplit(':', 1)[0]}:{port}"
        server.start()
        self._server = server
        return self

    def stop(self, grace=0.5):
        if getattr(self.switch, "idle_sweep", None) is not None:
            self.switch.idle_sweep = None
        self._stopping = True
        self._sweep_wanted.set()
        if self.state.digest_lists is not None:
            self.state.digest_lists.close()
        with self._arb_lock:
            for ctl in self._controllers:
                ctl.close()
        if self._server is not None:
            self._server.stop(grace).wait(grace + 1)
            self._server = None
        ager = self._ager
        if ager is not None and ager is not threading.current_thread():
            ager.join()       # woken by _sweep_wanted above; it ends at its next look at _stopping

    def load_program(self, program, p4info=None, device_config=b"", cookie=None):
        """Install `program` (an engine Program), as SetForwardingPipelineConfig would."""
        with self._config_lock:
            self._install(self._prepare(program, p4info or program.p4info, device_config, cookie))

    # -- pipeline config -----------------------------------------------------------
    def _prepare(self, program, p4info, device_config, cookie):
        index = P4InfoIndex(p4info)
        rng = getattr(self.switch, "rng", None)     # a seeded `random` extern (virtual time)
        pipeline = program.new_pipeline(cpu_port=self.switch.cpu_port, log=self.switch.log,
                                        **({"rng": rng} if rng is not None else {}))
        _check_p4info_matches(index, pipeline)
        return Pipeline_(program, pipeline, index, device_config, cookie)

    def _prepare_running(self, config, cookie):
        """p4lang/tutorials' controllers push p4c-bm2-ss's JSON (in a P4DeviceConfig), which the
        engine cannot run: it takes it for the program the switch already runs (rocelab switch
        PROG.p4), if the P4Info they push describes that program."""
        try:
            return self._prepare(self.installed.program, config.p4info, config.p4_device_config, cookie)
        except P4RuntimeError as exc:
            raise invalid("p4_device_config is a BMv2 JSON, which this engine target cannot run, and "
                          f"the P4Info does not describe the program the switch runs: {exc.message}") from None

    def _install(self, prepared, state=None):
        """Switch to `prepared` with `state` (a DeviceState already written into it, or a new one)."""
        prepared.pipeline.digest_callback = self._on_digest
        state = state or DeviceState()
        state.digest_lists = DigestLists(functools.partial(self._send_digest_list, prepared))
        for digest_id, entry in state.digest_configs.items():
            state.digest_lists.configure(digest_id, entry.config)
        with self.switch.lock:
            replaced = self.state.digest_lists
            self.state = state
            self.installed = prepared
            self.switch.set_pipeline(prepared.pipeline)
            # only a pipeline with ageing tables costs the switch's loop a sweep
            self.switch.idle_sweep = ((self.idle_sweep_s, self._ask_for_sweep)
                                      if prepared.idle_tables else None)
        if replaced is not None:
            replaced.close()          # (joins its timer: not while holding the switch's lock)
        LOG.info("forwarding pipeline installed (%d tables)", len(prepared.index.tables))

    def SetForwardingPipelineConfig(self, request, context):
        with self._config_lock:
            return self._guard(context, self._set_pipeline, request)

    def _set_pipeline(self, request):
        self._check_device(request.device_id)
        self._check_primary(request)
        action = request.action
        if action in (Request.VERIFY, Request.VERIFY_AND_SAVE, Request.VERIFY_AND_COMMIT,
                      Request.RECONCILE_AND_COMMIT):
            if not request.HasField("config"):
                raise invalid(f"{Request.Action.Name(action)} needs a config")
            config = request.config
            if not config.p4info.ByteSize():
                # (a program with only registers or counters has no tables and no actions, yet
                # its P4Info, which p4c writes, is a good one; only an empty one is a mistake)
                raise invalid("config.p4info is empty")
            cookie = config.cookie.cookie if config.HasField("cookie") else None
            if self.installed is not None and is_bmv2_device_config(config.p4_device_config):
                prepared = self._prepare_running(config, cookie)
            else:
                program = self.compiler(config.p4_device_config)
                prepared = self._prepare(program, config.p4info, config.p4_device_config, cookie)
            if action == Request.VERIFY_AND_SAVE:
                self.saved = prepared
            elif action == Request.RECONCILE_AND_COMMIT:
                self._install(prepared, self._reconciled_state(prepared))
            elif action != Request.VERIFY:
                self._install(prepared)
        elif action == Request.COMMIT:
            if request.HasField("config"):
                raise invalid("COMMIT takes no config (it commits the one saved by VERIFY_AND_SAVE)")
            if self.saved is None:
                raise not_found("COMMIT without a saved (VERIFY_AND_SAVE) config")
            self._install(self.saved)
            self.saved = None
        else:
            raise invalid(f"unsupported SetForwardingPipelineConfig action {action}")
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _reconciled_state(self, prepared):
        """RECONCILE_AND_COMMIT (spec; PI does it so too): the forwarding state read from the
        running pipeline is written into the new one before it takes over. If any of it does
        not fit the new program, UNKNOWN (as PI answers) and the running pipeline is untouched."""
        installed = self._require_pipeline()
        old = self._entities(installed, self.state, self.switch.lock)
        state = DeviceState()
        new = self._entities(prepared, state, threading.Lock())

        def carry(op, entity):
            try:
                new.write(p4runtime_pb2.Update(type=op, entity=entity))
            except P4RuntimeError as exc:
                raise P4RuntimeError(code_pb2.UNKNOWN, "RECONCILE_AND_COMMIT: the forwarding state does "
                                     f"not fit the new config ({exc.message}); nothing was changed") from None

        for op, query in _RECONCILE_READS:
            for entity in old.read(query):
                info = prepared.index.tables.get(entity.table_entry.table_id) if entity.HasField("table_entry") else None
                if info is None or not is_immutable(info, prepared.pipeline.tables.get(info.name)):
                    carry(op, entity)    # (the new program brings its own const or initial entries)
        # the default actions the controller set; one never set, or reset, is the new program's
        for table_id in list(self.state.default_metadata):
            info = prepared.index.tables.get(table_id)
            if info is None or not info.const_default_action_id:
                query = p4runtime_pb2.TableEntry(table_id=table_id, is_default_action=True)
                for entity in old.read(p4runtime_pb2.Entity(table_entry=query)):
                    carry(MODIFY, entity)
        return state

    def GetForwardingPipelineConfig(self, request, context):
        return self._guard(context, self._get_pipeline, request)

    def _get_pipeline(self, request):
        self._check_device(request.device_id)
        installed = self._require_pipeline()
        response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        config = response.config
        kind = request.response_type
        Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
        if kind not in Get.ResponseType.values():
            raise invalid(f"response_type {kind} is not one of ALL, COOKIE_ONLY, P4INFO_AND_COOKIE, "
                          "DEVICE_CONFIG_AND_COOKIE")
        if kind in (Get.ALL, Get.P4INFO_AND_COOKIE):
            config.p4info.CopyFrom(installed.index.p4info)
        if kind in (Get.ALL, Get.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = installed.device_config
        if installed.cookie is not None:     # as it was given (0 included), or unset (spec, PI)
            config.cookie.cookie = installed.cookie
        return response

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- Write / Read ------------------------------------------------------------------
    def Write(self, request, context):
        with self._config_lock:
            return self._write(request, context)

    def _write(self, request, context):
        try:
            self._check_device(request.device_id)
            self._check_primary(request)
            installed = self._require_pipeline()
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise P4RuntimeError(code_pb2.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        except P4RuntimeError as exc:
            context.abort(exc.grpc_code, exc.message)
        handler = self._entities(installed, self.state, self.switch.lock)
        results = []
        for update in request.updates:
            try:
                handler.write(update)
                results.append(None)
            except P4RuntimeError as exc:
                results.append(exc)
            except Exception as exc:   # an engine fault answers INTERNAL, never kills the server
                LOG.exception("write failed")
                results.append(P4RuntimeError(code_pb2.INTERNAL, f"{type(exc).__name__}: {exc}"))
        sync = getattr(self.switch, "sync_pg_profiles", None)
        if sync is not None:       # the engine's buffer takes its PG profiles from a table
            sync()
        if any(r is not None for r in results):
            abort_with_status(context, write_batch_status(results))
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context):
        try:
            self._check_device(request.device_id)
            installed = self._require_pipeline()
            handler = self._entities(installed, self.state, self.switch.lock)
            responses = _ReadResponses()
            for entity in request.entities:
                handler.read(entity, new_entity=responses.new_entity)
        except P4RuntimeError as exc:
            context.abort(exc.grpc_code, exc.message)
        except Exception as exc:
            LOG.exception("read failed")
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        yield from responses.filled

    # -- StreamChannel --------------------------------------------------------------------
    def StreamChannel(self, request_iterator, context):
        with self._arb_lock:
            full = self._open_streams >= self.max_streams
            if not full:
                self._open_streams += 1
        if full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this switch serves at most {self.max_streams} StreamChannels at once")
        try:
            yield from self._serve_stream(request_iterator, context)
        finally:
            with self._arb_lock:
                self._open_streams -= 1

    def _serve_stream(self, request_iterator, context):
        ctl = Controller(context.peer())
        reader = threading.Thread(target=self._read_stream, args=(ctl, request_iterator),
                                  name=f"p4rt-stream-{ctl.number}", daemon=True)
        context.add_callback(lambda: ctl.close())
        reader.start()
        try:
            while True:
                item = ctl.out.get()
                if isinstance(item, tuple) and item and item[0] == "end":
                    _, code, message = item
                    if code is not None:
                        context.abort(GRPC_CODES[code], message)
                    return
                yield item
        finally:
            self._remove(ctl)

    def _read_stream(self, ctl, request_iterator):
        try:
            for request in request_iterator:
                kind = request.WhichOneof("update")
                if kind == "arbitration":
                    self._arbitrate(ctl, request.arbitration)
                elif not ctl.arbitrated:
                    # PI ignores what comes before the arbitration and keeps the stream; the
                    # packet is not sent, and a StreamError says why
                    if kind == "packet":
                        self._stream_error(ctl, code_pb2.FAILED_PRECONDITION, "a packet-out before the "
                                           "stream's MasterArbitrationUpdate is not sent", request.packet)
                elif kind == "packet":
                    self._packet_out(ctl, request.packet)
                elif kind == "digest_ack":
                    self._digest_ack(ctl, request.digest_ack)
                else:
                    self._stream_error(ctl, code_pb2.UNIMPLEMENTED, f"stream message {kind} is not supported")
        except grpc.RpcError:
            pass
        except P4RuntimeError as exc:
            ctl.close(exc.code, exc.message)
            return
        ctl.close()

    def _arbitrate(self, ctl, update):
        role = update.role.name
        if update.device_id != self.device_id:
            # spec 1.4: NOT_FOUND on a new stream; a live one may not change its device
            code = code_pb2.FAILED_PRECONDITION if ctl.arbitrated else code_pb2.NOT_FOUND
            raise P4RuntimeError(code, f"device id {update.device_id} is not this switch "
                                 f"(device id {self.device_id})")
        if update.role.HasField("config"):
            # spec 1.4: a role.config outside the agreed scheme is INVALID_ARGUMENT; this switch
            # has none (every role has full pipeline access), so any config is outside it
            raise invalid("this switch has no role configuration scheme: leave role.config unset")
        if ctl.arbitrated and role != ctl.role:
            raise P4RuntimeError(code_pb2.FAILED_PRECONDITION,
                                 f"a stream keeps its role ({ctl.role or '(default)'}); open a new "
                                 f"StreamChannel for role {role or '(default)'}")
        eid = (update.election_id.high, update.election_id.low) if update.HasField("election_id") else None
        with self._arb_lock:
            for other in self._controllers:
                if other is not ctl and other.role == role and eid is not None and other.election_id == eid:
                    raise invalid(f"election id {eid} is already used by another controller")
            old_primary = self._primary(role)
            ctl.role, ctl.election_id, ctl.arbitrated = role, eid, True
            self._roles.add(role)
            if ctl not in self._controllers:
                self._controllers.append(ctl)
            new_primary = self._primary(role)
            if new_primary is not old_primary:
                self._notify_role(role)
            else:
                ctl.send(self._arbitration_message(ctl, new_primary))

    def _primary(self, role):
        candidates = [c for c in self._controllers if c.role == role and c.election_id is not None]
        return max(candidates, key=lambda c: c.election_id, default=None)

    def _arbitration_message(self, ctl, primary):
        response = p4runtime_pb2.StreamMessageResponse()
        arb = response.arbitration
        arb.device_id = self.device_id
        if ctl.role:
            arb.role.name = ctl.role
        if primary is not None:
            arb.election_id.high, arb.election_id.low = primary.election_id
        if primary is ctl:
            arb.status.CopyFrom(status_pb2.Status(code=code_pb2.OK, message="primary"))
        elif primary is not None:
            arb.status.CopyFrom(status_pb2.Status(code=code_pb2.ALREADY_EXISTS, message="a primary exists"))
        else:
            arb.status.CopyFrom(status_pb2.Status(code=code_pb2.NOT_FOUND, message="no primary"))
        return response

    def _notify_role(self, role):
        primary = self._primary(role)
        for c in self._controllers:
            if c.role == role:
                c.send(self._arbitration_message(c, primary))

    def _remove(self, ctl):
        with self._arb_lock:
            if ctl not in self._controllers:
                return
            was_primary = self._primary(ctl.role) is ctl
            self._controllers.remove(ctl)
            if was_primary:
                self._notify_role(ctl.role)

    def _stream_error(self, ctl, code, message, packet_out=None):
        response = p4runtime_pb2.StreamMessageResponse()
        response.error.canonical_code = code
        response.error.message = message
        if packet_out is not None:
            response.error.packet_out.packet_out.CopyFrom(packet_out)
        ctl.send(response)

    # -- packet I/O and digests ------------------------------------------------------------
    def _packet_out(self, ctl, packet):
        with self._arb_lock:
            primary = self._primary(ctl.role)
        if primary is not ctl:
            self._stream_error(ctl, code_pb2.PERMISSION_DENIED, "only the primary controller may send packets",
                               packet)
            return
        installed = self.installed
        if installed is None or self.switch.cpu_port is None:
            self._stream_error(ctl, code_pb2.FAILED_PRECONDITION,
                               "packet-out needs a pipeline and a CPU port (--cpu-port)", packet)
            return
        try:
            header = _pack_header(installed.index.controller_headers.get("packet_out"), packet.metadata)
        except P4RuntimeError as exc:
            self._stream_error(ctl, exc.code, exc.message, packet)
            return
        if self.switch.inject(self.switch.cpu_port, header + packet.payload) is False:
            self._stream_error(ctl, code_pb2.RESOURCE_EXHAUSTED,
                               "the switch's packet-out queue is full: packet dropped", packet)

    def _on_packet_in(self, frame):
        installed = self.installed
        if installed is None:
            return
        response = p4runtime_pb2.StreamMessageResponse()
        fields = installed.index.controller_headers.get("packet_in")
        if fields:
            size = (sum(w for _, _, w in fields) + 7) // 8
            if len(frame) < size:
                return
            _unpack_header(fields, frame[:size], response.packet.metadata)
            frame = frame[size:]
        response.packet.payload = frame
        self._to_primaries(response)

    def _on_digest(self, name, values):
        """A digest from the data path: to the digest's buffer (testbed/p4rt/digests.py)."""
        installed, lists = self.installed, self.state.digest_lists
        if installed is None or lists is None:
            return
        info = installed.index.digest_by_name.get(name)
        if info is not None:      # (configured or not: DigestLists drops it if not)
            # (a tuple: the digest cache keeps values in a set)
            lists.learn(info.preamble.id, tuple(values) if isinstance(values, list) else values)

    def _send_digest_list(self, installed, digest_id, list_id, values):
        """A list of `installed`'s digests, to the primaries while that pipeline still runs."""
        if self.installed is not installed:
            return      # a replaced pipeline's list (its timer's last sweep): not this one's ids
        info = installed.index.digests[digest_id]     # (DigestLists takes only its P4Info's ids)
        response = p4runtime_pb2.StreamMessageResponse()
        digest = response.digest
        digest.digest_id, digest.list_id, digest.timestamp = digest_id, list_id, time.time_ns()
        for value in values:
            digest.data.append(digest_data(installed.index, info, value))
        self._to_primaries(response)

    def _digest_ack(self, ctl, ack):
        with self._arb_lock:
            primary = self._primary(ctl.role)
        lists = self.state.digest_lists
        if primary is ctl and lists is not None:    # as PI: a backup's acks are ignored
            lists.ack(ack.digest_id, ack.list_id)

    def sweep_idle_entries(self):
        """One idle-timeout sweep at the switch's current time: the entries idle for their TTL
        go to the primary controllers in one IdleTimeoutNotification, which is returned (None
        when there were none). The switch lock is held only to pick them (~5 ms per 10,000
        entries); the message is built after. Run by the ager thread (and by tests, whose
        switch runs on a clock they set). A fault is logged, never raised."""
        installed = self.installed
        if installed is None or not installed.idle_tables:
            return None
        try:
            with self.switch.lock:
                expired = idle_timeout.expired_entries(installed.idle_tables, installed.pipeline,
                                                       self.switch.now_us())
            if not expired:
                return None
            response = idle_timeout.notification(expired, time.time_ns())
        except Exception:
            LOG.exception("idle timeout sweep failed")
            return None
        self._to_primaries(response)
        return response

    def _ask_for_sweep(self):
        """The switch's loop, when a sweep is due: the sweep runs in the ager thread, so the
        data path never waits for notifications to be built."""
        if self._ager is None:
            self._ager = threading.Thread(target=self._run_ager, name="p4rt-idle-ager", daemon=True)
            self._ager.start()
        self._sweep_wanted.set()

    def _run_ager(self):
        while True:
            self._sweep_wanted.wait()
            self._sweep_wanted.clear()
            if self._stopping:
                return
            self.sweep_idle_entries()

    def _to_primaries(self, response):
        with self._arb_lock:
            roles = {c.role for c in self._controllers}
            primaries = [self._primary(role) for role in roles]
        for ctl in primaries:
            if ctl is not None:
                ctl.send(response)

    # -- checks ---------------------------------------------------------------------------------
    def _check_device(self, device_id):
        if device_id != self.device_id:
            raise P4RuntimeError(code_pb2.NOT_FOUND, f"device id {device_id} is not this switch "
                                 f"(device id {self.device_id})")

    def _check_primary(self, request):
        """Write and SetForwardingPipelineConfig come from the primary of their role. As
        simple_switch_grpc (PI) allows it for grpc_cli and scripts: while no controller has a
        StreamChannel open, a request of the default role without election_id is let through."""
        role, election_id = request.role, request.election_id
        with self._arb_lock:
            if not self._controllers and not role and not request.HasField("election_id"):
                return
            if role not in self._roles:
                raise not_found(f"role {role!r} is unknown: no controller has arbitrated for it")
            primary = self._primary(role)
        eid = (election_id.high, election_id.low)
        if primary is None or primary.election_id != eid:
            raise P4RuntimeError(code_pb2.PERMISSION_DENIED,
                                 f"election id {eid} is not the primary's for role {role or '(default)'}")

    def _entities(self, installed, state, lock):
        """Writes and reads of `installed`'s pipeline with `state`, on the switch's ports and clock."""
        return EntityHandler(installed.index, installed.pipeline, state, lock,
                             ports=self._port_numbers(), now_us=getattr(self.switch, "now_us", None))

    def _port_numbers(self):
        """The ports replicas may name: the switch's ports and its CPU port."""
        ports = set(getattr(self.switch, "ports", None) or ())
        if self.switch.cpu_port is not None:
            ports.add(self.switch.cpu_port)
        return ports

    def _require_pipeline(self):
        if self.installed is None:
            raise P4RuntimeError(code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        return self.installed

    def _guard(self, context, fn, request):
        try:
            return fn(request)
        except P4RuntimeError as exc:
            context.abort(exc.grpc_code, exc.message)
        except Exception as exc:
            LOG.exception("request failed")
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")


def _pack_header(fields, metadata):
    """Serialise PacketOut metadata into the @controller_header bytes (missing fields are 0)."""
    if not fields:
        if metadata:
            raise invalid("the program has no packet_out controller header, yet metadata was sent")
        return b""
    given = {}
    widths = {fid: (name, width) for fid, name, width in fields}
    for m in metadata:
        if m.metadata_id not in widths:
            raise invalid(f"packet_out metadata id {m.metadata_id} is not in the P4Info")
        name, width = widths[m.metadata_id]
        given[m.metadata_id] = decode_int(m.value, width, f"packet_out metadata {name}")
    value, bits = 0, 0
    for fid, _name, width in fields:
        value = (value << width) | given.get(fid, 0)
        bits += width
    pad = -bits % 8
    return (value << pad).to_bytes((bits + pad) // 8, "big")


def _unpack_header(fields, data, out):
    bits = sum(w for _, _, w in fields)
    value = int.from_bytes(data, "big") >> (len(data) * 8 - bits)
    shift = bits
    for fid, _name, width in fields:
        shift -= width
        out.add(metadata_id=fid, value=encode_int((value >> shift) & ((1 << width) - 1)))


def _check_p4info_matches(index, pipeline):
    """Every P4Info object the client will address must exist in the compiled program."""
    for kind, mapping, attr in (("table", index.tables, "tables"),
                                ("action profile", index.action_profiles, "action_profiles"),
                                ("counter", index.counters, "counters"),
                                ("meter", index.meters, "meters"),
                                ("register", index.registers, "registers"),
                                ("value set", getattr(index, "value_sets", {}), "value_sets")):
        engine = getattr(pipeline, attr, {}) or {}
        for item in mapping.values():
            name = item.name if hasattr(item, "name") else item.preamble.name
            if name not in engine:
                raise invalid(f"P4Info {kind} {name!r} is not in the P4 program given as device config")
            size = getattr(engine[name], "size", None)
            if kind in ("counter", "meter", "register") and isinstance(size, int) and item.size != size:
                raise invalid(f"P4Info {kind} {name!r} has {item.size} cells, the program's has {size}")
    for info in getattr(index, "value_sets", {}).values():
        fields = pipeline.value_sets[info.name].fields
        if [f.bitwidth for f in info.match_fields] != [f.width for f in fields]:
            raise invalid(f"P4Info value set {info.name} has match fields of "
                          f"{[f.bitwidth for f in info.match_fields]} bits, the program's are "
                          f"{[f.width for f in fields]}")
    for info in index.tables.values():
        table = pipeline.tables[info.name]
        if info.supports_idle_timeout and getattr(table, "supports_timeout", True) is False:
            # its hits would not be recorded: every entry with a TTL would be reported idle
            raise invalid(f"P4Info table {info.name} has idle_timeout_behavior NOTIFY_CONTROL, "
                          "the program's table has no support_timeout = true")
        if len(table.keys) != len(info.match_fields):
            raise invalid(f"P4Info table {info.name} has {len(info.match_fields)} match fields, "
                          f"the program's has {len(table.keys)}")
        # The engine knows best when entries need priorities (several lpm keys, which p4c-bm2-ss
        # refuses, make a ternary table); every table, not only the last one as it was
        info.needs_priority = getattr(table, "needs_priority", info.needs_priority)
        # widths too: values are checked against the P4Info's, so a wrong one would let values
        # wider than the field through (or make the server build huge masks)
        for field, key in zip(info.match_fields, table.keys):
            width = getattr(key, "width", None)
            if width is not None and index.translation(field.type_name) is not None:
                info.data_plane_widths[field.name] = width      # P4Info gives the controller's width
            elif width is not None and field.bitwidth != width:
                raise invalid(f"P4Info table {info.name} field {field.name} is {field.bitwidth} bits wide, "
                              f"the program's is {width}")
    compiled = getattr(getattr(pipeline, "program", None), "compiled", None)
    for action in index.actions.values() if compiled is not None else ():
        engine = compiled.actions.get(action.name)
        params = dict(engine.runtime_params) if engine is not None else {}
        for param in action.params:
            if engine is not None and index.translation(param.type_name) is not None and param.name in params:
                action.data_plane_widths[param.name] = params[param.name]
            elif engine is not None and params.get(param.name) != param.bitwidth:
                raise invalid(f"P4Info action {action.name} param {param.name} ({param.bitwidth} bits) does "
                              f"not match the program's ({params.get(param.name, 'no such param')})")
    for name, htype, _ in getattr(compiled, "controller_headers", None) or ():
        # packet metadata is cut at the program's widths; values are not translated (see entities)
        fields = index.controller_headers.get(name)
        widths = dict((field, getattr(ftype, "width", None)) for field, ftype in htype.fields)
        if fields:
            index.controller_headers[name] = [(fid, fname, widths.get(fname) or width)
                                              for fid, fname, width in fields]
