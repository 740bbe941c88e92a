"""`rocelab te`: run the TE app under Ryu's manager, and talk to a running one over REST.

    rocelab te run --fabric fabric.json [--rest-host 127.0.0.1 --rest-port 8080]
                   [--interval 5] [--programmer p4runtime|dry-run]
    rocelab te status | placements | utilization | topology | demands | optimize
    rocelab te override add LEAF INGRESS_PORT DST_PREFIX EGRESS_PORT
    rocelab te override remove LEAF INGRESS_PORT DST_PREFIX
    rocelab te demand add LEAF INGRESS_PORT DST_PREFIX RATE_MBPS [--ttl S]
    rocelab te link SWITCH PORT up|down        rocelab te interval [SECONDS]
"""
import argparse
import json
import os
import sys

from testbed.argtypes import number, tcp_port, whole

DEFAULT_URL = "http://127.0.0.1:8080"


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    te = p.add_subparsers(dest="te_command", metavar="COMMAND")

    run = te.add_parser("run", help="start the app under ryu-manager (foreground)")
    run.add_argument("--fabric", required=True, help="fabric.json written by the Clos builder")
    run.add_argument("--rest-host", default="127.0.0.1", help="REST listen address (default 127.0.0.1)")
    run.add_argument("--rest-port", type=tcp_port, default=8080, help="REST listen port (default 8080)")
    run.add_argument("--interval", type=number(0.2, 3600), default=5.0, help="seconds between CSPF runs (default 5)")
    run.add_argument("--programmer", choices=("p4runtime", "dry-run"), default="p4runtime",
                     help="p4runtime: program the leaves through the fabric controller; "
                          "dry-run: keep overrides in memory (no switches needed)")
    run.add_argument("--min-rate", type=number(0, 1e6), default=0.01, metavar="MBPS",
                     help="demands at or below this rate stay on ECMP (default 0.01 Mb/s)")
    run.add_argument("--no-watch-links", action="store_true",
                     help="do not poll switch interfaces' operstate for link up/down")
    run.add_argument("--intf-format", metavar="FORMAT",
                     help="switch interface names to watch, from {switch}, {device_id} and {port} "
                          "(default {switch}-eth{port}, as the Clos builder names them)")
    run.add_argument("--ryu-arg", action="append", default=[], metavar="ARG",
                     help="pass an option through to ryu-manager (repeatable), e.g. --ryu-arg=--verbose")
    run.set_defaults(func=_cmd_run)

    def client(cmd, help_, handler, **kw):
        c = te.add_parser(cmd, help=help_, **kw)
        c.add_argument("--url", default=os.environ.get("ROCELAB_TE_URL", DEFAULT_URL),
                       help=f"the running app's REST address (default {DEFAULT_URL})")
        c.set_defaults(func=handler)
        return c

    for cmd, path, what in (("status", "/te", "interval, last run, recent events"),
                            ("topology", "/te/topology", "switches, hosts, links and their state"),
                            ("placements", "/te/placements", "installed overrides and their paths"),
                            ("utilization", "/te/utilization", "planned and measured per-link utilization"),
                            ("demands", "/te/demands", "the traffic matrix the next run uses"),
                            ("switches", "/te/switches", "P4Runtime reachability of every switch")):
        client(cmd, what, _get(path))
    client("optimize", "run CSPF now", lambda a: _request(a.url, "POST", "/te/optimize"))

    ov = client("override", "add or remove a manual override", _cmd_override)
    ov.add_argument("action", choices=("add", "remove"))
    ov.add_argument("leaf")
    ov.add_argument("ingress_port", type=whole(0, 510))
    ov.add_argument("dst_prefix")
    ov.add_argument("egress_port", type=whole(0, 510), nargs="?", help="uplink port (add only)")

    dm = client("demand", "declare (or withdraw) a demand hint", _cmd_demand)
    dm.add_argument("action", choices=("add", "remove"))
    dm.add_argument("leaf")
    dm.add_argument("ingress_port", type=whole(0, 510))
    dm.add_argument("dst_prefix")
    dm.add_argument("rate_mbps", type=number(0, 1e6), nargs="?")
    dm.add_argument("--ttl", type=number(0, 1e7, lo_open=True), help="seconds until the hint expires")

    ln = client("link", "tell the app a link went down or came back", _cmd_link)
    ln.add_argument("switch")
    ln.add_argument("port", type=whole(0, 510))
    ln.add_argument("state", choices=("up", "down"))

    iv = client("interval", "show or set the optimization interval", _cmd_interval)
    iv.add_argument("seconds", type=number(0.2, 3600), nargs="?")


