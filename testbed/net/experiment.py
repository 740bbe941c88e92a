"""Experiments: boot a Clos, set the fabric knobs, run a collective on every host, collect
telemetry, write summary.json (schema in testbed/net/summary.py), plots and pcaps, tear down.

    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2))      # testbed.clos
    settings = FabricSettings(hash="qpn", pfc=True)
    job = job_for(clos, "ring_allreduce", sizes=[1 << 20], qps_per_connection=4)
    with Experiment(clos, target="engine", out="runs/qpn") as exp:      # boots + programs
        summary = exp.run_phase("qpn", job, settings)                   # -> runs/qpn/summary.json

In virtual time (no root) the Clos is built at production rates and the experiment gets a seed:
`build(ClosSpec(..., link_rate_mbps=400_000, clock="virtual"))`, `Experiment(clos, clock="virtual",
seed=1)`, and jobs with `mtu=testbed.sim.profile.NIC_MTU`.

`rocelab run` is one phase; the demo (:func:`demo`) is two phases on one booted fabric.
Every rank is a `rocelab traffic run` process inside its host's namespace, recorded in the
run's ledger like everything else, so Ctrl-C, SIGTERM or a crash leave nothing behind.
"""
import json
import os
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.net.fabric import FabricError, FabricNet
from testbed.net.lifecycle import Terminated, interruptions_held, signals_deferred, stop_process
from testbed.units import rate_text, rate_unit

HASH_MODES = ("5tuple", "qpn", "flowlet")
CONTROLLER_DEFAULT = "default"


class ExperimentError(ValueError):
    """A bad experiment request; the message names the option at fault."""


@dataclass
class FabricSettings:
    """The fabric knobs of one phase (set through the controller before traffic starts)."""

    hash: str = "5tuple"
    flowlet_gap_us: int = None  # None: the controller's default
    pfc: bool = True
    ecn: object = CONTROLLER_DEFAULT  # or None (no marking) or (kmin packets, kmax packets, pmax)
    pfc_headroom: int = None  # bytes per lossless PG; None: the headroom calculator's
    # PFC watchdog detection (seconds, 0 off): None the fabric's (virtual time: the paper's 200 ms);
    # a number for every switch; {switch: seconds} for those switches, the fabric's elsewhere
    watchdog_s: object = None

    def watchdog_for(self, switch, default):
        """The watchdog detection time `switch` gets in this phase."""
        if isinstance(self.watchdog_s, dict):
            return self.watchdog_s.get(switch, default)
        return default if self.watchdog_s is None else self.watchdog_s

    def check(self):
        if self.hash not in HASH_MODES:
            raise ExperimentError(f"--hash {self.hash!r}: choose one of {', '.join(HASH_MODES)}")
        gap = self.flowlet_gap_us
        if gap is not None and (int(gap) != gap or gap < 1):
            raise ExperimentError(f"--flowlet-gap-us {gap}: a whole number of microseconds >= 1")
        if self.ecn not in (None, CONTROLLER_DEFAULT):
            kmin, kmax, pmax = self.ecn
            if not (0 <= kmin < kmax and 0.0 < pmax <= 1.0):
                raise ExperimentError(f"--ecn {kmin},{kmax},{pmax}: need 0 <= KMIN < KMAX and 0 < PMAX <= 1")
            from testbed.control.knobs import EcnProfile, KnobError
            try:  # what the controller would refuse after the boot is refused now
                EcnProfile(kmin, kmax, pmax).check("--ecn")
            except KnobError as exc:
                raise ExperimentError(str(exc)) from None
        times = self.watchdog_s.values() if isinstance(self.watchdog_s, dict) else [self.watchdog_s]
        if any(t is not None and not t >= 0 for t in times):
            raise ExperimentError(f"watchdog {self.watchdog_s!r}: detection times are seconds >= 0 (0: off)")
        return self


