"""What the topology scripts in topologies/ run: boot, optional test, optional CLI.

    sudo python3 topologies/clos.py --spines 2 --leaves 4 --hosts-per-leaf 2 \
         [--target engine|bmv2|kernel] [--link-rate 10] [--pcap DIR] [--test pingall] [--cli]

Exit status: 0 when booted (and, with --test pingall, 0% loss, like `mn --test`);
1 when a test failed or a switch did not start; 2 for bad arguments or a machine that
cannot run it; 130 after Ctrl-C (outside the CLI: in it, Ctrl-C interrupts the command,
as in Mininet), 143 after SIGTERM. Everything created is torn down in every case.
"""
import argparse
import os
import signal
import sys
import time


def build_parser(prog, description, **shape_defaults):
    from testbed.net import options

    from testbed.argtypes import output_dir
    from testbed.cli import Parser

    p = Parser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_topology_options(p, **shape_defaults)
    options.add_target_options(p)
    p.add_argument("--pcap", type=output_dir, metavar="DIR", default=None,
                   help="write per-port pcaps under DIR (default: OUT/pcap)")
    p.add_argument("--out", type=output_dir, metavar="DIR", default=None,
                   help="fabric.json, logs and pcaps go here (default runs/topo-<time>)")
    p.add_argument("--test", choices=("pingall", "none"), default="none",
                   help="pingall: exit 0 only with 0%% loss")
    p.add_argument("--cli", action="store_true", help="drop into the Mininet CLI with fabric commands")
    return p


def main(argv=None, prog="clos.py", description=__doc__, **shape_defaults):
    from testbed.clos import TopologyError
    from testbed.net import options

    args = build_parser(prog, description, **shape_defaults).parse_args(argv)
    try:
        clos = options.clos_from_args(args)
    except TopologyError as exc:
        return options.fail(prog, str(exc))
    problem = options.check_program(args.program, args.target)
    if problem:
        return options.fail(prog, problem)
    status = options.need_root(prog)
    if status:
        return status
    from testbed import REPO_ROOT
    from testbed.net.fabric import FabricError, FabricNet
    from testbed.net.lifecycle import Terminated
    from testbed.net.nodes import SwitchStartError

    out = args.out or str(REPO_ROOT / "runs" / time.strftime("topo-%Y%m%d-%H%M%S"))
    fabric = FabricNet(clos, target=args.target, program=args.program, out_dir=out, mtu=args.mtu,
                       port_defaults=options.port_defaults(args), log_console=args.log_console,
                       name_prefix=args.name_prefix)
    if args.pcap:
        fabric.pcap_dir = os.path.abspath(args.pcap)
    try:
        with fabric:
            clos.save(os.path.join(out, "fabric.json"))
            print(f"*** {len(clos.switches)} switches ({args.target}), {len(clos.hosts)} hosts up in "
                  f"{fabric.timings['boot_s']:.2f} s; fabric.json, logs and pcaps in {out}")
            status = 0
            if args.test == "pingall":
                sent, lost, failures = fabric.pingall()
                for item in failures:
                    print(f"    no reply: {item}")
                print(f"*** pingall: {100.0 * lost / max(sent, 1):.0f}% dropped ({sent - lost}/{sent} received)")
                status = 0 if lost == 0 else 1
            if args.cli:
                from testbed.net.fabric_cli import FabricCLI
                FabricCLI(fabric)
            print("*** tearing down")
        return status
    except (FabricError, TopologyError) as exc:
        return options.fail(prog, str(exc))
    except SwitchStartError as exc:
        return options.fail(prog, str(exc), 1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; torn down", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"{prog}: {exc}; torn down", file=sys.stderr)
        return exc.exit_status


def script(**kwargs):
    """What a topology script runs: main(), then no Ctrl-C race on the way out.

    Once main() returns everything is torn down; a Ctrl-C landing during interpreter
    exit would otherwise kill the process by SIGINT (status -2) instead of 130."""
    try:
        status = main(**kwargs)
    except KeyboardInterrupt:
        status = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return status
