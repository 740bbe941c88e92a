"""Target "kernel": Linux routing in a namespace standing in for a P4 switch.

Why not a Linux bridge: a Clos of bridges is one L2 domain full of loops, and the hosts'
plan is routed (each host sends everything to its leaf port's MAC). A namespace with
IPv4 forwarding, static neighbours and kernel ECMP routes honours exactly the same plan
from testbed/clos.py, so hosts are configured identically on every target. It is a
comparison baseline and a way to exercise the Mininet side without a P4 switch; it has
no P4 pipeline, no PFC/ECN and no shaping (PortModels are ignored, and said so).
"""
import json
import subprocess
from collections import deque
from pathlib import Path

from mininet.node import Node

from testbed.net.nodes import RecordedNode

LINK_NEIGHBOUR = "169.254.0.1"  # the one next hop every inter-switch port resolves statically


def shortest_path_ports(clos):
    """{switch: {leaf subnet: [ports]}}: every equal-cost next hop towards each leaf.

    Breadth-first distances from each leaf over the switch graph; a port is a next hop
    when its peer switch is one hop closer (up-down paths in a Clos, all of them)."""
    table = {name: {} for name in clos.switches}
    for leaf in clos.leaves:
        dist = {leaf.name: 0}
        todo = deque([leaf.name])
        while todo:
            here = todo.popleft()
            for port in clos.switches[here].ports.values():
                if port.peer in clos.switches and port.peer not in dist:
                    dist[port.peer] = dist[here] + 1
                    todo.append(port.peer)
        for name, sw in clos.switches.items():
            if name == leaf.name or name not in dist:
                continue
            hops = sorted(p.number for p in sw.ports.values()
                          if p.peer in dist and p.peer in clos.switches and dist[p.peer] == dist[name] - 1)
            table[name][leaf.subnet] = hops
    return table


def run_in(node, argv, stdin=None):
    """Run argv in `node`'s namespace (no shell round trip); returns CompletedProcess."""
    prefix = ["mnexec", "-a", str(node.pid)] if node.inNamespace else []
    return subprocess.run(prefix + list(argv), input=stdin, text=True, capture_output=True)


class KernelRouter(RecordedNode, Node):
    target = "kernel"

    def __init__(self, name, clos_switch=None, pcap_dir=None, log_dir=None, **params):
        self.clos_switch = clos_switch
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.captures = []
        params.pop("program", None)
        params.pop("log_console", None)
        params.pop("inNamespace", None)
        params.pop("listenPort", None)
        super().__init__(name, inNamespace=True, **params)

    def port_interfaces(self):
        return {port: intf.name for port, intf in sorted(self.intfs.items()) if intf.name != "lo"}

    def program_routes(self, clos, next_hops, mtu=1500):
        sysctl = ["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                  "net.ipv4.conf.default.rp_filter=0", "net.ipv4.conf.all.send_redirects=0",
                  "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                  "net.ipv4.fib_multipath_hash_policy=1"]  # 5-tuple ECMP hashing
        res = run_in(self, sysctl)
        if res.returncode:
            raise RuntimeError(f"{self.name}: {res.stderr.strip()}")
        sw = self.clos_switch
        batch = ["link set dev lo up"]
        for number, port in sorted(sw.ports.items()):
            dev = sw_intf = self.intfs[number].name
            batch.append(f"link set dev {dev} mtu {mtu} up")
            if port.peer in clos.hosts:
                nic = clos.hosts[port.peer].nics[port.peer_port]
                batch.append(f"route replace {nic.ip}/32 dev {sw_intf}")
                batch.append(f"neigh replace {nic.ip} lladdr {nic.mac} dev {sw_intf} nud permanent")
            else:
                peer_mac = clos.switches[port.peer].ports[port.peer_port].mac
                batch.append(f"neigh replace {LINK_NEIGHBOUR} lladdr {peer_mac} dev {sw_intf} nud permanent")
        if sw.subnet:
            # The gateway address answers for ICMP errors the router itself sends.
            gateway = sw.subnet.rsplit(".", 1)[0] + ".254"
            batch.append(f"addr add {gateway}/32 dev lo")
        for prefix, ports in sorted(next_hops.items()):
            if not ports:
                continue
            hops = " ".join(f"nexthop via {LINK_NEIGHBOUR} dev {self.intfs[p].name} onlink" for p in ports)
            batch.append(f"route replace {prefix} {hops}")
        res = run_in(self, ["ip", "-batch", "-"], "\n".join(batch) + "\n")
        if res.returncode:
            raise RuntimeError(f"{self.name}: route programming failed: {res.stderr.strip()}")

    def start_captures(self, ledger):
        """One tcpdump per port into PCAP_DIR/<interface>.pcap (both directions)."""
        if not self.pcap_dir:
            return
        self.pcap_dir.mkdir(parents=True, exist_ok=True)
        for name in self.port_interfaces().values():
            proc = self.popen(["tcpdump", "-i", name, "-U", "-q", "-w", str(self.pcap_dir / f"{name}.pcap")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.captures.append(proc)

    def processes(self):
        """What stop() ends (FabricNet stops every switch's processes at once)."""
        return list(self.captures)

    def stop_captures(self):
        from testbed.net.lifecycle import stop_processes
        stop_processes(self.captures, timeout=1.0)
        self.captures = []

    def port_status(self):
        """{port: {rx_packets, rx_bytes, tx_packets, tx_bytes}} from the kernel."""
        res = run_in(self, ["ip", "-s", "-j", "link", "show"])
        stats = {d["ifname"]: d.get("stats64", {}) for d in json.loads(res.stdout or "[]")}
        out = {}
        for port, name in self.port_interfaces().items():
            s = stats.get(name, {})
            out[port] = {"rx_packets": s.get("rx", {}).get("packets", 0), "rx_bytes": s.get("rx", {}).get("bytes", 0),
                         "tx_packets": s.get("tx", {}).get("packets", 0), "tx_bytes": s.get("tx", {}).get("bytes", 0)}
        return out

    def apply_port_models(self, pfc_priorities=(), watchdog_s=None):
        pass  # no shaping or PFC here: documented in the module docstring

    def stop(self, deleteIntfs=True):
        self.stop_captures()