def parse_ecn(text):
    """'5,20,0.2' -> (5, 20, 0.2); 'off' -> None; 'default' -> the controller's profile."""
    if text is None or text.strip().lower() == CONTROLLER_DEFAULT:
        return CONTROLLER_DEFAULT
    if text.strip().lower() in ("off", "none"):
        return None
    try:
        kmin, kmax, pmax = text.split(",")
        return int(kmin), int(kmax), float(pmax)
    except ValueError:
        raise ExperimentError(f"--ecn {text!r}: expected KMIN,KMAX,PMAX such as 5,20,0.2 (packets, packets, "
                              "probability) or 'off'") from None


def job_for(clos, pattern, sizes, nranks=None, placement="topology", iterations=1, warmup=0, channels=1,
            qps_per_connection=1, cts=True, dcqcn=False, chunk_bytes=65536, mtu=1024, timeout_s=None, name=None,
            seed=0, preset=None):
    """A validated traffic job (traffic/job.py format) for the hosts of `clos`: rank i runs on
    NIC 0 of the i-th placed host, sends everything to its leaf port's MAC, and its NIC
    paces at the host link rate. Raises ExperimentError before anything exists."""
    from traffic.collectives import expected_bytes
    from traffic.job import MAX_TIMEOUT_S, JobError, parse_job, place

    hosts = [{"host": h.name, "ip": h.nics[0].ip, "mac": h.nics[0].mac, "iface": h.intf(0),
              "gateway_mac": h.nics[0].gateway_mac, "leaf": h.nics[0].leaf} for h in clos.hosts.values()]
    rate = clos.spec.link_rate_mbps
    try:
        ranks = place(hosts, nranks, placement, seed)   # seed: which shuffle 'random' placement is
        if timeout_s is None:
            # Generous: ten times the time the busiest rank needs at line rate, plus set-up.
            n = len(ranks)
            busiest = max(expected_bytes(pattern, r, n, max(sizes), chunk_bytes, preset=preset)[0]
                          for r in range(n)) if n > 1 else 0
            timeout_s = round(30 + 10 * busiest * len(sizes) * (iterations + warmup) * 8 / (rate * 1e6), 1)
            if timeout_s > MAX_TIMEOUT_S:
                raise ExperimentError(f"--size {max(sizes)} on {n} ranks at {rate:g} Mb/s would run for about "
                                      f"{timeout_s / 10:.0f} s, more than a run may take ({MAX_TIMEOUT_S} s): "
                                      "choose a smaller --size or fewer --iterations")
        data = {"name": name or pattern, "pattern": pattern, "sizes": list(sizes), "iterations": iterations,
                "warmup": warmup, "channels": channels, "qps_per_connection": qps_per_connection,
                "chunk_bytes": chunk_bytes, "cts": {"enabled": bool(cts)},
                "dcqcn": {"enabled": bool(dcqcn)},
                "nic": {"line_rate_mbps": rate, "mtu": mtu}, "timeout_s": timeout_s, "ranks": ranks}
        if preset is not None:
            data["preset"] = preset
        parse_job(data)
    except (JobError, KeyError, ValueError) as exc:
        raise ExperimentError(str(exc)) from None
    return data


