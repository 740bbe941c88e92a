"""A leaf/spine Clos as data: switches, hosts, links, port numbers and the address plan.

This is the one description every part of the testbed shares: the Mininet builder
creates exactly these nodes and links, the fabric controller derives routes and ECMP
groups from it, and the TE app reads it (as ``fabric.json``) to know the graph.
It is validated as a whole before anything is created.

Numbering (all 1-based, stable, readable in captures):

* leaf ``l`` has host-facing ports ``1..H`` (port ``h`` faces host ``h`` of that leaf),
  then uplinks ``H+1..H+S`` (port ``H+s`` faces spine ``s``);
* spine ``s`` has ports ``1..L`` towards the leaves of its zone, then, in a three-tier
  fabric, uplinks ``L+1..L+A`` to the aggregation switches;
* aggregation switch ``a`` has port ``(z-1)*S + s`` towards spine ``s`` of zone ``z``.

Addressing: host ``h`` of global leaf ``g`` (rail ``r`` NIC on a rail-optimised fabric)
is ``10.<zone>.<g>.<h>/24``; the leaf owns ``10.<zone>.<g>.0/24`` and answers as
gateway ``.254``. Every address is derived, never configured by hand.
"""
import ipaddress
import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

#: Rates are scaled down: the report says by how much against this production speed.
PRODUCTION_LINK_GBPS = 400.0

MAX_SWITCHES = 64
MAX_HOSTS = 128
# Virtual time has no processes per switch: the limits are the event and memory budget (see
# testbed/sim/budget.py), and rates are production ones.
MAX_VIRTUAL_SWITCHES = 1024
MAX_VIRTUAL_HOSTS = 4096
MAX_VIRTUAL_RATE_MBPS = 1_600_000
CPU_PORT = 510  # like BMv2 setups: below the 511 drop port, above any front-panel port


MAX_FABRIC_FILE_BYTES = 16 << 20


class TopologyError(ValueError):
    """An invalid fabric shape; the message names the parameter at fault."""


@dataclass
class Port:
    number: int
    mac: str
    peer: str  # node name at the other end
    peer_port: int  # 0-based NIC index for hosts, port number for switches
    rate_mbps: float
    kind: str  # "host", "uplink", "downlink"


@dataclass
class Switch:
    name: str
    role: str  # "leaf", "spine", "agg"
    index: int  # 1-based within its role (global across zones)
    zone: int
    device_id: int
    grpc_port: int
    thrift_port: int
    ports: Dict[int, Port] = field(default_factory=dict)
    subnet: Optional[str] = None  # leaves only: the host prefix they own

    @property
    def grpc_addr(self):
        return f"127.0.0.1:{self.grpc_port}"

    def intf(self, port):
        return f"{self.name}-eth{port}"


@dataclass
class Nic:
    index: int  # 0-based: ethN on the host
    ip: str  # without prefix length
    prefix_len: int
    mac: str
    leaf: str
    leaf_port: int
    gateway_ip: str
    gateway_mac: str  # the leaf port's MAC: hosts send everything routed to it


@dataclass
class Host:
    name: str
    index: int  # 1-based, global
    zone: int
    nics: List[Nic] = field(default_factory=list)

    @property
    def ip(self):
        return self.nics[0].ip

    def intf(self, nic=0):
        return f"{self.name}-eth{nic}"


@dataclass
class Link:
    a: str
    a_port: int
    b: str
    b_port: int
    rate_mbps: float


