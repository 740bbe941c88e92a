"""The TE engine: CSPF placement of demands onto leaf uplinks, and an ECMP baseline.

A demand is traffic entering leaf ``leaf`` on host port ``ingress_port`` towards
``dst_prefix``; placing it means choosing the uplink its override sends it to (the
only hop the fabric lets TE pin: beyond it, switches use ECMP).

CSPF, as in Meta's centralized TE: demands are placed largest first, each on a
shortest path whose every link still has room for it (the constraint), preferring the
path whose busiest link ends up least utilized; a demand that fits nowhere takes the
least-bad path and is flagged. A short local search then moves single demands off the
most utilized link while that lowers the maximum utilization, which repairs the few
cases where greedy order alone is beaten by luck.

:func:`ecmp_loads` is the baseline: every flow (a 5-tuple) hashed onto the equal-cost
next hops with a fixed hash at every switch, like a fabric without TE.
"""
import struct
import zlib
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from testbed.te.topology import FabricGraph, PortRef


@dataclass(frozen=True)
class DemandKey:
    leaf: str
    ingress_port: int
    dst_prefix: str

    def as_dict(self):
        return {"leaf": self.leaf, "ingress_port": self.ingress_port, "dst_prefix": self.dst_prefix}


@dataclass(frozen=True)
class Flow:
    """A 5-tuple, for the ECMP baseline (RoCEv2: UDP to 4791, source port per QP)."""
    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int = 4791
    proto: int = 17


@dataclass
class Demand:
    key: DemandKey
    rate_mbps: float
    dst_leaf: str
    flows: List[Tuple[Flow, float]] = field(default_factory=list)  # (flow, Mb/s) if known


@dataclass
class Placement:
    key: DemandKey
    rate_mbps: float
    uplink: int
    fractions: Dict[PortRef, float]
    fits: bool  # every link on the path had room for the demand when it was placed
    pinned: bool = False  # a manual override: CSPF works around it, never moves it

    def as_dict(self, graph):
        d = self.key.as_dict()
        d.update(rate_mbps=round(self.rate_mbps, 6), egress_port=self.uplink,
                 via=graph.links[(self.key.leaf, self.uplink)].dst, fits=self.fits,
                 origin="manual" if self.pinned else "cspf",
                 path=[graph.links[ref].name for ref in sorted(self.fractions)])
        return d


@dataclass
class Plan:
    placements: Dict[DemandKey, Placement]
    loads: Dict[PortRef, float]  # Mb/s per directed fabric link
    unroutable: List[DemandKey]  # no up path at all: left to ECMP (which cannot help either)

    def max_utilization(self, graph):
        return max_utilization(graph, self.loads)


def utilization(graph: FabricGraph, loads: Dict[PortRef, float]) -> Dict[PortRef, float]:
    return {link.ref: loads.get(link.ref, 0.0) / link.capacity_mbps for link in graph.fabric_links()}


def max_utilization(graph, loads):
    return max(utilization(graph, loads).values(), default=0.0)


def _add(loads, fractions, rate, sign=1.0):
    for ref, share in fractions.items():
        loads[ref] = loads.get(ref, 0.0) + sign * share * rate


def _bottleneck_after(graph, loads, fractions, rate):
    """The highest utilization on the path once `rate` is added to it."""
    return max((loads.get(ref, 0.0) + share * rate) / graph.links[ref].capacity_mbps
               for ref, share in fractions.items())


def _fits(graph, loads, fractions, rate):
    return all(loads.get(ref, 0.0) + share * rate <= graph.links[ref].capacity_mbps + 1e-9
               for ref, share in fractions.items())


def _objective(graph, loads):
    """Lexicographic: the maximum utilization first, then the sum of squares (spread)."""
    util = utilization(graph, loads).values()
    return (round(max(util, default=0.0), 9), round(sum(u * u for u in util), 9))


