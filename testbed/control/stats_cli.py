"""`rocelab stats`: the P4 counters of a running fabric's switches.

    rocelab stats [SWITCH...] [--priorities] [--json]

Per port: rx/tx packets and bytes, drops, ECN marks, PFC frames sent and received (per
priority with --priorities); per switch: drop reasons, ECMP member and TE override hits,
and the demand matrix (bytes per <ingress port, destination prefix>). The fabric is the
fabric.json a topology script writes (--fabric, or $ROCELAB_FABRIC).
"""
import argparse
import json
import sys

from testbed.control.cli import UsageError, add_fabric_options, open_controller

COLUMNS = (("rx_packets", "rx pkts"), ("rx_bytes", "rx bytes"), ("tx_packets", "tx pkts"),
           ("tx_bytes", "tx bytes"), ("drop_packets", "drops"), ("ecn_marks", "ecn"),
           ("pfc_tx", "pfc tx"), ("pfc_rx", "pfc rx"))


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    add_fabric_options(p)
    p.add_argument("switches", nargs="*", metavar="SWITCH", help="default: every switch")
    p.add_argument("--priorities", action="store_true", help="one row per port and priority (non-zero only)")
    p.add_argument("--json", action="store_true", help="the controller's counter layout as JSON")
    p.set_defaults(func=run)


def run(args):
    from testbed.control import ControlError
    ctl = None
    try:
        ctl = open_controller(args)
        ctl.connect()
        counters = ctl.read_counters()
    except (UsageError, ControlError) as exc:
        print(f"rocelab stats: {exc}", file=sys.stderr)
        return 2
    finally:
        if ctl is not None:
            ctl.close()
    if args.json:
        json.dump(counters, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    for name, c in counters.items():
        print(format_switch(c, args.priorities))
    return 0


def format_switch(c, per_priority=False):
    """A switch's counters (read_counters() layout) as a text table."""
    lines = [f"{c['switch']} ({c['role']})",
             "  port prio " + "".join(f"{title:>11}" for _, title in COLUMNS)]
    for port, totals in sorted(c["port_totals"].items()):
        lines.append(f"  {port:>4}  all " + "".join(f"{totals[key]:>11}" for key, _ in COLUMNS))
        if per_priority:
            for prio, cell in sorted(c["ports"][port].items()):
                if any(cell.values()):
                    lines.append(f"  {port:>4} {prio:>4} " + "".join(f"{cell[key]:>11}" for key, _ in COLUMNS))
    drops = {k: v for k, v in c["drops"].items() if v}
    lines.append("  drops: " + (", ".join(f"{k} {v}" for k, v in sorted(drops.items())) or "none"))
    for m in c["ecmp_members"]:
        lines.append(f"  ecmp group {m['group']} member {m['member']} (port {m['port']}): "
                     f"{m['packets']} packets, {m['bytes']} bytes")
    for t in c["te_overrides"]:
        lines.append(f"  te override port {t['ingress_port']} {t['dst_prefix']} -> port {t['egress_port']}: "
                     f"{t['packets']} packets, {t['bytes']} bytes")
    for d in c["demands"]:
        lines.append(f"  demand port {d['ingress_port']} -> {d['dst_prefix']}: {d['packets']} packets, {d['bytes']} bytes")
    if any(c["punted"].values()):
        lines.append(f"  punted to this reader: {c['punted']}")
    return "\n".join(lines)
