"""FabricController: programs every switch of a Clos over P4Runtime (see __init__.py for the API).

State it keeps per switch: what it believes is installed (learned by reading the
switch when it did not write it itself), the runtime knobs, and the links it has been
told are down. Every change is computed as a plan and written as a diff, so calling a
setter twice writes nothing the second time. All methods are thread-safe and run in
plain threads (never call them from eventlet green threads: gRPC and green threads do
not mix).
"""
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
import logging
import threading
import zlib

from testbed import P4_DIR
from testbed.control import pipeline_config
from testbed.control import program_names as N
from testbed.control.counters import read_switch
from testbed.control.entries import Entry
from testbed.control.knobs import KNOB_TABLES, Knobs, KnobError, knobs_from_entries, with_headroom
from testbed.control.p4runtime_io import (DEFAULT_PIPELINE_TIMEOUT, DEFAULT_RPC_TIMEOUT, ControlError,
                                          SwitchConnection, clone_session_entity)
from testbed.control.plan import PLANNED_TABLES, ROUTING_TABLES, diff, plan_switch, te_override_entry
from testbed.control.routes import compute_routes, link_key, next_hop, normalize_prefix
from testbed.switch import buffers

LOG = logging.getLogger("rocelab.control")
DEFAULT_PROGRAM = P4_DIR / "fabric.p4"