@dataclass
class ClosSpec:
    """What the user asks for. :func:`build` turns it into a :class:`Clos` or raises."""

    spines: int = 2
    leaves: int = 2
    hosts_per_leaf: int = 2
    link_rate_mbps: float = 10.0  # host links; uplinks follow from the oversubscription
    oversubscription: float = 1.0  # leaf host capacity : uplink capacity (1 = 1:1, 2 = 2:1)
    rails: int = 1  # NICs per host, each on a different leaf of its rail group
    zones: int = 1  # >1: a third tier of aggregation switches joins two-tier zones
    aggs: int = 0  # aggregation switches (zones > 1)
    agg_oversubscription: float = 1.0  # spine down capacity : spine up capacity
    grpc_base_port: int = 50000
    thrift_base_port: int = 9090
    clock: str = "real"  # "virtual": production rates and larger fabrics (one process, no Mininet)

    def validate(self):
        def need(cond, what):
            if not cond:
                raise TopologyError(what)

        for name in ("spines", "leaves", "hosts_per_leaf", "rails", "zones"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1,
                 f"--{name.replace('_', '-')} must be a whole number >= 1 (got {value!r})")
        need(self.clock in ("real", "virtual"), f"--clock {self.clock!r}: choose real or virtual")
        virtual = self.clock == "virtual"
        need(self.link_rate_mbps > 0, f"--link-rate must be > 0 Mb/s (got {self.link_rate_mbps})")
        if virtual:
            need(self.link_rate_mbps <= MAX_VIRTUAL_RATE_MBPS,
                 f"--link-rate {self.link_rate_mbps} Mb/s: at most {MAX_VIRTUAL_RATE_MBPS} (1.6 Tb/s)")
        else:
            need(self.link_rate_mbps <= 10_000,
                 f"--link-rate {self.link_rate_mbps} Mb/s is beyond what software switches emulate in "
                 "real time; rates are scaled down (try 10-100), or use --clock virtual")
        need(0.25 <= self.oversubscription <= 16,
             f"--oversubscription must be between 0.25 and 16 (got {self.oversubscription})")
        need(self.leaves % self.rails == 0,
             f"--rails {self.rails} must divide --leaves {self.leaves} (each host puts one NIC "
             "on each leaf of its rail group)")
        need(self.leaves <= 250 and self.hosts_per_leaf <= 250, "at most 250 leaves and 250 hosts per leaf")
        if self.zones > 1:
            need(self.aggs >= 1, f"--zones {self.zones} needs --aggs >= 1 (the third tier)")
            need(0.25 <= self.agg_oversubscription <= 16,
                 f"--agg-oversubscription must be between 0.25 and 16 (got {self.agg_oversubscription})")
        else:
            need(self.aggs == 0, "--aggs needs --zones > 1")
        switches = self.zones * (self.spines + self.leaves) + self.aggs
        hosts = self.zones * (self.leaves // self.rails) * self.hosts_per_leaf
        if virtual:
            need(switches <= MAX_VIRTUAL_SWITCHES, f"{switches} switches: virtual time runs at most "
                 f"{MAX_VIRTUAL_SWITCHES}")
            need(hosts <= MAX_VIRTUAL_HOSTS, f"{hosts} hosts: virtual time runs at most {MAX_VIRTUAL_HOSTS}")
        else:
            need(switches <= MAX_SWITCHES,
                 f"{switches} switches is more than one machine runs in real time (max {MAX_SWITCHES}); "
                 "use fewer spines/leaves/zones, --clock virtual, or Mininet's cluster mode")
            need(hosts <= MAX_HOSTS, f"{hosts} hosts is more than one machine runs in real time (max {MAX_HOSTS}); "
                 "use --clock virtual")
        for name in () if virtual else ("grpc_base_port", "thrift_base_port"):  # virtual: ephemeral ports
            base = getattr(self, name)
            need(1024 <= base and base + switches < 65536, f"--{name.replace('_', '-')} {base} out of range")

    @property
    def uplink_rate_mbps(self):
        return self.link_rate_mbps * self.hosts_per_leaf / (self.spines * self.oversubscription)


@dataclass
class Clos:
    spec: ClosSpec
    switches: Dict[str, Switch]
    hosts: Dict[str, Host]
    links: List[Link]

    # --- queries the controller, runner and TE app need ---
    def by_role(self, role):
        return [s for s in self.switches.values() if s.role == role]

    @property
    def leaves(self):
        return self.by_role("leaf")

    @property
    def spines(self):
        return self.by_role("spine")

    @property
    def aggs(self):
        return self.by_role("agg")

    def host_by_ip(self, ip):
        for host in self.hosts.values():
            for nic in host.nics:
                if nic.ip == ip:
                    return host, nic
        raise KeyError(ip)

    def peer(self, switch, port):
        p = self.switches[switch].ports[port]
        return p.peer, p.peer_port

    @property
    def scale(self):
        """How much slower than production the emulated links run (for every report)."""
        return {
            "link_rate_mbps": self.spec.link_rate_mbps,
            "uplink_rate_mbps": round(self.spec.uplink_rate_mbps, 6),
            "production_link_gbps": PRODUCTION_LINK_GBPS,
            "time_dilation": PRODUCTION_LINK_GBPS * 1000.0 / self.spec.link_rate_mbps,
        }

    # --- serialisation (fabric.json) ---
    def to_dict(self):
        return {
            "spec": asdict(self.spec),
            "scale": self.scale,
            "switches": [_switch_dict(s) for s in self.switches.values()],
            "hosts": [asdict(h) for h in self.hosts.values()],
            "links": [asdict(link) for link in self.links],
        }

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def from_dict(cls, data):
        # The description is fully derived from the spec: rebuild it, so a file cannot
        # carry a plan that disagrees with the numbering rules above.
        return build(ClosSpec(**data["spec"]))

    @classmethod
    def load(cls, path):
        """The Clos a fabric.json describes; TopologyError for a file that is not one (binary,
        oversized, nested too deeply, non-finite numbers), OSError when it cannot be read."""
        with open(path, "rb") as f:
            raw = f.read(MAX_FABRIC_FILE_BYTES + 1)
        if len(raw) > MAX_FABRIC_FILE_BYTES:
            raise TopologyError(f"larger than a fabric description may be ({MAX_FABRIC_FILE_BYTES} bytes)")

        def refuse(name):
            raise TopologyError(f"{name} is not a number in JSON")
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=refuse)
        except RecursionError:
            raise TopologyError("JSON nested too deeply") from None
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise TopologyError("expected a JSON object with a \"spec\" object (as the Clos builder writes)")
        return cls.from_dict(data)


