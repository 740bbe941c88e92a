"""The Mininet CLI with fabric commands beside Mininet's own (`help` lists them).

    fabric                      the plan: switches, ports, peers, rates, P4Runtime addresses
    pingall                     every host to every other host's NICs, in parallel
    stats [SWITCH]              per-port packet/byte counters; per lossless PG the most it held,
                                headroom drops (must be 0) and PFC watchdog storms/drops
    queues [SWITCH]             per-queue drops, max depth, ECN marks, PFC sent/received, paused time,
                                headroom drops, watchdog storms, PG high-water mark
    hash 5tuple|qpn|flowlet     ECMP hash mode on every switch
    flowlet_gap US              flowlet inactivity gap
    ecn KMIN KMAX PMAX          ECN marking thresholds (packets) and max probability
    pfc XOFF XON | pfc on|off   PFC thresholds (bytes per ingress PG), or PFC generation on/off
    link A B up|down            Mininet's command, also telling the controller (ECMP repair)
    iperf [H1 H2], iperfudp BW [H1 H2]
                                iperf 2 from H1 to H2 for 5 s; Mininet's own hangs on Debian's
                                iperf 2.1.8 and runs `killall -9 iperf` on the whole machine

Fabric knobs go through the FabricController (testbed/control); on a target without one
(kernel) they say so instead of failing.
"""
import re
import time

from mininet.cli import CLI

IPERF_PORT = 5001
IPERF_SECONDS = 5