def _fail(msg):
    print(f"rocelab te: {msg}", file=sys.stderr)
    return 2


def _cmd_run(args):
    from testbed.clos import Clos, TopologyError
    try:
        Clos.load(args.fabric)
    except FileNotFoundError:
        return _fail(f"--fabric {args.fabric}: no such file (the Clos builder writes it)")
    except (ValueError, KeyError, TypeError, TopologyError) as exc:
        return _fail(f"--fabric {args.fabric}: not a valid fabric description: {exc}")
    if not 1 <= args.rest_port <= 65535:
        return _fail(f"--rest-port {args.rest_port} is not a TCP port")
    if not 0.2 <= args.interval <= 3600:
        return _fail(f"--interval {args.interval:g} is out of range (0.2..3600 s)")
    if args.intf_format:
        from testbed.te.collector import intf_name
        try:
            intf_name(Clos.load(args.fabric).leaves[0], 1, args.intf_format)
        except ValueError as exc:
            return _fail(f"--intf-format: {exc}")
    if args.programmer == "p4runtime":
        try:
            from testbed.control import FabricController  # noqa: F401  (checked for a clear message)
        except ImportError as exc:
            return _fail(f"--programmer p4runtime needs the fabric controller (testbed.control): {exc}; "
                         "use --programmer dry-run to run without switches")
    os.environ["ROCELAB_TE_CONFIG"] = json.dumps({
        "fabric": os.path.abspath(args.fabric), "programmer": args.programmer,
        "interval_s": args.interval, "min_rate_mbps": args.min_rate,
        "watch_operstate": not args.no_watch_links, "intf_format": args.intf_format})
    from testbed.te.launcher import run_manager
    print(f"rocelab te: REST API on http://{args.rest_host}:{args.rest_port}/te "
          f"(programmer {args.programmer}, interval {args.interval:g} s)", flush=True)
    from testbed.te.programmer import ProgrammerError
    from testbed.te.worker import RemoteError, WorkerError
    try:
        return run_manager(["--wsapi-host", args.rest_host, "--wsapi-port", str(args.rest_port),
                            *args.ryu_arg, "testbed.te.app"])
    except (ProgrammerError, WorkerError, RemoteError) as exc:
        # e.g. switches unreachable when the app connects: a message, not a traceback
        print(f"rocelab te: the app could not start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        return _fail(f"cannot serve REST on {args.rest_host}:{args.rest_port}: {exc}")


def _request(url, method, path, body=None):
    import urllib.error
    import urllib.request
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            print(resp.read().decode(), end="")
            return 0
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        try:
            text = json.loads(text).get("error", text)
        except ValueError:
            pass
        return _fail(f"{method} {path}: {exc.code}: {text}")
    except (urllib.error.URLError, OSError) as exc:
        return _fail(f"cannot reach the TE app at {url} ({getattr(exc, 'reason', exc)}); is `rocelab te run` up?")


def _get(path):
    return lambda args: _request(args.url, "GET", path)


def _key(args):
    return {"leaf": args.leaf, "ingress_port": args.ingress_port, "dst_prefix": args.dst_prefix}


def _cmd_override(args):
    if args.action == "add":
        if args.egress_port is None:
            return _fail("override add needs EGRESS_PORT (the uplink to pin the traffic to)")
        return _request(args.url, "POST", "/te/overrides", dict(_key(args), egress_port=args.egress_port))
    return _request(args.url, "DELETE", "/te/overrides", _key(args))


def _cmd_demand(args):
    if args.action == "add":
        if args.rate_mbps is None:
            return _fail("demand add needs RATE_MBPS")
        body = dict(_key(args), rate_mbps=args.rate_mbps)
        if args.ttl is not None:
            body["ttl_s"] = args.ttl
        return _request(args.url, "POST", "/te/demands", body)
    return _request(args.url, "DELETE", "/te/demands", _key(args))


def _cmd_link(args):
    return _request(args.url, "POST", f"/te/links/{args.switch}/{args.port}/{args.state}")


def _cmd_interval(args):
    if args.seconds is None:
        return _request(args.url, "GET", "/te/interval")
    return _request(args.url, "PUT", "/te/interval", {"interval_s": args.seconds})
