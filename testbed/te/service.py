"""The TE service: collector + CSPF engine + switch programmer, and the state they share.

Framework-free on purpose: the Ryu app (:mod:`testbed.te.app`) is a thin REST and
timer shell around one :class:`TEService`, and tests drive the service directly.

Overrides have an origin. ``cspf`` ones are recomputed on every run: the run installs
what the new plan adds, changes what it moves and removes what it no longer wants.
``manual`` ones (REST) stay until removed and CSPF works around them. On a link or
switch failure every installed override whose path crosses the failure is removed at
once, so the switches' default ECMP routes carry its traffic; CSPF ones are placed
again on the next run (their demand is remembered for a few intervals even though the
removed entry no longer counts it), manual ones come back when their path is up.

Failures come from the testbed (REST link/switch events, interface operstate) and from
the switches themselves: a switch whose counters cannot be read is taken as down until
a read succeeds again. An override that a live switch refused to remove is retried at
the start of every run; one on a switch that is down is simply forgotten (a switch
that restarts comes back without it).
"""
import ipaddress
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Dict, Optional

from testbed.te import fields
from testbed.te.collector import DemandHints, OperstateWatcher, RateMeter, traffic_matrix
from testbed.te.engine import DemandKey, cspf, utilization
from testbed.te.programmer import Override, ProgrammerError
from testbed.te.topology import FabricError, FabricGraph

MIN_INTERVAL_S, MAX_INTERVAL_S = 0.2, 3600.0
MAX_RATE_MBPS = 1e6          # a demand hint beyond 1 Tb/s is a typo
MAX_TTL_S = 1e7
MAX_PROBE_TIMEOUT_S = 30.0


@dataclass
class Active:
    override: Override
    origin: str  # "cspf" or "manual"
    rate_mbps: float = 0.0


