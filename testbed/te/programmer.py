"""The switch programmer: installs and removes TE overrides, reads counters.

The TE service talks to an :class:`OverrideProgrammer`; three exist:

* :class:`DryRunProgrammer` keeps overrides in memory (tests, `--programmer dry-run`,
  and what-if runs with no fabric behind the app);
* :class:`FabricProgrammer` adapts ``testbed.control.FabricController`` (P4Runtime to
  the leaves: the override table, per-port and per-override counters);
* :class:`ProcessProgrammer` runs either inside the worker process
  (:mod:`testbed.te.worker`): under Ryu, gRPC must never run under eventlet.

Counters come back normalised to :class:`CounterSample`: cumulative bytes per
directed link (a port's tx bytes) and per demand key, whatever the controller's own
dict layout is; rates are the collector's business.
"""
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from testbed.te.engine import DemandKey


@dataclass
class CounterSample:
    at: float  # time.monotonic() of the read
    port_tx_bytes: Dict[Tuple[str, int], int] = field(default_factory=dict)
    demand_bytes: Dict[DemandKey, int] = field(default_factory=dict)
    unreachable: Dict[str, str] = field(default_factory=dict)  # switch -> why its read failed


@dataclass(frozen=True)
class Override:
    leaf: str
    ingress_port: int
    dst_prefix: str
    egress_port: int

    @property
    def key(self):
        return DemandKey(self.leaf, self.ingress_port, self.dst_prefix)

    def as_dict(self):
        return {"leaf": self.leaf, "ingress_port": self.ingress_port,
                "dst_prefix": self.dst_prefix, "egress_port": self.egress_port}


class ProgrammerError(RuntimeError):
    """A switch refused or could not be reached; the message names switch and entry."""


class OverrideProgrammer:
    def add(self, override: Override): raise NotImplementedError  # replaces the same key's entry
    def remove(self, override: Override): raise NotImplementedError
    def installed(self): raise NotImplementedError  # -> list[Override] as the switches hold them
    def read_counters(self) -> CounterSample: raise NotImplementedError
    def close(self): pass


class DryRunProgrammer(OverrideProgrammer):
    """Overrides in memory; counters are whatever :meth:`feed` last supplied."""

    def __init__(self):
        self.entries: Dict[DemandKey, Override] = {}
        self.calls = []  # (operation, override, thread ident): tests check who called
        self._sample = CounterSample(time.monotonic())

    def _record(self, op, ov):
        import threading  # the real module's identity is all that is read here
        self.calls.append((op, ov, threading.get_ident()))

    def add(self, override):
        self._record("add", override)
        self.entries[override.key] = override

    def remove(self, override):
        self._record("remove", override)
        self.entries.pop(override.key, None)

    def installed(self):
        return list(self.entries.values())

    def feed(self, port_tx_bytes=None, demand_bytes=None, unreachable=None):
        self._sample = CounterSample(time.monotonic(), dict(port_tx_bytes or {}), dict(demand_bytes or {}),
                                     dict(unreachable or {}))

    def read_counters(self):
        s = self._sample
        return CounterSample(time.monotonic(), dict(s.port_tx_bytes), dict(s.demand_bytes), dict(s.unreachable))


class ProcessProgrammer(OverrideProgrammer):
    """Runs a programmer of `kind` inside the worker process (see :mod:`testbed.te.worker`).

    This is what the Ryu app uses: the gRPC clients live in a process without eventlet.
    """

    def __init__(self, kind, clos, timeout=30.0):
        from testbed.te.worker import ProcessWorker
        self.kind = kind
        self.timeout = timeout
        self.fabric = clos.to_dict()
        self.worker = ProcessWorker()
        try:
            self.worker.call("open", kind, clos.to_dict(), timeout=60.0)
        except BaseException:
            self.worker.close()
            raise

    def _call(self, method, *args):
        return self.worker.call("call", method, *args, timeout=self.timeout)

    def add(self, override):
        return self._call("add", override)

    def remove(self, override):
        return self._call("remove", override)

    def installed(self):
        return self._call("installed")

    def read_counters(self):
        sample = self._call("read_counters")
        sample.at = time.monotonic()  # the child's clock may differ: rates use ours
        return sample

    def probe(self, switches=None, timeout_s=2.0):
        count = len(switches or self.fabric["switches"])
        return self.worker.call("probe", self.fabric, switches, timeout_s,
                                timeout=timeout_s * count + 5)

    def close(self):
        try:
            self._call("close")
        except Exception:
            pass  # the child is going away regardless
        self.worker.close()


