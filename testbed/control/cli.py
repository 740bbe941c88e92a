"""`rocelab fabric`: program and tune the switches of a running fabric over P4Runtime.

    rocelab fabric program                       pipeline + routes + defaults on every switch
    rocelab fabric show [SWITCH...]              knobs and routes as the switches hold them
    rocelab fabric hash 5tuple|qpn|flowlet [--qp-aware | --no-qp-aware]
    rocelab fabric flowlet GAP_US [--choice random|least_loaded]
    rocelab fabric ecn KMIN KMAX PMAX [--priority P]      rocelab fabric ecn off [--priority P]
    rocelab fabric pfc XOFF XON [--headroom B] [--reserved B] [--priorities 3,4] [--refresh-us US]
                                                 [--pause-us US]   (bytes per ingress port and PG)
    rocelab fabric pfc on|off [--priorities 3,4]
    rocelab fabric headroom [--rate R] [--cable-m M] [--mtu B] [--response-us U]
                                                 the PFC headroom a lossless PG needs, bytes
                                                 (a calculator: needs no fabric)
    rocelab fabric dscp DSCP=PRIORITY ...        replaces the whole DSCP -> priority map
    rocelab fabric te add LEAF IN_PORT PREFIX OUT_PORT | te remove LEAF IN_PORT PREFIX | te list
    rocelab fabric link A B up|down              routes and ECMP groups without (or with) the link
                                                 (remembered in links-down.json beside fabric.json)

The fabric is the fabric.json a topology script writes (--fabric, or $ROCELAB_FABRIC).
Every command but `program` opens its own P4Runtime role ("cli"), so a fabric booted by
topologies/clos.py keeps its controller; --switch narrows a command to some switches.
"""
import argparse
import os
import sys

from testbed.argtypes import number, whole
from testbed.switch import buffers

