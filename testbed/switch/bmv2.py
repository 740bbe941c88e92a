"""The BMv2 target: p4c-bm2-ss to compile, simple_switch_grpc to run, simple_switch_CLI
(Thrift) for what P4Runtime does not cover.

BMv2's ports have no MAC model, so PFC reception is done here: the P4 program
punts PFC frames to the CPU port, the controller hands them to
Bmv2Agent.handle_pfc_frame(), and the agent pauses the queue by setting its rate
to the minimum (BMv2 reads a rate of 0 as unlimited) and restores it when the
pause expires. BMv2 queue rates are in packets/s: bit rates are converted with
an assumed mean packet size.
"""
import os
import shutil
import subprocess
import threading
import time

from testbed.switch import pfc
from testbed.switch.agent import AgentError, SwitchAgent

P4C = "p4c-bm2-ss"
SIMPLE_SWITCH_GRPC = "simple_switch_grpc"
SIMPLE_SWITCH_CLI = "simple_switch_CLI"
PAUSED_RATE_PPS = 1            # the slowest rate BMv2 accepts; 0 would mean "unlimited"
NUM_PRIORITIES = 8


def binaries_missing(names=(P4C, SIMPLE_SWITCH_GRPC, SIMPLE_SWITCH_CLI)):
    """None if every BMv2/p4c binary is on PATH, else a sentence naming the missing ones."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        return f"BMv2/p4c binaries not installed here ({', '.join(missing)} not on PATH)"
    return None


class Bmv2Error(Exception):
    pass


#: How simple_switch_CLI answers a command it refused: it still exits 0, and prints e.g.
#: "Invalid mirroring operation (SESSION_NOT_FOUND)", "Error: ..." or "*** Unknown syntax: ...".
CLI_REFUSALS = ("Invalid ", "Error", "*** ")
CLI_PROMPT = "RuntimeCmd:"


def cli_refusals(stdout):
    """The answers in simple_switch_CLI's `stdout` that say a command was refused."""
    answers = (a.strip() for a in stdout.split(CLI_PROMPT))
    return [a.splitlines()[0] for a in answers if a.startswith(CLI_REFUSALS)]


def compile_p4(p4_path, out_dir, include_dirs=()):
    """p4c-bm2-ss -> (json path, P4Info text path); raises Bmv2Error with p4c's message."""
    missing = binaries_missing((P4C,))
    if missing:
        raise Bmv2Error(missing)
    base = os.path.join(out_dir, os.path.splitext(os.path.basename(p4_path))[0])
    json_path, p4info_path = base + ".json", base + ".p4info.txt"
    cmd = [P4C, "--arch", "v1model", "--p4runtime-files", p4info_path, "-o", json_path]
    for d in include_dirs:
        cmd += ["-I", d]
    res = subprocess.run(cmd + [p4_path], capture_output=True, text=True)
    if res.returncode != 0:
        raise Bmv2Error(f"{P4C} failed on {p4_path}:\n{res.stderr.strip()}")
    return json_path, p4info_path