class FabricCLI(CLI):
    prompt = "rocelab> "

    def __init__(self, fabric, **kwargs):
        self.fabric = fabric
        CLI.__init__(self, fabric.mn, **kwargs)

    def onecmd(self, line):
        # One failing command must not end the session (and with it the fabric).
        try:
            return CLI.onecmd(self, line)
        except Exception as exc:  # noqa: BLE001 - reported, the CLI goes on
            print(f"*** error: {type(exc).__name__}: {exc}")
            return False

    # --- helpers ---
    def _controller(self, what):
        ctl = self.fabric.controller
        if ctl is None or not hasattr(ctl, what):
            print(f"*** {what}: not available on the {self.fabric.target} target")
            return None
        return getattr(ctl, what)

    def _switch_names(self, line):
        names = line.split() or list(self.fabric.clos.switches)
        unknown = [n for n in names if n not in self.fabric.clos.switches]
        if unknown:
            print(f"*** unknown switch(es): {' '.join(unknown)} (have: {' '.join(self.fabric.clos.switches)})")
            return []
        return names

    def _call(self, what, *args):
        fn = self._controller(what)
        if fn is None:
            return None
        try:
            return fn(*args)
        except (ValueError, KeyError, RuntimeError) as exc:
            print(f"*** {what}: {exc}")
            return None

    # --- commands ---
    def do_fabric(self, _line):
        "Show the fabric plan: switches, ports, peers, rates and P4Runtime addresses."
        clos = self.fabric.clos
        print(f"scale: {clos.scale}")
        for sw in clos.switches.values():
            extra = f" subnet {sw.subnet}" if sw.subnet else ""
            print(f"{sw.name} ({sw.role}, device {sw.device_id}, P4Runtime {sw.grpc_addr}){extra}")
            for number, port in sorted(sw.ports.items()):
                intf = self.fabric.mn[sw.name].intfs.get(number)
                print(f"  port {number:>3} {intf.name if intf else '?':<15} -> {port.peer}:{port.peer_port}"
                      f"  {port.rate_mbps:g} Mb/s  {port.kind}")
        for host in clos.hosts.values():
            print(f"{host.name}: " + ", ".join(f"{host.intf(n.index)} {n.ip}/{n.prefix_len} via {n.leaf}:{n.leaf_port}"
                                               for n in host.nics))

    def do_pingall(self, _line):
        "Ping between all hosts (all NICs), in parallel; prints the loss."
        sent, lost, failures = self.fabric.pingall()
        for item in failures:
            print(f"  no reply: {item}")
        print(f"*** Results: {100.0 * lost / max(sent, 1):.0f}% dropped ({sent - lost}/{sent} received)")

    def do_stats(self, line):
        "stats [SWITCH...]: per-port counters (packets/bytes in and out), lossless PG and watchdog counters."
        from testbed.net import telemetry
        for name in self._switch_names(line):
            counters = telemetry.port_counters(self.fabric, name)
            print(name)
            for port, c in sorted(counters.items()):
                print(f"  port {port:>3}  rx {c.get('rx_packets', 0):>8} pkts {c.get('rx_bytes', 0):>10} B"
                      f"   tx {c.get('tx_packets', 0):>8} pkts {c.get('tx_bytes', 0):>10} B")
                for prio in self.fabric.pfc_priorities:
                    if "pg_max_bytes" not in c:
                        break          # no buffer model on this target (BMv2, kernel)
                    print(f"      prio {prio}  PG max {c['pg_max_bytes'][prio]} B  headroom drops "
                          f"{c['headroom_drops'][prio]}  watchdog storms {c['watchdog_storms'][prio]} "
                          f"drops {c['watchdog_drops'][prio]}")

    def do_queues(self, line):
        "queues [SWITCH...]: per-queue drops, max depth, ECN marks, PFC frames and paused time."
        from testbed.net import telemetry
        for name in self._switch_names(line):
            rows = telemetry.queue_stats(self.fabric, name)
            if rows is None:
                print(f"*** queues: not available on the {self.fabric.target} target")
                return
            print(name)
            for q in rows:
                if any(q.get(k) for k in ("drops", "max_depth", "ecn_marked", "pfc_tx", "pfc_rx", "paused_us",
                                          "headroom_drops", "watchdog_storms", "pg_max_bytes")):
                    print(f"  port {q['port']:>3} prio {q['priority']}  drops {q['drops']}  max_depth {q['max_depth']}"
                          f"  ecn {q['ecn_marked']}  pfc_tx {q['pfc_tx']}  pfc_rx {q['pfc_rx']}  paused {q['paused_us']} us"
                          f"  headroom_drops {q['headroom_drops']}  storms {q['watchdog_storms']}"
                          f"  pg_max {q['pg_max_bytes']} B")

    def do_hash(self, line):
        "hash 5tuple|qpn|flowlet: set the ECMP hash mode on every switch."
        mode = line.strip()
        if mode not in ("5tuple", "qpn", "flowlet"):
            print("usage: hash 5tuple|qpn|flowlet")
            return
        if self._controller("set_hash_mode"):
            self._call("set_hash_mode", mode)

    def do_flowlet_gap(self, line):
        "flowlet_gap US: flowlet inactivity gap in microseconds."
        try:
            gap = int(line.strip())
        except ValueError:
            print("usage: flowlet_gap US (a whole number of microseconds)")
            return
        self._call("set_flowlet_gap", gap)

    def do_ecn(self, line):
        "ecn KMIN KMAX PMAX: ECN marking between KMIN and KMAX packets, up to probability PMAX."
        try:
            kmin, kmax, pmax = line.split()
            kmin, kmax, pmax = int(kmin), int(kmax), float(pmax)
        except ValueError:
            print("usage: ecn KMIN KMAX PMAX (e.g. ecn 5 20 0.2)")
            return
        self._call("set_ecn", kmin, kmax, pmax)

    def do_pfc(self, line):
        "pfc XOFF XON: pause thresholds in bytes per ingress PG; pfc on|off: PFC generation."
        words = line.split()
        if words in (["on"], ["off"]):
            self._call("set_pfc", words[0] == "on")
            return
        try:
            xoff, xon = (int(w) for w in words)
        except ValueError:
            print("usage: pfc XOFF XON | pfc on|off")
            return
        self._call("set_pfc_thresholds", xoff, xon)

    def do_link(self, line):
        "link A B up|down: bring the link between A and B up or down (and tell the controller)."
        words = line.split()
        if len(words) != 3 or words[2] not in ("up", "down"):
            print("usage: link A B up|down")
            return
        # one line for a name or pair that is not a link (Mininet's own line and the
        # controller's both came out, Mininet's first: "dst not in network: spine9")
        unknown = [n for n in words[:2] if n not in self.mn.nameToNode]
        if unknown:
            print(f"*** link: no node named {' '.join(unknown)} (have: {' '.join(self.mn.nameToNode)})")
            return
        if not self.mn.linksBetween(self.mn[words[0]], self.mn[words[1]]):
            print(f"*** link: {words[0]} and {words[1]} are not linked (`fabric` shows the links)")
            return
        CLI.do_link(self, line)
        ctl = self.fabric.controller
        if ctl is not None and hasattr(ctl, "link_status"):
            self._call("link_status", words[0], words[1], words[2] == "up")

    def do_iperf(self, line):
        "iperf [HOST1 HOST2]: TCP from HOST1 to HOST2 for 5 s (default: the first and last host)."
        self._iperf(line.split(), udp_bw=None)

    def do_iperfudp(self, line):
        "iperfudp BW [HOST1 HOST2]: UDP at BW (e.g. 10M) from HOST1 to HOST2 for 5 s."
        words = line.split()
        if len(words) not in (1, 3) or not re.fullmatch(r"\d+(\.\d+)?[KMG]?", words[0]):
            print("usage: iperfudp BW [HOST1 HOST2] (e.g. iperfudp 5M h1 h2)")
            return
        self._iperf(words[1:], udp_bw=words[0])

    def _iperf(self, names, udp_bw):
        """Client in HOST1, server in HOST2; the server is stopped by its PID (Mininet's
        iperf ran `killall -9 iperf`, which reaches every iperf on the machine)."""
        hosts = self.mn.hosts
        if not names:
            if len(hosts) < 2:
                print("*** iperf: needs two hosts")
                return
            client, server = hosts[0], hosts[-1]
        elif len(names) == 2 and all(n in {h.name for h in hosts} for n in names):
            client, server = self.mn[names[0]], self.mn[names[1]]
        else:
            print(f"usage: iperf{'udp BW' if udp_bw else ''} [HOST1 HOST2] (hosts: {' '.join(h.name for h in hosts)})")
            return
        udp = f"-u -b {udp_bw} " if udp_bw else ""
        print(f"*** iperf: {'UDP at ' + udp_bw if udp_bw else 'TCP'} from {client.name} to {server.name}, "
              f"{IPERF_SECONDS} s")
        out = server.cmd(f"iperf -s -p {IPERF_PORT} {udp}>/dev/null 2>&1 & echo rocelab-pid=$!")
        found = re.search(r"rocelab-pid=(\d+)", out)
        if not found:
            print(f"*** iperf: the server did not start in {server.name}: {out.strip()}")
            return
        pid = found.group(1)
        ledger = getattr(self.fabric, "ledger", None)
        if ledger is not None:
            ledger.add("pid", int(pid), node=server.name, role="iperf server")
        try:
            time.sleep(0.5)          # the server's listen(); a TCP client does not retry
            report = client.cmd(f"iperf -c {server.IP()} -p {IPERF_PORT} {udp}-t {IPERF_SECONDS} -f m")
            print(report.rstrip())
        finally:
            server.cmd(f"kill {pid} 2>/dev/null; wait {pid} 2>/dev/null")
            if ledger is not None:
                ledger.discard("pid", int(pid))
