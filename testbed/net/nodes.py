"""Mininet nodes of the fabric: hosts as RDMA NIC endpoints and the P4 switch classes.

Every node records what it spawns in the run's Ledger the moment it exists (see
lifecycle.py), and never relies on its Mininet shell to tear down.
"""
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Host, Switch

from testbed.net.fabric_errors import SwitchStartError  # noqa: F401  (raised here, caught by callers)

from testbed.clos import CPU_PORT
from testbed.net import agents
from testbed.net.lifecycle import kill_namespace, netns_id, signals_deferred, stop_process

ROCE_UDP_PORT = 4791


class RecordedNode:
    """Mixin: every process this node spawns (its shell, popen()) goes into the ledger."""

    def __init__(self, name, ledger=None, **params):
        self.ledger = ledger
        super().__init__(name, **params)
        self.ns = netns_id(self.pid)

    def _popen(self, cmd, **params):
        with signals_deferred():
            proc = super()._popen(cmd, **params)
            if self.ledger is not None:
                self.ledger.add("pid", proc.pid, node=self.name)
        return proc

    def kill_shell(self):
        """Stop the node's shell (and, in a private namespace, everything in it)."""
        if self.shell is None:
            return
        if self.inNamespace:
            kill_namespace(self.ns, leader=self.pid)
        # An interactive bash ignores SIGTERM (each shell cost a 0.5 s timeout), and a
        # node's shell holds nothing to flush: SIGKILL straight away.
        if self.shell.poll() is None:
            self.shell.kill()
        self.shell.wait()
        # The master end is wrapped by Mininet's file object (self.stdin is self.stdout):
        # close it through that object, or its finaliser would later close the same fd
        # number again -- by then another node's pty or a gRPC socket.
        self.stdin.close()
        try:
            os.close(self.slave)
        except OSError:
            pass
        self.shell = None


class RdmaHost(RecordedNode, Host):
    """A server whose NICs are the fabric's RDMA endpoints (emulated by traffic/).

    `configure` gives it, in one batch: the NIC addresses of the Clos plan with no
    connected route, a route to every fabric prefix via its leaf gateway with a
    permanent neighbour entry for the gateway's MAC (hosts never ARP; everything goes to
    the leaf port), the MTU, IPv6 off, no checksum/segmentation offloads (frames leave
    whole and correct), and no ICMP errors: see `ICMP_POLICY`.
    """

    #: What keeps UDP 4791 free of ICMP port-unreachable replies (documented choice):
    #: the traffic receiver binds 4791 while it runs, and outside that the host's
    #: rate-limited ICMP errors are switched off with net.ipv4.icmp_msgs_burst=0 and
    #: icmp_msgs_per_sec=0 (per namespace; the default icmp_ratemask covers destination
    #: unreachable, source quench, time exceeded and parameter problem). Echo replies are
    #: not rate-limited, so ping keeps working. There is no iptables/nft on these machines.
    ICMP_POLICY = ("net.ipv4.icmp_msgs_burst=0", "net.ipv4.icmp_msgs_per_sec=0")

    def configure(self, clos_host, routes, mtu=1500):
        """routes: {prefix: nic_index} for every fabric prefix this host reaches."""
        lines = [
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 "
            "net.ipv6.conf.lo.disable_ipv6=1 net.ipv4.conf.all.rp_filter=0 "
            "net.ipv4.conf.default.rp_filter=0 " + " ".join(self.ICMP_POLICY),
            "ip link set lo up",
        ]
        for nic in clos_host.nics:
            dev = clos_host.intf(nic.index)
            lines += [
                f"ip link set dev {dev} mtu {mtu} up",
                f"sysctl -qw net.ipv4.conf.{dev.replace('.', '/')}.rp_filter=0",
                f"ethtool -K {dev} tx off sg off tso off gso off gro off >/dev/null 2>&1",
                f"ip addr add {nic.ip}/{nic.prefix_len} dev {dev} noprefixroute",
                f"ip neigh replace {nic.gateway_ip} lladdr {nic.gateway_mac} dev {dev} nud permanent",
            ]
            intf = self.intf(dev)
            intf.ip, intf.prefixLen = nic.ip, nic.prefix_len
        for prefix, nic_index in routes.items():
            nic = clos_host.nics[nic_index]
            lines.append(f"ip route replace {prefix} via {nic.gateway_ip} dev {clos_host.intf(nic_index)} onlink")
        out = self.cmd("{ " + "; ".join(lines) + "; } 2>&1 | grep -v '^$'; true")
        if out.strip():
            raise RuntimeError(f"{self.name}: host configuration failed: {out.strip()}")


