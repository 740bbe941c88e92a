"""`rocelab lab NAME`: run one guided lab and print its comparison table.

Virtual time (the default): the lab runs at production units (400G, the paper's buffers and
thresholds) on the simulated clock, once per seed (--seeds, default 3), and writes
OUT/index.html (the paper's figure beside ours, plots, per-seed tables, captures),
OUT/lab.json and OUT/seedN/<phase>/. No root needed.

    rocelab lab ecmp --out runs/lab-ecmp
    rocelab lab all --quick --out runs/labs        # every lab, one index page

Real time (--clock real): today's hands-on version at megabit rates in Mininet (root):
OUT/lab.json and OUT/lab.png, each phase in OUT/<phase>/.

    sudo rocelab lab incast --clock real --quick

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


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    labs = p.add_subparsers(dest="lab", metavar="LAB")
    labs.add_parser("list", help="the labs and what each shows").set_defaults(func=list_labs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=output_dir, default=None, metavar="DIR", help="output directory (default runs/lab-NAME-<time>)")
    common.add_argument("--quick", action="store_true", help="fewer, smaller phases (a first look, ~1 min)")
    common.add_argument("--clock", choices=("virtual", "real"), default="virtual",
                        help="virtual: production units on a simulated clock, deterministic per seed (default); "
                             "real: the hands-on version in Mininet at megabit rates (root)")
    common.add_argument("--seeds", type=whole(1, MAX_SEEDS), default=3, metavar="N",
                        help="virtual time: run the lab with seeds 1..N (default 3)")
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
    for lab, (_module, lab_help) in LABS.items():
        print(f"{lab:10} {lab_help}")
    print("guides: topologies/labs/<lab>.md; run one with: sudo rocelab lab <lab> [--quick] [--out DIR]")
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
    elif args.seeds != 3:
        parts += ["--seeds", str(args.seeds)]
    if args.no_pcap:
        parts.append("--no-pcap")
    if args.out:
        parts += ["--out", str(args.out)]
    return " ".join(parts)


def run(args):
    prefix = args.name_prefix
    if prefix is not None and not (prefix.isalnum() and 1 <= len(prefix) <= 7):
        return _fail(f"rocelab lab {args.lab}", f"--name-prefix {prefix!r} must be 1-7 letters or digits")
    if args.clock == "virtual":
        return run_virtual_lab(args)
    return run_real(args)


def _out(args, name):
    from testbed import REPO_ROOT
    return args.out or str(REPO_ROOT / "runs" / time.strftime(f"lab-{name}-%Y%m%d-%H%M%S"))


def run_virtual_lab(args):
    from testbed.labs.seeds import default_seeds
    from testbed.labs.virtual import run_virtual, table
    from testbed.net.experiment import guarded

    prog = f"rocelab lab {args.lab}"
    lab = load(args.lab, "virtual")
    if lab is None:
        return _fail(prog, f"lab {args.lab} has no virtual-time version; use --clock real")
    from testbed.labs.base import LabError, build_clos
    try:
        lab.phases(build_clos(lab, args.quick), args.quick)  # validate before booting
    except (LabError, ValueError) as exc:
        return _fail(prog, str(exc))
    out = _out(args, args.lab)
    results = []
    status = guarded(prog, lambda: results.append(run_virtual(lab, out, quick=args.quick,
                                                              seeds=default_seeds(args.seeds),
                                                              pcap=not args.no_pcap, command=command_line(args))))
    if status is not None:
        return status
    result = results[0]
    print()
    print(table(lab, result))
    print(f"*** wrote {out}: index.html (open it in a browser), lab.json, "
          f"{', '.join(p['file'] for p in result['plots'])}; per seed: seedN/<phase>/ (summary.json, plots, ranks/)")
    return _status(result)


def _status(result):
    # a phase may be meant to fail (the watchdog lab's deadlock without a watchdog never completes)
    return 0 if all(r["status"] == r.get("expect_status", "ok") for d in result["seeds_detail"]
                    for r in d["phases"]) else 1


def _fail(prog, message):
    import sys
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def run_all(args):
    """Every lab that has a virtual-time version, one after another, and one index page."""
    import sys
    from pathlib import Path
    from testbed.labs import report
    from testbed.labs.seeds import default_seeds
    from testbed.labs.virtual import run_virtual
    from testbed.net.experiment import guarded

    if args.clock != "virtual":
        return _fail("rocelab lab all", "--clock real: run the real-time labs one at a time (rocelab lab NAME "
                                        "--clock real)")
    out = Path(_out(args, "all"))
    t0 = time.monotonic()
    done, worst = [], 0
    for name in LABS:
        lab = load(name, "virtual")
        if lab is None:
            continue
        results = []
        try:
            status = guarded(f"rocelab lab all ({name})",
                             lambda: results.append(run_virtual(lab, out / name, quick=args.quick,
                                                                seeds=default_seeds(args.seeds), pcap=not args.no_pcap,
                                                                command=command_line(args, name).replace(
                                                                    f"--out {args.out}", f"--out {out / name}"))))
        except Exception as exc:        # one lab's fault must not lose the others' pages
            print(f"rocelab lab all: {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
        if status is not None:
            done.append((name, None, f"exit status {status}"))
            worst = max(worst, status)
            if status in (130, 129, 143):     # Ctrl-C, SIGHUP, SIGTERM: the user wants it to stop
                break
            continue
        done.append((name, results[0], None))
        worst = max(worst, _status(results[0]))
        for f in results[0]["findings"]:
            print(f"*** {name}: {f['text']}")
    elapsed = time.monotonic() - t0
    report.write_index_page(done, out, command_line(args, "all"), elapsed)
    print(f"*** lab all: {len(done)} labs in {elapsed:.0f} s of wall time; open {out / 'index.html'}")
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
