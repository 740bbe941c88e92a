"""SimFabric: a Clos of testbed/clos.py on the simulated clock, with the interface of the
real-time FabricNet that experiments use (controller, switch nodes, counters, ranks).

    with SimFabric(clos, out_dir="runs/x", seed=1) as fabric:
        reports = fabric.run_ranks(job, "runs/x/ranks")

Each switch's P4Runtime server runs in this process on an abstract Unix socket of its own, and the
fabric controller programs `p4/fabric.p4` through it exactly as it does a switch process.
Cables: serialization at the port's rate plus a propagation delay (defaults: 10 m of copper
from host to leaf, 100 m of fiber between tiers, 5 ns/m).
"""
import contextlib
import functools
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path

from testbed.clos import CPU_PORT
from testbed.net import telemetry
from testbed.net.fabric_errors import FabricError
from testbed.net.port_model import PortModel
from testbed.sim import faults as sim_faults, profile
from testbed.sim.nodes import DatagramNet, SimHost, SimSwitch
from testbed.sim.progress import RunProgress
from testbed.sim.scheduler import Process, Scheduler
from testbed.sim.wire import Wire

LOSSLESS_PRIORITIES = (3,)
_PROGRAMS = {}                 # P4 source -> compiled Program (compiled programs are read-only)
_COMPILE_LOCK = threading.Lock()
_FABRIC_IDS = itertools.count(1)       # several fabrics in one process get their own socket names
SAMPLE_INTERVAL_S = 10e-6
# How long a rank stays after the final barrier, in unloaded fabric RTTs. Real time lingers
# 0.3 s for a barrier "go" lost on the way; here datagrams are never lost, and a rank passes
# the final barrier only once every rank has its data acknowledged, so what can still be on
# the way is a stray frame (a duplicate after a spurious resend, its ACK): an RTT or two. A
# longer stay costs no figure but stretches the phase: 0.3 s after a 50 us collective put
# the next phase 300 ms later in the captures and let a fault timed after the run fire.
LINGER_RTTS = 2
# Between two phases the fabric idles, as real time's does (its ranks' 0.3 s linger and the
# set-up): at least this long, and with flowlet hashing twice the next phase's flowlet gap, so
# every flowlet has expired and a phase does not start on the last phase's paths.
PHASE_QUIET_S = 1e-3


class SimFabricError(FabricError):
    """A virtual fabric that cannot be built (caught like real time's boot errors: one line)."""


