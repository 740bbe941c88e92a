"""`rocelab traffic ...`: run one rank of a job inside a host, check jobs, write sample packets."""
import argparse
import signal
import sys

from testbed.argtypes import output_file, whole

EPILOG = """\
a job is a JSON file; the smallest one names a pattern and the ranks' hosts:
  {"pattern": "ring_allreduce", "sizes": [1048576],
   "ranks": [{"host": "h1", "ip": "10.0.0.1", "mac": "02:00:00:00:00:01", "iface": "h1-eth0"},
             {"host": "h2", "ip": "10.0.0.2", "mac": "02:00:00:00:00:02", "iface": "h2-eth0"}]}
patterns: ring_allreduce tree_allreduce allgather reducescatter alltoall alltoallv incast pipeline
          stream workload (one training iteration; "preset": "dense" or "moe")
every other key (channels, qps_per_connection, qp_spread, chunk_bytes, cts, dcqcn, classes, nic,
timeout_s, ...) is optional; `python3 -c "import traffic.job; help(traffic.job)"` lists them.

typical use, one process per host (e.g. in each Mininet host):
  rocelab traffic check --job job.json               # validate; show each rank's peers and bytes
  rocelab traffic run --job job.json --rank 0 --out rank0.json
"""


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    groups = p.add_subparsers(dest="traffic_cmd", metavar="COMMAND")

    run = groups.add_parser("run", help="run one rank of a job in this host (namespace); writes a JSON report",
                            description="Run rank N of the job on this host's interface (needs root for the raw "
                                        "socket), coordinating with the other ranks over the network; exits by "
                                        "itself within the job's timeout_s and writes its report even on failure. "
                                        "Exit status: 0 ok, 1 the run failed or timed out, 2 bad arguments or job, "
                                        "130 interrupted.",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--job", required=True, help="job description (JSON)")
    run.add_argument("--rank", required=True, type=whole(0, 100_000), help="this process's rank (index into job.ranks)")
    run.add_argument("--out", type=output_file, help="write the JSON report here (default: print it)")
    run.add_argument("--quiet", action="store_true", help="do not print the nccl-tests table")
    run.set_defaults(func=_run)

    check = groups.add_parser("check", help="validate a job file and print each rank's schedule summary",
                              description="Validate a job file (errors name the bad key) and print, per rank, "
                                          "its host, peers and the bytes it sends and receives.",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--job", required=True)
    check.set_defaults(func=_check)

    pcap = groups.add_parser("pcap", help="write a capture with one of every frame the NIC sends")
    pcap.add_argument("out", help="pcap file to write")
    pcap.set_defaults(func=_pcap)

    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _run(args):
    import json
    from traffic.job import JobError, load_job
    from traffic.report import nccl_table, perftest_table
    from traffic.runner import RankRunner
    try:
        job = load_job(args.job)
        runner = RankRunner(job, args.rank, log=lambda m: print(m, file=sys.stderr) if not args.quiet else None)
    except (JobError, ValueError) as exc:
        print(f"rocelab traffic run: {exc}", file=sys.stderr)
        return 2
    # SIGTERM (an experiment runner stopping us) ends the run like Ctrl-C: the report still gets written.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    report = runner.run()
    text = json.dumps(report, indent=1)
    if args.out:
        try:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        except OSError as exc:
            print(f"rocelab traffic run: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
            return 2
    else:
        print(text)
    if not args.quiet:
        print(nccl_table(report), file=sys.stderr if not args.out else sys.stdout)
        if report["perftest"]:
            print(perftest_table(report), file=sys.stderr if not args.out else sys.stdout)
    if report["status"] != "ok":
        print(f"rocelab traffic run: rank {args.rank}: {report['status']}: {report['error']}", file=sys.stderr)
        return 130 if report["status"] == "interrupted" else 1
    return 0


def _check(args):
    from traffic import collectives
    from traffic.job import JobError, load_job
    try:
        job = load_job(args.job)
    except JobError as exc:
        print(f"rocelab traffic check: {exc}", file=sys.stderr)
        return 2
    print(f"job {job.name}: {job.pattern}, {job.n} ranks, sizes {job.sizes}, channels {job.channels}, "
          f"{job.qps_per_connection} QP(s)/connection ({job.qp_spread}), CTS {'on' if job.cts else 'off'}, "
          f"DCQCN {'on' if job.nic.dcqcn else 'off'}, {job.nic.line_rate_bps / 1e6:g} Mb/s, MTU {job.nic.mtu}")
    for r in job.ranks:
        tx, rx = collectives.expected_bytes(job.pattern, r.rank, job.n, job.sizes[0], job.chunk_bytes,
                                            job.alltoallv_weights, job.preset)
        print(f"  rank {r.rank:3d} {r.host:>10} {r.ip:>15} {r.iface:>15}  peers "
              f"{collectives.peers(job.pattern, r.rank, job.n, weights=job.alltoallv_weights, preset=job.preset)}  size {job.sizes[0]}: sends {tx} B, receives {rx} B "
              f"per channel-operation")
    return 0


def _pcap(args):
    from traffic.samples import write_sample_pcap
    try:
        n = write_sample_pcap(args.out)
    except OSError as exc:
        print(f"rocelab traffic pcap: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {n} frames to {args.out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="traffic")
    sub = parser.add_subparsers(dest="group")
    register(sub, "traffic", __doc__)
    a = parser.parse_args(["traffic"] + sys.argv[1:])
    sys.exit(a.func(a))