class P4Switch(RecordedNode, Switch):
    """A P4 software switch process on this node's ports (root namespace).

    Shared by the targets: the ports (``PORT@IFACE`` in the Clos numbering), the pcap
    and log directories, the P4Runtime address and device id, the CPU port, start/stop
    with the ledger, readiness, RSS, and the port models (rate, queue depth, delay,
    jitter, loss) that subclasses hand to their switch agent."""

    target = None

    def __init__(self, name, clos_switch=None, program=None, pcap_dir=None, log_dir=None,
                 log_console=False, cpu_port=CPU_PORT, **params):
        self.clos_switch = clos_switch
        self.program = Path(program) if program else None
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.log_dir = Path(log_dir) if log_dir else Path("/tmp")
        self.log_console = log_console
        self.cpu_port = cpu_port
        self.proc = None
        self._agent = None
        params.setdefault("dpid", "%016x" % clos_switch.device_id)
        params.pop("inNamespace", None)
        super().__init__(name, inNamespace=False, **params)

    # --- what the controller and the runner need ---
    @property
    def grpc_addr(self):
        return self.clos_switch.grpc_addr

    @property
    def device_id(self):
        return self.clos_switch.device_id

    @property
    def log_path(self):
        return self.log_dir / f"{self.name}.log"

    def port_interfaces(self):
        """{port number: interface name} for every front-panel port."""
        return {port: intf.name for port, intf in sorted(self.intfs.items()) if port != 0 and intf.name != "lo"}

    def port_models(self):
        return {port: intf.port_model for port, intf in sorted(self.intfs.items())
                if getattr(intf, "port_model", None) is not None}

    # --- process ---
    def launch_command(self):
        raise NotImplementedError

    def start(self, _controllers=()):
        ports = self.port_interfaces()
        batch = "".join(f"link set dev {name} up\n" for name in ports.values())
        res = subprocess.run(["ip", "-batch", "-"], input=batch, text=True, capture_output=True)
        if res.returncode:
            raise SwitchStartError(f"{self.name}: cannot bring ports up: {res.stderr.strip()}")
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.launch_command()
        with open(self.log_path, "ab") as log, signals_deferred():
            log.write(("# " + shlex.join(cmd) + "\n").encode())
            log.flush()
            # Own session: a Ctrl-C at the terminal reaches us, and we stop it in order.
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=self.launch_env())
            if self.ledger is not None:
                self.ledger.add("pid", self.proc.pid, node=self.name, role="switch")

    def launch_env(self):
        return dict(os.environ)

    def wait_ready(self, deadline):
        """Block until the P4Runtime port accepts connections, or raise SwitchStartError."""
        host, port = self.grpc_addr.rsplit(":", 1)
        while True:
            self.check_running()
            try:
                with socket.create_connection((host, int(port)), timeout=0.2) as probe:
                    # A port in the ephemeral range can connect to itself (TCP simultaneous
                    # open) while nothing listens: that is not the switch answering.
                    if probe.getsockname() != probe.getpeername():
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SwitchStartError(f"{self.name}: P4Runtime {self.grpc_addr} not up in time; "
                                       f"end of {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.05)

    def check_running(self, when="starting"):
        """Raise SwitchStartError, with the end of the switch's log, if its process has exited."""
        if self.proc is None or self.proc.poll() is not None:
            raise SwitchStartError(f"{self.name}: switch process exited while {when} (status "
                                   f"{None if self.proc is None else self.proc.returncode}); "
                                   f"end of {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines=15):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def rss_bytes(self):
        """Resident memory of the switch process (what one more switch costs)."""
        if self.proc is None:
            return 0
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def processes(self):
        """What stop() ends (FabricNet stops every switch's processes at once)."""
        return [self.proc] if self.proc is not None else []

    def stop(self, deleteIntfs=True):
        if self._agent is not None and hasattr(self._agent, "close"):
            self._agent.close()
        self._agent = None
        if self.proc is not None:
            stop_process(self.proc, timeout=2.0)

    # --- the switch agent: port models and what P4Runtime does not report ---
    @property
    def agent(self):
        if self._agent is None:
            self._agent = agents.agent_for(self)
        return self._agent

    def apply_port_models(self, pfc_priorities=agents.LOSSLESS_PRIORITIES, watchdog_s=None):
        """Hand each port's PortModel (and which PFC priorities pause it, and the PFC
        watchdog's detection time) to the switch."""
        from testbed.switch.agent import AgentError
        try:
            agents.apply_port_models(self.agent, self.port_models(), pfc_priorities, watchdog_s)
        except (AgentError, OSError) as exc:
            raise SwitchStartError(f"{self.name}: port models not applied: {exc}") from None

    def port_status(self):
        """{port: the agent's port record}: counters, queue depths, tail drops, PFC, pauses."""
        return {port: self.agent.port_counters(port) for port in self.port_interfaces()}

    def queue_depths(self):
        """{(port, priority): packets queued now}, for the queue sampler."""
        return {(port, prio): depth for port, status in self.port_status().items()
                for prio, depth in enumerate(status.get("queue_depth", ()))}


class EngineSwitch(P4Switch):
    """The project's own P4 engine (`rocelab switch`), serving P4Runtime like BMv2."""

    target = "engine"

    def launch_command(self):
        cmd = [sys.executable, "-m", "testbed.cli", "switch"]
        for port, name in self.port_interfaces().items():
            cmd += ["-i", f"{port}@{name}"]
        cmd += ["--grpc-server-addr", self.grpc_addr, "--device-id", str(self.device_id),
                "--cpu-port", str(self.cpu_port)]
        if self.pcap_dir:
            cmd += ["--pcap", str(self.pcap_dir)]
        if self.log_console:
            cmd.append("--log-console")
        # No program argument: like simple_switch_grpc --no-p4, the switch waits for the
        # controller's SetForwardingPipelineConfig, which compiles the program anyway;
        # compiling it at start-up as well doubled the CPU time of every boot.
        return cmd


class Bmv2Switch(P4Switch):
    """BMv2's simple_switch_grpc; the controller pushes the p4c-bm2-ss output."""

    target = "bmv2"
    binary = "simple_switch_grpc"

    def launch_command(self):
        cmd = [self.binary, "--device-id", str(self.device_id), "--no-p4",
               "--thrift-port", str(self.clos_switch.thrift_port)]
        for port, name in self.port_interfaces().items():
            cmd += ["-i", f"{port}@{name}"]
        if self.pcap_dir:
            cmd += ["--pcap", str(self.pcap_dir)]
        if self.log_console:
            cmd.append("--log-console")
        cmd += ["--", "--grpc-server-addr", self.grpc_addr, "--cpu-port", str(self.cpu_port),
                "--priority-queues", "8"]
        return cmd


TARGETS = {"engine": EngineSwitch, "bmv2": Bmv2Switch}
