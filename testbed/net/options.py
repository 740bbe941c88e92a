"""Command-line options shared by the topology scripts, `rocelab run` and the benchmark.

Only argparse here (keeps `rocelab --help` fast). :func:`clos_from_args` turns the
options into a validated Clos or raises TopologyError naming the option at fault, before
anything is created; :func:`fail` prints that as a one-line error with exit status 2.
"""
import argparse
import os
import sys

TARGET_CHOICES = ("engine", "bmv2", "kernel")


def ratio(text):
    """'2', '2:1' or '1.125': host capacity over uplink capacity, as testbed/clos.py defines it.
    A:B is read as A/B, so '2:1' and '2' are the same 2:1 oversubscription."""
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            return float(a) / float(b)
        return float(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a ratio (e.g. 1, 2, 2:1, 1.125:1)") from None


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def add_topology_options(p, spines=2, leaves=2, hosts_per_leaf=2, rails=1, zones=1, aggs=0):
    g = p.add_argument_group("fabric shape (testbed/clos.py numbering)")
    g.add_argument("--spines", type=int, default=spines, help=f"spine switches per zone (default {spines})")
    g.add_argument("--leaves", type=int, default=leaves, help=f"leaf switches per zone (default {leaves})")
    g.add_argument("--hosts-per-leaf", type=int, default=hosts_per_leaf,
                   help=f"hosts (NIC ports) per leaf (default {hosts_per_leaf})")
    g.add_argument("--link-rate", type=float, default=10.0, metavar="MBPS",
                   help="host link rate in Mb/s; uplinks follow from the oversubscription (default 10)")
    g.add_argument("--oversubscription", type=ratio, default=1.0, metavar="RATIO",
                   help="leaf host capacity : uplink capacity, e.g. 1 (1:1), 2 or 2:1, 1.125:1 (default 1)")
    g.add_argument("--rails", type=int, default=rails,
                   help=f"NICs per host, each on a different leaf of its rail group (default {rails})")
    g.add_argument("--zones", type=int, default=zones,
                   help=f"two-tier zones joined by an aggregation tier when > 1 (default {zones})")
    g.add_argument("--aggs", type=int, default=aggs, help=f"aggregation switches (needs --zones > 1; default {aggs})")
    g.add_argument("--agg-oversubscription", type=ratio, default=1.0, metavar="RATIO",
                   help="spine down capacity : spine up capacity (default 1)")
    g.add_argument("--grpc-base-port", type=int, default=50000,
                   help="switch N serves P4Runtime on 127.0.0.1:BASE+N (default 50000)")


def add_target_options(p):
    g = p.add_argument_group("switches and ports")
    g.add_argument("--target", choices=TARGET_CHOICES, default="engine",
                   help="engine: the embedded P4 engine (default); bmv2: simple_switch_grpc; "
                        "kernel: Linux routing stand-in without P4 (comparisons)")
    g.add_argument("--program", default=None, help="P4 program (default p4/fabric.p4)")
    g.add_argument("--mtu", type=int, default=1500, help="host and switch-port MTU (default 1500)")
    g.add_argument("--queue-depth", type=int, default=64, metavar="PKTS",
                   help="packets per priority queue on every switch port (default 64)")
    g.add_argument("--delay-us", type=positive_float, default=0.0, help="propagation delay per link, us")
    g.add_argument("--jitter-us", type=positive_float, default=0.0, help="uniform extra delay per packet, us")
    g.add_argument("--loss", type=positive_float, default=0.0, help="probability a frame is lost on a link")
    g.add_argument("--log-console", action="store_true", help="per-packet switch logs (slow)")
    g.add_argument("--name-prefix", default=None, metavar="PREFIX",
                   help="name switch interfaces PREFIX<device>p<port> instead of leaf1-eth3, so "
                        "parallel runs (tests) cannot clash; at most 7 characters")


def clos_from_args(args):
    """A validated Clos for the parsed options; raises TopologyError before creating anything."""
    from testbed.clos import ClosSpec, TopologyError, build

    spec = ClosSpec(spines=args.spines, leaves=args.leaves, hosts_per_leaf=args.hosts_per_leaf,
                    link_rate_mbps=args.link_rate, oversubscription=args.oversubscription,
                    rails=args.rails, zones=args.zones, aggs=args.aggs,
                    agg_oversubscription=args.agg_oversubscription, grpc_base_port=args.grpc_base_port)
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
    from testbed.net.links import PortModel

    fields = dict(queue_depth=args.queue_depth, delay_us=args.delay_us, jitter_us=args.jitter_us, loss=args.loss)
    try:
        PortModel(rate_mbps=1.0, **fields)
    except ValueError as exc:
        raise TopologyError(str(exc).replace("port model: ", "--queue-depth/--delay-us/--jitter-us/--loss: ")) from None
    return fields


def fail(prog, message, status=2):
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def need_root(prog):
    if os.geteuid() != 0:
        return fail(prog, "must run as root (Mininet creates namespaces and veths); try sudo", 1)
    return 0
