"""`rocelab lab NAME`: run one guided lab and print its comparison table.

Virtual time (the default): the lab runs at production units (400G, the paper's buffers and
thresholds) on the simulated clock, once per seed (--seeds, default 3), and writes
OUT/index.html (the paper's figure beside ours, plots, per-seed tables, captures),
OUT/lab.json and OUT/seedN/<phase>/. No root needed.

    rocelab lab ecmp --out runs/lab-ecmp
    rocelab lab all --quick --out runs/labs        # every lab, one index page

Each seed is a point of the project's Dask sweep layer (testbed/sweep/labpoint.py): by default
on a LocalCluster of one single-threaded worker per core on 127.0.0.1 (`--workers N`), or on
an existing cluster (`--scheduler tcp://HOST:PORT`, as for `rocelab sweep`); `--workers 1`
runs them in this process. Virtual time is deterministic: the same lab.json findings whatever
the workers. `lab all` sends every lab's seeds at once, the longest first.

Real time (--clock real): today's hands-on version at megabit rates in Mininet (root):
OUT/lab.json and OUT/lab.png, each phase in OUT/<phase>/.

    sudo .venv/bin/rocelab lab incast --clock real --quick

Labs: `rocelab lab list`; guides in topologies/labs/.
Exit status: 0 when every phase's collective completed, 1 when one failed or a switch did
not start, 2 for bad arguments, 130 after Ctrl-C.
"""
import argparse
import importlib
import time

from testbed.argtypes import output_dir, tcp_port, whole

# lab name -> (module, one-line help); modules are imported only when a lab runs
LABS = {
    "ecmp": ("testbed.labs.ecmp", "ECMP low-entropy collisions: max/mean uplink load under 5-tuple hashing"),
    "qpscaling": ("testbed.labs.qpscaling", "E-ECMP (5-tuple + dest QP) with QP scaling: AllReduce busbw"),
    "te": ("testbed.labs.te", "centralized TE: CSPF exact-match overrides vs ECMP on a colliding matrix"),
    "incast": ("testbed.labs.incast", "16:1 incast, PFC only vs receiver-driven CTS: queues, pauses"),
    "flowlet": ("testbed.labs.flowlet", "flowlet switching: out-of-order packets vs the flowlet gap"),
    "ecn": ("testbed.labs.ecn", "ECN thresholds with DCQCN: relaxed 5 MB vs tight 300/600 KB (virtual time)"),
    "subscription": ("testbed.labs.subscription", "1:1 static vs 1:2 vs 1:2 + TE vs 1:1.125 + TE (virtual time)"),
    "watchdog": ("testbed.labs.watchdog", "PFC watchdog (200 ms): a NIC storming PFC, a PFC deadlock (virtual time)"),
}
MAX_SEEDS = 64
DEFAULT_SEEDS = 3
# A seed's wall time relative to ecmp's (--quick, serial, 2026-11-24; watchdog estimated): `lab
# all` starts the longest seeds first, so the short ones fill the cores at the end. Order only:
# no figure depends on it; a lab missing here counts as 1.
RELATIVE_COST = {"ecmp": 1.0, "incast": 2.2, "qpscaling": 2.8, "watchdog": 3.0, "ecn": 5.0, "flowlet": 6.4,
                 "te": 6.5, "subscription": 7.7}


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    labs = p.add_subparsers(dest="lab", metavar="LAB")
    labs.add_parser("list", help="the labs and what each shows").set_defaults(func=list_labs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=output_dir, default=None, metavar="DIR", help="output directory (default runs/lab-NAME-<time>)")
    common.add_argument("--quick", action="store_true", help="fewer, smaller phases (a first look: 1-3 min a lab on 2 cores, lab all ~8 min)")
    common.add_argument("--clock", choices=("virtual", "real"), default="virtual",
                        help="virtual: production units on a simulated clock, deterministic per seed (default); "
                             "real: the hands-on version in Mininet at megabit rates (root)")
    common.add_argument("--seeds", type=whole(1, MAX_SEEDS), default=None, metavar="N",
                        help="virtual time: run the lab with seeds 1..N (default 3)")
    common.add_argument("--workers", type=whole(1, 1024), default=None, metavar="N",
                        help="virtual time: seeds run on a local Dask cluster of N single-threaded workers on "
                             "127.0.0.1 (default one per core); 1 runs them in this process")
    common.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="virtual time: run the seeds on this existing Dask scheduler's workers "
                             "(as rocelab sweep --scheduler)")
    common.add_argument("--target", choices=("engine", "bmv2"), default="engine",
                        help="switch target (the labs need the P4 knobs; default engine)")
    common.add_argument("--no-pcap", action="store_true", help="no per-port captures")
    common.add_argument("--name-prefix", default=None, metavar="PREFIX",
                        help="short unique switch interface names (parallel runs, tests); 1-7 letters/digits")
    common.add_argument("--grpc-base-port", type=tcp_port, default=50000, help="switch N serves P4Runtime on BASE+N")
    for lab, (_module, lab_help) in LABS.items():
        q = labs.add_parser(lab, parents=[common], help=lab_help, description=lab_help)
        q.set_defaults(func=run)
    q = labs.add_parser("all", parents=[common], help="every lab in virtual time, one index page",
                        description="every lab in virtual time; OUT/<lab>/index.html each and OUT/index.html")
    q.set_defaults(func=run_all)
    p.set_defaults(func=lambda args: p.print_help() or 0)


