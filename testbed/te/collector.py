"""The collector: traffic matrix and link utilization from counters, link state from the host.

* :class:`RateMeter` turns successive cumulative :class:`CounterSample`\\ s into rates
  (Mb/s per demand key and per directed link). Counter resets (a switch restarted)
  give no negative rates: that interval is skipped for the key.
* :class:`DemandHints` are demands declared by whoever knows them in advance (a job
  scheduler placing ranks, a lab script): Meta's TE also takes placement hints. They
  expire, so a finished job stops occupying capacity.
* :class:`OperstateWatcher` reports link up/down from ``/sys/class/net/<switch>-eth<port>``
  (Mininet's `link s1 s2 down` sets both ends down there); the testbed may also post
  events to the REST API directly.
"""
import os
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from testbed.te.engine import Demand, DemandKey
from testbed.te.programmer import CounterSample


class RateMeter:
    def __init__(self, smoothing=0.5):
        self.smoothing = smoothing  # EWMA weight of the newest interval (1 = no memory)
        self._last: Optional[CounterSample] = None
        self.demand_mbps: Dict[DemandKey, float] = {}
        self.link_mbps: Dict[Tuple[str, int], float] = {}

    def update(self, sample: CounterSample):
        last, self._last = self._last, sample
        if last is None:
            return False
        dt = sample.at - last.at
        if dt <= 0:
            return False
        # Switches report only the demand cells that are non-zero: a key missing from the
        # last read of a switch that *was* read had zero bytes then, not an unknown count.
        was_read = {switch for switch, _ in last.port_tx_bytes}
        self.demand_mbps = self._rates(last.demand_bytes, sample.demand_bytes, dt, self.demand_mbps,
                                       lambda key: key.leaf in was_read)
        self.link_mbps = self._rates(last.port_tx_bytes, sample.port_tx_bytes, dt, self.link_mbps,
                                     lambda ref: False)
        return True

    def _rates(self, before, after, dt, previous, absent_was_zero):
        rates = {}
        for key, now in after.items():
            if key in before:
                delta = now - before[key]
            elif absent_was_zero(key):
                delta = now
            else:
                continue  # first sight of a switch (or one that was unreachable): no rate yet
            if delta < 0:
                continue  # counter reset: no rate this interval
            rate = delta * 8 / dt / 1e6
            old = previous.get(key)
            rates[key] = rate if old is None else self.smoothing * rate + (1 - self.smoothing) * old
        return rates


@dataclass
class Hint:
    key: DemandKey
    rate_mbps: float
    expires: Optional[float]  # deadline on the hints' clock, None = until removed


class DemandHints:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.hints: Dict[DemandKey, Hint] = {}

    def set(self, key, rate_mbps, ttl_s=None):
        self.hints[key] = Hint(key, float(rate_mbps), None if ttl_s is None else self.clock() + ttl_s)

    def remove(self, key):
        return self.hints.pop(key, None) is not None

    def current(self):
        now = self.clock()
        for key in [k for k, h in self.hints.items() if h.expires is not None and h.expires < now]:
            del self.hints[key]
        return {k: h.rate_mbps for k, h in self.hints.items()}


def traffic_matrix(graph, measured: Dict[DemandKey, float], hinted: Dict[DemandKey, float],
                   min_rate_mbps=0.0):
    """Demands for CSPF: the larger of measured and hinted rate, same-leaf traffic left out.

    Only traffic entering the fabric, at a leaf's host port, is a demand: spines and leaf
    uplinks count the same bytes again in transit (every switch has the demand counter).
    """
    demands = []
    for key in set(measured) | set(hinted):
        sw = graph.clos.switches.get(key.leaf)
        if sw is None or sw.role != "leaf" or key.ingress_port not in graph.host_ports(key.leaf):
            continue
        rate = max(measured.get(key, 0.0), hinted.get(key, 0.0))
        if rate <= min_rate_mbps:
            continue
        dst_leaf = graph.leaf_for_prefix(key.dst_prefix)
        if dst_leaf == key.leaf:
            continue  # never crosses an uplink: nothing to engineer
        demands.append(Demand(key, rate, dst_leaf))
    return demands


def intf_name(switch, port, intf_format=None):
    if not intf_format:
        return switch.intf(port)
    try:
        return intf_format.format(switch=switch.name, device_id=switch.device_id, port=port)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"interface name format {intf_format!r}: {exc!r} "
                         "(fields: {switch}, {device_id}, {port})") from None


class OperstateWatcher:
    """Polls the root namespace's switch interfaces; yields (switch, port, up) changes."""

    def __init__(self, clos, sysfs="/sys/class/net", intf_format=None):
        """`intf_format` names a switch port's interface from {switch}, {device_id} and
        {port}; the default is the fabric's own ``{switch}-eth{port}``."""
        self.sysfs = sysfs
        self.ports = [(sw.name, p.number, intf_name(sw, p.number, intf_format))
                      for sw in clos.switches.values() for p in sw.ports.values() if p.kind != "host"]
        self.state = {}

    def _read(self, intf):
        try:
            with open(os.path.join(self.sysfs, intf, "operstate")) as f:
                return f.read().strip()
        except OSError:
            return None  # not created (no booted fabric), or already gone

    def poll(self):
        changes = []
        for switch, port, intf in self.ports:
            state = self._read(intf)
            if state is None:
                continue
            up = state in ("up", "unknown")  # "unknown" for some virtual links; the far end of a
            # downed veth reads "lowerlayerdown"
            known = self.state.get((switch, port))
            if known != up:
                if known is not None or not up:  # a link already down at start is news too
                    changes.append((switch, port, up))
                self.state[(switch, port)] = up
        return changes
