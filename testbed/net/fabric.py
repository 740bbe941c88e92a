"""FabricNet: the Clos of testbed/clos.py booted in Mininet, programmed, and torn down.

    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2))
    with FabricNet(clos, target="engine", out_dir="runs/x") as net:   # boots + programs
        net.pingall()                                                  # -> (sent, lost)
        net.mn                                                         # the Mininet object (CLI)
    # leaving the block (normally, by exception, Ctrl-C or SIGTERM) tears everything down

Switches run in the root namespace (their P4Runtime servers listen on 127.0.0.1, where
the controller is), hosts each in their own. Switch-side interface names follow
``Switch.intf`` (``leaf1-eth3``) unless a `name_prefix` asks for short unique ones (tests
and parallel runs). Nothing is created before the whole plan is validated and checked
for clashes with what already exists on the machine.
"""
import os
import resource
import shutil
import socket
import tempfile
import time
from pathlib import Path

from testbed import P4_DIR
from testbed.cleanup import Ledger
from testbed.net import agents
from testbed.net.fabric_errors import FabricError  # noqa: F401  (re-exported)
from testbed.net.lifecycle import signals_deferred, termination_as_exception

TARGETS = ("engine", "bmv2", "kernel")
DEFAULT_PROGRAM = P4_DIR / "fabric.p4"
BOOT_TIMEOUT_S = 60.0


def host_routes(clos, clos_host):
    """{prefix: nic index}: which NIC a host uses for every leaf subnet of the fabric.

    With rails, a destination on rail r's leaf is reached through the host's rail-r NIC
    (the rail-optimised pattern); otherwise everything leaves through NIC 0."""
    rails = clos.spec.rails
    routes = {}
    for leaf in clos.leaves:
        rail = (leaf.index - 1) % rails if rails > 1 else 0
        routes[leaf.subnet] = min(rail, len(clos_host.nics) - 1)
    return routes