class Experiment:
    """A booted fabric that runs phases; the context manager boots and always tears down."""

    def __init__(self, clos, target="engine", out=None, pcap=True, log=print, clock="real", seed=0,
                 **fabric_options):
        """clock "real": Mininet, switch processes, wall-clock time (needs root); "virtual": the
        same switches, NICs and ranks on a discrete-event clock in this process (testbed/sim/).
        out: the report directory; by default runs/run-<time> in the repository, as `rocelab run`."""
        from testbed import REPO_ROOT
        self.clos = clos
        self.target = target
        self.out = Path(out) if out is not None else REPO_ROOT / "runs" / time.strftime("run-%Y%m%d-%H%M%S")
        self.log = log
        self.clock = clock
        if clock == "virtual":
            from testbed.sim.fabric import SimFabric
            if target != "engine":
                raise ExperimentError(f"--target {target}: virtual time runs the engine target only")
            keep = {k: fabric_options[k] for k in ("program", "port_defaults", "pfc_priorities")
                    if fabric_options.get(k) is not None}
            self.fabric = SimFabric(clos, out_dir=self.out, pcap=pcap, seed=seed, **keep)
        elif clock == "real":
            self.fabric = FabricNet(clos, target=target, out_dir=self.out, pcap=pcap, **fabric_options)
        else:
            raise ExperimentError(f"--clock {clock!r}: choose real or virtual")
        self.summaries = []
        self._quiet_due = False          # virtual time: a phase ran and the fabric has not idled since
        self._switch_events_reported = 0   # virtual time: the fabric's switch_events span every phase

    def preflight(self):
        """Raise FabricError for what would stop the boot (real time: root, tools, the target's
        binary, ports), before a line is printed or a file written; virtual time needs nothing."""
        check = getattr(self.fabric, "preflight", None)
        if check is not None:
            check()

    def __enter__(self):
        self.preflight()
        self.log(f"*** booting {len(self.clos.switches)} switches ({self.target}, {self.clock} time) and "
                 f"{len(self.clos.hosts)} hosts")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self.clos.save(self.out / "fabric.json")
        except OSError as exc:
            raise FabricError(f"cannot write the report directory {self.out}: {exc.strerror or exc}") from None
        self.fabric.__enter__()
        self.log(f"*** fabric up and programmed in {self.fabric.timings['boot_s']:.1f} s")
        return self

    def __exit__(self, *exc):
        self.log("*** tearing down")
        self.fabric.__exit__(*exc)
        self._finish_summaries()

    # --- one phase ---
    def settle(self, settings):
        """Virtual time: after a phase, idle the fabric before the next one (`settings`) starts,
        as real time's fabric idles between phases. run_phase does it; call it first when
        something set up before run_phase (a lab's timed hook) must count from the new start."""
        if self._quiet_due:
            gap = settings.flowlet_gap_us if settings.hash == "flowlet" else None
            self.fabric.settle(gap)
            self._quiet_due = False

    def apply(self, settings):
        """Set the fabric knobs; False where the target has no P4 pipeline (kernel)."""
        ctl = self.fabric.controller
        if ctl is None:
            return False
        try:
            ctl.set_hash_mode(settings.hash)
            if settings.flowlet_gap_us is not None:
                ctl.set_flowlet_gap_us(settings.flowlet_gap_us)
            if settings.ecn is None:
                ctl.disable_ecn()
            elif settings.ecn != CONTROLLER_DEFAULT:
                ctl.set_ecn(*settings.ecn)
            if settings.pfc and settings.pfc_headroom is not None:
                ctl.set_pfc(headroom=settings.pfc_headroom)
            else:
                ctl.set_pfc(settings.pfc)
        except (ValueError, RuntimeError) as exc:  # the controller's KnobError / ControlError
            raise FabricError(f"fabric knobs: {exc}") from None
        wanted = self.fabric.pfc_priorities if settings.pfc else ()
        for node in self.fabric.switches:
            node.apply_port_models(wanted, settings.watchdog_for(getattr(node, "name", None), self.fabric.watchdog_s))
        return True

    def run_phase(self, name, job, settings, out=None, faults=()):
        """Run `job` (a job dict) under `settings`; writes OUT/summary.json and returns it."""
        from testbed.net import plots, summary, telemetry
        from traffic.job import parse_job

        out = Path(out or self.out)
        (out / "ranks").mkdir(parents=True, exist_ok=True)
        self._no_dead_switch()
        try:
            applied = self.apply(settings)
        except FabricError:
            self._no_dead_switch()  # a switch that died explains a failed knob better
            raise
        self.log(f"*** {name}: {job['pattern']} of {', '.join(str(s) for s in job['sizes'])} B on "
                 f"{len(job['ranks'])} ranks, {settings.hash} hashing, {job['qps_per_connection']} QP(s) per "
                 f"connection" + ("" if applied else " (fabric knobs not applied: no P4 pipeline on this target)"))
        virtual = self.clock == "virtual"
        self.settle(settings)
        telemetry.reset_watermarks(self.fabric)
        before = telemetry.snapshot(self.fabric)
        sampler = (self.fabric.queue_sampler() if virtual else telemetry.QueueSampler(self.fabric)).start()
        started = time.time()
        t0 = time.monotonic()
        sim_t0 = self.fabric.clock() if virtual else None
        faults_before = len(self.fabric.fault_log) if virtual else 0     # the fabric's log spans every phase
        try:
            if virtual:
                outcome = self.fabric.run_ranks(job, out / "ranks", faults=faults)
            else:
                outcome = run_ranks(self.fabric, job, out / "ranks")
        finally:
            samples = sampler.stop()
        # The traffic is over: Ctrl-C now waits until its report is written whole (a second
        # Ctrl-C does not), then ends the run as it would have.
        written = False
        try:
            with interruptions_held():
                reports = outcome.reports
                wall = time.monotonic() - t0
                duration = self.fabric.clock() - sim_t0 if virtual else wall
                after = telemetry.snapshot(self.fabric)
                rows = telemetry.queue_rows(self.clos.switches, before, after, sampler.max_depths())
                config = {"topology": _topology(self.clos.spec),
                          "fabric": {**_settings(settings), **self._port_config(), "applied": applied,
                                     "effective": self._effective_knobs()},
                          "job": _job_config(job)}
                result = summary.build(name, self.target, config, self.clos, parse_job(job), reports, before, after, rows,
                                       duration, started, faults=outcome.faults, interrupted=outcome.interrupted_by,
                                       clock=self.clock)
                if virtual:
                    # where this phase lies on the simulated clock: the per-port captures hold
                    # every phase of a run in one file each, timestamped on this clock
                    result["sim_start_s"] = round(sim_t0, 9)
                    result["sim_end_s"] = round(sim_t0 + duration, 9)
                    result["fault_events"] = self.fabric.fault_log[faults_before:]
                    # a fault timed after the run ended never happens: say so (`@10s` for `@10us`)
                    fired, missed = [e["fault"] for e in result["fault_events"]], []
                    for fault in map(str, faults):
                        if fault in fired:
                            fired.remove(fault)
                        else:
                            missed.append(fault)
                    result["faults_not_reached"] = missed
                    for fault in missed:
                        self.log(f"*** {name}: --fault {fault} not reached: the run ended {duration * 1e6:.0f} us after "
                                 "the traffic started")
                    # what switches noticed since the last phase's report (its settling included),
                    # so no event is lost between phases and none is reported twice
                    events = self.fabric.switch_events
                    result["switch_events"] = events[self._switch_events_reported:]
                    self._switch_events_reported = len(events)
                    # Everything else is a function of the run's arguments and seed; this block is not.
                    result["wall_clock"] = {"started": result.pop("started"), "elapsed_s": round(wall, 3),
                                            "boot_s": round(self.fabric.timings.get("boot_s", 0.0), 3),
                                            "events": self.fabric.scheduler.events,
                                            "events_per_s": round(self.fabric.scheduler.events / max(wall, 1e-9))}
                result["buffers"] = telemetry.buffer_status(self.fabric)
                # an interrupted run is written at once: plots are for runs that ended by themselves
                result["plots"] = [] if outcome.interrupted else plots.all_plots(result, samples, out)
                with open(out / "queue_samples.json", "w") as f:
                    json.dump(samples, f)
                self._write(out, result)
                self.summaries.append((out, result))
                written = True
        except (KeyboardInterrupt, Terminated):
            if written and outcome.interrupted is None:
                self.log(f"*** {name}: interrupted after its traffic; summary in {out / 'summary.json'}")
            raise
        if outcome.interrupted is not None:
            self.log(f"*** {name}: interrupted ({outcome.interrupted_by}); summary in {out / 'summary.json'}")
            raise outcome.interrupted
        for fault in outcome.faults:
            self.log(f"*** {name}: failed: {fault}")
        c = result["collective"]
        busbw = rate_text(c["busbw_gbps"] * 1000, "{:.3f}") if c["busbw_gbps"] else "-"
        self.log(f"*** {name}: {c['status']}; time {c['time_us']} us, busbw {busbw}; summary in {out / 'summary.json'}")
        self._quiet_due = virtual
        return result

    def _no_dead_switch(self):
        """Before a phase: a switch process that died (between phases, or while the knobs were
        set) ends the run here, named, rather than as a controller timeout or rank failures.
        Virtual time has no processes to die (its faults are events: --fault)."""
        if getattr(self.fabric, "clock_kind", "real") == "virtual":
            return
        from testbed.net.fabric_errors import SwitchStartError
        from testbed.net.watchdog import Watchdog
        faults = Watchdog(self.fabric).check(force=True)
        if faults:
            raise SwitchStartError("; ".join(faults))

    def _effective_knobs(self):
        """What the switches hold, read back through the controller (None without one)."""
        ctl = self.fabric.controller
        if ctl is None:
            return None
        k = ctl.get_knobs(self.clos.leaves[0].name)
        return {"hash_mode": k.hash_mode, "qp_aware": k.qp_aware, "flowlet_gap_us": k.flowlet_gap_us,
                "ecn": {str(p): asdict(e) for p, e in k.ecn.items()},
                "pfc": {str(p): asdict(c) for p, c in k.pfc.items()}, "pfc_pause_us": k.pfc_pause_us}

    def _port_config(self):
        from testbed.net.port_model import PortModel
        model = PortModel(rate_mbps=0, **self.fabric.port_defaults).as_dict()
        del model["rate_mbps"]  # per link: in "links" and "scale"
        return model

    @staticmethod
    def _write(out, result):
        # Whole or not at all: a reader (or a Ctrl-C) never sees half a summary.
        path = Path(out) / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)

    def _finish_summaries(self):
        # The switches flush their captures when they stop: list them afterwards.
        pcap_dir = self.fabric.pcap_dir
        for out, result in self.summaries:
            if pcap_dir and Path(pcap_dir).is_dir():
                result["pcap_dir"] = os.path.relpath(pcap_dir, out)
                result["pcaps"] = sorted(p.name for p in Path(pcap_dir).glob("*.pcap"))
                self._write(out, result)


