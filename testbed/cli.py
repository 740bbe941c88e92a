"""The `rocelab` command: one subcommand group per concern.

Each group lives in the module that owns the concern and exposes
``register(subparsers)``; it adds its parser and sets ``func`` on it. Group
modules import only argparse-level things at the top, so `rocelab --help`
stays fast; heavy imports (grpc, scapy, mininet) happen inside handlers.
"""
import argparse
import importlib
import re
import sys

from testbed import __version__

# group name -> (module, one-line help)
GROUPS = {
    "p4": ("testbed.p4engine.cli", "check, describe (P4Info) and packet-test P4_16 programs"),
    "switch": ("testbed.switch.cli", "run a P4 software switch (engine target) on interfaces"),
    "fabric": ("testbed.control.cli", "program and tune a running fabric (hash mode, ECN, PFC, TE)"),
    "stats": ("testbed.control.stats_cli", "read counters and queue state from running switches"),
    "run": ("testbed.net.cli", "boot a Clos, run a traffic pattern, collect a report"),
    "sweep": ("testbed.sweep.cli", "a grid of virtual-time runs (knobs x seeds) on Dask distributed"),
    "traffic": ("traffic.cli", "emulated RDMA NIC: send/receive RoCEv2 collectives in a host"),
    "lab": ("testbed.labs.cli", "guided labs: ECMP collisions, QP scaling, TE, incast+CTS, flowlets, ECN, "
            "subscription, PFC watchdog"),
    "captures": ("testbed.labs.captures", "a virtual-time run's captures per phase: one-way delays, pauses, path "
                 "changes, go-back-N OOS"),
    "te": ("testbed.te.cli", "the traffic-engineering app (Ryu framework)"),
    "demo": ("testbed.demo", "the main demo (what `make demo` runs)"),
    "bench": ("testbed.bench", "benchmarks: engine, switch, traffic, boot, sim, sweep, labs (figures, not tests)"),
    "clean": ("testbed.cleanup", "remove leftovers of crashed runs (only what rocelab created)"),
}


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors: `rocelab X: error: ...` and exit status 2.

    Subcommand parsers are made with the parent's class, so every group gets this."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # argparse takes `-64K` or `-2:1` (a negative value with a unit) for an unknown option
        # and says "expected one argument"; no option here starts with a digit, so read it as
        # a value and let the option's own check name it.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    parser = Parser(
        prog="rocelab",
        description="An emulated RoCE fabric testbed: P4 switches in a Mininet Clos, "
        "RoCEv2 collective traffic, PFC/ECN/ECMP/TE labs.",
    )
    parser.add_argument("--version", action="version", version=f"rocelab {__version__}")
    sub = parser.add_subparsers(dest="group", metavar="GROUP")
    for name, (module_name, help_text) in GROUPS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and not module_name.startswith(exc.name):
                raise
            # A group whose module is not there yet still shows up, and says so when used.
            p = sub.add_parser(name, help=help_text + " [not available]", description=help_text)
            p.set_defaults(func=_unavailable(name, module_name))
            continue
        module.register(sub, name, help_text)
    return parser


def _unavailable(name, module_name):
    def run(_args):
        print(f"rocelab {name}: not available in this build ({module_name} is missing)", file=sys.stderr)
        return 2
    return run


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        if getattr(args, "group", None):
            parser.parse_args([args.group, "--help"])
        parser.print_help()
        return 0
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print("rocelab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
