"""Routes and ECMP groups of every switch, computed from a Clos (testbed/clos.py).

Pure functions: no P4Runtime here, so the routing plan is unit-testable on its own.

* Every leaf subnet (``10.<zone>.<leaf>.0/24``) is routed on every other switch along
  all shortest live paths; leaves never carry transit traffic (valley-free), so the
  search does not continue through a leaf other than the destination.
* A leaf routes its own hosts with /32s straight out of the host port.
* One next hop gives a plain route; several give an ECMP group. Identical next-hop
  sets share one group, numbered 1.. in route order.
* Route ids name destination prefixes in the data plane (TE overrides and demand
  counters are keyed on them): leaf subnet -> the leaf's global index, host /32 ->
  HOST_ROUTE_BASE + leaf port. The same prefix has the same id on every switch.
"""
from collections import deque
from dataclasses import dataclass
import ipaddress
from typing import Dict, FrozenSet, List, Tuple

from testbed.control import program_names as N

HOST_ROUTE_BASE = 64


class RoutingError(ValueError):
    """The fabric cannot be expressed in fabric.p4's tables (the message says which limit)."""


@dataclass(frozen=True)
class NextHop:
    port: int
    smac: str   # this switch's port MAC
    dmac: str   # the MAC at the other end of the link


@dataclass(frozen=True)
class Route:
    prefix: str                  # "10.1.2.0/24"
    route_id: int
    next_hops: Tuple[NextHop, ...]
    group: int = 0               # ECMP group id when len(next_hops) > 1

    @property
    def network(self):
        return ipaddress.ip_network(self.prefix)


@dataclass
class SwitchRoutes:
    switch: str
    routes: List[Route]
    groups: Dict[int, Tuple[NextHop, ...]]   # group id -> members in member-index order

    def by_prefix(self):
        return {r.prefix: r for r in self.routes}

    def by_route_id(self):
        return {r.route_id: r for r in self.routes}


def link_key(a, b):
    """How a link is named in `down_links`: the unordered pair of its end nodes."""
    return frozenset((a, b))


def peer_mac(clos, switch, port):
    p = clos.switches[switch].ports[port]
    if p.peer in clos.switches:
        return clos.switches[p.peer].ports[p.peer_port].mac
    return clos.hosts[p.peer].nics[p.peer_port].mac


def next_hop(clos, switch, port):
    return NextHop(port, clos.switches[switch].ports[port].mac, peer_mac(clos, switch, port))


def _distances_to(clos, dest, down_links):
    """Hop counts from every switch to switch `dest` over live switch-to-switch links."""
    dist = {dest: 0}
    queue = deque([dest])
    while queue:
        node = queue.popleft()
        sw = clos.switches[node]
        if sw.role == "leaf" and node != dest:
            continue   # valley-free: a leaf is a destination, never a transit hop
        for port in sw.ports.values():
            if port.peer not in clos.switches or link_key(node, port.peer) in down_links:
                continue
            if port.peer not in dist:
                dist[port.peer] = dist[node] + 1
                queue.append(port.peer)
    return dist


def compute_routes(clos, down_links: FrozenSet = frozenset()) -> Dict[str, SwitchRoutes]:
    """{switch name: SwitchRoutes} for the whole fabric with `down_links` out of service."""
    down_links = frozenset(down_links)
    per_switch = {name: [] for name in clos.switches}
    for dest in sorted(clos.leaves, key=lambda s: s.index):
        if dest.index > HOST_ROUTE_BASE - 1:
            raise RoutingError(f"leaf {dest.name}: at most {HOST_ROUTE_BASE - 1} leaves fit the route-id plan")
        dist = _distances_to(clos, dest.name, down_links)
        for name, sw in clos.switches.items():
            if name == dest.name or name not in dist:
                continue
            ports = sorted(p.number for p in sw.ports.values()
                           if p.peer in clos.switches and link_key(name, p.peer) not in down_links
                           and dist.get(p.peer) == dist[name] - 1)
            if ports:
                per_switch[name].append((dest.subnet, dest.index, tuple(next_hop(clos, name, p) for p in ports)))
    for leaf in clos.leaves:
        for port in sorted(leaf.ports.values(), key=lambda p: p.number):
            if port.kind != "host":
                continue
            if HOST_ROUTE_BASE + port.number > N.MAX_ROUTE_ID:
                raise RoutingError(f"leaf {leaf.name} port {port.number}: host ports above "
                                   f"{N.MAX_ROUTE_ID - HOST_ROUTE_BASE} do not fit the route-id plan")
            nic = clos.hosts[port.peer].nics[port.peer_port]
            per_switch[leaf.name].append((f"{nic.ip}/32", HOST_ROUTE_BASE + port.number,
                                          (next_hop(clos, leaf.name, port.number),)))
    return {name: _with_groups(name, items) for name, items in per_switch.items()}


def _with_groups(switch, items):
    groups, group_of, routes = {}, {}, []
    for prefix, route_id, hops in sorted(items, key=lambda item: item[1]):
        group = 0
        if len(hops) > 1:
            ports = tuple(h.port for h in hops)
            group = group_of.get(ports)
            if group is None:
                group = len(groups) + 1
                if group >= N.MAX_ECMP_GROUPS:
                    raise RoutingError(f"{switch}: more than {N.MAX_ECMP_GROUPS - 1} distinct ECMP groups")
                if len(hops) > N.MAX_ECMP_MEMBERS:
                    raise RoutingError(f"{switch}: an ECMP group of {len(hops)} members "
                                       f"(max {N.MAX_ECMP_MEMBERS})")
                group_of[ports] = group
                groups[group] = hops
        routes.append(Route(prefix, route_id, hops, group))
    return SwitchRoutes(switch, routes, groups)


def normalize_prefix(text):
    """'10.1.2.0/24' or a host address '10.1.2.3' (-> /32); raises ValueError naming the text."""
    try:
        return str(ipaddress.ip_network(str(text).strip(), strict=True))
    except ValueError as exc:
        raise ValueError(f"destination prefix {text!r} is not an IPv4 prefix ({exc})") from None
