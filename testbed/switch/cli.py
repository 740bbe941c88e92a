"""`rocelab switch`: run the engine as a software switch, with simple_switch_grpc's habits.

    rocelab switch -i 1@veth1 -i 2@veth2 --cpu-port 255 --pcap /tmp/caps prog.p4

Ports are AF_PACKET sockets on the named interfaces. Without a program the
switch waits for a controller's SetForwardingPipelineConfig (P4Info plus the
P4 source as device config). The switch agent (rates, queue depths, PFC,
impairments, counters) listens on --agent-addr. SIGTERM/SIGINT exit cleanly.
"""
import argparse
import math
import sys

from testbed.argtypes import host_port, number, probability, whole

DEFAULT_GRPC = "127.0.0.1:9559"
MAX_QUEUE_DEPTH = 1 << 20      # packets
MAX_DELAY_US = 10_000_000.0    # 10 s: an impairment, not a link that never delivers
MAX_RATE_BPS = 1e12
AGENT_PORT_OFFSET = 100   # default agent port = gRPC port + 100 (like BMv2's separate thrift port)


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", nargs="?", metavar="PROG.p4",
                   help="P4_16 v1model program (omit to wait for SetForwardingPipelineConfig)")
    p.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFACE",
                   help="attach switch port PORT to interface IFACE (repeatable)")
    p.add_argument("--grpc-server-addr", type=host_port, default=DEFAULT_GRPC, metavar="HOST:PORT",
                   help=f"P4Runtime server address (default {DEFAULT_GRPC})")
    p.add_argument("--device-id", type=whole(0, (1 << 64) - 1), default=0, help="P4Runtime device id (default 0, as BMv2)")
    p.add_argument("--cpu-port", type=whole(0, 510), default=None, metavar="N",
                   help="port number that carries packet-in/packet-out to the controller")
    p.add_argument("--pcap", nargs="?", const=".", default=None, metavar="DIR",
                   help="write <iface>_in.pcap and <iface>_out.pcap per port into DIR (made if missing; default .)")
    p.add_argument("--log-console", action="store_true", help="print a per-packet trace to stdout")
    p.add_argument("--agent-addr", type=_agent_address, default=None, metavar="HOST:PORT",
                   help="switch agent address (default: gRPC host, gRPC port + 100; 'none' disables)")
    p.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                   help="include directory for the P4 preprocessor")
    p.add_argument("--target", choices=("engine", "bmv2"), default="engine",
                   help="refuse a program this target cannot run (bmv2: what p4c-bm2-ss refuses) before starting")
    p.add_argument("--rate", type=_rate_option, default=None, metavar="BPS",
                   help="egress rate of every port, bits/s with optional k/M/G suffix (default unlimited)")
    p.add_argument("--queue-depth", type=whole(1, MAX_QUEUE_DEPTH), default=None, metavar="PKTS",
                   help="depth limit of every egress queue in packets (default 64)")
    p.add_argument("--pfc", default=None, metavar="PRIOS",
                   help="priorities whose received PFC frames pause the port, e.g. 3,4 or all")
    p.add_argument("--delay-us", type=number(0, MAX_DELAY_US), default=0.0, help="propagation delay of every port (µs)")
    p.add_argument("--jitter-us", type=number(0, MAX_DELAY_US), default=0.0, help="jitter of every port (µs, uniform ±)")
    p.add_argument("--loss", type=probability, default=0.0, help="random loss probability of every port (0..1)")
    p.set_defaults(func=run)


def parse_rate(text):
    """'10M' -> 10_000_000 bits/s."""
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}
    t = text.strip().lower().removesuffix("bps").removesuffix("b/s")
    factor = scale.get(t[-1:], 1)
    if t[-1:] in scale:
        t = t[:-1]
    try:
        value = float(t) * factor
    except ValueError:
        raise ValueError(f"--rate {text!r}: expected bits/s such as 10M or 1.5G") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_RATE_BPS:
        raise ValueError(f"--rate {text!r}: expected a rate from 0 to {MAX_RATE_BPS:g} bits/s")
    return int(value)


def _rate_option(text):
    try:
        parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
    return text


def _agent_address(text):
    return text if text.lower() == "none" else host_port(text)


def parse_priorities(text):
    if text.strip().lower() == "all":
        return list(range(8))
    if text.strip().lower() in ("none", ""):
        return []
    try:
        prios = [int(p) for p in text.split(",")]
    except ValueError:
        raise ValueError(f"--pfc {text!r}: expected priorities like 3,4 or 'all'") from None
    bad = [p for p in prios if not 0 <= p <= 7]
    if bad:
        raise ValueError(f"--pfc {text!r}: priorities {bad} not in 0..7")
    return prios


def _fail(message, status=2):
    print(f"rocelab switch: {message}", file=sys.stderr)
    return status