class RankOutcome:
    """What run_ranks saw: the ranks' reports (rank order), the watchdog's faults (a dead
    switch or rank, which ended the phase early) and the Ctrl-C/SIGTERM that ended it, if any."""

    def __init__(self, reports, faults=(), interrupted=None):
        self.reports = reports
        self.faults = list(faults)
        self.interrupted = interrupted

    @property
    def interrupted_by(self):
        exc = self.interrupted
        if exc is None:
            return None
        return "SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc).removeprefix("received ")


def run_ranks(fabric, job, out_dir):
    """Every rank as `rocelab traffic run` in its host; returns a :class:`RankOutcome`.

    A rank that does not finish within the job's timeout (plus a margin) is stopped and
    reported as such; a rank that wrote no report is reported with the end of its log.
    The watchdog ends the phase as soon as a switch or rank process dies; Ctrl-C or
    SIGTERM end it too, after the ranks were stopped and their reports read."""
    from testbed.net.lifecycle import Terminated
    from testbed.net.watchdog import Watchdog
    out_dir = Path(out_dir)
    job_path = out_dir / "job.json"
    with open(job_path, "w") as f:
        json.dump(job, f, indent=1)
    ranks = []
    watchdog = Watchdog(fabric)
    interrupted = None
    try:
        # Inside the try: a Ctrl-C while the ranks start is an interrupted phase (a summary),
        # as one later is; each start and its record are one step it cannot split.
        for rank, r in enumerate(job["ranks"]):
            cmd = [sys.executable, "-m", "testbed.cli", "traffic", "run", "--job", str(job_path), "--rank",
                   str(rank), "--out", str(out_dir / f"rank{rank}.json")]
            with signals_deferred():
                ranks.append((rank, r, _start_in_host(fabric, fabric.host(r["host"]), cmd,
                                                      out_dir / f"rank{rank}.log")))
        watchdog.ranks = [(rank, r["host"], (lambda p=proc: _running(p)), out_dir / f"rank{rank}.json")
                          for rank, r, proc in ranks]
        deadline = time.monotonic() + job["timeout_s"] + 15
        while any(_running(p) for _, _, p in ranks) and time.monotonic() < deadline:
            if watchdog.check():
                break
            time.sleep(0.05)
        watchdog.check(force=True)  # a switch that died as the ranks gave up is still named
    except (KeyboardInterrupt, Terminated) as exc:
        interrupted = exc
    finally:
        _stop_ranks([proc for _, _, proc in ranks])
    reports = []
    started = {rank for rank, _, _ in ranks}
    for rank, r in enumerate(job["ranks"]):
        if rank not in started:
            reports.append({"rank": rank, "host": r["host"], "status": "interrupted", "results": [], "counters": {},
                            "error": "not started: the run was interrupted first"})
            continue
        report = _read_report(out_dir, rank, r)
        if interrupted is not None and report["error"].startswith("no report:") and report["status"] == "error":
            report["status"] = "interrupted"      # stopped by the Ctrl-C before it could write one
        mine = [f for f in watchdog.faults if f.startswith(f"rank {rank} (")]
        if mine:
            report["status"], report["error"] = "error", f"{mine[0]}; {report.get('error')}"
        reports.append(report)
    return RankOutcome(reports, watchdog.faults, interrupted)


