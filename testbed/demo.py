"""The main demo (`make demo`): boots a small Clos on the chosen target, runs a RoCE
ring AllReduce with 5-tuple hashing and then with QPN hashing + QP scaling, and
writes the nccl-tests-style tables, per-link load plot and pcaps under runs/."""
import sys


def register(sub, name, help_text):
    from testbed.argtypes import output_dir
    p = sub.add_parser(name, help=help_text, description=__doc__)
    p.add_argument("--target", choices=("engine", "bmv2"), default="engine")
    p.add_argument("--out", type=output_dir, default=None, help="output directory (default runs/demo-<clock>-<time>)")
    p.add_argument("--clock", choices=("real", "virtual"), default="real",
                   help="real: Mininet and switch processes at 10 Mb/s (root; captures to open in Wireshark); "
                        "virtual: the same switches and NICs on a simulated clock at 400G, deterministic")
    p.add_argument("--seed", type=int, default=0, help="virtual time: the run's seed")
    p.set_defaults(func=run)


def run(args):
    try:
        from testbed.net import experiment
    except ImportError as exc:
        print(f"rocelab demo: the Clos experiment runner is not available yet ({exc})", file=sys.stderr)
        return 2
    if args.clock == "virtual" and args.target != "engine":
        print("rocelab demo: --clock virtual runs the engine target only", file=sys.stderr)
        return 2
    return experiment.demo(target=args.target, out=args.out, clock=args.clock, seed=args.seed)