CLI_ROLE = "cli"
#: The CLI session's election id: above the fabric controller's (0, 1) and the TE app's (0, 2).
#: Roles keep the three apart on a P4Runtime server that has them (the engine's); BMv2's
#: simple_switch_grpc (PI) has none and arbitrates every stream of a device as one, refusing
#: a second stream with an election id in use ("Election id already exists"). There a command
#: is primary for its own short session, then the session below it is again.
CLI_ELECTION_ID = (0, 3)


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    add_fabric_options(p, switch_option=True)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    subparsers = p.add_subparsers(dest="fabric_command", metavar="COMMAND")

    class Commands:
        # the fabric options are accepted after the command too (`rocelab fabric hash qpn --fabric F`)
        @staticmethod
        def add_parser(*a, **kw):
            c = subparsers.add_parser(*a, **kw)
            add_fabric_options(c, switch_option=True, top=False)
            return c

    cmds = Commands()

    c = cmds.add_parser("program", help="push fabric.p4 and install routes and defaults on every switch")
    c.add_argument("--program", help="the P4 program (default p4/fabric.p4)")
    c.add_argument("--target", choices=("engine", "bmv2"), default="engine")
    c.set_defaults(func=_run(_program, role=None))

    c = cmds.add_parser("show", help="knobs and routes of each switch")
    c.add_argument("switches", nargs="*", metavar="SWITCH")
    c.set_defaults(func=_run(_show))

    c = cmds.add_parser("hash", help="ECMP hash mode")
    c.add_argument("mode", choices=("5tuple", "qpn", "flowlet"))
    qp = c.add_mutually_exclusive_group()
    qp.add_argument("--qp-aware", dest="qp_aware", action="store_true", default=None,
                    help="flowlet mode: the flow key includes the BTH destination QP")
    qp.add_argument("--no-qp-aware", dest="qp_aware", action="store_false")
    c.set_defaults(func=_run(lambda ctl, a: ctl.set_hash_mode(a.mode, a.qp_aware, switches=a.switch)))

    c = cmds.add_parser("flowlet", help="flowlet gap (us) and how a new flowlet picks its path")
    c.add_argument("gap_us", type=whole(1, 10_000_000))
    c.add_argument("--choice", choices=("random", "least_loaded"))
    c.set_defaults(func=_run(_flowlet))

    c = cmds.add_parser("ecn", help="ECN marking thresholds (packets) and max probability, or off")
    c.add_argument("values", nargs="+", metavar="KMIN KMAX PMAX | off")
    c.add_argument("--priority", type=whole(0, 7), default=3, help="the queue (default 3, RoCE data)")
    c.set_defaults(func=_run(_ecn))

    c = cmds.add_parser("pfc", help="PFC profile of the lossless PGs (bytes per ingress port and "
                                     "priority), or PFC on/off")
    c.add_argument("values", nargs="+", metavar="XOFF XON | on | off")
    c.add_argument("--headroom", type=whole(0, (1 << 32) - 1), metavar="BYTES",
                   help="bytes a PG may still take after XOFF (default: `rocelab fabric headroom` "
                        "for the switch's fastest port)")
    c.add_argument("--reserved", type=whole(0, (1 << 32) - 1), metavar="BYTES",
                   help="bytes guaranteed to each PG before the shared pool (default 0)")
    c.add_argument("--priorities", type=_priorities, default=(3,), help="lossless priorities (default 3)")
    c.add_argument("--refresh-us", type=whole(1, 10_000_000), help="how often an XOFF is repeated while the queue stays full")
    c.add_argument("--pause-us", type=whole(1, 10_000_000), help="pause time an XOFF asks for")
    c.set_defaults(func=_run(_pfc))

    c = cmds.add_parser("headroom", help="PFC headroom calculator: bytes still arriving after XOFF")
    c.add_argument("--rate", default="10M", help="link rate in bits/s, e.g. 10M, 400G (default 10M, the lab's)")
    c.add_argument("--cable-m", type=number(0, 1e6), default=buffers.LAB_CABLE_M, metavar="M",
                   help=f"cable length in metres, {buffers.PROPAGATION_NS_PER_M:g} ns each (default 0: veths)")
    c.add_argument("--mtu", type=whole(68, 65535), default=buffers.LAB_MTU, metavar="BYTES", help="MTU (default 1500)")
    c.add_argument("--response-us", type=number(0, 1e8), default=buffers.REALTIME_RESPONSE_US, metavar="US",
                   help="the peer's time to act on an XOFF (default "
                        f"{buffers.REALTIME_RESPONSE_US:g}: the real-time switches' measured loop lag)")
    c.set_defaults(func=_headroom)

    c = cmds.add_parser("dscp", help="DSCP -> priority map (replaces the whole map)")
    c.add_argument("pairs", nargs="+", metavar="DSCP=PRIORITY")
    c.set_defaults(func=_run(_dscp))

    c = cmds.add_parser("te", help="traffic-engineering overrides (exact <ingress port, prefix>)")
    c.add_argument("action", choices=("add", "remove", "list"))
    c.add_argument("args", nargs="*", metavar="LEAF IN_PORT PREFIX [OUT_PORT]")
    c.set_defaults(func=_run(_te))

    c = cmds.add_parser("link", help="tell the controller a link is down or up again (ECMP repair)")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("state", choices=("up", "down"))
    c.set_defaults(func=_run(_link))


def add_fabric_options(p, switch_option=False, top=True):
    """--fabric/--timeout (and --switch); `top=False` on subcommands: only what is given counts."""
    def default(value):
        return value if top else argparse.SUPPRESS
    p.add_argument("--fabric", default=default(os.environ.get("ROCELAB_FABRIC")),
                   help="fabric.json of the running fabric (default $ROCELAB_FABRIC)")
    p.add_argument("--timeout", type=number(0, 3600, lo_open=True), default=default(5.0),
                   help="seconds to wait for each switch (default 5)")
    if switch_option:
        p.add_argument("--switch", action="append", metavar="NAME", default=default(None),
                       help="only this switch (repeatable; default every switch)")


class UsageError(ValueError):
    """A command line that names something wrong; printed without a traceback."""