def _stop_ranks(procs, timeout=1.0):
    """SIGTERM every rank still running (they write their reports), SIGKILL after `timeout`."""
    import signal as signals
    running = [p for p in procs if _running(p)]
    for pid, _start in running:
        try:
            os.kill(pid, signals.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in running) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in running:
        if _running(proc):
            stop_process(proc[0], timeout=0.1)


def _start_in_host(fabric, node, cmd, log_path):
    """Start `cmd` in the background of the host's own shell; returns (pid, start time).

    Not node.popen(): that forks this process, whose gRPC threads (the controller's
    channels) do not survive a fork; the host shell was forked before any of them existed.
    The PID is recorded in the run's ledger, and teardown kills everything in the host's
    namespace anyway."""
    from testbed.cleanup import proc_start_time
    out = node.cmd(f"{shlex.join(cmd)} >{shlex.quote(str(log_path))} 2>&1 </dev/null & echo rocelab-pid=$!")
    found = re.search(r"rocelab-pid=(\d+)", out)
    if not found:
        raise FabricError(f"{node.name}: could not start the traffic rank: {out.strip()}")
    pid = int(found.group(1))
    if fabric.ledger is not None:
        fabric.ledger.add("pid", pid, node=node.name, role="rank")
    return pid, proc_start_time(pid)