def run(args):
    import os
    from functools import partial
    import signal
    import threading
    import time

    from testbed.switch.ports import PortError, RawPort, parse_port_spec

    try:
        specs = [parse_port_spec(s) for s in args.interface]
        rate = parse_rate(args.rate) if args.rate else None
        pfc_prios = parse_priorities(args.pfc) if args.pfc is not None else None
        numbers = [n for n, _ in specs]
        if len(set(numbers)) != len(numbers):
            raise ValueError("a port number is given twice with -i")
        if args.cpu_port is not None and args.cpu_port in numbers:
            raise ValueError(f"--cpu-port {args.cpu_port} is also a data port (-i)")
        if not 0.0 <= args.loss <= 1.0:
            raise ValueError(f"--loss {args.loss} is not a probability in 0..1")
        if args.pcap is not None and os.path.exists(args.pcap) and not os.path.isdir(args.pcap):
            raise ValueError(f"--pcap: {args.pcap!r} exists and is not a directory")
        from testbed.switch.agent import parse_address
        grpc_host, grpc_port = parse_address(args.grpc_server_addr)
        if args.agent_addr is None and grpc_port + AGENT_PORT_OFFSET > 65535:
            raise ValueError(f"--grpc-server-addr port {grpc_port}: the default agent port (+{AGENT_PORT_OFFSET}) "
                             "would pass 65535; give --agent-addr")
        agent_addr = args.agent_addr or f"{grpc_host}:{grpc_port + AGENT_PORT_OFFSET}"
    except (PortError, ValueError) as exc:
        return _fail(str(exc))

    program = None
    if args.program:
        if not os.path.isfile(args.program):
            return _fail(f"{args.program}: no such file")
        try:
            from testbed.p4engine import P4Error
            from testbed.p4engine.isolated import compile_file_isolated
        except ImportError as exc:
            return _fail(f"the P4 engine is not available: {exc}", 1)
        try:
            # in a child process: the parse would leave ~18 MB in this long-running one
            program = compile_file_isolated(args.program, include_dirs=tuple(args.include), target=args.target)
        except P4Error as exc:
            print(str(exc), file=sys.stderr)
            return 1

    from testbed.p4rt.server import P4RuntimeServer, compile_device_config
    from testbed.switch.agent import AgentServer, EngineAgent
    from testbed.switch.datapath import Switch
    from testbed.switch.pcap import PortCaptures

    log = _console_log if args.log_console else None
    ports = {}
    try:
        for number, iface in specs:
            ports[number] = RawPort(number, iface)
    except PortError as exc:
        for port in ports.values():
            port.close()
        return _fail(str(exc), 1)
    captures = None
    if args.pcap:
        try:   # made here, as rocelab's other --pcap/--out directories are, once the ports opened
            os.makedirs(args.pcap, exist_ok=True)
        except OSError as exc:
            for port in ports.values():
                port.close()
            return _fail(f"--pcap {args.pcap}: cannot create the directory: {exc.strerror or exc}", 2)
        captures = PortCaptures(args.pcap, {n: p.iface for n, p in ports.items()})
    switch = Switch(ports, cpu_port=args.cpu_port, captures=captures, log=log)
    switch.notice = _console_log        # rare events (PFC watchdog storms) go to the switch's log
    for egress in switch.egress_ports.values():
        if egress.number == args.cpu_port:
            continue
        if rate is not None:
            egress.set_rate(rate)
        if args.queue_depth is not None:
            egress.set_depth(args.queue_depth)
        if pfc_prios is not None:
            egress.set_pfc(pfc_prios)
        egress.set_impairments(args.delay_us, args.jitter_us, args.loss)

    # pipelines pushed later are held to the same target's limits as the program given here
    server = P4RuntimeServer(switch, device_id=args.device_id, address=args.grpc_server_addr,
                             compiler=partial(compile_device_config, target=args.target))
    agent_server = None
    try:
        # The agent's port is bound first: once the P4Runtime port answers (what the fabric
        # waits for), the switch is up, and not about to exit because the agent's port is taken.
        if agent_addr.lower() != "none":
            agent_server = AgentServer(EngineAgent(switch), agent_addr)
        server.start()
        if agent_server:
            agent_server.start()
    except (OSError, ValueError) as exc:
        if agent_server:
            agent_server.stop()
        server.stop()
        switch.close()
        return _fail(str(exc), 1)
    if program is not None:
        source = getattr(program, "source", "") or open(args.program).read()
        server.load_program(program, device_config=source.encode())

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # A data path that died takes the whole switch down (no zombie answering P4Runtime).
    switch.on_failure = lambda reason: stop.set()
    switch.start()
    print(f"rocelab switch: ports {', '.join(f'{n}@{p.iface}' for n, p in sorted(ports.items())) or 'none'}; "
          f"P4Runtime on {args.grpc_server_addr} (device {args.device_id}); "
          f"agent on {agent_server.address if agent_server else 'none'}; "
          f"{'program ' + args.program if program else 'waiting for SetForwardingPipelineConfig'}",
          flush=True)
    while not stop.wait(0.5):
        pass
    if switch.failure:
        print(f"rocelab switch: data path failed: {switch.failure}; stopping", file=sys.stderr, flush=True)
    server.stop()
    if agent_server:
        agent_server.stop()
    switch.close()
    if args.log_console:
        sys.stdout.flush()
    print(f"rocelab switch: stopped at {time.strftime('%H:%M:%S')}", flush=True)
    return 1 if switch.failure else 0


def _console_log(line):
    import time
    now = time.time()
    sys.stdout.write(f"[{time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}] {line}\n")
