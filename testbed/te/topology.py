"""The fabric as the TE app sees it: directed links with capacities and up/down state.

Built from a :class:`testbed.clos.Clos` (the fabric.json the Clos builder writes), so
node names and port numbers are exactly the switches' own. A directed link is named by
its transmitting end ``(switch, port)``: that is also where its counters live (the
port's tx bytes), so planned and measured utilization line up.

Forwarding model (what the fabric controller installs): a leaf either follows a TE
override to one uplink or spreads over all its uplinks by ECMP; every other switch
spreads over its equal-cost next hops towards the destination leaf. Leaves never
transit traffic, and routes are static, so a spine whose link to the destination leaf
is down black-holes it (which is why overrides through it must go at once).
"""
import ipaddress
from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

PortRef = Tuple[str, int]  # (switch, port): the transmitting end of a directed link


class FabricError(ValueError):
    """A name, port or prefix that is not part of this fabric; the message says which."""


@dataclass
class DirectedLink:
    src: str
    src_port: int
    dst: str
    dst_port: int
    capacity_mbps: float
    kind: str  # "uplink", "downlink" (switch to switch) or "host" (switch to host)

    @property
    def ref(self) -> PortRef:
        return (self.src, self.src_port)

    @property
    def name(self):
        return f"{self.src}:{self.src_port}->{self.dst}:{self.dst_port}"