def list_labs(_args):
    width = max(len(lab) for lab in LABS)
    for lab, (_module, lab_help) in LABS.items():
        print(f"{lab:{width}}  {lab_help}")
    print("guides: topologies/labs/<lab>.md; run one with: rocelab lab <lab> [--quick] [--out DIR] "
          "(virtual time, no root; sudo ... --clock real for the hands-on version)")
    return 0


def load(name, clock="real"):
    """The lab object for `clock`; None when the lab has no version for that clock."""
    module = importlib.import_module(LABS[name][0])
    return getattr(module, "VIRTUAL" if clock == "virtual" else "LAB", None)


def command_line(args, lab_name=None):
    """The exact command that makes this output again."""
    parts = ["rocelab", "lab", lab_name or args.lab]
    if args.quick:
        parts.append("--quick")
    if args.clock != "virtual":
        parts += ["--clock", args.clock]
    elif args.seeds != DEFAULT_SEEDS:
        parts += ["--seeds", str(args.seeds)]
    if args.no_pcap:
        parts.append("--no-pcap")
    if args.out:
        parts += ["--out", str(args.out)]
    return " ".join(parts)


def _clock_options(prog, args):
    """A one-line refusal (exit status) of an option the chosen clock would silently ignore,
    else None; sets the default seed count."""
    if args.clock == "virtual":
        args.seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
        if args.target != "engine":
            return _fail(prog, f"--target {args.target}: virtual time runs the engine target only "
                               "(--clock real for BMv2)")
        return None
    given = [name for name, value in (("--seeds", args.seeds), ("--workers", args.workers),
                                      ("--scheduler", args.scheduler)) if value is not None]
    if given:
        return _fail(prog, f"{', '.join(given)}: virtual time only (a real-time lab runs once, in Mininet)")
    return None


def run(args):
    prefix = args.name_prefix
    if prefix is not None and not (prefix.isalnum() and 1 <= len(prefix) <= 7):
        return _fail(f"rocelab lab {args.lab}", f"--name-prefix {prefix!r} must be 1-7 letters or digits")
    refused = _clock_options(f"rocelab lab {args.lab}", args)
    if refused is not None:
        return refused
    if args.clock == "virtual":
        return run_virtual_lab(args)
    return run_real(args)


def _out(args, name):
    from testbed import REPO_ROOT
    return args.out or str(REPO_ROOT / "runs" / time.strftime(f"lab-{name}-%Y%m%d-%H%M%S"))


def _where(prog, args):
    """(scheduler, workers) for the seeds, or the exit status of a one-line refusal."""
    from testbed.sweep.cluster import ClusterError, check_address
    if args.scheduler and args.workers:
        return _fail(prog, "--workers sizes the local cluster; with --scheduler the cluster's own workers run")
    if args.scheduler:
        try:
            check_address(args.scheduler)
        except ClusterError as exc:
            return _fail(prog, str(exc))
    return args.scheduler, args.workers


