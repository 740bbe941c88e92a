"""Command-line options shared by the topology scripts, `rocelab run` and the benchmark.

Only argparse here (keeps `rocelab --help` fast). :func:`clos_from_args` turns the
options into a validated Clos or raises TopologyError naming the option at fault, before
anything is created; :func:`fail` prints that as a one-line error with exit status 2.
"""
import argparse
import os
import sys

from testbed.argtypes import number, probability, tcp_port, whole

TARGET_CHOICES = ("engine", "bmv2", "kernel")


def ratio(text):
    """'2', '2:1' or '1.125': host capacity over uplink capacity, as testbed/clos.py defines it.
    A:B is read as A/B, so '2:1' and '2' are the same 2:1 oversubscription."""
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            value = float(a) / float(b)
        else:
            value = float(text)
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or not 0 < value <= MAX_RATIO:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r} is not a ratio between 0 and {MAX_RATIO:g} "
                                         "(e.g. 1, 2, 2:1, 1.125:1)")
    return value


# Upper bounds of the emulation: far beyond what a lab needs, low enough that timers and
# buffers computed from them stay meaningful (an hour of delay is not a link).
MAX_RATIO = 1000.0
MAX_LINK_RATE_MBPS = 1_600_000.0  # 1.6T: virtual time; real time is held to 10G by ClosSpec.validate
MAX_DELAY_US = 10_000_000.0  # 10 s
MAX_QUEUE_DEPTH = 1 << 20
MAX_COUNT = 1024  # switches or hosts of one kind


def add_topology_options(p, spines=2, leaves=2, hosts_per_leaf=2, rails=1, zones=1, aggs=0):
    g = p.add_argument_group("fabric shape (testbed/clos.py numbering)")
    g.add_argument("--spines", type=whole(1, MAX_COUNT), default=spines, help=f"spine switches per zone (default {spines})")
    g.add_argument("--leaves", type=whole(1, MAX_COUNT), default=leaves, help=f"leaf switches per zone (default {leaves})")
    g.add_argument("--hosts-per-leaf", type=whole(1, MAX_COUNT), default=hosts_per_leaf,
                   help=f"hosts (NIC ports) per leaf (default {hosts_per_leaf})")
    g.add_argument("--link-rate", type=number(0, MAX_LINK_RATE_MBPS, lo_open=True), default=None, metavar="MBPS",
                   help="host link rate in Mb/s; uplinks follow from the oversubscription (default 10 in real "
                        "time, 400000 = 400G in virtual time)")
    g.add_argument("--oversubscription", type=ratio, default=1.0, metavar="RATIO",
                   help="leaf host capacity : uplink capacity, e.g. 1 (1:1), 2 or 2:1, 1.125:1 (default 1)")
    g.add_argument("--rails", type=whole(1, 64), default=rails,
                   help=f"NICs per host, each on a different leaf of its rail group (default {rails})")
    g.add_argument("--zones", type=whole(1, 64), default=zones,
                   help=f"two-tier zones joined by an aggregation tier when > 1 (default {zones})")
    g.add_argument("--aggs", type=whole(0, MAX_COUNT), default=aggs, help=f"aggregation switches (needs --zones > 1; default {aggs})")
    g.add_argument("--agg-oversubscription", type=ratio, default=1.0, metavar="RATIO",
                   help="spine down capacity : spine up capacity (default 1)")
    g.add_argument("--grpc-base-port", type=tcp_port, default=50000,
                   help="switch N serves P4Runtime on 127.0.0.1:BASE+N (default 50000)")


def add_target_options(p):
    g = p.add_argument_group("switches and ports")
    g.add_argument("--target", choices=TARGET_CHOICES, default="engine",
                   help="engine: the embedded P4 engine (default); bmv2: simple_switch_grpc; "
                        "kernel: Linux routing stand-in without P4 (comparisons)")
    g.add_argument("--program", default=None, help="P4 program (default p4/fabric.p4)")
    g.add_argument("--mtu", type=whole(576, 9000), default=None,
                   help="host and switch-port MTU (default 1500 in real time, 9000 in virtual time)")
    g.add_argument("--queue-depth", type=whole(1, MAX_QUEUE_DEPTH), default=None, metavar="PKTS",
                   help="packets per priority queue on every switch port (default 64 in real time, "
                        "4096 in virtual time)")
    g.add_argument("--delay-us", type=number(0, MAX_DELAY_US), default=0.0, help="propagation delay per link, us")
    g.add_argument("--jitter-us", type=number(0, MAX_DELAY_US), default=0.0, help="uniform extra delay per packet, us")
    g.add_argument("--loss", type=probability, default=0.0, help="probability a frame is lost on a link")
    g.add_argument("--log-console", action="store_true", help="per-packet switch logs (slow)")
    g.add_argument("--name-prefix", default=None, metavar="PREFIX",
                   help="name switch interfaces PREFIX<device>p<port> instead of leaf1-eth3, so "
                        "parallel runs (tests) cannot clash; at most 7 characters")