class FabricGraph:
    def __init__(self, clos):
        self.clos = clos
        self.links: Dict[PortRef, DirectedLink] = {}
        for sw in clos.switches.values():
            for port in sw.ports.values():
                self.links[(sw.name, port.number)] = DirectedLink(
                    sw.name, port.number, port.peer, port.peer_port, port.rate_mbps, port.kind)
        self.down_ports = set()  # PortRefs reported down (both ends of a link go down together)
        self.down_switches = set()
        self._leaf_nets = [(ipaddress.ip_network(s.subnet), s.name) for s in clos.leaves]
        self._dist_cache = {}

    # --- state ---
    def set_link(self, switch, port, up):
        """Mark the link at `switch` port `port` (and its far end) up or down."""
        link = self.link(switch, port)
        ends = [link.ref]
        if link.dst in self.clos.switches:
            ends.append((link.dst, link.dst_port))
        for ref in ends:
            (self.down_ports.discard if up else self.down_ports.add)(ref)
        self._dist_cache.clear()
        return ends

    def set_switch(self, switch, up):
        self.switch(switch)
        (self.down_switches.discard if up else self.down_switches.add)(switch)
        self._dist_cache.clear()

    def is_up(self, ref: PortRef):
        link = self.links[ref]
        return (ref not in self.down_ports and link.src not in self.down_switches
                and link.dst not in self.down_switches)

    # --- lookups with clear errors ---
    def switch(self, name):
        try:
            return self.clos.switches[name]
        except (KeyError, TypeError):  # TypeError: not a name at all (a list from JSON)
            shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:40] + "..."
            raise FabricError(f"no switch named {shown} in this fabric "
                              f"(known: {', '.join(sorted(self.clos.switches))})") from None

    def leaf(self, name):
        sw = self.switch(name)
        if sw.role != "leaf":
            raise FabricError(f"{name!r} is a {sw.role}, not a leaf: overrides live on leaves")
        return sw

    def link(self, switch, port):
        self.switch(switch)
        try:
            return self.links[(switch, int(port))]
        except (KeyError, ValueError, TypeError):
            raise FabricError(f"{switch!r} has no port {port!r} "
                              f"(ports: {sorted(self.clos.switches[switch].ports)})") from None

    def uplinks(self, leaf) -> List[int]:
        return sorted(p.number for p in self.leaf(leaf).ports.values() if p.kind == "uplink")

    def host_ports(self, leaf) -> List[int]:
        return sorted(p.number for p in self.leaf(leaf).ports.values() if p.kind == "host")

    def leaf_for_prefix(self, prefix) -> str:
        """The leaf that owns `prefix` (a host /32 or the leaf's subnet)."""
        try:
            net = ipaddress.ip_network(prefix, strict=True)
        except ValueError as exc:
            shown = repr(prefix) if len(repr(prefix)) <= 40 else repr(prefix)[:40] + "..."
            raise FabricError(f"bad destination prefix {shown}: {str(exc)[:120]}") from None
        for leaf_net, name in self._leaf_nets:
            if net.version == leaf_net.version and net.subnet_of(leaf_net):
                return name
        raise FabricError(f"destination prefix {prefix} is not inside any leaf's subnet "
                          f"({', '.join(str(n) for n, _ in self._leaf_nets)})")

    # --- forwarding model ---
    def _distances_to(self, dst_leaf):
        """Hop counts to `dst_leaf` over up switch links, leaves not transiting."""
        if dst_leaf in self._dist_cache:
            return self._dist_cache[dst_leaf]
        dist = {dst_leaf: 0}
        queue = deque([dst_leaf])
        into = {}  # node -> [(ref of link into `node`, from node)]
        for ref, link in self.links.items():
            if link.kind != "host" and self.is_up(ref):
                into.setdefault(link.dst, []).append(link.src)
        while queue:
            node = queue.popleft()
            if node != dst_leaf and self.clos.switches[node].role == "leaf":
                continue  # a leaf is an end point, never a transit hop
            for prev in into.get(node, ()):
                if prev not in dist:
                    dist[prev] = dist[node] + 1
                    queue.append(prev)
        self._dist_cache[dst_leaf] = dist
        return dist

    def next_hops(self, node, dst_leaf) -> List[int]:
        """Ports of `node` on a shortest up path to `dst_leaf` (the ECMP set), sorted."""
        dist = self._distances_to(dst_leaf)
        if node not in dist:
            return []
        ports = []
        for port in sorted(self.clos.switches[node].ports):
            ref = (node, port)
            link = self.links[ref]
            if link.kind == "host" or not self.is_up(ref):
                continue
            if dist.get(link.dst, -1) == dist[node] - 1:
                ports.append(port)
        return ports

    def path_fractions(self, src_leaf, uplink, dst_leaf) -> Optional[Dict[PortRef, float]]:
        """Share of traffic on each directed link when `src_leaf` sends via `uplink`.

        Beyond the first hop, switches split evenly over their ECMP sets. None when
        the traffic cannot reach `dst_leaf` that way (a link or switch on it is down).
        """
        first = (src_leaf, uplink)
        if src_leaf in self.down_switches or not self.is_up(first):
            return None
        fractions = {first: 1.0}
        frontier = {self.links[first].dst: 1.0}
        for _ in range(8):  # a Clos path is at most 4 hops; the bound stops loops
            if set(frontier) == {dst_leaf}:
                return fractions
            nxt = {}
            for node, share in frontier.items():
                if node == dst_leaf:
                    nxt[node] = nxt.get(node, 0.0) + share
                    continue
                ports = self.next_hops(node, dst_leaf)
                if not ports or self.clos.switches[node].role == "leaf":
                    return None
                for port in ports:
                    ref = (node, port)
                    fractions[ref] = fractions.get(ref, 0.0) + share / len(ports)
                    peer = self.links[ref].dst
                    nxt[peer] = nxt.get(peer, 0.0) + share / len(ports)
            frontier = nxt
        return None

    def usable_uplinks(self, src_leaf, dst_leaf) -> List[int]:
        return [p for p in self.uplinks(src_leaf) if self.path_fractions(src_leaf, p, dst_leaf)]

    def fabric_links(self):
        """Switch-to-switch directed links (what TE can move load between)."""
        return [link for link in self.links.values() if link.kind != "host"]

    def describe(self):
        """Plain-dict topology with link state, for the REST API."""
        seen, links = set(), []
        for ref, link in sorted(self.links.items()):
            far = (link.dst, link.dst_port)
            if far in seen:
                continue
            seen.add(ref)
            links.append({"a": link.src, "a_port": link.src_port, "b": link.dst, "b_port": link.dst_port,
                          "kind": "host" if link.kind == "host" else "fabric",
                          "capacity_mbps": link.capacity_mbps, "up": self.is_up(ref)})
        return {
            "switches": [{"name": s.name, "role": s.role, "zone": s.zone, "subnet": s.subnet,
                          "grpc_addr": s.grpc_addr, "up": s.name not in self.down_switches}
                         for s in self.clos.switches.values()],
            "hosts": [{"name": h.name, "ips": [n.ip for n in h.nics],
                       "attached": [f"{n.leaf}:{n.leaf_port}" for n in h.nics]}
                      for h in self.clos.hosts.values()],
            "links": links,
            "scale": self.clos.scale,
        }