class SimFabric:
    clock_kind = "virtual"

    def __init__(self, clos, program=None, out_dir=None, pcap=True, seed=0, port_defaults=None,
                 pfc_priorities=None, host_cable_m=profile.HOST_CABLE_M, fabric_cable_m=profile.FABRIC_CABLE_M,
                 controller_options=None, sample_interval_s=SAMPLE_INTERVAL_S, log=None):
        from testbed.control.controller import DEFAULT_PROGRAM
        self.clos = clos
        self.program = Path(program) if program else DEFAULT_PROGRAM
        self.out_dir = Path(out_dir) if out_dir else None
        self.pcap_dir = self.out_dir / "pcap" if (pcap and self.out_dir) else None
        self.seed = int(seed)
        self.port_defaults = dict(port_defaults or {})
        self.pfc_priorities = tuple(LOSSLESS_PRIORITIES if pfc_priorities is None else pfc_priorities)
        self.watchdog_s = profile.buffer_config().watchdog_detect_s     # the paper's 200 ms
        self.cable_s = {"host": host_cable_m * profile.NS_PER_METER * 1e-9,
                        "fabric": fabric_cable_m * profile.NS_PER_METER * 1e-9}
        self.controller_options = {"knobs": profile.knobs(), **profile.headroom_model(), **(controller_options or {})}
        self.sample_interval_s = sample_interval_s
        self.log = log or (lambda msg: None)
        self.scheduler = Scheduler()
        self.nodes = {}
        self.hosts_by_name = {}
        self.wires = []               # (from node, to node, Wire): every cable, both directions
        self.datagrams = DatagramNet(self.scheduler)
        self.controller = None
        self.timings = {}
        self.fault_log = []           # [{t_s, fault}] as they happened
        self.switch_events = []       # [{t_s, switch, event}]: what switches noticed (PFC watchdog storms)
        self.link_listeners = []      # fn(a, b, up) after a link changed (the TE service: testbed/te/virtual.py)
        self._socket_prefix = None

    # --- clock ---
    def clock(self):
        return self.scheduler.now()

    def _switch_notice(self, switch, message):
        self.switch_events.append({"t_s": round(self.clock(), 9), "switch": switch, "event": message})
        self.log(f"{switch}: {message}")

    # --- boot ---
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        from testbed.control import FabricController
        from testbed.p4rt.server import P4RuntimeServer
        from testbed.switch.pcap import PortCaptures

        t0 = time.monotonic()
        if not self.program.is_file():
            raise SimFabricError(f"P4 program {self.program} not found")
        # P4Runtime over abstract Unix sockets (Linux): no TCP port taken, not reachable from
        # outside this machine's network namespace, and nothing on disk for a killed run to leave.
        self._socket_prefix = f"rocelab-sim-{os.getpid()}-{next(_FABRIC_IDS)}"
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        sched = self.scheduler
        for sw in self.clos.switches.values():
            captures = None
            if self.pcap_dir:
                captures = PortCaptures(str(self.pcap_dir), {n: sw.intf(n) for n in sw.ports},
                                        clock=sched.now, nanoseconds=True, snaplen=profile.CAPTURE_SNAPLEN)
            node = SimSwitch(sched, sw, CPU_PORT, captures, seed=self.seed, buffer_config=profile.buffer_config())
            node.switch.notice = functools.partial(self._switch_notice, sw.name)
            node.server = P4RuntimeServer(node.switch, device_id=sw.device_id,
                                          address=f"unix-abstract:{self._socket_prefix}/{sw.name}",
                                          compiler=self._compile).start()
            self.nodes[sw.name] = node
        for host in self.clos.hosts.values():
            self.hosts_by_name[host.name] = SimHost(sched, host, self.datagrams)
        for link in self.clos.links:
            self._cable(link)
        linger = LINGER_RTTS * self.base_rtt_s()
        for host in self.hosts_by_name.values():
            host.linger_s = linger
        addresses = {name: node.server.address for name, node in self.nodes.items()}
        from testbed.control.p4runtime_io import ControlError
        try:
            ctl = FabricController(self.clos, program=self.program, target="engine", addresses=addresses,
                                   seed=self.seed, **self.controller_options)
            self.controller = ctl
            ctl.connect()
            ctl.push_pipeline()
            ctl.install_defaults()
        except (ControlError, ValueError) as exc:       # KnobError is a ValueError
            raise SimFabricError(f"programming the virtual fabric: {exc}") from None
        for node in self.nodes.values():
            node.models = self.port_models(node)
            node.apply_port_models(self.pfc_priorities, self.watchdog_s)
        self.timings["boot_s"] = time.monotonic() - t0
        return self

    def _compile(self, device_config):
        """Every switch gets the same program: compile it once per process (each switch still
        has its own pipeline; a sweep's worker reuses it for every point)."""
        from testbed.p4engine import P4Error, compile_source
        from testbed.p4rt.errors import invalid
        with _COMPILE_LOCK:
            program = _PROGRAMS.get(device_config)
            if program is None:
                try:
                    program = compile_source(device_config.decode("utf-8"), filename=str(self.program))
                except (P4Error, UnicodeDecodeError) as exc:
                    raise invalid(f"P4 program does not compile:\n{exc}") from None
                _PROGRAMS[device_config] = program
            return program

    def _cable(self, link):
        """Two wires, one per direction; each delivers to the node at its far end."""
        ends = []
        for name, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if name in self.hosts_by_name:
                host = self.hosts_by_name[name]
                frame_s = profile.FRAME_BYTES * 8 / (link.rate_mbps * 1e6)
                host.tx_lookahead_s, host.rx_coalesce_s = frame_s, 2 * frame_s
                nic_port = host.nic_port
                ends.append((nic_port, nic_port.deliver))
            else:
                node = self.nodes[name]
                ends.append((node.ports[port], lambda frame, _n=node, _p=port: _n.receive(_p, frame)))
        host_link = link.a in self.hosts_by_name or link.b in self.hosts_by_name
        delay = self.cable_s["host" if host_link else "fabric"]
        (a_port, a_in), (b_port, b_in) = ends
        rate = link.rate_mbps * 1e6
        a_port.wire = Wire(self.scheduler, rate, delay, b_in)
        b_port.wire = Wire(self.scheduler, rate, delay, a_in)
        self.wires += [(link.a, link.b, a_port.wire), (link.b, link.a, b_port.wire)]

    def base_rtt_s(self):
        """The unloaded round trip of the fabric's longest path, host to host through every
        switch tier and back: on each cable a full frame's serialization (store and forward)
        and its propagation delay, the slowest cable of its kind (host or fabric) each time."""
        tiers = len({s.role for s in self.clos.switches.values()})
        worst = {"host": 0.0, "fabric": 0.0}
        for a, b, wire in self.wires:
            kind = "host" if a in self.hosts_by_name or b in self.hosts_by_name else "fabric"
            worst[kind] = max(worst[kind], profile.FRAME_BYTES * 8 / wire.rate_bps + wire.delay_s)
        return 2 * (2 * worst["host"] + 2 * (tiers - 1) * worst["fabric"])

    def settle(self, flowlet_gap_us=None):
        """Idle the fabric between two phases: PHASE_QUIET_S, or twice the flowlet gap the next
        phase hashes with (None: the gap the controller has set, when it hashes by flowlet)."""
        if flowlet_gap_us is None and self.controller is not None:
            gaps = [k.flowlet_gap_us for k in self.controller.knobs.values() if k.hash_mode == "flowlet"]
            flowlet_gap_us = max(gaps, default=None)
        self.scheduler.pass_time(max(PHASE_QUIET_S, 2e-6 * (flowlet_gap_us or 0)))

    def port_models(self, node):
        return {n: PortModel(rate_mbps=p.rate_mbps, **self.port_defaults)
                for n, p in sorted(node.clos_switch.ports.items())}

    def stop(self):
        if self.controller is not None:
            self.controller.close()
            self.controller = None
        for node in self.nodes.values():
            if node.server is not None:
                node.server.stop(grace=0)
                node.server = None
            if node.switch.captures:
                node.switch.captures.close()
            node.switch.close()

    # --- what experiments use ---
    @property
    def switches(self):
        return list(self.nodes.values())

    def switch(self, name):
        return self.nodes[name]

    def host(self, name):
        return self.hosts_by_name[name]

    def nic_counters(self, host):
        return self.hosts_by_name[host].nic_counters()

    def queue_sampler(self):
        return QueueSampler(self)

    def link_status(self, a, b, up):
        """Take the cable(s) between switches `a` and `b` down or up (both directions), and tell
        the controller, as `link a b down` does on a booted fabric."""
        for src, dst, wire in self.wires:
            if {src, dst} == {a, b}:
                wire.up = up
        if self.controller is not None:
            self.controller.link_status(a, b, up)
        for listener in list(self.link_listeners):
            listener(a, b, up)

    def switch_down(self, name):
        """The switch stops: queues lost, every cable of it dark, the controller routes around it."""
        self.nodes[name].crash()
        for src, dst, wire in self.wires:
            if name in (src, dst):
                wire.up = False
        if self.controller is not None:
            for peer in sorted({p.peer for p in self.clos.switches[name].ports.values()}):
                if peer in self.clos.switches:
                    self.controller.link_status(name, peer, False)

    def run_ranks(self, job, out_dir, until=None, progress=True, faults=()):
        """Every rank of `job` (a job dict) as a process on the simulated clock, until all are
        done or their timeout passes; writes ranks/rankN.json like real time and returns the
        :class:`~testbed.net.experiment.RankOutcome`. SIGINT/SIGTERM stop the clock: unfinished
        ranks report "interrupted" and the outcome carries the signal (the caller writes its
        summary, then re-raises it)."""
        from testbed.net.experiment import RankOutcome
        from traffic.job import parse_job
        from traffic.runner import RankRunner

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "job.json", "w") as f:
            json.dump(job, f, indent=1)
        parsed = parse_job(job)
        sched = self.scheduler
        runners, procs = [], []
        remaining = [parsed.n]

        def body(runner):
            try:
                return runner.run()
            finally:
                remaining[0] -= 1
                if not remaining[0]:
                    sched.stop()

        for rank, r in enumerate(parsed.ranks):
            host = self.hosts_by_name[r.host]
            host.attach_control(self.datagrams, r.ip, parsed.control_port)
            runner = RankRunner(parsed, rank, clock=sched.now, io=host)
            proc = Process(sched, lambda _r=runner: body(_r), f"rank{rank}")
            host.process = proc
            runners.append(runner)
            procs.append(proc)
            proc.start()
        fault_timers = sim_faults.schedule(self, faults, sched.now(), {r.me.host: r for r in runners})
        limit = sched.now() + parsed.timeout_s + 1.0 if until is None else until
        bar = RunProgress(runners) if progress else None
        with _signals_stop(sched) as stopped:
            try:
                sched.run(until=limit, on_step=bar)
            except KeyboardInterrupt:     # a second Ctrl-C while the handler was being replaced
                stopped.append(signal.SIGINT)
            finally:
                if bar is not None:
                    bar.close()
        for timer in fault_timers:       # timed after the run: not reached, and not in the next phase
            timer.cancel()
        interrupted = bool(stopped)
        reports = []
        for rank, (runner, proc) in enumerate(zip(runners, procs)):
            if proc.finished and proc.error is None and proc.result is not None:
                report = proc.result
            else:
                if proc.error is not None:
                    runner.status, runner.error = "error", f"{type(proc.error).__name__}: {proc.error}"
                elif interrupted:
                    runner.status, runner.error = "interrupted", "interrupted by a signal"
                else:
                    runner.status, runner.error = "timeout", f"did not finish within {parsed.timeout_s} s"
                report = runner.report()
            with open(out_dir / f"rank{rank}.json", "w") as f:
                json.dump(report, f, indent=1)
            reports.append(report)
        for host in self.hosts_by_name.values():
            host.process = None
        return RankOutcome(reports, interrupted=_as_exception(stopped[0]) if stopped else None)


