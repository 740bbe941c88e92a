"""`rocelab lab NAME`: run one guided lab (several experiments on one booted fabric), print
its comparison table, write OUT/lab.json and OUT/lab.png (each phase in OUT/<phase>/).

    sudo rocelab lab ecmp --out runs/lab-ecmp
    sudo rocelab lab incast --quick

Labs: ecmp, qpscaling, te, incast, flowlet (`rocelab lab list`); guides in topologies/labs/.
Exit status: 0 when every phase's collective completed, 1 when one failed or a switch did
not start, 2 for bad arguments, 130 after Ctrl-C.
"""
import argparse
import importlib
import time

from testbed.argtypes import output_dir, tcp_port

# lab name -> (module, one-line help); modules are imported only when a lab runs
LABS = {
    "ecmp": ("testbed.labs.ecmp", "ECMP low-entropy collisions: max/mean uplink load under 5-tuple hashing"),
    "qpscaling": ("testbed.labs.qpscaling", "E-ECMP (5-tuple + dest QP) with QP scaling: AllReduce busbw"),
    "te": ("testbed.labs.te", "centralized TE: CSPF exact-match overrides vs ECMP on a colliding matrix"),
    "incast": ("testbed.labs.incast", "16:1 incast, PFC only vs receiver-driven CTS: queues, pauses"),
    "flowlet": ("testbed.labs.flowlet", "flowlet switching: out-of-order packets vs the flowlet gap"),
}


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    labs = p.add_subparsers(dest="lab", metavar="LAB")
    labs.add_parser("list", help="the labs and what each shows").set_defaults(func=list_labs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=output_dir, default=None, metavar="DIR", help="output directory (default runs/lab-NAME-<time>)")
    common.add_argument("--quick", action="store_true", help="fewer, smaller phases (a first look, ~1 min)")
    common.add_argument("--target", choices=("engine", "bmv2"), default="engine",
                        help="switch target (the labs need the P4 knobs; default engine)")
    common.add_argument("--no-pcap", action="store_true", help="no per-port captures")
    common.add_argument("--name-prefix", default=None, metavar="PREFIX",
                        help="short unique switch interface names (parallel runs, tests); 1-7 letters/digits")
    common.add_argument("--grpc-base-port", type=tcp_port, default=50000, help="switch N serves P4Runtime on BASE+N")
    for lab, (_module, lab_help) in LABS.items():
        q = labs.add_parser(lab, parents=[common], help=lab_help, description=lab_help)
        q.set_defaults(func=run)
    p.set_defaults(func=lambda args: p.print_help() or 0)


def list_labs(_args):
    for lab, (_module, lab_help) in LABS.items():
        print(f"{lab:10} {lab_help}")
    print("guides: topologies/labs/<lab>.md; run one with: sudo rocelab lab <lab> [--quick] [--out DIR]")
    return 0


def load(name):
    return importlib.import_module(LABS[name][0]).LAB


def run(args):
    from testbed import REPO_ROOT
    from testbed.labs.base import LabError, build_clos, run_lab
    from testbed.net import options
    from testbed.net.experiment import ExperimentError, guarded

    prog = f"rocelab lab {args.lab}"
    lab = load(args.lab)
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
    out = args.out or str(REPO_ROOT / "runs" / time.strftime(f"lab-{args.lab}-%Y%m%d-%H%M%S"))
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