def load_clos(args):
    from testbed.clos import Clos, TopologyError
    if not args.fabric:
        raise UsageError("which fabric? pass --fabric runs/<name>/fabric.json (written by topologies/clos.py) "
                         "or set ROCELAB_FABRIC")
    try:
        return Clos.load(args.fabric)
    except OSError as exc:
        raise UsageError(f"cannot read {args.fabric}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, TopologyError) as exc:
        raise UsageError(f"{args.fabric} is not a fabric description: {exc}") from None


def open_controller(args, role=CLI_ROLE, **options):
    from testbed.control import FabricController
    clos = load_clos(args)
    switches = getattr(args, "switch", None) or getattr(args, "switches", None) or None
    if role == CLI_ROLE:
        options.setdefault("election_id", CLI_ELECTION_ID)
    return FabricController(clos, switches=switches, role=role, connect_timeout=args.timeout,
                            down_links=read_down_links(args.fabric), **options)


def _down_links_file(fabric_path):
    # Beside fabric.json: each `rocelab fabric link` is a new controller, so the links it was
    # told about must outlive it, or the next command would route over them again.
    return os.path.join(os.path.dirname(os.path.abspath(fabric_path)), "links-down.json")


def read_down_links(fabric_path):
    import json
    try:
        with open(_down_links_file(fabric_path)) as f:
            return [tuple(pair) for pair in json.load(f)]
    except (OSError, ValueError):
        return []


def write_down_links(fabric_path, down_links):
    import json
    with open(_down_links_file(fabric_path), "w") as f:
        json.dump(sorted(sorted(pair) for pair in down_links), f)


def _run(handler, role=CLI_ROLE):
    """Wrap `handler(controller, args)`: open, run, close; user errors end in one line, rc 2."""
    def run(args):
        from testbed.control import ControlError, KnobError, RoutingError
        ctl = None
        try:
            options = {"program": args.program, "target": args.target} if role is None else {}
            ctl = open_controller(args, role=role, **options)
            ctl.connect()
            return handler(ctl, args) or 0
        except (UsageError, ControlError, KnobError, RoutingError) as exc:
            print(f"rocelab fabric: {exc}", file=sys.stderr)
            return 2
        finally:
            if ctl is not None:
                ctl.close()
    return run


def _priorities(text):
    try:
        prios = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of priorities 0..7") from None
    if not prios:
        raise argparse.ArgumentTypeError("at least one priority")
    return prios


def _int(text, what):
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{what} must be a whole number (got {text!r})") from None


# --- handlers -------------------------------------------------------------------------

def _program(ctl, _args):
    ctl.push_pipeline()
    ctl.install_defaults()
    print(f"programmed {len(ctl.names)} switch(es) with {ctl.program_path} ({ctl.target})")


def _show(ctl, _args):
    for name in ctl.names:
        k = ctl.get_knobs(name)
        mode = k.hash_mode + (" (per QP)" if k.hash_mode == "flowlet" and k.qp_aware else "")
        print(f"{name}: hash {mode}, flowlet gap {k.flowlet_gap_us} us ({k.flowlet_choice}), seed {k.hash_seed}")
        print("  dscp -> priority: " + (", ".join(f"{d}->{p}" for d, p in sorted(k.dscp_map.items())) or "none"))
        for prio, e in sorted(k.ecn.items()):
            print(f"  ecn  priority {prio}: Kmin {e.kmin} Kmax {e.kmax} Pmax {e.pmax:g}")
        for prio, c in sorted(k.pfc.items()):
            print(f"  pfc  priority {prio}: XOFF {c.xoff} XON {c.xon} headroom {c.headroom} reserved {c.reserved} "
                  f"bytes per ingress PG, refresh {c.refresh_us} us, pause {k.pfc_pause_us} us")
        for prefix, route_id, ports, group in ctl.route_table(name):
            via = f"group {group} ports {ports}" if group else f"port {ports[0]}"
            print(f"  route {prefix:<18} id {route_id:<3} -> {via}")


def _flowlet(ctl, args):
    ctl.set_flowlet_gap_us(args.gap_us, switches=args.switch)
    if args.choice:
        ctl.set_flowlet_choice(args.choice, switches=args.switch)


def _ecn(ctl, args):
    if args.values == ["off"]:
        ctl.disable_ecn(args.priority, switches=args.switch)
        return
    if len(args.values) != 3:
        raise UsageError("ecn KMIN KMAX PMAX (e.g. ecn 5 20 0.2) or ecn off")
    kmin, kmax = _int(args.values[0], "KMIN"), _int(args.values[1], "KMAX")
    try:
        pmax = float(args.values[2])
    except ValueError:
        raise UsageError(f"PMAX must be a probability such as 0.2 (got {args.values[2]!r})") from None
    ctl.set_ecn(kmin, kmax, pmax, priority=args.priority, switches=args.switch)


def _pfc(ctl, args):
    if args.values in (["on"], ["off"]):
        ctl.set_pfc(enabled=args.values == ["on"], priorities=args.priorities, refresh_us=args.refresh_us,
                    pause_us=args.pause_us, switches=args.switch)
        return
    if len(args.values) != 2:
        raise UsageError("pfc XOFF XON (bytes per ingress PG, e.g. pfc 12000 6000) or pfc on|off")
    ctl.set_pfc(_int(args.values[0], "XOFF"), _int(args.values[1], "XON"), priorities=args.priorities,
                refresh_us=args.refresh_us, pause_us=args.pause_us, headroom=args.headroom,
                reserved=args.reserved, switches=args.switch)


def _headroom(args):
    from testbed.switch.cli import parse_rate
    try:
        rate = parse_rate(args.rate)
    except ValueError as exc:
        print(f"rocelab fabric headroom: {exc}", file=sys.stderr)
        return 2
    room = buffers.headroom_bytes(rate, args.cable_m, args.mtu, args.response_us)
    frame = buffers.max_frame_bytes(args.mtu)
    in_flight = room - 2 * frame
    print(f"{room}")
    print(f"# {rate / 1e6:g} Mb/s x (2 x {args.cable_m:g} m x {buffers.PROPAGATION_NS_PER_M:g} ns/m + "
          f"{args.response_us:g} us response) = {in_flight} bytes in flight, + 2 x {frame}-byte frames",
          file=sys.stderr)
    return 0


def _dscp(ctl, args):
    mapping = {}
    for pair in args.pairs:
        dscp, sep, prio = pair.partition("=")
        if not sep:
            raise UsageError(f"{pair!r}: write DSCP=PRIORITY, e.g. 26=3")
        mapping[_int(dscp, "DSCP")] = _int(prio, f"the priority of DSCP {dscp}")
    ctl.set_dscp_map(mapping, switches=args.switch)


def _te(ctl, args):
    if args.action == "list":
        for o in ctl.te_overrides(args.switch):
            print(f"{o['leaf']} port {o['ingress_port']} {o['dst_prefix']} -> port {o['egress_port']}"
                  f"  ({o['packets']} packets, {o['bytes']} bytes)")
        return
    want = 4 if args.action == "add" else 3
    if len(args.args) != want:
        raise UsageError("te add LEAF IN_PORT PREFIX OUT_PORT | te remove LEAF IN_PORT PREFIX")
    leaf, in_port, prefix = args.args[0], _int(args.args[1], "IN_PORT"), args.args[2]
    if args.action == "add":
        ctl.add_te_override(leaf, in_port, prefix, _int(args.args[3], "OUT_PORT"))
    elif not ctl.remove_te_override(leaf, in_port, prefix):
        print(f"{leaf}: there was no override for {prefix} from port {in_port}")


def _link(ctl, args):
    changed = ctl.link_status(args.a, args.b, args.state == "up")
    write_down_links(args.fabric, ctl.down_links)
    print(f"link {args.a}-{args.b} {args.state}: {changed} entries rewritten")
