"""`rocelab run`: boot a Clos, set the fabric knobs, run one traffic pattern, write the report.

    sudo .venv/bin/rocelab run --spines 2 --leaves 2 --hosts-per-leaf 2 --pattern ring_allreduce \\
         --hash qpn --qps-per-conn 4 --out runs/qpn

Writes OUT/summary.json (schema: testbed/net/summary.py), OUT/pcap/ (per-port captures),
OUT/*.png (per-link load, queue depth over time, PFC/ECN counts), OUT/ranks/ (each rank's
job, log and report) and OUT/logs/ (switch logs); everything is torn down afterwards.
Exit status: 0 when every rank completed, 1 when the collective failed or a switch did not
start, 2 for bad arguments, 130 after Ctrl-C, 143 after SIGTERM.
"""
import argparse
import math
import sys
import time

from testbed.argtypes import number, output_dir, whole
from testbed.cli import Parser

MAX_SIZE = 1 << 40  # bytes per collective row: far more than a lab link moves in a day
NIC_MTU_VIRTUAL = 4096   # testbed/sim/profile.py NIC_MTU (not imported: `rocelab --help` stays fast)


def on_off(text):
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected on or off")
    return text == "on"


def byte_size(text):
    """'1M' -> 1048576, '64K' -> 65536, '1000' -> 1000."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b")
    factor = units.get(t[-1:], 1)
    try:
        scaled = float(t[:-1] if t[-1:] in units else t) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (e.g. 65536, 64K, 1M)") from None
    if not math.isfinite(scaled) or not 4 <= scaled <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r}: a size from 4 bytes to {MAX_SIZE >> 30}G")
    if scaled != int(scaled):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(scaled)


class RunRefused(ValueError):
    """`rocelab run` would refuse these options (one line) before anything starts."""


class _RefusingParser(Parser):
    """The run's parser for an option list given in code (a sweep point): errors raise.
    (rocelab's Parser: `--size -64K` is a value its option refuses, as on the command line.)"""

    def error(self, message):
        raise RunRefused(message)

    def exit(self, status=0, message=None):
        raise RunRefused((message or "").strip() or f"options end the parser (status {status})")


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(p)
    p.set_defaults(func=run)


def point_parser():
    """A parser with exactly `rocelab run`'s options whose errors raise RunRefused."""
    p = _RefusingParser(prog="rocelab run", add_help=False)
    add_run_options(p)
    return p


def add_run_options(p):
    from testbed.net import options
    from traffic.collectives import PATTERNS  # stdlib-only: `rocelab --help` stays fast

    options.add_topology_options(p)
    options.add_target_options(p)
    options.add_clock_options(p)
    g = p.add_argument_group("traffic (traffic/: emulated RDMA NICs)")
    g.add_argument("--pattern", choices=list(PATTERNS), default="ring_allreduce")
    g.add_argument("--preset", choices=("dense", "moe"), default=None,
                   help="--pattern workload: one training iteration like a dense model (Llama-3-like: TP, PP, "
                        "DP AllReduce) or an MoE model (DeepSeek-V2-like: PP, device-limited All-to-All, DP); "
                        "default dense")
    g.add_argument("--size", type=byte_size, action="append", default=None, metavar="BYTES",
                   help="collective size per row, e.g. 1M (repeatable; default 1M)")
    g.add_argument("--iterations", type=whole(1, 1_000_000), default=1)
    g.add_argument("--warmup", type=whole(0, 1_000_000), default=0)
    g.add_argument("--channels", type=whole(1, 64), default=1, help="independent rings/trees (NCCL channels)")
    g.add_argument("--qps-per-conn", type=whole(1, 64), default=1, help="QPs per connection (QP scaling)")
    g.add_argument("--ranks", type=whole(2, 100_000), default=None, help="ranks (default: every host)")
    g.add_argument("--placement", choices=("topology", "random"), default="topology",
                   help="topology: ring neighbours share a leaf; random: shuffled")
    g.add_argument("--cts", type=on_off, default=True, metavar="on|off", help="receiver-driven CTS admission")
    g.add_argument("--dcqcn", type=on_off, default=False, metavar="on|off", help="DCQCN rate control on CNPs")
    g.add_argument("--timeout-s", type=number(0, 86400, lo_open=True), default=None, help="give up on ranks after this long "
                                                                  "(default: from the bytes to move)")
    k = p.add_argument_group("fabric knobs (through the fabric controller)")
    k.add_argument("--hash", choices=("5tuple", "qpn", "flowlet"), default="5tuple", help="ECMP hashing")
    k.add_argument("--flowlet-gap-us", type=whole(1, 10_000_000), default=None,
                   help="flowlet inactivity gap (default: the controller's)")
    k.add_argument("--pfc", type=on_off, default=True, metavar="on|off", help="PFC on the lossless priority 3")
    k.add_argument("--pfc-headroom", type=whole(0, (1 << 32) - 1), default=None, metavar="BYTES",
                   help="headroom of each lossless ingress PG after XOFF (default: `rocelab fabric headroom` "
                        "for the switch's fastest port; 0 shows why it is there)")
    k.add_argument("--ecn", default="default", metavar="KMIN,KMAX,PMAX",
                   help="ECN marking thresholds on priority 3 (packets, packets, probability), off, or "
                        "default (the controller's profile)")
    p.add_argument("--out", type=output_dir, default=None, metavar="DIR", help="report directory (default runs/run-<time>)")
    p.add_argument("--no-pcap", action="store_true", help="no per-port captures")
    p.add_argument("--fault", action="append", default=[], metavar="KIND:TARGET:ACTION@TIME",
                   help="virtual time: a fault at a simulated time after the traffic starts, e.g. "
                        "link:leaf1-spine1:down@100us, switch:spine1:down@50us, nic:h3:slow=25%%@0, "
                        "nic:h3:stop@1ms (repeatable)")
    p.add_argument("--max-events", type=float, default=None, metavar="N",
                   help="virtual time: refuse runs estimated above N events (default 2e8, ~30 min)")


def run(args):
    """`rocelab run` with parsed options: validate, then boot, run and report (exit status)."""
    from testbed.net import options

    prog = "rocelab run"
    try:
        plan = prepare(args)
    except RunRefused as exc:
        return options.fail(prog, str(exc))
    if args.clock != "virtual":
        status = options.need_root(prog)
        if status:
            return status
    return _run_booted(prog, args, *plan)


def parse_point(argv):
    """`rocelab run --clock virtual ARGV` parsed and validated exactly as the command does it,
    nothing created: returns (args, plan) or raises RunRefused with the command's one line."""
    args = point_parser().parse_args(["--clock", "virtual", *argv])
    if args.clock != "virtual":
        raise RunRefused(f"--clock {args.clock}: a point runs in virtual time")
    return args, prepare(args)


def run_point(argv, out):
    """One virtual-time point: exactly `rocelab run --clock virtual ARGV --out OUT` (the same
    validation, OUT layout and printed report); returns its exit status. A point is a pure
    function of ARGV (its seed is one of them): where it runs changes nothing in summary.json
    but its "wall_clock" block."""
    from testbed.net import options
    try:
        args = point_parser().parse_args(["--clock", "virtual", *argv, "--out", str(out)])
    except RunRefused as exc:
        return options.fail("rocelab run", str(exc))
    if args.clock != "virtual":
        return options.fail("rocelab run", f"--clock {args.clock}: a point runs in virtual time")
    return run(args)


def prepare(args):
    """Validate the options (nothing is created): (clos, settings, job, faults), or RunRefused."""
    from testbed.clos import TopologyError
    from testbed.net import options
    from testbed.net.experiment import ExperimentError, FabricSettings, job_for, parse_ecn

    try:
        clos = options.clos_from_args(args)
        settings = FabricSettings(hash=args.hash, flowlet_gap_us=args.flowlet_gap_us, pfc=args.pfc,
                                  ecn=parse_ecn(args.ecn), pfc_headroom=args.pfc_headroom).check()
        virtual = args.clock == "virtual"
        job = job_for(clos, args.pattern, args.size or [1 << 20], nranks=args.ranks, placement=args.placement,
                      iterations=args.iterations, warmup=args.warmup, channels=args.channels,
                      qps_per_connection=args.qps_per_conn, cts=args.cts, dcqcn=args.dcqcn, timeout_s=args.timeout_s,
                      mtu=NIC_MTU_VIRTUAL if virtual else 1024, seed=args.seed, preset=args.preset)
        faults = []
        if virtual:
            from testbed.sim.budget import check_budget
            from testbed.sim.faults import FaultError, parse_fault
            check_budget(clos, job, args.max_events)
            try:
                faults = [parse_fault(text, clos) for text in args.fault]
            except FaultError as exc:
                raise ExperimentError(str(exc)) from None
            if args.target != "engine":
                raise ExperimentError(f"--target {args.target}: virtual time runs the engine target only")
        elif args.fault:
            raise ExperimentError("--fault needs --clock virtual (in real time, use the CLI's `link` "
                                  "command or stop a switch)")
    except (TopologyError, ExperimentError) as exc:
        raise RunRefused(str(exc)) from None
    problem = options.check_program(args.program, args.target)
    if problem:
        raise RunRefused(problem)
    return clos, settings, job, faults


def _run_booted(prog, args, clos, settings, job, faults=()):
    from testbed import REPO_ROOT
    from testbed.net import options
    from testbed.net.experiment import Experiment, guarded, nccl_table

    out = args.out or str(REPO_ROOT / "runs" / time.strftime("run-%Y%m%d-%H%M%S"))
    results = []

    def one_phase():
        with Experiment(clos, target=args.target, out=out, pcap=not args.no_pcap, program=args.program, mtu=args.mtu,
                        port_defaults=options.port_defaults(args), log_console=args.log_console,
                        name_prefix=args.name_prefix, pfc_priorities=None if settings.pfc else (),
                        clock=args.clock, seed=args.seed) as exp:
            results.append(exp.run_phase("run", job, settings, faults=faults))

    status = guarded(prog, one_phase)
    if status is not None:
        return status
    result = results[0]
    print(nccl_table(result))
    for error in result["errors"]:
        print(f"{prog}: {error}", file=sys.stderr)
    print(f"*** report in {out}: summary.json, {', '.join(result['plots']) or 'no plots'}"
          + (f", pcap/ ({len(result.get('pcaps', []))} files)" if result.get("pcaps") else ""))
    return 0 if result["status"] == "ok" else 1