def simple_switch_command(ports, json_path=None, grpc_addr="127.0.0.1:9559", device_id=0, cpu_port=None,
                          pcap_dir=None, log_console=False, thrift_port=9090, log_file=None):
    """argv for simple_switch_grpc with `ports` {number: iface} and 8 priority queues."""
    cmd = [SIMPLE_SWITCH_GRPC]
    for number, iface in sorted(ports.items()):
        cmd += ["-i", f"{number}@{iface}"]
    cmd += ["--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    if pcap_dir:
        cmd += ["--pcap", pcap_dir]
    if log_console:
        cmd += ["--log-console"]
    if log_file:
        cmd += ["--log-file", log_file, "--log-flush"]
    cmd += [json_path] if json_path else ["--no-p4"]
    cmd += ["--", "--grpc-server-addr", grpc_addr, "--priority-queues", str(NUM_PRIORITIES)]
    if cpu_port is not None:
        cmd += ["--cpu-port", str(cpu_port)]
    return cmd


class Bmv2Agent(SwitchAgent):
    """The switch agent of a simple_switch_grpc, through simple_switch_CLI."""

    def __init__(self, thrift_port=9090, ports=(), mean_packet_bytes=1024, runner=None):
        self.thrift_port = thrift_port
        self._ports = sorted(ports)
        self.mean_packet_bytes = mean_packet_bytes
        self._run = runner or self._run_cli
        self._rates_pps = {}                   # port -> configured pps (0 = unlimited)
        self._pfc_enabled = {}                 # port -> set of priorities
        self._pause_until = {}                 # (port, prio) -> monotonic time
        self._timers = {}
        self._pfc_rx = {}                      # port -> [count per priority]
        self._paused_seconds = {}              # (port, prio) -> seconds
        self._paused_since = {}                # (port, prio) -> monotonic time the pause began
        self._lock = threading.Lock()

    def _run_cli(self, commands):
        if binaries_missing((SIMPLE_SWITCH_CLI,)):
            raise AgentError(binaries_missing((SIMPLE_SWITCH_CLI,)))
        res = subprocess.run([SIMPLE_SWITCH_CLI, "--thrift-port", str(self.thrift_port)],
                             input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=30)
        refused = cli_refusals(res.stdout)
        if res.returncode != 0 or refused:
            detail = "; ".join(refused) or f"{res.stdout.strip()} {res.stderr.strip()}".strip()
            raise AgentError(f"simple_switch_CLI on thrift port {self.thrift_port}: {detail}")
        return res.stdout

    def ports(self):
        return list(self._ports)

    def _pps(self, rate_bps):
        if rate_bps < 0:
            raise AgentError(f"rate {rate_bps} b/s is negative")
        return 0 if rate_bps == 0 else max(1, round(rate_bps / (8 * self.mean_packet_bytes)))

    def set_port_rate(self, port, rate_bps):
        pps = self._pps(rate_bps)
        self._rates_pps[port] = pps
        now = time.monotonic()
        # Paused queues keep their minimal rate; the new rate applies when they resume.
        self._run([f"set_queue_rate {pps} {port} {prio}" for prio in range(NUM_PRIORITIES)
                   if self._pause_until.get((port, prio), 0) <= now])

    def set_queue_depth(self, port, depth, priority=None):
        if depth < 1:
            raise AgentError(f"queue depth {depth} must be at least 1 packet")
        if priority is not None and not 0 <= priority < NUM_PRIORITIES:
            # simple_switch_grpc would answer with a C++ range_check exception
            raise AgentError(f"priority {priority} not in 0..{NUM_PRIORITIES - 1}")
        prios = range(NUM_PRIORITIES) if priority is None else [priority]
        self._run([f"set_queue_depth {depth} {port} {prio}" for prio in prios])

    def set_impairments(self, port, delay_us=0.0, jitter_us=0.0, loss=0.0):
        if delay_us or jitter_us or loss:
            raise AgentError("BMv2 ports have no delay, jitter or loss model (an engine-target feature)")

    def set_pfc(self, port, priorities):
        prios = set(priorities)
        if any(not 0 <= p < NUM_PRIORITIES for p in prios):
            raise AgentError(f"priorities {sorted(prios)} not all in 0..7")
        self._pfc_enabled[port] = prios

    def handle_pfc_frame(self, port, frame):
        """Apply a PFC frame the program punted from `port`; returns the priorities acted on."""
        try:
            entries = pfc.decode_pfc(frame)
        except ValueError:
            return []
        rate_pps = self._rates_pps.get(port, 0)
        rate_bps = rate_pps * 8 * self.mean_packet_bytes or pfc_reference_bps()
        acted = []
        counts = self._pfc_rx.setdefault(port, [0] * NUM_PRIORITIES)
        for prio, quanta in entries:
            counts[prio] += 1
            if prio not in self._pfc_enabled.get(port, ()):
                continue
            acted.append(prio)
            if quanta == 0:
                self._resume(port, prio)
            else:
                self._pause(port, prio, pfc.pause_seconds(quanta, rate_bps))
        return acted

    def _pause(self, port, prio, seconds):
        with self._lock:
            key = (port, prio)
            now = time.monotonic()
            if self._pause_until.get(key, 0) <= now:
                self._run([f"set_queue_rate {PAUSED_RATE_PPS} {port} {prio}"])
                self._paused_since[key] = now
            self._pause_until[key] = now + seconds
            old = self._timers.pop(key, None)
            if old:
                old.cancel()
            if self._closed:
                return
            timer = threading.Timer(seconds, self._resume, (port, prio))
            timer.daemon = True
            self._timers[key] = timer
            timer.start()

    def _resume(self, port, prio):
        with self._lock:
            key = (port, prio)
            if key not in self._pause_until:
                return
            timer = self._timers.pop(key, None)
            if timer and timer is not threading.current_thread():
                timer.cancel()
            now = time.monotonic()
            since = self._paused_since.pop(key, now)
            self._paused_seconds[key] = self._paused_seconds.get(key, 0.0) + (now - since)
            del self._pause_until[key]
            self._run([f"set_queue_rate {self._rates_pps.get(port, 0)} {port} {prio}"])

    _closed = False

    def close(self):
        """The switch is going away: its pause timers are cancelled, and one already resuming
        is waited for, so no thread of this agent runs on."""
        with self._lock:
            self._closed = True
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()

    def queue_depth(self, port, priority):
        raise AgentError("BMv2's runtime interface does not report queue occupancy")

    def pause_state(self, port):
        now = time.monotonic()
        return {prio: round((until - now) * 1e6) for (p, prio), until in self._pause_until.items()
                if p == port and until > now}

    def port_counters(self, port):
        return {"port": port, "rate_pps": self._rates_pps.get(port, 0),
                "pfc_enabled": sorted(self._pfc_enabled.get(port, ())),
                "pfc_rx": list(self._pfc_rx.get(port, [0] * NUM_PRIORITIES)),
                "paused_us": [round(self._paused_seconds.get((port, p), 0.0) * 1e6)
                              for p in range(NUM_PRIORITIES)]}

    def mirroring_add(self, session, port):
        self._run([f"mirroring_add {session} {port}"])

    def mirroring_delete(self, session):
        self._run([f"mirroring_delete {session}"])


def pfc_reference_bps():
    from testbed.switch.traffic_manager import PFC_REFERENCE_BPS
    return PFC_REFERENCE_BPS
