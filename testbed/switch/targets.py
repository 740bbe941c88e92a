"""Start a switch of either target as a process, behind one Python interface.

    target = EngineTarget(ports={1: "s1-eth1", 2: "s1-eth2"}, grpc_addr="127.0.0.1:9559",
                          device_id=1, cpu_port=255, program="p4/fabric.p4", pcap_dir=None)
    target.start(); target.agent.set_port_rate(1, 10_000_000); ...; target.stop()

`command()` gives the argv, for callers (Mininet nodes) that start it themselves.
For BMv2, `program` is compiled with p4c-bm2-ss first and `p4info_path` names
the P4Info the controller should use; the engine target serves the P4Info it
derives from the same source.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

from testbed.switch.agent import RemoteEngineAgent, parse_address


class SwitchTarget:
    kind = None

    def __init__(self, ports, grpc_addr="127.0.0.1:9559", device_id=0, cpu_port=None, program=None,
                 pcap_dir=None, log_console=False, log_path=None):
        self.ports = dict(ports)
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.program = program
        self.pcap_dir = pcap_dir
        self.log_console = log_console
        self.log_path = log_path
        self.process = None
        self._log_file = None

    def command(self):
        raise NotImplementedError

    def listening_addresses(self):
        """Where the process serves once it is up (start() waits for each)."""
        return [self.grpc_addr]

    def start(self, timeout=30.0, ledger=None):
        """Start the process and wait until each of its servers accepts connections."""
        out = subprocess.DEVNULL
        if self.log_path:
            self._log_file = out = open(self.log_path, "w")
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        if ledger is not None:
            ledger.add("pid", self.process.pid)
        pending = list(self.listening_addresses())
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} switch exited with status {self.process.returncode}"
                                   + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                socket.create_connection(parse_address(pending[0]), timeout=0.2).close()
                pending.pop(0)
                if not pending:
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.kind} switch did not open {pending[0]} within {timeout:.0f} s")

    def stop(self, timeout=10.0):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_file:
            self._log_file.close()
            self._log_file = None


class EngineTarget(SwitchTarget):
    kind = "engine"

    def __init__(self, *args, agent_addr=None, extra_args=(), **kwargs):
        super().__init__(*args, **kwargs)
        host, port = parse_address(self.grpc_addr)
        self.agent_addr = agent_addr or f"{host}:{port + 100}"
        self.extra_args = list(extra_args)
        self._agent = None

    def command(self):
        cmd = [sys.executable, "-m", "testbed.cli", "switch"]
        for number, iface in sorted(self.ports.items()):
            cmd += ["-i", f"{number}@{iface}"]
        cmd += ["--grpc-server-addr", self.grpc_addr, "--device-id", str(self.device_id),
                "--agent-addr", self.agent_addr]
        if self.cpu_port is not None:
            cmd += ["--cpu-port", str(self.cpu_port)]
        if self.pcap_dir:
            cmd += ["--pcap", self.pcap_dir]
        if self.log_console:
            cmd += ["--log-console"]
        cmd += self.extra_args
        if self.program:
            cmd.append(self.program)
        return cmd

    def listening_addresses(self):
        # the agent opens just after P4Runtime: a caller's first set_pfc must not beat it
        agent = [] if self.agent_addr.lower() == "none" else [self.agent_addr]
        return super().listening_addresses() + agent

    @property
    def agent(self):
        if self._agent is None:
            self._agent = RemoteEngineAgent(self.agent_addr)
        return self._agent

    def stop(self, timeout=10.0):
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        super().stop(timeout)


class Bmv2Target(SwitchTarget):
    kind = "bmv2"

    def __init__(self, *args, thrift_port=9090, build_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.thrift_port = thrift_port
        self.build_dir = build_dir
        self.json_path = self.p4info_path = None
        self._agent = None

    def stop(self, timeout=10.0):
        if self._agent is not None:
            self._agent.close()          # its PFC resume timers
            self._agent = None
        super().stop(timeout)

    def compile(self):
        from testbed.switch.bmv2 import compile_p4
        if self.program and self.json_path is None:
            out = self.build_dir or tempfile.mkdtemp(prefix="rocelab-bmv2-")
            os.makedirs(out, exist_ok=True)
            self.json_path, self.p4info_path = compile_p4(self.program, out)
        return self.json_path, self.p4info_path

    def command(self):
        from testbed.switch.bmv2 import simple_switch_command
        self.compile()
        return simple_switch_command(self.ports, self.json_path, self.grpc_addr, self.device_id, self.cpu_port,
                                     self.pcap_dir, self.log_console, self.thrift_port)

    @property
    def agent(self):
        from testbed.switch.bmv2 import Bmv2Agent
        if self._agent is None:
            self._agent = Bmv2Agent(self.thrift_port, ports=self.ports)
        return self._agent


TARGETS = {"engine": EngineTarget, "bmv2": Bmv2Target}


def make_target(kind, *args, **kwargs):
    try:
        return TARGETS[kind](*args, **kwargs)
    except KeyError:
        raise ValueError(f"unknown switch target {kind!r} (choose from {', '.join(TARGETS)})") from None