def cspf(graph: FabricGraph, demands: Iterable[Demand], pinned: Iterable[Tuple[DemandKey, float, int]] = (),
         improve_rounds: int = 50) -> Plan:
    """Place `demands` (largest first); `pinned` are manual overrides (key, rate, uplink)."""
    loads: Dict[PortRef, float] = {}
    placements: Dict[DemandKey, Placement] = {}
    unroutable: List[DemandKey] = []
    pinned_keys = set()
    for key, rate, uplink in pinned:
        fractions = graph.path_fractions(key.leaf, uplink, graph.leaf_for_prefix(key.dst_prefix))
        if fractions is None:
            continue  # a suspended manual override (its path is down) carries nothing
        _add(loads, fractions, rate)
        placements[key] = Placement(key, rate, uplink, fractions, True, pinned=True)
        pinned_keys.add(key)

    ordered = sorted((d for d in demands if d.key not in pinned_keys),
                     key=lambda d: (-d.rate_mbps, d.key.leaf, d.key.ingress_port, d.key.dst_prefix))
    options: Dict[DemandKey, Dict[int, Dict[PortRef, float]]] = {}
    for demand in ordered:
        paths = {}
        for uplink in graph.uplinks(demand.key.leaf):
            fractions = graph.path_fractions(demand.key.leaf, uplink, demand.dst_leaf)
            if fractions:
                paths[uplink] = fractions
        if not paths:
            unroutable.append(demand.key)
            continue
        options[demand.key] = paths
        # All Clos paths between two leaves have the same hop count, so "shortest" is
        # every usable uplink; the constraint and the bottleneck pick among them.
        fitting = [u for u, f in paths.items() if _fits(graph, loads, f, demand.rate_mbps)]
        pool = fitting or list(paths)
        uplink = min(pool, key=lambda u: (_bottleneck_after(graph, loads, paths[u], demand.rate_mbps), u))
        _add(loads, paths[uplink], demand.rate_mbps)
        placements[demand.key] = Placement(demand.key, demand.rate_mbps, uplink, paths[uplink], bool(fitting))

    _improve(graph, loads, placements, options, improve_rounds)
    return Plan(placements, loads, unroutable)


def _improve(graph, loads, placements, options, rounds):
    """Move single demands to other uplinks while that lowers the objective."""
    for _ in range(rounds):
        best = _objective(graph, loads)
        util = utilization(graph, loads)
        hottest = max(util, key=util.get, default=None)
        if hottest is None:
            return
        move = None
        for key, placement in placements.items():
            if placement.pinned or hottest not in placement.fractions:
                continue
            for uplink, fractions in options.get(key, {}).items():
                if uplink == placement.uplink:
                    continue
                _add(loads, placement.fractions, placement.rate_mbps, -1.0)
                _add(loads, fractions, placement.rate_mbps)
                score = _objective(graph, loads)
                _add(loads, fractions, placement.rate_mbps, -1.0)
                _add(loads, placement.fractions, placement.rate_mbps)
                if score < best:
                    best, move = score, (key, uplink, fractions)
        if move is None:
            return
        key, uplink, fractions = move
        p = placements[key]
        _add(loads, p.fractions, p.rate_mbps, -1.0)
        _add(loads, fractions, p.rate_mbps)
        within = all(loads.get(ref, 0.0) <= graph.links[ref].capacity_mbps + 1e-9 for ref in fractions)
        placements[key] = Placement(key, p.rate_mbps, uplink, fractions, within)


# --- the ECMP baseline -------------------------------------------------------------

def flow_hash(flow: Flow, salt: str = "") -> int:
    """A fixed 5-tuple hash (CRC-32 over the packed tuple, optionally salted per switch)."""
    import ipaddress
    packed = (ipaddress.ip_address(flow.src_ip).packed + ipaddress.ip_address(flow.dst_ip).packed
              + struct.pack("!HHB", flow.src_port, flow.dst_port, flow.proto))
    return zlib.crc32(salt.encode() + packed)


def ecmp_route(graph: FabricGraph, leaf: str, dst_leaf: str, flow: Flow) -> Optional[List[PortRef]]:
    """The hops one flow takes under plain ECMP: at each switch, hash mod the next-hop set."""
    node, hops = leaf, []
    for _ in range(8):
        if node == dst_leaf:
            return hops
        ports = graph.next_hops(node, dst_leaf)
        if not ports or (hops and graph.clos.switches[node].role == "leaf"):
            return None
        # The leaf hashes unsalted; deeper switches salt with their name so hash
        # polarization (every tier picking the same index) does not skew the baseline.
        port = ports[flow_hash(flow, "" if not hops else node) % len(ports)]
        hops.append((node, port))
        node = graph.links[(node, port)].dst
    return None


def ecmp_loads(graph: FabricGraph, demands: Iterable[Demand]) -> Dict[PortRef, float]:
    """Link loads when every flow of every demand follows its ECMP hash."""
    loads: Dict[PortRef, float] = {}
    for demand in demands:
        if not demand.flows:
            raise ValueError(f"demand {demand.key} has no flows: the ECMP baseline hashes 5-tuples")
        for flow, rate in demand.flows:
            hops = ecmp_route(graph, demand.key.leaf, demand.dst_leaf, flow)
            for ref in hops or ():
                loads[ref] = loads.get(ref, 0.0) + rate
    return loads
