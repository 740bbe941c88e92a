"""Per-host JSON reports and the tables people know: nccl-tests rows and perftest bandwidth."""
from traffic.nic import QUANTUM_BITS  # noqa: F401  (documented unit of PFC counters)

COUNTER_KEYS = ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "data_tx_bytes", "data_rx_bytes",
                "oos", "duplicates", "cnp_tx", "cnp_rx", "ce_rx", "pfc_rx", "pfc_tx", "pause_rx",
                "retransmits", "lat_timeouts", "naks_tx", "naks_rx", "acks_tx", "acks_rx", "cts_tx", "cts_rx",
                "icrc_errors", "unknown_qp", "send_errors", "tx_messages", "rx_messages", "rx_buffer_peak")


def rank_report(runner):
    job = runner.job
    nic = runner.nic.report() if runner.nic else {"qps": []}
    qp_owner = {}
    for conn in runner.conns.values():
        for qp in conn.qps:
            qp_owner[qp.local_qpn] = (conn.peer, conn.channel)
    qps = []
    for q in nic.get("qps", []):
        peer, channel = qp_owner.get(q["qpn"], (None, None))
        qps.append({"peer_rank": peer, "channel": channel, **q})
    exp_tx, exp_rx = runner.expected_bytes()
    cfg = job.nic
    return {
        "job": job.name, "pattern": job.pattern, "rank": runner.rank, "nranks": job.n,
        "host": runner.me.host, "ip": runner.me.ip, "iface": runner.me.iface,
        "status": runner.status, "error": runner.error,
        "config": {
            "channels": job.channels, "qps_per_connection": job.qps_per_connection, "qp_spread": job.qp_spread,
            "chunk_bytes": job.chunk_bytes, "cts": job.cts, "cts_buffer_bytes": job.cts_buffer_bytes,
            "cts_budget_bytes": job.cts_budget_bytes,
            "dcqcn": cfg.dcqcn.to_dict() if cfg.dcqcn else None,
            "line_rate_mbps": cfg.line_rate_bps / 1e6, "mtu": cfg.mtu, "lat_timeout_s": cfg.ack_timeout,
            "classes": {k: vars(v) for k, v in cfg.classes.items()},
        },
        "next_hops": {str(k): v for k, v in runner.next_hop_macs.items()},
        "results": runner.results,
        "perftest": runner.perftest,
        "bytes": {"expected_tx": exp_tx, "expected_rx": exp_rx,
                  "acked_tx": sum(c.acked for c in runner.conns.values()),
                  "rx": sum(c.recv_cum for c in runner.conns.values())},
        "counters": {k: nic.get(k, 0) for k in COUNTER_KEYS},
        "pfc_rx_by_priority": nic.get("pfc_rx_by_priority", [0] * 8),
        "paused_seconds_by_priority": nic.get("paused_seconds_by_priority", [0] * 8),
        "ack_rtt_us": nic.get("ack_rtt_us", {"samples": 0, "min": None, "median": None, "max": None}),
        "timing": runner.timing,
        "qps": qps,
    }


def nccl_table(report):
    """nccl-tests-style text table for one rank's results (out-of-place columns only)."""
    lines = [f"# {report['pattern']}  nranks {report['nranks']}  rank {report['rank']} ({report['host']})  "
             f"channels {report['config']['channels']}  qps/conn {report['config']['qps_per_connection']}  "
             f"cts {'on' if report['config']['cts'] else 'off'}  "
             f"dcqcn {'on' if report['config']['dcqcn'] else 'off'}  line {report['config']['line_rate_mbps']:g} Mb/s",
             "#",
             f"# {'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'root':>6} {'time':>10} {'algbw':>8} {'busbw':>8}",
             f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'':>6} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in report["results"]:
        lines.append(f"  {r['size']:>12} {r['count']:>12} {r['type']:>6} {r['redop']:>6} {r['root']:>6} "
                     f"{r['time_us']:>10.1f} {r['algbw_GBps']:>8.4f} {r['busbw_GBps']:>8.4f}")
    c = report["counters"]
    lines.append(f"# status {report['status']}"
                 + (f" ({report['error']})" if report["error"] else "")
                 + f"; OOS {c['oos']}, retransmits {c['retransmits']}, LAT timeouts {c['lat_timeouts']}, "
                   f"CNP tx/rx {c['cnp_tx']}/{c['cnp_rx']}, PFC rx {c['pfc_rx']}")
    return "\n".join(lines)


def perftest_table(report):
    lines = [f" {'#bytes':>10} {'#iterations':>12} {'BW average[Gb/sec]':>20} {'BW average[MB/sec]':>20} "
             f"{'MsgRate[Mpps]':>14}  role"]
    for p in report["perftest"]:
        lines.append(f" {p['bytes']:>10} {p['iterations']:>12} {p['bw_avg_Gbps']:>20.6f} {p['bw_avg_MBps']:>20.3f} "
                     f"{p['msg_rate_Mpps']:>14.6f}  {p['role']}")
    return "\n".join(lines)