class FabricController:
    def __init__(self, clos, program_path=None, *, program=None, target="engine", p4info_path=None,
                 device_config_path=None, election_id=(0, 1), role=None, connect_timeout=10.0,
                 knobs=None, switches=None, down_links=(), rpc_timeout=DEFAULT_RPC_TIMEOUT,
                 pipeline_timeout=DEFAULT_PIPELINE_TIMEOUT, addresses=None, seed=0,
                 headroom_response_us=None, headroom_cable_m=None, headroom_mtu=None):
        """addresses: {switch: gRPC address} where a switch's P4Runtime server is not at its
        Clos address (virtual time serves each on an abstract Unix socket, "unix-abstract:name"); seed: varies every switch's
        ECMP hash seed (0 keeps the default, one per device id); headroom_response_us/_cable_m/_mtu:
        the response time, cable length and MTU the default PFC headroom is computed for (default:
        the real-time lab's, testbed/switch/buffers.py; virtual time passes the physical ones)."""
        self.clos = clos
        self.headroom_model = (buffers.REALTIME_RESPONSE_US if headroom_response_us is None else headroom_response_us,
                               buffers.LAB_CABLE_M if headroom_cable_m is None else headroom_cable_m,
                               buffers.LAB_MTU if headroom_mtu is None else headroom_mtu)
        self.program_path = str(program_path or program or DEFAULT_PROGRAM)
        if target not in pipeline_config.TARGETS:
            raise ControlError(f"target {target!r}: choose one of {', '.join(pipeline_config.TARGETS)}")
        self.target = target
        self.p4info_path = p4info_path
        self.device_config_path = device_config_path
        self.connect_timeout = connect_timeout
        names = list(clos.switches) if switches is None else list(switches)
        unknown = [n for n in names if n not in clos.switches]
        if unknown:
            raise ControlError(f"unknown switch(es) {', '.join(unknown)} (the fabric has {', '.join(clos.switches)})")
        self.names = names
        base = (knobs or Knobs()).check()
        self.knobs = {n: _with_port_headroom(_seeded(base, clos.switches[n], seed), clos.switches[n],
                                             self.headroom_model) for n in names}
        self._knobs_known = {n: knobs is not None for n in names}
        self.down_links = {link_key(a, b) for a, b in down_links}
        self.routes = compute_routes(clos, frozenset(self.down_links))
        # rpc_timeout: seconds each switch has to answer a read/write (a hung switch then fails
        # with "switch X: no answer within N s" instead of holding the controller's lock);
        # pipeline_timeout: the same for a pipeline push, which compiles the program.
        addresses = addresses or {}
        self.connections = {n: SwitchConnection(n, addresses.get(n, clos.switches[n].grpc_addr),
                                                clos.switches[n].device_id,
                                                election_id, role, rpc_timeout, pipeline_timeout)
                            for n in names}
        self.installed = {n: None for n in names}        # None = not known yet (read on first use)
        self.punted = {n: {"pfc": 0, "mac_control": 0} for n in names}
        self.packet_in_handler = None                    # callable(switch, payload, metadata) or None
        self._pipeline = None
        self._lock = threading.RLock()
        self._read_plans = {}     # switch -> counters.ReadPlan, reused while it fits

    # ------------------------------------------------------------------ session
    def connect(self, timeout=None):
        """Open a P4Runtime session to every switch, all at once (waits up to `timeout` s for
        each to answer). All or nothing: if a switch does not answer, the sessions this call
        opened are closed again (their threads would outlive a caller that never got a controller)."""
        opened = []

        def open_session(name):
            conn = self.connections[name]
            if not conn.connected:
                conn.packet_in_handler = self._on_packet_in
                conn.connect(self.connect_timeout if timeout is None else timeout)
                opened.append(conn)
        with self._lock:
            try:
                _on_each(self.names, open_session, "connecting")
            except BaseException:
                for conn in opened:
                    conn.close()
                raise
        return self

    def close(self):
        with self._lock:
            for conn in self.connections.values():
                conn.close()

    def __enter__(self):
        return self.connect()

    def __exit__(self, *exc):
        self.close()

    def _conn(self, switch):
        if switch not in self.connections:
            raise ControlError(f"unknown switch {switch!r} (the fabric has {', '.join(self.connections)})")
        conn = self.connections[switch]
        if not conn.connected:
            raise ControlError(f"{switch}: not connected (call connect() first)")
        return conn

    def _on_packet_in(self, switch, payload, meta):
        reason = meta.get("reason")
        if reason == N.PUNT_PFC:
            self.punted[switch]["pfc"] += 1
        elif reason == N.PUNT_MAC_CONTROL:
            self.punted[switch]["mac_control"] += 1
        handler = self.packet_in_handler
        if handler is not None:
            handler(switch, payload, meta)

    # ------------------------------------------------------------------ pipeline + defaults
    def push_pipeline(self):
        """SetForwardingPipelineConfig on every switch (P4Info + the target's device config), all
        at once: each engine switch compiles the program, and they are separate processes."""
        with self._lock:
            if self._pipeline is None:
                self._pipeline = pipeline_config.load(self.program_path, self.target,
                                                      self.p4info_path, self.device_config_path)

            # One P4Info copy per switch, made here: protobuf messages are not made to be read from
            # several threads at once (on the pure-Python runtime, CopyFrom of a shared one raised
            # "dictionary changed size during iteration" in a 32-switch run).
            p4infos = {}
            for name in self.names:
                p4infos[name] = type(self._pipeline.p4info)()
                p4infos[name].CopyFrom(self._pipeline.p4info)

            def push(name):
                self._conn(name).set_pipeline(p4infos[name], self._pipeline.device_config)
                # A fresh pipeline holds only the program's own defaults.
                self.installed[name] = {"entries": {}, "sessions": {}}
            _on_each(self.names, push, "pipeline push")

    def install_defaults(self):
        """Routes, ECMP groups, DSCP map, thresholds and PFC clone sessions on every switch (all
        switches at once; each thread touches only its own switch's state)."""
        with self._lock:
            _on_each(self.names, self._install_defaults, "installing the defaults")

    def _install_defaults(self, name):
        state = self._state(name)
        plan = plan_switch(self.clos, name, self.routes[name], self.knobs[name])
        self._apply(name, plan.entries, PLANNED_TABLES)
        conn = self._conn(name)
        missing = [s for sid, s in sorted(plan.clone_sessions.items())
                   if state["sessions"].get(sid) != s]
        if missing:
            kinds = ["MODIFY" if s.session_id in state["sessions"] else "INSERT" for s in missing]
            conn.write([(k, clone_session_entity(s), f"clone session {s.session_id}")
                        for k, s in zip(kinds, missing)], "PFC clone sessions")
            for s in missing:
                state["sessions"][s.session_id] = s
        self._knobs_known[name] = True

    def _state(self, name):
        """What `name` holds: read from the switch the first time it is needed."""
        state = self.installed[name]
        if state is None:
            conn = self._conn(name)
            info = conn.info()
            entries = {}
            for table in PLANNED_TABLES + (N.TE_OVERRIDE,):
                for te in conn.read_table(table):
                    entry = info.entry_from(te)
                    entries[entry.key] = _short(entry)
                for entry in conn.read_default(table) if table == N.ECMP_CONFIG else ():
                    entry = _short(entry)
                    entries[entry.key] = entry
            state = self.installed[name] = {"entries": entries, "sessions": self._read_sessions(conn)}
            if not self._knobs_known[name]:
                self.knobs[name] = knobs_from_entries(entries.values(), self.knobs[name], self.clos.switches[name])
                self._knobs_known[name] = True
        return state

    @staticmethod
    def _read_sessions(conn):
        from p4.v1 import p4runtime_pb2
        from testbed.control.entries import CloneSession
        entity = p4runtime_pb2.Entity()
        entity.packet_replication_engine_entry.clone_session_entry.SetInParent()
        sessions = {}
        try:
            found = conn.read([entity])
        except ControlError:
            return sessions   # targets that cannot list sessions: they are rewritten as needed
        for e in found:
            cs = e.packet_replication_engine_entry.clone_session_entry
            sessions[cs.session_id] = CloneSession(cs.session_id, tuple((r.egress_port, r.instance)
                                                                        for r in cs.replicas),
                                                   cs.packet_length_bytes)
        return sessions

    def _apply(self, name, wanted, tables):
        """Make `tables` of switch `name` hold exactly the `wanted` entries (make before break)."""
        state = self._state(name)
        inserts, modifies, deletes = diff(wanted, state["entries"], tables)
        conn = self._conn(name)
        for kind, batch in (("INSERT", inserts), ("MODIFY", modifies), ("DELETE", deletes)):
            if not batch:
                continue
            conn.write_entries(kind, batch, f"({kind.lower()} {len(batch)} entries)")
            for entry in batch:
                if kind == "DELETE":
                    state["entries"].pop(entry.key, None)
                else:
                    state["entries"][entry.key] = entry
        return len(inserts) + len(modifies) + len(deletes)

    def _set_knobs(self, switches, update):
        """Apply `update(knobs) -> knobs` on `switches` (None = all) and write what changed."""
        with self._lock:
            targets = self._targets(switches)
            new = {}
            for name in targets:
                self._state(name)                      # learn current knobs first
                new[name] = _with_port_headroom(update(self.knobs[name]), self.clos.switches[name],
                                                self.headroom_model)
            for name in targets:
                self.knobs[name] = new[name]
                plan = plan_switch(self.clos, name, self.routes[name], new[name])
                self._apply(name, plan.entries, KNOB_TABLES)

    def _targets(self, switches):
        if switches is None:
            return list(self.names)
        if isinstance(switches, str):
            switches = [switches]
        unknown = [s for s in switches if s not in self.connections]
        if unknown:
            raise ControlError(f"unknown switch(es) {', '.join(unknown)} (the fabric has {', '.join(self.names)})")
        return list(switches)

    # ------------------------------------------------------------------ runtime knobs
    def set_hash_mode(self, mode, qp_aware=None, switches=None):
        """ECMP hashing: "5tuple", "qpn" (5-tuple + BTH dest QP) or "flowlet" (qp_aware: per-QP flowlets)."""
        self._set_knobs(switches, lambda k: k.with_hash_mode(mode, qp_aware))

    def set_flowlet_gap_us(self, gap_us, switches=None):
        self._set_knobs(switches, lambda k: k.with_flowlet(gap_us=_whole(gap_us, "flowlet gap (us)")))

    set_flowlet_gap = set_flowlet_gap_us

    def set_flowlet_choice(self, choice, switches=None):
        """How a new flowlet picks its member: "random" or "least_loaded" (fewer bytes of two)."""
        self._set_knobs(switches, lambda k: k.with_flowlet(choice=choice))

    def set_ecn(self, kmin, kmax, pmax, priority=3, switches=None):
        """RED marking on `priority`: none up to Kmin packets, linear up to Pmax at Kmax, all above."""
        self._set_knobs(switches, lambda k: k.with_ecn(_whole(kmin, "Kmin"), _whole(kmax, "Kmax"),
                                                       float(pmax), priority))

    def disable_ecn(self, priority=3, switches=None):
        self._set_knobs(switches, lambda k: k.without_ecn(priority))

    def set_pfc(self, xoff=None, xon=None, priorities=(3,), enabled=True, refresh_us=None, pause_us=None,
                switches=None, headroom=None, reserved=None):
        """PFC generation. enabled=True: exactly `priorities` are lossless, with these XOFF/XON
        thresholds in bytes per ingress PG (None keeps the current ones); enabled=False: off on
        `priorities`.
        set_pfc(True) / set_pfc(False) switch it on/off with the current thresholds."""
        if isinstance(xoff, bool):
            enabled, xoff = xoff, None
        if not enabled:
            self._set_knobs(switches, lambda k: k.with_pfc(priorities=priorities, enabled=False))
            return
        self._set_knobs(switches, lambda k: k.with_pfc(
            None if xoff is None else _whole(xoff, "XOFF"), None if xon is None else _whole(xon, "XON"),
            priorities, True, refresh_us, pause_us,
            None if headroom is None else _whole(headroom, "headroom"),
            None if reserved is None else _whole(reserved, "reserved")))

    def set_pfc_thresholds(self, xoff, xon, switches=None):
        """New XOFF/XON on the priorities that already have PFC on (priority 3 if none has)."""
        prios = sorted(next(iter(self.knobs.values())).pfc) or [3]
        self.set_pfc(xoff, xon, priorities=prios, switches=switches)

    def set_dscp_map(self, mapping, switches=None):
        """{dscp: priority}; replaces the whole map (unlisted DSCPs go to priority 0)."""
        self._set_knobs(switches, lambda k: k.with_dscp_map(mapping))

    def set_knobs(self, knobs, switches=None):
        """Replace every knob at once with `knobs` (a Knobs; each switch keeps its hash seed)."""
        knobs.check()
        self._set_knobs(switches, lambda current: replace(knobs, hash_seed=current.hash_seed))

    def refresh(self, switches=None):
        """Forget what this controller believes `switches` hold: the next operation reads the
        switch again (after another controller, e.g. `rocelab fabric`, changed it)."""
        with self._lock:
            for name in self._targets(switches):
                self.installed[name] = None
                self._knobs_known[name] = False

    def get_knobs(self, switch):
        with self._lock:
            self._state(switch)
            return self.knobs[switch]

    # ------------------------------------------------------------------ links
    def link_status(self, a, b, up):
        """Tell the controller that the link between switches `a` and `b` is up/down: routes and
        ECMP groups are recomputed without it and every switch whose plan changed is rewritten."""
        with self._lock:
            if a not in self.clos.switches or b not in self.clos.switches:
                raise ControlError(f"link {a}-{b}: both ends must be switches of the fabric")
            if not any(p.peer == b for p in self.clos.switches[a].ports.values()):
                raise ControlError(f"there is no link between {a} and {b}")
            key = link_key(a, b)
            if up:
                self.down_links.discard(key)
            else:
                self.down_links.add(key)
            self.routes = compute_routes(self.clos, frozenset(self.down_links))
            changed = 0
            for name in self.names:
                plan = plan_switch(self.clos, name, self.routes[name], self.knobs[name])
                changed += self._apply(name, plan.entries, ROUTING_TABLES)
            return changed

    # ------------------------------------------------------------------ TE overrides
    def _te_target(self, leaf, ingress_port, dst_prefix):
        if leaf not in self.connections:
            raise ControlError(f"unknown switch {leaf!r} (the fabric has {', '.join(self.names)})")
        sw = self.clos.switches[leaf]
        if ingress_port not in sw.ports:
            raise ControlError(f"{leaf}: ingress port {ingress_port} does not exist (ports: {sorted(sw.ports)})")
        try:
            prefix = normalize_prefix(dst_prefix)
        except ValueError as exc:
            raise ControlError(str(exc)) from None
        route = self.routes[leaf].by_prefix().get(prefix)
        if route is None:
            known = ", ".join(r.prefix for r in self.routes[leaf].routes if r.prefix.endswith("/24"))
            raise ControlError(f"{leaf}: no route for {prefix}, so no override can apply to it "
                               f"(routed prefixes: {known})")
        return sw, route

    def add_te_override(self, leaf, ingress_port, dst_prefix, egress_port):
        """Traffic entering `leaf` on `ingress_port` for `dst_prefix` leaves by `egress_port`,
        whatever ECMP would choose. Replaces an override with the same key."""
        with self._lock:
            sw, route = self._te_target(leaf, ingress_port, dst_prefix)
            if egress_port not in sw.ports:
                raise ControlError(f"{leaf}: egress port {egress_port} does not exist (ports: {sorted(sw.ports)})")
            if egress_port == ingress_port:
                raise ControlError(f"{leaf}: override would send {route.prefix} back out of port {ingress_port}")
            entry = te_override_entry(ingress_port, route.route_id, next_hop(self.clos, leaf, egress_port))
            state = self._state(leaf)
            current = state["entries"].get(entry.key)
            if current == entry:
                return
            kind = "MODIFY" if current is not None else "INSERT"
            self._conn(leaf).write_entries(kind, [entry], f"TE override {route.prefix} from port {ingress_port}")
            state["entries"][entry.key] = entry

    def remove_te_override(self, leaf, ingress_port, dst_prefix):
        """Remove the override (ECMP applies again); False if there was none."""
        with self._lock:
            _sw, route = self._te_target(leaf, ingress_port, dst_prefix)
            state = self._state(leaf)
            key = (N.TE_OVERRIDE, (("exact", ingress_port), ("exact", route.route_id)), False)
            entry = state["entries"].get(key)
            if entry is None:
                return False
            self._conn(leaf).write_entries("DELETE", [entry], f"TE override {route.prefix} from port {ingress_port}")
            del state["entries"][key]
            return True

    def te_overrides(self, switch=None):
        """[{"leaf", "ingress_port", "dst_prefix", "egress_port", "packets", "bytes"}] as the
        switches hold them (read back, with their hit counters)."""
        with self._lock:
            out = []
            for name in self._targets(switch):
                conn = self._conn(name)
                info = conn.info()
                routes = self.routes[name].by_route_id()
                for te in conn.read_table(N.TE_OVERRIDE, with_counters=True):
                    entry = info.entry_from(te)
                    rid = entry.match[1][1]
                    out.append({"leaf": name, "ingress_port": entry.match[0][1],
                                "dst_prefix": routes[rid].prefix if rid in routes else f"route {rid}",
                                "egress_port": dict(entry.params).get("port"),
                                "packets": te.counter_data.packet_count, "bytes": te.counter_data.byte_count})
            return sorted(out, key=lambda o: (o["leaf"], o["ingress_port"], o["dst_prefix"]))

    def clear_te_overrides(self, switch=None):
        with self._lock:
            removed = 0
            for name in self._targets(switch):
                removed += self._apply(name, {}, (N.TE_OVERRIDE,))
            return removed

    # ------------------------------------------------------------------ counters
    def read_counters(self, switch=None):
        """{switch: counters} (layout in testbed/control/counters.py); `switch` narrows it down."""
        out = {}
        with self._lock:
            for name in self._targets(switch):
                out[name], self._read_plans[name] = read_switch(
                    self._conn(name), self.clos.switches[name], self.routes[name], self.punted[name],
                    self._read_plans.get(name))
        return out

    # ------------------------------------------------------------------ views
    def route_table(self, switch):
        """[(prefix, route id, [egress ports], group)] as planned for `switch`."""
        return [(r.prefix, r.route_id, [h.port for h in r.next_hops], r.group) for r in self.routes[switch].routes]