class FabricProgrammer(OverrideProgrammer):
    """Adapter to ``testbed.control.FabricController`` (lives in the worker process)."""

    def __init__(self, clos, controller=None, clock=time.monotonic):
        """`clock`: what counter samples are stamped with (virtual time: the simulated clock)."""
        self.clock = clock
        if controller is None:
            try:
                from testbed.control import FabricController
            except ImportError as exc:
                raise ProgrammerError("the fabric controller (testbed.control) is not available in "
                                      f"this build ({exc}); run with --programmer dry-run") from None
            controller = FabricController(clos, **_te_session_options(FabricController))
            controller.connect()
        self.clos = clos
        self.controller = controller

    def add(self, override):
        try:
            self.controller.add_te_override(override.leaf, override.ingress_port, override.dst_prefix,
                                            override.egress_port)
        except Exception as exc:
            raise ProgrammerError(f"{override.leaf}: cannot install override {override.as_dict()}: {exc}") from exc

    def remove(self, override):
        try:
            self.controller.remove_te_override(override.leaf, override.ingress_port, override.dst_prefix)
        except Exception as exc:
            raise ProgrammerError(f"{override.leaf}: cannot remove override {override.as_dict()}: {exc}") from exc

    def installed(self):
        return [_override_from(entry) for entry in _iter_entries(self.controller.te_overrides())]

    def read_counters(self):
        """One switch at a time, so that a dead switch is reported instead of failing the read."""
        raw, unreachable = {}, {}
        for name in self.clos.switches:
            try:
                raw.update(self.controller.read_counters(name))
            except Exception as exc:
                unreachable[name] = f"{type(exc).__name__}: {exc}"
        sample = normalize_counters(raw, self.clock())
        sample.unreachable = unreachable
        return sample

    def close(self):
        close = getattr(self.controller, "close", None)
        if close:
            close()


#: The TE app's P4Runtime session: its own role, so that it is primary for its writes
#: (the overrides) without taking primaryship away from the fabric controller that
#: booted the fabric (which keeps the default role).
TE_ROLE = "te"
#: Above the fabric controller's (0, 1): BMv2's P4Runtime server (PI) has no roles and refuses
#: a stream whose election id another stream of the device holds (testbed/control/cli.py).
TE_ELECTION_ID = (0, 2)


def _te_session_options(controller_cls):
    """Role and election id, for the controller versions that take them."""
    import inspect
    try:
        params = inspect.signature(controller_cls).parameters
    except (TypeError, ValueError):
        return {}
    options = {}
    if "role" in params:
        options["role"] = TE_ROLE
    if "election_id" in params:
        options["election_id"] = TE_ELECTION_ID
    return options


# --- tolerant readers of the controller's plain dicts ---------------------------------

def _iter_entries(raw):
    """Override entries as dicts, from a list of dicts/tuples or a {switch: [...]} dict."""
    if isinstance(raw, dict):
        for leaf, entries in raw.items():
            for entry in entries:
                entry = dict(entry) if isinstance(entry, dict) else _tuple_entry(entry)
                entry.setdefault("leaf", leaf)
                yield entry
    else:
        for entry in raw or ():
            yield dict(entry) if isinstance(entry, dict) else _tuple_entry(entry)