def add_clock_options(p, default="real"):
    g = p.add_argument_group("clock")
    g.add_argument("--clock", choices=("real", "virtual"), default=default,
                   help="real: Mininet, switch processes and wall-clock time (root; hands-on, captures, "
                        "CLI); virtual: the same switches, NICs and ranks on a simulated clock in one "
                        f"process, at production rates, deterministic per --seed (default {default})")
    g.add_argument("--seed", type=int, default=0, metavar="N",
                   help="virtual time: the run's seed (switch hash seeds, P4 random, link loss/jitter)")


def _clock_defaults(args):
    """Fill the options whose defaults depend on the clock (lab rates vs production units)."""
    virtual = getattr(args, "clock", "real") == "virtual"
    for name, real, production in (("link_rate", 10.0, 400_000.0), ("mtu", 1500, 9000),
                                   ("queue_depth", 64, 4096)):
        if getattr(args, name, None) is None:
            setattr(args, name, production if virtual else real)


def clos_from_args(args):
    """A validated Clos for the parsed options; raises TopologyError before creating anything."""
    from testbed.clos import ClosSpec, TopologyError, build

    _clock_defaults(args)
    spec = ClosSpec(spines=args.spines, leaves=args.leaves, hosts_per_leaf=args.hosts_per_leaf,
                    link_rate_mbps=args.link_rate, oversubscription=args.oversubscription,
                    rails=args.rails, zones=args.zones, aggs=args.aggs,
                    agg_oversubscription=args.agg_oversubscription, grpc_base_port=args.grpc_base_port,
                    clock=getattr(args, "clock", "real"))
    clos = build(spec)
    if not 576 <= args.mtu <= 9000:
        raise TopologyError(f"--mtu {args.mtu} must be between 576 and 9000")
    port_defaults(args)  # raises on bad queue depth / loss
    prefix = getattr(args, "name_prefix", None)
    if prefix is not None and not (prefix.isalnum() and 1 <= len(prefix) <= 7):
        raise TopologyError(f"--name-prefix {prefix!r} must be 1-7 letters or digits")
    return clos


def port_defaults(args):
    """The PortModel fields every port shares (the rate comes from the Clos)."""
    from testbed.clos import TopologyError
    from testbed.net.port_model import PortModel

    _clock_defaults(args)
    fields = dict(queue_depth=args.queue_depth, delay_us=args.delay_us, jitter_us=args.jitter_us, loss=args.loss)
    try:
        PortModel(rate_mbps=1.0, **fields)
    except ValueError as exc:
        raise TopologyError(str(exc).replace("port model: ", "--queue-depth/--delay-us/--jitter-us/--loss: ")) from None
    return fields


def check_program(program, target):
    """Why `--program` cannot run on `target` (one line), or None; before anything boots.

    The engine target compiles it here (in a child process, as the switches will); BMv2's
    p4c is not run here, so only the file is checked for it."""
    if program is None or target == "kernel":
        return None
    if not os.path.isfile(program):
        return f"--program {program}: no such file"
    if target != "engine":
        return None
    from testbed.p4engine import P4Error
    from testbed.p4engine.isolated import compile_file_isolated
    try:
        compile_file_isolated(program)
    except P4Error as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), "does not compile")
        return f"--program {program} does not compile: {first} (`rocelab p4 check {program}` shows every error)"
    except RuntimeError as exc:
        return f"--program {program}: {exc}"
    return None


def fail(prog, message, status=2):
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def need_root(prog):
    if os.geteuid() != 0:
        return fail(prog, "must run as root (Mininet creates namespaces and veths); try sudo", 1)
    return 0