def _running(proc):
    pid, start = proc
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == start


def _read_report(out_dir, rank, r):
    try:
        with open(out_dir / f"rank{rank}.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        try:
            tail = (out_dir / f"rank{rank}.log").read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        return {"rank": rank, "host": r["host"], "status": "error", "results": [], "counters": {},
                "error": f"no report: {' | '.join(tail) or 'empty log'}"}


def _topology(spec):
    return {k: v for k, v in asdict(spec).items() if k not in ("grpc_base_port", "thrift_base_port")}


def _settings(settings):
    ecn = settings.ecn
    if ecn not in (None, CONTROLLER_DEFAULT):
        ecn = dict(zip(("kmin", "kmax", "pmax"), ecn))
    return {"hash": settings.hash, "flowlet_gap_us": settings.flowlet_gap_us, "pfc": settings.pfc, "ecn": ecn,
            "pfc_headroom": settings.pfc_headroom, "watchdog_s": settings.watchdog_s}


def _job_config(job):
    keys = ("pattern", "sizes", "iterations", "warmup", "channels", "qps_per_connection", "chunk_bytes", "timeout_s")
    return {**{k: job[k] for k in keys}, "cts": job["cts"]["enabled"], "dcqcn": job["dcqcn"]["enabled"],
            "line_rate_mbps": job["nic"]["line_rate_mbps"], "mtu": job["nic"]["mtu"],
            "ranks": [r["host"] for r in job["ranks"]]}


def guarded(prog, boot_and_run):
    """Call boot_and_run() (which boots, runs and tears down); None when it returned, else
    the exit status for what went wrong, printed as one line (never a traceback):
    2 bad request or machine, 1 a switch did not start, 130 Ctrl-C, 143/129 SIGTERM/SIGHUP."""
    from testbed.net.lifecycle import Terminated
    from testbed.net.fabric_errors import SwitchStartError
    try:
        boot_and_run()
        return None
    except (FabricError, ExperimentError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SwitchStartError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; torn down", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"{prog}: {exc}; torn down", file=sys.stderr)
        return exc.exit_status


# --- tables ---------------------------------------------------------------------------

def nccl_table(result):
    """An nccl-tests-style table of a phase's collective (the slowest rank's time per size)."""
    c, cfg = result["collective"], result["config"]
    line = cfg["job"]["line_rate_mbps"]
    scale = result["scale"]
    # virtual time runs the production rate itself; real time says how much slower its links are
    clock = ("virtual time" if result.get("clock") == "virtual"
             else f"x{scale['time_dilation']:g} slower than {scale['production_link_gbps']:g}G")
    # the last column in the line rate's unit: lab links run megabits, where GB/s reads as 0.00049
    unit, per = rate_unit(line)
    lines = [f"# {result['name']}: {c['pattern']}  nranks {c['ranks']}  hash {cfg['fabric']['hash']}  "
             f"qps/conn {cfg['job']['qps_per_connection']}  pfc {'on' if cfg['fabric']['pfc'] else 'off'}  "
             f"line {rate_text(line)}  ({clock})",
             f"# {'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'time':>11} {'algbw':>8} {'busbw':>8} "
             f"{'busbw':>8}",
             f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>11} {'(GB/s)':>8} {'(GB/s)':>8} "
             f"{'(' + unit + ')':>8}"]
    for row in c["rows"]:
        lines.append(f"  {row['size_bytes']:>12} {row['size_bytes'] // 4:>12} {'float':>6} {'sum':>6} "
                     f"{row['time_us']:>11.1f} {row['algbw_GBps']:>8.5f} {row['busbw_GBps']:>8.5f} "
                     f"{row['busbw_gbps'] * 1000 / per:>8.3f}")
    oos = sum(h["oos"] for h in result["hosts"])
    pfc = sum(q["pfc_tx"] for q in result["queues"])
    drops = sum(q["drops"] for q in result["queues"])
    headroom = sum(q.get("headroom_drops", 0) for q in result["queues"])
    storms = sum(q.get("watchdog_storms", 0) for q in result["queues"])
    lines.append(f"# status {c['status']}; OOS {oos}, switch PFC frames sent {pfc}, queue drops {drops}, "
                 f"headroom drops {headroom}, PFC watchdog storms {storms}")
    return "\n".join(lines)


# --- the demo ---------------------------------------------------------------------------

DEMO_SHAPE = dict(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=10.0, oversubscription=2.0)
DEMO_SIZE = 1 << 20
DEMO_QPS = 4
# Virtual time runs the same demo at production units: 400G hosts, 200G uplinks, MTU 4096, and
# a 16 MB AllReduce (1 MB at 400G is over in tens of microseconds, mostly start-up).
DEMO_VIRTUAL = dict(link_rate_mbps=400_000.0, size=16 << 20, mtu=4096)


def demo(target="engine", out=None, size=None, name_prefix=None, grpc_base_port=50000, state_dir=None,
         clock="real", seed=0):
    """`make demo`: ring AllReduce with 5-tuple hashing (1 QP per connection), then QPN-aware
    hashing with QP scaling, on one booted 2x2x2 Clos; tables, plots and pcaps under OUT.

    The uplinks are 2:1 oversubscribed (5 Mb/s each for 10 Mb/s hosts in real time, 200G for
    400G in virtual time) so that where the flows land matters: a ring connection that crosses
    the spines on one uplink runs at half the host rate, one spread over both spines can run
    at full rate."""
    from testbed import REPO_ROOT
    from testbed.clos import ClosSpec, TopologyError, build

    prog = "rocelab demo"
    virtual = clock == "virtual"
    if not virtual and os.geteuid() != 0:
        print(f"{prog}: must run as root (Mininet creates namespaces and veths); try sudo, "
              "or --clock virtual", file=sys.stderr)
        return 1
    out = Path(out or REPO_ROOT / "runs" / time.strftime(f"demo-{clock}-%Y%m%d-%H%M%S"))
    shape = dict(DEMO_SHAPE, link_rate_mbps=DEMO_VIRTUAL["link_rate_mbps"]) if virtual else DEMO_SHAPE
    size = size or (DEMO_VIRTUAL["size"] if virtual else DEMO_SIZE)
    mtu = DEMO_VIRTUAL["mtu"] if virtual else 1024
    try:
        clos = build(ClosSpec(**shape, grpc_base_port=grpc_base_port, clock=clock))
        phases = [("5tuple", FabricSettings(hash="5tuple"),
                   job_for(clos, "ring_allreduce", [size], qps_per_connection=1, name="ring-5tuple", mtu=mtu)),
                  ("qpn", FabricSettings(hash="qpn"),
                   job_for(clos, "ring_allreduce", [size], qps_per_connection=DEMO_QPS, name="ring-qpn", mtu=mtu))]
    except (TopologyError, ExperimentError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    options = {} if virtual else dict(name_prefix=name_prefix, state_dir=state_dir)
    experiment = Experiment(clos, target=target, out=out, clock=clock, seed=seed, **options)
    try:
        experiment.preflight()     # e.g. TARGET=bmv2 where BMv2 is not installed: one line, nothing written
    except FabricError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    print(f"*** rocelab demo on the {target} target in {clock} time: {clos.spec.spines} spines, "
          f"{clos.spec.leaves} leaves, {clos.spec.hosts_per_leaf} hosts per leaf; {rate_text(clos.spec.link_rate_mbps)} "
          f"host links, {rate_text(clos.spec.uplink_rate_mbps)} uplinks (2:1); output in {out}")
    out.mkdir(parents=True, exist_ok=True)
    results = []

    def both_phases():
        with experiment as exp:
            for name, settings, job in phases:
                results.append(exp.run_phase(name, job, settings, out / name))

    status = guarded(prog, both_phases)
    if status is not None:
        return status
    text = "\n\n".join(nccl_table(r) for r in results)
    if len(results) == 2 and all(r["collective"]["busbw_gbps"] for r in results):
        speedup = results[1]["collective"]["busbw_gbps"] / results[0]["collective"]["busbw_gbps"]
        text += f"\n\n# QPN hashing + {DEMO_QPS} QPs/connection vs 5-tuple with 1 QP: busbw x{speedup:.2f}"
        if not virtual:
            text += ("\n# (real time: software switches and NICs share this machine's CPUs, so this ratio moves "
                     "with its load;\n#  `rocelab demo --clock virtual` gives the fabric's own figure, the same on "
                     "every machine)")
    (out / "demo.txt").write_text(text + "\n")
    print(text)
    print(f"\n*** wrote {out}: demo.txt; per phase ({', '.join(r['name'] for r in results)}): summary.json, "
          f"{', '.join(results[0]['plots'])}, ranks/; pcap/ ({len(results[-1].get('pcaps', []))} per-port captures "
          "for Wireshark or tshark)")
    return 0 if all(r["collective"]["status"] == "ok" for r in results) else 1