def _on_each(names, work, what):
    """work(name) for every switch concurrently; every switch is tried, and the failures are
    reported together, each naming its switch (a bug, not a ControlError, propagates as is)."""
    if len(names) <= 1:
        for name in names:
            work(name)
        return
    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="fabric-switch") as pool:
        futures = [pool.submit(work, name) for name in names]
    failed = [f.exception() for f in futures if f.exception() is not None]
    for exc in failed:
        if not isinstance(exc, ControlError):
            raise exc
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise ControlError(f"{what} failed on {len(failed)} of {len(names)} switches:\n"
                           + "\n".join(f"  {exc}" for exc in failed))


def _seeded(knobs, switch, seed=0):
    # Different hash seeds per switch keep tiers from making correlated choices (polarization);
    # a run's seed moves all of them, as rebooting switches with new seeds would.
    if seed:
        mixed = zlib.crc32(f"{seed}/{switch.device_id}".encode())
        hash_seed = (mixed ^ (mixed >> 16)) & 0xFFFF
    else:
        hash_seed = switch.device_id & 0xFFFF
    return replace(knobs, hash_seed=hash_seed)


def _with_port_headroom(knobs, switch, model):
    """Unset PFC headroom comes from the calculator for the switch's fastest port and
    `model` = (response time us, cable m, MTU)."""
    response_us, cable_m, mtu = model
    return with_headroom(knobs, max((p.rate_mbps for p in switch.ports.values()), default=0.0), mtu=mtu,
                         response_us=response_us, cable_m=cable_m)


def _short(entry):
    """Entries read back carry full P4Info names; the planner uses the same full names."""
    return Entry(entry.table, tuple(entry.match), entry.action, tuple(entry.params), entry.default)


def _whole(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise KnobError(f"{what} must be a whole number (got {value!r})")
    return int(value)