def _as_exception(signum):
    """The exception real time raises for this signal (the caller re-raises it)."""
    from testbed.net.lifecycle import Terminated
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


@contextlib.contextmanager
def _signals_stop(scheduler):
    """SIGINT/SIGTERM stop the clock between two events (never inside a rank, which would end
    that rank alone); yields the list of signals received."""
    received = []
    if threading.current_thread() is not threading.main_thread():
        yield received          # signals reach only the main thread (e.g. a sweep's worker thread)
        return

    def handler(signum, _frame):
        received.append(signum)
        scheduler.stop()
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


class QueueSampler(telemetry.QueueSampler):
    """Queue depths every `sample_interval_s` of simulated time (non-empty queues only): the
    real-time sampler's samples and max_depths, ticked by the scheduler instead of a thread.

    While every queue is empty a tick would record nothing, so the sampler sleeps until a
    switch queues a frame and goes on at the next tick of the same time grid."""

    def __init__(self, fabric):
        super().__init__(fabric, fabric.sample_interval_s)
        self._timer = None
        self._next = None        # when the next tick is (or would be, while asleep)
        self._stopped = False

    def start(self):
        self.t0 = self._next = self.fabric.clock()
        self._timer = self.fabric.scheduler.at(self._next, self._tick)
        return self

    def _tick(self):
        t = round(self.fabric.clock() - self.t0, 9)
        queued = False
        for node in self.fabric.nodes.values():
            switch = node.switch
            for number in switch._busy:          # only ports with something queued
                for prio, queue in enumerate(switch.egress_ports[number].queues):
                    if queue:
                        queued = True
                        self.samples.append((t, node.name, number, prio, len(queue)))
        self._next += self.interval_s
        if queued:
            self._timer = self.fabric.scheduler.at(self._next, self._tick)
        else:
            self._timer = None
            for node in self.fabric.nodes.values():
                node.on_queued = self._wake

    def _wake(self):
        """A frame was queued somewhere: tick again from the first grid time after now (the
        ticks skipped, up to now included, found every queue empty)."""
        for node in self.fabric.nodes.values():
            node.on_queued = None
        if self._stopped:
            return
        now = self.fabric.clock()
        while self._next <= now:
            self._next += self.interval_s
        self._timer = self.fabric.scheduler.at(self._next, self._tick)

    def stop(self):
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for node in self.fabric.nodes.values():
            node.on_queued = None
        return self.samples
