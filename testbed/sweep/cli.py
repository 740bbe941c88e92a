"""`rocelab sweep`: a grid of virtual-time runs on Dask distributed.

    rocelab sweep --out sweeps/qps --seeds 3 --vary hash=5tuple,qpn --vary qps-per-conn=1,4,8 \\
        -- --spines 2 --leaves 2 --hosts-per-leaf 2 --size 1M
    rocelab sweep --spec sweep.yaml                 # the same as a file (YAML or JSON)
    rocelab sweep --scheduler tcp://10.0.0.5:8786 ...   # an existing cluster

Every point is exactly `rocelab run --clock virtual <options after --> --<knob> <value> --seed N`.
Writes DIR/points/<id>/ (each point's run directory), DIR/sweep.csv, DIR/sweep.json and
DIR/index.html. Rerunning the same command skips the points already complete.
Exit status: 0 every point ok, 1 some point failed or could not run, 2 bad input (nothing
started), 130 Ctrl-C (finished points kept, sweep.json says "interrupted").

Spec file keys: out, scheduler, workers, seeds (N or a list), vary ({knob: [values]}),
options (a list or a string of `rocelab run` options), max_points, pcap.
"""
import argparse
import json
import shlex
import sys

from testbed.argtypes import output_dir, whole

SPEC_KEYS = ("out", "scheduler", "workers", "seeds", "vary", "options", "max_points", "pcap")


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=output_dir, default=None, metavar="DIR", help="the sweep's directory (required "
                   "unless the spec gives it)")
    p.add_argument("--spec", default=None, metavar="FILE", help="the sweep as a YAML or JSON file (keys above)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="an existing Dask scheduler (default: a local cluster on 127.0.0.1)")
    p.add_argument("--workers", type=whole(1, 1024), default=None, metavar="N",
                   help="local cluster: worker processes (default one per core)")
    p.add_argument("--seeds", default=None, metavar="N|S1,S2",
                   help="seeds 0..N-1, or a list (default 1: seed 0)")
    p.add_argument("--vary", action="append", default=[], metavar="KNOB=V1,V2",
                   help="a rocelab run option and its values (repeatable; the grid is their cross product "
                        "times the seeds); use ; between values that contain commas: 'ecn=5,20,0.2;off'")
    p.add_argument("--max-points", type=whole(1, 10_000_000), default=None, metavar="N",
                   help="allow grids of up to N points (default budget 1000)")
    p.add_argument("--pcap", action="store_true", help="keep each point's per-port captures (off by default)")
    p.add_argument("run_options", nargs="*", metavar="-- RUN_OPTIONS", help="rocelab run options for every point")
    p.set_defaults(func=run)


def run(args):
    from testbed.sweep import grid
    from testbed.sweep.cluster import ClusterError, check_address

    prog = "rocelab sweep"
    try:
        spec = _load_spec(args.spec) if args.spec else {}
        out = args.out or spec.get("out")
        if not out:
            raise grid.GridError("--out DIR is required (or `out:` in the spec)")
        if args.spec and args.out is None:
            out = output_dir(str(out))
        scheduler = args.scheduler or spec.get("scheduler")
        workers = args.workers or spec.get("workers")
        if scheduler and workers:
            raise grid.GridError("--workers sizes the local cluster; with --scheduler the cluster's own workers run")
        if scheduler:
            check_address(scheduler)
        vary = [(grid.knob_name(k), grid._values(k, v if isinstance(v, list) else [v]))
                for k, v in (spec.get("vary") or {}).items()]
        vary += [grid.parse_vary(text) for text in args.vary]
        seeds = grid.parse_seeds(args.seeds if args.seeds is not None else spec.get("seeds", 1))
        base = _spec_options(spec.get("options")) + [a for a in args.run_options if a != "--"]
        max_points = args.max_points or spec.get("max_points")
        points = grid.check(grid.build(base, vary, seeds, pcap=args.pcap or bool(spec.get("pcap"))), max_points)
    except (grid.GridError, ClusterError, argparse.ArgumentTypeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return _sweep(prog, points, out, scheduler, workers, [k for k, _ in vary], seeds, base)


def _sweep(prog, points, out, scheduler, workers, knobs, seeds, base):
    from testbed.sweep.api import SweepInterrupted, run_sweep
    from testbed.sweep.cluster import ClusterError
    from testbed.sweep.progress import SweepProgress

    try:
        doc = run_sweep(points, out, scheduler=scheduler, workers=workers, knobs=knobs, seeds=seeds,
                        base_options=base, progress=SweepProgress())
    except ClusterError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SweepInterrupted as exc:
        c = exc.doc["counts"]
        print(f"{prog}: interrupted; {c['ok'] + c['failed']} of {c['total']} points kept in {out}/points "
              "(rerun the same command to finish)", file=sys.stderr)
        return 130
    c = doc["counts"]
    print(f"*** sweep {doc['status']}: {c['total']} points, {c['ok']} ok, {c['failed']} failed, {c['error']} "
          f"could not run, {c['resumed']} kept from before; {out}/index.html, sweep.csv, sweep.json")
    for row in doc["points"]:
        if row["status"] not in ("ok",):
            print(f"{prog}: point {row['id']}: {row['status']}: {row['error'] or 'not run'}", file=sys.stderr)
    return 0 if c["ok"] == c["total"] else 1


def _load_spec(path):
    from testbed.sweep.grid import GridError
    try:
        text = open(path).read()
    except OSError as exc:
        raise GridError(f"--spec {path}: {exc.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise GridError(f"--spec {path}: YAML needs PyYAML (or give the spec as JSON)") from None
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}" if where else ""
            raise GridError(f"--spec {path}: not valid YAML{at}") from None
    else:
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise GridError(f"--spec {path}: not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise GridError(f"--spec {path}: expected a mapping with keys {', '.join(SPEC_KEYS)}")
    unknown = [k for k in spec if k not in SPEC_KEYS]
    if unknown:
        raise GridError(f"--spec {path}: unknown key {unknown[0]!r} (known: {', '.join(SPEC_KEYS)})")
    if spec.get("vary") is not None and not isinstance(spec["vary"], dict):
        raise GridError(f"--spec {path}: vary must map each knob to a list of values")
    for key in ("workers", "max_points"):
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise GridError(f"--spec {path}: {key} must be a whole number >= 1 (got {value!r})")
    for key in ("out", "scheduler"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise GridError(f"--spec {path}: {key} must be a string")
    return spec


def _spec_options(options):
    if options is None:
        return []
    if isinstance(options, str):
        return shlex.split(options)
    if isinstance(options, list):
        return [str(o) for o in options]
    from testbed.sweep.grid import GridError
    raise GridError("spec: options must be a list or a string of rocelab run options")