def _on_seeds(prog, run):
    """run() (which runs seeds through the sweep layer) with SIGTERM/SIGHUP as exceptions, so a
    local cluster is closed on the way out; None when it returned, else the exit status."""
    from testbed.net.experiment import guarded
    from testbed.net.lifecycle import termination_as_exception
    from testbed.sweep.cluster import ClusterError
    try:
        with termination_as_exception():
            return guarded(prog, run)
    except ClusterError as exc:
        return _fail(prog, str(exc))


def run_virtual_lab(args):
    from testbed.labs.seeds import default_seeds
    from testbed.labs.virtual import LabInterrupted, run_virtual, table

    prog = f"rocelab lab {args.lab}"
    lab = load(args.lab, "virtual")
    if lab is None:
        return _fail(prog, f"lab {args.lab} has no virtual-time version; use --clock real")
    where = _where(prog, args)
    if isinstance(where, int):
        return where
    scheduler, workers = where
    from testbed.labs.base import LabError, build_clos
    try:
        lab.phases(build_clos(lab, args.quick), args.quick)  # validate before booting
    except (LabError, ValueError) as exc:
        return _fail(prog, str(exc))
    out = _out(args, args.lab)
    results = []

    def run_seeds():
        try:
            results.append(run_virtual(
                lab, out, quick=args.quick, seeds=default_seeds(args.seeds), pcap=not args.no_pcap,
                command=command_line(args), scheduler=scheduler, workers=workers, name=args.lab))
        except LabInterrupted as exc:
            results.append(exc)
    status = _on_seeds(prog, run_seeds)
    if status is not None:
        return status
    if isinstance(results[0], LabInterrupted):      # Ctrl-C: one line, saying where the finished seeds are
        import sys
        kept = results[0].result
        n = sum(d["status"] in ("ok", "failed") for d in kept["seeds_detail"]) if kept else 0
        print(f"{prog}: interrupted; {n} of {args.seeds} seeds kept" +
              (f" in {out} (index.html, lab.json)" if kept else ""), file=sys.stderr)
        return 130
    result = results[0]
    if result is None:
        import sys
        print(f"{prog}: no seed produced a result; their logs are in {out}/errors/", file=sys.stderr)
        return 1
    print()
    print(table(lab, result))
    print(f"*** wrote {out}: index.html (open it in a browser), lab.json, "
          f"{', '.join(p['file'] for p in result['plots'])}; per seed: seedN/<phase>/ (summary.json, plots, ranks/)")
    return _status(result)


def _status(result):
    """0 when every seed ran and every phase's collective ended as expected, else 1 (a phase may
    be meant to fail: the watchdog lab's deadlock without a watchdog never completes)."""
    details = result["seeds_detail"]
    ran = all(d.get("status", "ok") in ("ok", "failed") for d in details)
    return 0 if ran and all(r["status"] == r.get("expect_status", "ok") for d in details
                            for r in d["phases"]) else 1