def _tuple_entry(t):
    names = ("leaf", "ingress_port", "dst_prefix", "egress_port", "packets", "bytes")
    return dict(zip(names, t))


def _override_from(entry):
    return Override(entry.get("leaf") or entry.get("switch"), int(entry["ingress_port"]),
                    str(entry["dst_prefix"]), int(entry.get("egress_port", entry.get("port", 0))))


def normalize_counters(raw, at=None) -> CounterSample:
    """Turn ``read_counters()`` output into a :class:`CounterSample`.

    The controller's layout (testbed/control/counters.py): per switch, ``"port_totals"``
    or per-priority ``"ports"`` (summed) with ``tx_bytes``, ``"te_overrides"`` and
    ``"demands"`` lists of ``{ingress_port, dst_prefix, bytes}``; the demand counter
    sees all of a key's traffic, overridden or not, so it wins over override hits. The
    answer may be ``{switch: {...}}``, a list of ``{"switch": name, ...}`` or one of those.
    """
    sample = CounterSample(time.monotonic() if at is None else at)
    for switch, counters in _per_switch(raw):
        ports = counters.get("port_totals") or counters.get("ports", {})
        for port, value in ports.items():
            sample.port_tx_bytes[(switch, int(port))] = _tx_bytes(value)
        overrides = counters.get("te_overrides", counters.get("te_override_hits", []))
        if isinstance(overrides, dict):
            overrides = [dict(v, ingress_port=k[0], dst_prefix=k[1]) if isinstance(v, dict)
                         else {"ingress_port": k[0], "dst_prefix": k[1], "bytes": v}
                         for k, v in overrides.items()]
        for entry in overrides:
            key = DemandKey(switch, int(entry["ingress_port"]), str(entry["dst_prefix"]))
            sample.demand_bytes[key] = sample.demand_bytes.get(key, 0) + int(entry.get("bytes", 0))
        for entry in counters.get("demands", []):
            key = DemandKey(switch, int(entry["ingress_port"]), str(entry["dst_prefix"]))
            sample.demand_bytes[key] = max(sample.demand_bytes.get(key, 0), int(entry.get("bytes", 0)))
    return sample


def _per_switch(raw):
    """(switch, counters) pairs from {switch: {...}}, [{"switch": ...}, ...] or one {"switch": ...}."""
    if not raw:
        return []
    if isinstance(raw, dict) and "switch" in raw and isinstance(raw.get("switch"), str):
        return [(raw["switch"], raw)]
    if isinstance(raw, dict):
        return [(name, c) for name, c in raw.items() if isinstance(c, dict)]
    return [(c["switch"], c) for c in raw if isinstance(c, dict) and "switch" in c]


def _tx_bytes(value):
    if isinstance(value, (int, float)):
        return int(value)
    if "tx_bytes" in value:
        return int(value["tx_bytes"])
    # per-priority layout: {priority: {"tx_bytes": n}}
    return sum(_tx_bytes(v) for v in value.values() if isinstance(v, dict))


PROGRAMMERS = ("dry-run", "p4runtime")


def build_programmer(kind, fabric_dict) -> OverrideProgrammer:
    """Create a programmer in *this* process (the worker calls it)."""
    from testbed.clos import Clos
    if kind == "dry-run":
        return DryRunProgrammer()
    if kind == "p4runtime":
        return FabricProgrammer(Clos.from_dict(fabric_dict))
    raise ProgrammerError(f"unknown programmer {kind!r} (choose {' or '.join(PROGRAMMERS)})")


def make_programmer(kind, clos) -> OverrideProgrammer:
    """The programmer for the Ryu app: `kind` runs in the worker process, safe from green threads."""
    if kind not in PROGRAMMERS:
        raise ProgrammerError(f"unknown programmer {kind!r} (choose {' or '.join(PROGRAMMERS)})")
    return ProcessProgrammer(kind, clos)
