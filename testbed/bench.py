"""Benchmarks: figures printed side by side, never pass/fail assertions."""
import importlib
import sys

BENCHES = {
    "engine": ("testbed.p4engine.bench", "packets/s through a fabric-like pipeline, in-process"),
    "switch": ("testbed.switch.bench", "forwarded packets/s over veths: engine vs BMv2 vs Linux bridge"),
    "traffic": ("traffic.bench", "emulated-NIC send rate vs a plain Scapy sendp loop"),
    "boot": ("testbed.net.bench", "boot-to-pingall time and RSS per switch for a 2x4x8 Clos"),
    "sim": ("testbed.sim.bench", "virtual time: packet-hops per CPU s vs the engine; a 128-host Clos"),
    "sweep": ("testbed.sweep.bench", "an 8-point sweep: serial vs a LocalCluster, speedup and Dask's per-point overhead"),
    "labs": ("testbed.labs.bench", "rocelab lab all --quick: seeds in one process vs a LocalCluster (goal <= 10 min)"),
}


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__)
    p.add_argument("which", choices=list(BENCHES) + ["all"], help="which benchmark; all runs each in turn")
    p.add_argument("--quick", action="store_true", help="shorter runs (rough figures)")
    p.set_defaults(func=run)


def run(args):
    names = list(BENCHES) if args.which == "all" else [args.which]
    status = 0
    for name in names:
        module_name, what = BENCHES[name]
        print(f"== bench {name}: {what}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            print(f"   not available: {exc}", file=sys.stderr)
            status = 2
            continue
        status = module.main(quick=args.quick) or status
    return status