class FabricNet:
    def __init__(self, clos, target="engine", program=None, out_dir=None, pcap=True, mtu=1500,
                 name_prefix=None, port_defaults=None, log_console=False, ledger=None,
                 controller_options=None, state_dir=None, pfc_priorities=None):
        if target not in TARGETS:
            raise FabricError(f"--target {target!r}: choose one of {', '.join(TARGETS)}")
        self.clos = clos
        self.target = target
        self.program = Path(program) if program else DEFAULT_PROGRAM
        self.out_dir = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="rocelab-net-"))
        self.pcap_dir = self.out_dir / "pcap" if pcap else None
        self.log_dir = self.out_dir / "logs"
        self.mtu = mtu
        self.name_prefix = name_prefix
        self.port_defaults = dict(port_defaults or {})
        self.log_console = log_console
        self.controller_options = dict(controller_options or {})
        self.ledger = ledger
        self._own_ledger = ledger is None
        self.state_dir = state_dir  # where the ledger goes (default testbed.cleanup.STATE_DIR)
        # Received PFC frames of these priorities pause a switch port (empty: PFC off).
        self.pfc_priorities = tuple(agents.LOSSLESS_PRIORITIES if pfc_priorities is None else pfc_priorities)
        self.watchdog_s = fabric_watchdog_s(clos, mtu)
        self.mn = None
        self.controller = None
        self.timings = {}
        self.started = False

    # --- names ---
    def switch_intf(self, sw, port):
        if not self.name_prefix:
            return sw.intf(port)
        name = f"{self.name_prefix}{sw.device_id}p{port}"
        if len(name) > 15:
            raise FabricError(f"name prefix {self.name_prefix!r} makes interface {name!r} longer than 15 characters")
        return name

    def root_interfaces(self):
        """Interface names this fabric creates in the root namespace."""
        if self.target == "kernel":
            return []
        return [self.switch_intf(sw, p) for sw in self.clos.switches.values() for p in sw.ports]

    # --- checks before anything exists ---
    def preflight(self):
        if os.geteuid() != 0:
            raise FabricError("must run as root (Mininet creates namespaces and veths)")
        for tool in ("mnexec", "ip", "ethtool"):
            if not shutil.which(tool):
                raise FabricError(f"{tool} not found: run `make setup` (Debian's mininet, iproute2, ethtool)")
        if self.target == "bmv2" and not shutil.which("simple_switch_grpc"):
            raise FabricError("--target bmv2: simple_switch_grpc not found (BMv2 is provisioned in the "
                              "Vagrant VM; use --target engine here)")
        if self.target in ("engine", "bmv2") and not self.program.is_file():
            raise FabricError(f"P4 program {self.program} not found")
        if self.target == "bmv2":
            self.check_bmv2_limits()
        if self.target == "kernel" and self.pcap_dir and not shutil.which("tcpdump"):
            raise FabricError("tcpdump not found (needed for pcaps on --target kernel)")
        clashes = [n for n in self.root_interfaces() if Path(f"/sys/class/net/{n}").exists()]
        if clashes:
            raise FabricError(f"interface(s) {', '.join(clashes[:4])} already exist: another run is using "
                              "these names (finish it, or `rocelab clean` after a crash)")
        if self.target in ("engine", "bmv2"):
            second = "agent" if self.target == "engine" else "Thrift"
            for sw in self.clos.switches.values():
                for server, port in (("P4Runtime", sw.grpc_port), (second, agents.agent_port(self.target, sw))):
                    if not _port_free(port):
                        # BMv2's Thrift port does not move with --grpc-base-port
                        hint = "another BMv2 running?" if server == "Thrift" else \
                            "another fabric? choose --grpc-base-port"
                        raise FabricError(f"{sw.name}: {server} port {port} is in use ({hint})")

    def check_bmv2_limits(self):
        """p4c-bm2-ss would refuse the program once the switches are up: say where, before."""
        from testbed.p4engine import P4Error
        from testbed.p4engine.isolated import compile_file_isolated
        try:
            compile_file_isolated(self.program, target="bmv2")
        except P4Error as exc:
            raise FabricError(f"--target bmv2: p4c-bm2-ss would refuse {self.program}:\n{exc}") from None

    # --- boot ---
    def __enter__(self):
        self._guard = termination_as_exception()
        self._guard.__enter__()
        try:
            self.start()
        except BaseException:
            self.stop()
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        finally:
            self._guard.__exit__(*exc)

    def start(self):
        """Create, start and program everything; on any failure the caller must stop()."""
        t0 = time.monotonic()
        self.preflight()
        _raise_fd_limit()
        from mininet.net import Mininet
        from testbed.net import nodes
        from testbed.net.kernel_router import KernelRouter
        from testbed.net.links import FabricLink, FabricIntf

        if self.ledger is None:
            self.ledger = Ledger("net", state_dir=self.state_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        Mininet.inited = True  # skip Mininet's machine-wide sysctl/rlimit changes
        mn = Mininet(topo=None, build=False, controller=None, intf=FabricIntf, link=FabricLink,
                     autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.mn = mn
        switch_cls = KernelRouter if self.target == "kernel" else nodes.TARGETS[self.target]
        clos = self.clos
        for host in clos.hosts.values():
            mn.addHost(host.name, cls=nodes.RdmaHost, ledger=self.ledger, ip=None)
        for sw in clos.switches.values():
            mn.addSwitch(sw.name, cls=switch_cls, ledger=self.ledger, clos_switch=sw, program=self.program,
                         pcap_dir=self.pcap_dir, log_dir=self.log_dir, log_console=self.log_console)
        self.timings["nodes_s"] = time.monotonic() - t0

        for link in clos.links:
            self._add_link(link)
        self.timings["links_s"] = time.monotonic() - t0

        for host in clos.hosts.values():
            mn[host.name].configure(host, host_routes(clos, host), mtu=self.mtu)
        self.timings["hosts_s"] = time.monotonic() - t0

        switches = [mn[name] for name in clos.switches]
        if self.target == "kernel":
            from testbed.net.kernel_router import shortest_path_ports
            next_hops = shortest_path_ports(clos)
            for node in switches:
                node.program_routes(clos, next_hops[node.name], mtu=self.mtu)
                node.start_captures(self.ledger)
        else:
            for node in switches:
                node.start(())
            deadline = time.monotonic() + BOOT_TIMEOUT_S
            for node in switches:
                node.wait_ready(deadline)
            self.timings["switches_s"] = time.monotonic() - t0
            self._program_fabric()
            for node in switches:
                node.apply_port_models(self.pfc_priorities, self.watchdog_s)
        self.timings["boot_s"] = time.monotonic() - t0
        self.started = True
        return self

    def _model(self, rate_mbps):
        from testbed.net.port_model import PortModel
        return PortModel(rate_mbps=rate_mbps, **self.port_defaults)

    def _add_link(self, link):
        clos, mn = self.clos, self.mn
        if link.a in clos.hosts:
            # Host first: its end is created inside its namespace and never touches the root one.
            host, sw = clos.hosts[link.a], clos.switches[link.b]
            nic = host.nics[link.a_port]
            port = sw.ports[link.b_port]
            names = (host.intf(link.a_port), self._intf_of(sw, link.b_port))
            self._record(names[1])
            mn.addLink(host.name, sw.name, port1=link.a_port, port2=link.b_port,
                       intfName1=names[0], intfName2=names[1], addr1=nic.mac, addr2=port.mac,
                       model1=None, model2=self._model(port.rate_mbps))
            return
        a, b = clos.switches[link.a], clos.switches[link.b]
        names = (self._intf_of(a, link.a_port), self._intf_of(b, link.b_port))
        for name in names:
            self._record(name)
        mn.addLink(a.name, b.name, port1=link.a_port, port2=link.b_port,
                   intfName1=names[0], intfName2=names[1],
                   addr1=a.ports[link.a_port].mac, addr2=b.ports[link.b_port].mac,
                   model1=self._model(a.ports[link.a_port].rate_mbps),
                   model2=self._model(b.ports[link.b_port].rate_mbps))

    def _intf_of(self, sw, port):
        return sw.intf(port) if self.target == "kernel" else self.switch_intf(sw, port)

    def _record(self, name):
        if self.target != "kernel":  # namespaced routers take their veths with them
            self.ledger.add("link", name)

    def _program_fabric(self):
        """Routes, ECMP groups and defaults into every switch over P4Runtime."""
        try:
            from testbed.control import FabricController
        except ImportError as exc:
            raise FabricError(f"the fabric controller is not available ({exc}); "
                              "use --target kernel to boot without P4") from None
        t = time.monotonic()
        ctl = FabricController(self.clos, program=self.program, target=self.target, **self.controller_options)
        try:
            ctl.connect()
            ctl.push_pipeline()
            ctl.install_defaults()
        except BaseException as exc:
            ctl.close()
            if isinstance(exc, Exception):     # (a Ctrl-C stays a Ctrl-C)
                # "no P4Runtime server answers" says less than the switch's own last words
                for node in self.switches:
                    node.check_running(when="being programmed")
            raise
        self.controller = ctl
        if self.target == "bmv2":
            # BMv2 ports have no MAC: the program punts PFC frames and the agent pauses the queue.
            ctl.packet_in_handler = agents.pfc_punt_handler({node.name: node.agent for node in self.switches})
        self.timings["program_s"] = time.monotonic() - t

    # --- use ---
    def host(self, name):
        return self.mn[name]

    def switch(self, name):
        return self.mn[name]

    @property
    def switches(self):
        return [self.mn[name] for name in self.clos.switches]

    @property
    def hosts(self):
        return [self.mn[name] for name in self.clos.hosts]

    def pingall(self, timeout_s=2.0, count=3):
        """Every host pings every other host's every NIC, all hosts at once.

        Returns (sent, lost, failures) where failures lists 'src->dst_ip'. Uses
        testbed/net/ping.py (iputils' ping may not be installed)."""
        import sys
        jobs = []
        for host in self.clos.hosts.values():
            targets = [nic.ip for other in self.clos.hosts.values() if other.name != host.name for nic in other.nics]
            if not targets:
                continue
            node = self.mn[host.name]
            node.sendCmd(f"{sys.executable} -m testbed.net.ping -c {count} -W {timeout_s} {' '.join(targets)}")
            jobs.append((host.name, node, targets))
        sent, failures = 0, []
        for name, node, targets in jobs:
            out = node.waitOutput()
            ok = {line.split()[1] for line in out.splitlines() if line.startswith("ok ")}
            sent += len(targets)
            failures += [f"{name}->{ip}" for ip in targets if ip not in ok]
        return sent, len(failures), failures

    def rss_per_switch(self):
        return {node.name: node.rss_bytes() for node in self.switches if hasattr(node, "rss_bytes")}

    # --- teardown ---
    def stop(self):
        """Stop switch processes, kill host namespaces, delete veths; idempotent."""
        with signals_deferred():
            if self.controller is not None:
                try:
                    self.controller.close()
                except Exception:
                    pass
                self.controller = None
            if self.mn is not None:
                # SIGTERM to every switch process at once, then one shared deadline:
                # stopping them one by one costs a poll timeout each.
                from testbed.net.lifecycle import stop_processes
                stop_processes([p for node in self.mn.switches for p in node.processes()], timeout=3.0)
                for node in self.mn.switches:
                    try:
                        node.stop()
                    except Exception:
                        pass
                for node in self.mn.hosts + self.mn.switches:
                    node.kill_shell()
            if self.ledger is not None and self._own_ledger:
                self.ledger.release()
                self.ledger = None
            self.started = False


def _port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _raise_fd_limit():
    # Every switch port is a socket and every node a pty: raise our own soft limit only.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 16384):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))


def fabric_watchdog_s(clos, mtu):
    """The PFC watchdog's detection time for this Clos in real time (testbed/switch/buffers.py):
    200 ms, or twice the longest pause a PG of the default lab profile can legitimately hold
    at the most ports feeding one switch and the slowest link, whichever is longer."""
    from testbed.switch import buffers
    rates = [link.rate_mbps * 1e6 for link in clos.links if link.rate_mbps]
    if not rates:
        return buffers.WATCHDOG_DETECT_S
    fan_in = max((len(sw.ports) for sw in clos.switches.values()), default=2) - 1
    return round(buffers.fabric_watchdog_detect_s(fan_in, min(rates), max(rates), mtu), 3)