def _switch_dict(s):
    d = asdict(s)
    d["ports"] = [asdict(p) for p in s.ports.values()]
    d["grpc_addr"] = s.grpc_addr
    return d


def _mac(kind, a, b, c=0):
    # Locally administered unicast: 02:<kind>:<a hi>:<a lo>:<b>:<c>
    return "02:%02x:%02x:%02x:%02x:%02x" % (kind, a >> 8, a & 0xFF, b & 0xFF, c & 0xFF)


_SWITCH_MAC, _HOST_MAC = 0x10, 0x20


def build(spec: ClosSpec) -> Clos:
    """Validate `spec` and lay out the whole fabric; raises TopologyError, creates nothing."""
    spec.validate()
    switches: Dict[str, Switch] = {}
    hosts: Dict[str, Host] = {}
    links: List[Link] = []
    device = iter(range(1, 10_000))

    def add_switch(name, role, index, zone):
        dev = next(device)
        sw = Switch(name, role, index, zone, dev, spec.grpc_base_port + dev, spec.thrift_base_port + dev)
        switches[name] = sw
        return sw

    def connect(a, a_port, b, b_port, rate, a_kind, b_kind):
        a.ports[a_port] = Port(a_port, _mac(_SWITCH_MAC, a.device_id, a_port), b.name, b_port, rate, a_kind)
        b.ports[b_port] = Port(b_port, _mac(_SWITCH_MAC, b.device_id, b_port), a.name, a_port, rate, b_kind)
        links.append(Link(a.name, a_port, b.name, b_port, rate))

    H, S, L = spec.hosts_per_leaf, spec.spines, spec.leaves
    host_index = iter(range(1, 10_000))
    multi_zone = spec.zones > 1
    zone_spines = {}
    for z in range(1, spec.zones + 1):
        def zname(base, i):
            return f"z{z}{base}{i}" if multi_zone else f"{base}{i}"

        spines = [add_switch(zname("spine", s), "spine", (z - 1) * S + s, z) for s in range(1, S + 1)]
        leaves = [add_switch(zname("leaf", l), "leaf", (z - 1) * L + l, z) for l in range(1, L + 1)]
        zone_spines[z] = spines
        for leaf_no, leaf in enumerate(leaves, start=1):
            leaf.subnet = f"10.{z}.{leaf.index}.0/24"
            for s_no, spine in enumerate(spines, start=1):
                connect(leaf, H + s_no, spine, leaf_no, spec.uplink_rate_mbps, "uplink", "downlink")
        # Hosts: rail group g holds leaves g*R+1..g*R+R; host h of the group has NIC r on
        # leaf g*R+r+1, port h. Without rails, R = 1 and each leaf has its own hosts.
        R = spec.rails
        for g in range(L // R):
            for h in range(1, H + 1):
                hi = next(host_index)
                host = Host(f"h{hi}", hi, z)
                hosts[host.name] = host
                for r in range(R):
                    leaf = leaves[g * R + r]
                    net = ipaddress.ip_network(leaf.subnet)
                    port_mac = _mac(_SWITCH_MAC, leaf.device_id, h)
                    host.nics.append(Nic(r, str(net.network_address + h), net.prefixlen,
                                         _mac(_HOST_MAC, hi, r), leaf.name, h,
                                         str(net.network_address + 254), port_mac))
                    leaf.ports[h] = Port(h, port_mac, host.name, r, spec.link_rate_mbps, "host")
                    links.append(Link(host.name, r, leaf.name, h, spec.link_rate_mbps))

    if multi_zone:
        aggs = [add_switch(f"agg{a}", "agg", a, 0) for a in range(1, spec.aggs + 1)]
        down_capacity = L * spec.uplink_rate_mbps
        agg_rate = down_capacity / (spec.aggs * spec.agg_oversubscription)
        for z, spines in zone_spines.items():
            for s_no, spine in enumerate(spines, start=1):
                for a_no, agg in enumerate(aggs, start=1):
                    connect(spine, L + a_no, agg, (z - 1) * S + s_no, agg_rate, "uplink", "downlink")
    return Clos(spec, switches, hosts, links)