def _fail(prog, message):
    import sys
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def run_all(args):
    """Every lab that has a virtual-time version, one index page. Every lab's seeds go to the
    workers at once, the longest first (so no core idles at the end); each lab's page is
    written as soon as its last seed is in."""
    import sys
    from pathlib import Path
    from testbed.labs import report
    from testbed.labs.seeds import default_seeds
    from testbed.labs.virtual import finish, seed_line, seed_points
    from testbed.sweep.api import run_here_or_on_cluster
    from testbed.sweep.runner import Interrupted

    prog = "rocelab lab all"
    if args.clock != "virtual":
        return _fail(prog, "--clock real: run the real-time labs one at a time (rocelab lab NAME --clock real)")
    refused = _clock_options(prog, args)
    if refused is not None:
        return refused
    where = _where(prog, args)
    if isinstance(where, int):
        return where
    scheduler, workers = where
    out = Path(_out(args, "all"))
    t0 = time.monotonic()
    labs = {name: lab for name, lab in ((name, load(name, "virtual")) for name in LABS) if lab is not None}
    points = {name: seed_points(lab, out / name, args.quick, default_seeds(args.seeds), not args.no_pcap, name=name)
              for name, lab in labs.items()}
    finished = {name: {} for name in labs}
    done = {}           # name -> (result or None, error or None)

    def command(name):
        return command_line(args, name).replace(f"--out {args.out}", f"--out {out / name}")

    def finish_lab(name, results, interrupted=False):
        try:
            result = finish(labs[name], out / name, args.quick, results, command(name), t0, interrupted=interrupted)
        except Exception as exc:        # one lab's fault must not lose the others' pages
            print(f"{prog}: {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            done[name] = (None, f"{type(exc).__name__}: {exc}")
            return
        if result is None:
            done[name] = (None, "; ".join(f"seed {r.point.seed}: {r.status}: {r.error}" for r in results))
            print(f"{prog}: {name}: no seed produced a result", file=sys.stderr)
            return
        kept = sum(1 for r in results if r.summary is not None)
        done[name] = (result, f"interrupted after {kept} of {len(results)} seeds (their figures: {name}/index.html)"
                      if interrupted else None)
        for f in result["findings"]:
            print(f"*** {name}: {f['text']}")

    def on_result(r):
        print(seed_line(r), flush=True)
        name = r.point.lab_name
        finished[name][r.point.seed] = r
        if len(finished[name]) == len(points[name]):
            finish_lab(name, [finished[name][p.seed] for p in points[name]])

    order = sorted((p for ps in points.values() for p in ps), key=lambda p: -RELATIVE_COST.get(p.lab_name, 1.0))
    interrupted = []

    def run_everything():
        try:
            run_here_or_on_cluster(order, out, scheduler=scheduler, workers=workers, on_result=on_result)
        except Interrupted as exc:
            interrupted.append(exc.results)
            raise KeyboardInterrupt from None

    status = _on_seeds(prog, run_everything)
    if status == 2 and not done:
        return status       # refused before anything ran (an unreachable --scheduler): no page to write
    if interrupted:
        by_lab = {}
        for r in interrupted[0]:
            by_lab.setdefault(r.point.lab_name, []).append(r)
        for name, results in by_lab.items():
            if name not in done and any(r.summary is not None for r in results):
                finish_lab(name, results, interrupted=True)
    rows = []
    for name in labs:
        result, error = done.get(name, (None, f"exit status {status}" if status else "did not run"))
        rows.append((name, result if error is None else None, error))
    worst = max([status or 0] + [_status(r) if r is not None else 1 for r, _ in done.values()]
                + [1 for name in labs if name not in done])
    elapsed = time.monotonic() - t0
    report.write_index_page(rows, out, command_line(args, "all"), elapsed)
    print(f"*** lab all: {len(labs)} labs in {elapsed:.0f} s of wall time; open {out / 'index.html'}")
    return worst


def run_real(args):
    from testbed.labs.base import LabError, build_clos, run_lab
    from testbed.net import options
    from testbed.net.experiment import ExperimentError, guarded

    prog = f"rocelab lab {args.lab}"
    lab = load(args.lab, "real")
    if lab is None:
        return _fail(prog, f"lab {args.lab} runs in virtual time only (it needs the paper's units); drop --clock real")
    prefix = args.name_prefix
    if prefix is not None and not (prefix.isalnum() and 1 <= len(prefix) <= 7):
        return options.fail(prog, f"--name-prefix {prefix!r} must be 1-7 letters or digits")
    try:
        lab.phases(build_clos(lab, args.quick, args.grpc_base_port), args.quick)  # validate before booting
    except (LabError, ExperimentError) as exc:
        return options.fail(prog, str(exc))
    status = options.need_root(prog)
    if status:
        return status
    out = _out(args, args.lab)
    results = []

    def boot_and_run():
        results.append(run_lab(lab, out, quick=args.quick, target=args.target, name_prefix=prefix,
                               grpc_base_port=args.grpc_base_port, pcap=not args.no_pcap))

    status = guarded(prog, boot_and_run)
    if status is not None:
        return status
    result = results[0]
    print()
    print(lab.table(result))
    print(f"*** wrote {out}: lab.json{', ' + result['plot'] if result['plot'] else ''}; per phase: "
          f"{', '.join(r['dir'] + '/' for r in result['phases'])} (summary.json, plots, ranks/)"
          + ("" if args.no_pcap else "; pcap/ (per-port captures)"))
    return 0 if all(r["status"] == "ok" for r in result["phases"]) else 1