class TEService:
    def __init__(self, clos, programmer, interval_s=5.0, min_rate_mbps=0.01, lock=None,
                 watch_operstate=True, remember_intervals=3, intf_format=None, clock=time.monotonic,
                 min_interval_s=MIN_INTERVAL_S):
        """`clock`: seconds of the clock intervals and rates are measured on (virtual time passes
        its simulated clock, with a `min_interval_s` in microseconds; testbed/sim/te.py)."""
        self.clos = clos
        self.graph = FabricGraph(clos)
        self.programmer = programmer
        self.clock = clock
        self.min_interval_s = min_interval_s
        self.interval_s = self._check_interval(interval_s)
        self.min_rate_mbps = min_rate_mbps
        self.remember_intervals = remember_intervals
        self.lock = lock or threading.RLock()
        self.meter = RateMeter()
        self.hints = DemandHints(clock)
        self.watcher = OperstateWatcher(clos, intf_format=intf_format) if watch_operstate else None
        self.active: Dict[DemandKey, Active] = {}
        self.manual: Dict[DemandKey, Override] = {}
        self.remembered: Dict[DemandKey, tuple] = {}  # key -> (rate, monotonic time seen)
        self.stale: Dict[DemandKey, Override] = {}  # withdrawn here, but the switch refused
        self.unreachable = set()  # switches taken down because their counters could not be read
        self.plan = None
        self.runs = 0
        self.last_run: Optional[dict] = None
        self.last_run_at = None
        self.events = deque(maxlen=200)

    # --- helpers ---
    def _log(self, kind, **detail):
        self.events.append(dict(detail, event=kind, time=round(time.time(), 3)))

    def _check_interval(self, seconds):
        return fields.number(seconds, "interval_s", self.min_interval_s, MAX_INTERVAL_S)

    def _key(self, leaf, ingress_port, dst_prefix):
        """Validate an override key; returns it with the destination leaf."""
        self.graph.leaf(fields.name(leaf, "leaf"))
        ingress_port = fields.port(ingress_port, "ingress_port")
        dst_prefix = fields.prefix(dst_prefix)
        if ingress_port not in self.graph.host_ports(leaf):
            raise FabricError(f"{leaf} port {ingress_port} is not a host-facing port "
                              f"(host ports: {self.graph.host_ports(leaf)})")
        dst_leaf = self.graph.leaf_for_prefix(str(dst_prefix))
        if dst_leaf == leaf:
            raise FabricError(f"{dst_prefix} is local to {leaf}: its traffic never takes an uplink")
        subnet = self.clos.switches[dst_leaf].subnet
        if ipaddress.ip_network(str(dst_prefix)) != ipaddress.ip_network(subnet):
            # the switches key overrides and demand counters on the route a packet matched,
            # and on a source leaf that is the destination leaf's subnet route
            raise FabricError(f"{dst_prefix} is not a leaf subnet: overrides match whole leaf "
                              f"subnets ({dst_prefix} is inside {dst_leaf}'s {subnet})")
        return DemandKey(leaf, ingress_port, subnet), dst_leaf

    def _path(self, override):
        return self.graph.path_fractions(override.leaf, override.egress_port,
                                         self.graph.leaf_for_prefix(override.dst_prefix))

    def _install(self, override, origin, rate=0.0):
        old = self.active.get(override.key)
        if old and old.override == override:
            old.origin, old.rate_mbps = origin, rate
            return False
        self.programmer.add(override)  # replaces an entry with the same key: make before break
        self.active[override.key] = Active(override, origin, rate)
        self.stale.pop(override.key, None)
        return True

    def _withdraw(self, key, why):
        act = self.active.pop(key, None)
        if act is None:
            return None
        self._log("withdrawn", reason=why, origin=act.origin, **act.override.as_dict())
        if act.origin == "cspf" and act.rate_mbps > 0:
            self.remembered[key] = (act.rate_mbps, self.clock())
        self._remove_from_switch(act.override)
        return act.override

    def _remove_from_switch(self, override):
        """Delete the entry; a live switch that refuses gets asked again next run."""
        if override.leaf in self.graph.down_switches:
            self.stale.pop(override.key, None)
            return  # nothing to ask a dead switch; it comes back without the entry
        try:
            self.programmer.remove(override)
            self.stale.pop(override.key, None)
        except ProgrammerError as exc:
            self.stale[override.key] = override
            self._log("remove_failed", error=str(exc), **override.as_dict())

    def _retry_stale(self):
        for key, override in list(self.stale.items()):
            if key not in self.active:
                self._remove_from_switch(override)

    def _withdraw_broken(self, why):
        """Remove every installed override whose path is no longer up; returns them."""
        broken = [key for key, act in self.active.items() if self._path(act.override) is None]
        return [self._withdraw(key, why).as_dict() for key in broken]

    # --- link and switch events ---
    def link_event(self, switch, port, up):
        with self.lock:
            return self._link_event(switch, port, up)

    def _link_event(self, switch, port, up):
        switch, port = fields.name(switch, "switch"), fields.port(port, "port")
        ends = self.graph.set_link(switch, port, up)
        self._log("link_up" if up else "link_down", switch=switch, port=int(port))
        withdrawn = [] if up else self._withdraw_broken(f"link {switch}:{port} down")
        return {"link": [f"{s}:{p}" for s, p in ends], "up": bool(up), "withdrawn": withdrawn}

    def switch_event(self, switch, up):
        switch = fields.name(switch, "switch")
        with self.lock:
            self.graph.set_switch(switch, up)
            if up:
                self.unreachable.discard(switch)  # the next counter read judges it afresh
            self._log("switch_up" if up else "switch_down", switch=switch)
            withdrawn = [] if up else self._withdraw_broken(f"switch {switch} down")
            return {"switch": switch, "up": bool(up), "withdrawn": withdrawn}

    def _track_reachability(self, unreachable):
        """Switches whose counter read failed are down; they are up again once a read works."""
        for name in sorted(set(unreachable) - self.unreachable):
            self.unreachable.add(name)
            if name not in self.graph.down_switches:
                self.graph.set_switch(name, False)
                self._log("switch_unreachable", switch=name, error=unreachable[name])
                self._withdraw_broken(f"switch {name} unreachable")
        for name in sorted(self.unreachable - set(unreachable)):
            self.unreachable.discard(name)
            self.graph.set_switch(name, True)
            self._log("switch_reachable", switch=name)

    def poll_links(self):
        """Apply link changes seen in the host's interface state (booted fabric only)."""
        if not self.watcher:
            return []
        with self.lock:
            return [self._link_event(s, p, up) for s, p, up in self.watcher.poll()]

    # --- manual overrides ---
    def add_manual(self, leaf, ingress_port, dst_prefix, egress_port):
        with self.lock:
            key, dst_leaf = self._key(leaf, ingress_port, dst_prefix)
            egress_port = fields.port(egress_port, "egress_port")
            if egress_port not in self.graph.uplinks(leaf):
                raise FabricError(f"{leaf} port {egress_port} is not an uplink (uplinks: {self.graph.uplinks(leaf)})")
            override = Override(key.leaf, key.ingress_port, key.dst_prefix, egress_port)
            if self._path(override) is None:
                raise FabricError(f"{leaf} port {egress_port} has no working path to {dst_leaf} "
                                  "(a link or switch on it is down)")
            self._install(override, "manual", self._rate_of(key))  # a refusal leaves no trace
            self.manual[key] = override
            self._log("manual_add", **override.as_dict())
            return override.as_dict()

    def remove_override(self, leaf, ingress_port, dst_prefix):
        """Remove the override for this key, manual or CSPF (CSPF may place it again)."""
        with self.lock:
            key, _ = self._key(leaf, ingress_port, dst_prefix)
            had_manual = self.manual.pop(key, None) is not None
            removed = self._withdraw(key, "removed over REST")
            if removed is None and not had_manual:
                raise FabricError(f"no override for {leaf} port {key.ingress_port} -> {key.dst_prefix}")
            return {"removed": removed.as_dict() if removed else None, "was_manual": had_manual}

    # --- demands ---
    def add_hint(self, leaf, ingress_port, dst_prefix, rate_mbps, ttl_s=None):
        with self.lock:
            key, _ = self._key(leaf, ingress_port, dst_prefix)
            rate = fields.number(rate_mbps, "rate_mbps", 0.0, MAX_RATE_MBPS)
            ttl = None if ttl_s is None else fields.number(ttl_s, "ttl_s", 0.0, MAX_TTL_S, lo_open=True)
            self.hints.set(key, rate, ttl)
            return dict(key.as_dict(), rate_mbps=rate, ttl_s=ttl)

    def remove_hint(self, leaf, ingress_port, dst_prefix):
        with self.lock:
            key, _ = self._key(leaf, ingress_port, dst_prefix)
            if not self.hints.remove(key):
                raise FabricError(f"no demand hint for {leaf} port {key.ingress_port} -> {key.dst_prefix}")
            return key.as_dict()

    def _rate_of(self, key):
        return max(self.meter.demand_mbps.get(key, 0.0), self.hints.current().get(key, 0.0))

    def demands(self):
        with self.lock:
            return self._demands()

    def _demands(self):
        measured = dict(self.meter.demand_mbps)
        horizon = self.remember_intervals * self.interval_s
        now = self.clock()
        for key, (rate, seen) in list(self.remembered.items()):
            if now - seen > horizon:
                del self.remembered[key]
            elif key not in measured or measured[key] <= 0:
                measured[key] = rate
        return traffic_matrix(self.graph, measured, self.hints.current(), self.min_rate_mbps)

    # --- the optimization run ---
    def collect(self):
        sample = self.programmer.read_counters()
        self._track_reachability(sample.unreachable)
        self.meter.update(sample)
        for key, rate in self.meter.demand_mbps.items():
            if rate > self.min_rate_mbps:
                self.remembered[key] = (rate, self.clock())

    def optimize(self, reason="requested"):
        with self.lock:
            return self._optimize(reason)

    def _optimize(self, reason):
        started = time.monotonic()
        errors = []
        try:
            self.collect()
        except Exception as exc:  # a run without fresh counters still honours hints and failures
            errors.append(f"counter read failed: {exc}")
        self._withdraw_broken("path down at run start")
        self._retry_stale()
        demands = self._demands()
        pinned = []
        for key, override in self.manual.items():
            if self._path(override) is not None:
                pinned.append((key, self._rate_of(key), override.egress_port))
        self.plan = cspf(self.graph, demands, pinned)
        desired = {}
        for key, placement in self.plan.placements.items():
            origin = "manual" if placement.pinned else "cspf"
            desired[key] = (Override(key.leaf, key.ingress_port, key.dst_prefix, placement.uplink),
                            origin, placement.rate_mbps)
        installed, removed = [], []
        for key in [k for k in self.active if k not in desired]:
            removed.append(self._withdraw(key, "no longer in the plan").as_dict())
        for key, (override, origin, rate) in sorted(desired.items(), key=lambda kv: kv[1][0].as_dict()["leaf"]):
            try:
                if self._install(override, origin, rate):
                    installed.append(dict(override.as_dict(), origin=origin))
            except ProgrammerError as exc:
                errors.append(str(exc))
        self.runs += 1
        self.last_run_at = self.clock()
        self.last_run = {
            "run": self.runs, "reason": reason, "demands": len(demands),
            "placed": len(self.plan.placements), "unroutable": [k.as_dict() for k in self.plan.unroutable],
            "over_capacity": [p.key.as_dict() for p in self.plan.placements.values() if not p.fits],
            "installed": installed, "removed": removed,
            "max_utilization_planned": round(self.plan.max_utilization(self.graph), 6),
            "errors": errors, "took_ms": round((time.monotonic() - started) * 1000, 3),
        }
        self._log("optimized", run=self.runs, reason=reason, installed=len(installed), removed=len(removed))
        return self.last_run

    def tick(self):
        """Called often by the app's timer: link polling, and a run when the interval is up."""
        self.poll_links()
        with self.lock:
            due = self.last_run_at is None or self.clock() - self.last_run_at >= self.interval_s
            if due:
                return self._optimize("interval")
        return None

    # --- views for the REST API ---
    def set_interval(self, seconds):
        with self.lock:
            self.interval_s = self._check_interval(seconds)
            return {"interval_s": self.interval_s}

    def placements(self):
        with self.lock:
            out = []
            for key, act in sorted(self.active.items(), key=lambda kv: (kv[0].leaf, kv[0].ingress_port, kv[0].dst_prefix)):
                d = dict(act.override.as_dict(), origin=act.origin, rate_mbps=round(act.rate_mbps, 6))
                d["via"] = self.graph.links[(key.leaf, act.override.egress_port)].dst
                path = self._path(act.override) or {}
                d["path"] = [self.graph.links[ref].name for ref in sorted(path)]
                out.append(d)
            suspended = [dict(o.as_dict(), origin="manual") for k, o in self.manual.items() if k not in self.active]
            return {"placements": out, "suspended_manual": suspended}

    def utilization(self):
        with self.lock:
            planned = self.plan.loads if self.plan else {}
            measured = self.meter.link_mbps
            util = utilization(self.graph, planned)
            links = []
            for link in sorted(self.graph.links.values(), key=lambda l: l.ref):
                ref = link.ref
                entry = {"link": link.name, "switch": link.src, "port": link.src_port, "kind": link.kind,
                         "capacity_mbps": link.capacity_mbps, "up": self.graph.is_up(ref)}
                if ref in measured:
                    entry["measured_mbps"] = round(measured[ref], 6)
                    entry["measured_utilization"] = round(measured[ref] / link.capacity_mbps, 6)
                if ref in util:
                    entry["planned_mbps"] = round(planned.get(ref, 0.0), 6)
                    entry["planned_utilization"] = round(util[ref], 6)
                links.append(entry)
            return {"links": links,
                    "max_planned_utilization": round(max(util.values(), default=0.0), 6),
                    "max_measured_utilization": round(max(
                        (e["measured_utilization"] for e in links if "measured_utilization" in e and e["kind"] != "host"),
                        default=0.0), 6)}

    def status(self):
        with self.lock:
            return {"interval_s": self.interval_s, "runs": self.runs, "last_run": self.last_run,
                    "overrides": len(self.active), "manual": len(self.manual),
                    "down_ports": sorted(f"{s}:{p}" for s, p in self.graph.down_ports),
                    "down_switches": sorted(self.graph.down_switches),
                    "unreachable_switches": sorted(self.unreachable),
                    "removals_pending": [o.as_dict() for o in self.stale.values()],
                    "events": list(self.events)[-20:]}

    def probe_switches(self, switches=None, timeout_s=2.0):
        """P4Runtime Capabilities of each switch (in the worker process when there is one)."""
        if switches is not None and (not isinstance(switches, (list, tuple)) or len(switches) > len(self.clos.switches)):
            raise fields.FieldError("switch: expected at most one name per switch of the fabric")
        for name in switches or ():
            self.graph.switch(fields.name(name, "switch"))
        timeout_s = fields.number(timeout_s, "timeout", 0.0, MAX_PROBE_TIMEOUT_S, lo_open=True)
        if hasattr(self.programmer, "probe"):
            return self.programmer.probe(switches, timeout_s)
        from testbed.te.p4rt_probe import probe_all  # plain process, no eventlet: call directly
        return probe_all(self.clos, switches, timeout_s)

    def close(self):
        self.programmer.close()
