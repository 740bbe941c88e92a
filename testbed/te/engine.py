"""The TE engine: CSPF placement of demands onto leaf uplinks, and an ECMP baseline.

A demand is traffic entering leaf ``leaf`` on host port ``ingress_port`` towards
``dst_prefix``; placing it means choosing the uplink its override sends it to (the
only hop the fabric lets TE pin: beyond it, switches use ECMP).

CSPF, as in Meta's centralized TE: demands are placed largest first, each on a
shortest path whose every link still has room for it (the constraint), preferring the
path whose busiest link ends up least utilized; a demand that fits nowhere takes the
least-bad path and is flagged. Greedy order alone is sometimes beaten by luck (ECMP's
hash happening on a better split), so two refinements follow: a local search moving one
or two demands off the most utilized link, then a branch-and-bound over uplink choices
with a node budget (exact at lab scale, best-effort beyond it) that only accepts a
strictly lower maximum utilization.

:func:`ecmp_loads` is the baseline: every flow (a 5-tuple) hashed onto the equal-cost
next hops with a fixed hash at every switch, like a fabric without TE.
"""
import contextlib
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
         improve_rounds: int = 50, exact_budget: int = 200_000) -> Plan:
    """Place `demands` (largest first); `pinned` are manual overrides (key, rate, uplink).

    `exact_budget` bounds the branch-and-bound search (nodes visited) that follows the
    greedy pass and the local search; 0 turns it off.
    """
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
    _branch_and_bound(graph, loads, placements, options, exact_budget)
    return Plan(placements, loads, unroutable)


def _improve(graph, loads, placements, options, rounds):
    """Move one demand, or failing that two at once, while that lowers the objective.

    Single moves off the hottest link fix most greedy mistakes; pairs (one demand off
    the hottest link, another one out of its way) fix the rest at lab scale, where the
    demand count is small enough for the quadratic search.
    """
    def shift(key, fractions, sign):
        _add(loads, fractions, placements[key].rate_mbps, sign)

    @contextlib.contextmanager
    def moved(key, fractions):
        """`key` on the path `fractions` instead of its placement, for the block's duration."""
        shift(key, placements[key].fractions, -1.0)
        shift(key, fractions, 1.0)
        try:
            yield
        finally:
            shift(key, fractions, -1.0)
            shift(key, placements[key].fractions, 1.0)

    def alternatives(key):
        return [(u, f) for u, f in options[key].items() if u != placements[key].uplink]

    for _ in range(rounds):
        best = _objective(graph, loads)
        util = utilization(graph, loads)
        hottest = max(util, key=util.get, default=None)
        if hottest is None:
            return
        movable = [k for k, p in placements.items() if not p.pinned and len(options.get(k, ())) > 1]
        on_hot = [k for k in movable if hottest in placements[k].fractions]
        move = None
        for key in on_hot:
            for uplink, fractions in alternatives(key):
                with moved(key, fractions):
                    score = _objective(graph, loads)
                if score < best:
                    best, move = score, [(key, uplink, fractions)]
        if move is None:
            for key in on_hot:
                for uplink, fractions in alternatives(key):
                    with moved(key, fractions):
                        for other in movable:
                            if other == key:
                                continue
                            for o_uplink, o_fractions in alternatives(other):
                                with moved(other, o_fractions):
                                    score = _objective(graph, loads)
                                if score < best:
                                    best = score
                                    move = [(key, uplink, fractions), (other, o_uplink, o_fractions)]
        if move is None:
            return
        for key, uplink, fractions in move:
            p = placements[key]
            shift(key, p.fractions, -1.0)
            shift(key, fractions, 1.0)
            placements[key] = Placement(key, p.rate_mbps, uplink, fractions, p.fits)
        for key, _, fractions in move:  # a moved demand fits if its new path is within capacity
            placements[key].fits = all(loads.get(ref, 0.0) <= graph.links[ref].capacity_mbps + 1e-9
                                       for ref in fractions)


def _branch_and_bound(graph, loads, placements, options, budget):
    """Search uplink choices exhaustively for a strictly lower maximum utilization.

    At lab scale (tens of demands, two to four uplinks each) the space is small enough
    that this usually proves the local-search result optimal or finds the optimum;
    at larger scale the node budget stops it and the best found so far is kept. The
    greedy result is the first incumbent, so the bound prunes from the start.
    """
    keys = [k for k, p in placements.items() if not p.pinned and len(options.get(k, ())) > 1]
    if budget <= 0 or not keys:
        return
    keys.sort(key=lambda k: -placements[k].rate_mbps)
    capacity = {link.ref: link.capacity_mbps for link in graph.fabric_links()}
    base = dict(loads)
    for key in keys:  # take the searched demands out; what stays is fixed load
        _add(base, placements[key].fractions, placements[key].rate_mbps, -1.0)
    base_max = max((base.get(r, 0.0) / c for r, c in capacity.items()), default=0.0)
    best = {"max": max_utilization(graph, loads) - 1e-9, "choice": None}
    choice = {}
    visited = [0]

    def search(i, current_max):
        visited[0] += 1
        if visited[0] > budget:
            return
        if i == len(keys):
            best["max"], best["choice"] = current_max - 1e-9, dict(choice)
            return
        key = keys[i]
        rate = placements[key].rate_mbps
        scored = []
        for uplink, fractions in options[key].items():
            worst = max((base.get(r, 0.0) + s * rate) / capacity[r] for r, s in fractions.items())
            scored.append((max(current_max, worst), uplink, fractions))
        for new_max, uplink, fractions in sorted(scored, key=lambda t: (t[0], t[1])):
            if new_max >= best["max"]:
                break  # sorted: every later option is at least as bad
            _add(base, fractions, rate)
            choice[key] = (uplink, fractions)
            search(i + 1, new_max)
            _add(base, fractions, rate, -1.0)
            del choice[key]

    search(0, base_max)
    if best["choice"] is None:
        return
    for key, (uplink, fractions) in best["choice"].items():
        p = placements[key]
        _add(loads, p.fractions, p.rate_mbps, -1.0)
        _add(loads, fractions, p.rate_mbps)
        placements[key] = Placement(key, p.rate_mbps, uplink, fractions, p.fits)
    for key in best["choice"]:
        placements[key].fits = all(loads.get(r, 0.0) <= capacity[r] + 1e-9 for r in placements[key].fractions)


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
