"""summary.json: what one experiment (`rocelab run`, a demo phase) measured.

    {
      "schema": "rocelab-summary/1",
      "name": "qpn",                         # the run's (or demo phase's) name
      "started": "2026-11-23T10:00:00",
      "duration_s": 4.2,                     # the whole traffic phase (rank start-up included,
                                             # and the ranks' stay after the final barrier: 0.3 s
                                             # in real time, two fabric RTTs in virtual time)
      "traffic_s": 0.8,                      # the collective's own time (sum of its rows' times)
      "target": "engine",                    # engine | bmv2 | kernel
      "clock": "real",                       # real (wall clock) | virtual (simulated: durations
                                             # are simulated seconds; "started" then lives in
                                             # "wall_clock": {started, elapsed_s, boot_s, events,
                                             # events_per_s}, the only part that varies between
                                             # two runs of the same arguments and seed)
      "config": {                            # what was asked for
        "topology": {spines, leaves, hosts_per_leaf, link_rate_mbps, oversubscription, rails, zones, aggs,
                     agg_oversubscription},
        "fabric": {"hash": "5tuple"|"qpn"|"flowlet", "flowlet_gap_us": N | null, "pfc": bool, "pfc_headroom": bytes | null,
                   "watchdog_s": seconds | {switch: seconds} | null,
                   "ecn": {"kmin", "kmax", "pmax"} | null | "default", "queue_depth", "delay_us",
                   "jitter_us", "loss",
                   "applied": bool,           # false: the target has no P4 knobs (kernel)
                   "effective": {"hash_mode", "qp_aware", "flowlet_gap_us", "ecn": {prio: {...}},
                                 "pfc": {prio: {"xoff", "xon", "refresh_us"}}, "pfc_pause_us"} | null},
                                             # what the switches hold, read back via the controller
        "job": {"pattern", "sizes", "iterations", "warmup", "channels", "qps_per_connection", "cts",
                "dcqcn", "chunk_bytes", "line_rate_mbps", "mtu", "ranks": [host, ...]}
      },
      "scale": {"link_rate_mbps", "uplink_rate_mbps", "production_link_gbps", "time_dilation"},
                                             # time_dilation = 400 Gb/s / link rate: a microsecond
                                             # here is time_dilation times shorter in production
      "links": [{"from", "from_port", "to", "to_port", "tx_packets", "tx_bytes", "rate_mbps",
                 "utilization"}],            # one per direction; a host's port is its NIC index;
                                             # utilization = tx_bytes*8 / traffic_s / rate (0..1)
      "queues": [{"switch", "port", "priority", "drops", "max_depth", "ecn_marked", "pfc_tx",
                  "pfc_rx", "paused_us", "tx_packets", "headroom_drops", "watchdog_storms",
                  "watchdog_drops", "pg_max_bytes"}],
                                             # only queues where something happened; drops =
                                             # tail drops, max_depth = largest sampled depth in
                                             # packets, ecn_marked/pfc_tx = what the P4 program
                                             # marked/generated on that egress port, pfc_rx =
                                             # PFC frames the port's MAC received, paused_us =
                                             # time that queue was paused; headroom_drops =
                                             # lossless packets the ingress PG (port, priority)
                                             # had no headroom for (must be 0), watchdog_storms/
                                             # _drops = PFC storms declared on the egress queue
                                             # and what it dropped, pg_max_bytes = the most the
                                             # ingress PG held in the phase (engine only)
      "buffers": {switch: {"total_bytes", "pool_bytes", "shared_used", "alpha",
                           "profiles": {pg: {"xoff", "xon", "headroom", "reserved", "lossless"}},
                           "watchdog": {"detect_s", "restore_s", "action"},
                           "loop_lag": {"samples", "p50_us", "p99_us", "p99_9_us", "max_us"}}},
                                             # engine switches: the buffer model and how late
                                             # the switch's loop ran during the phase
      "hosts": [{"name", "rank", "status", "tx_packets", "rx_packets", "oos", "cnp_tx", "cnp_rx",
                 "retransmits", "lat_timeouts", "pfc_rx", "pfc_tx", "ecn_ce_rx",
                 "ack_rtt_us": {"samples", "min", "median", "max"} | null}],
                                             # from each rank's NIC (traffic/ report counters);
                                             # ack_rtt_us: a message's last packet to its ACK in
                                             # microseconds, resends excluded (null: no report)
      "collective": {"pattern", "size_bytes", "time_us", "algbw_gbps", "busbw_gbps",
                     "algbw_GBps", "busbw_GBps", "busbw_of_line_rate", "ranks", "status",
                     "rows": [...]},         # time_us: the slowest rank's time (the collective
                                             # ends when its last rank does); *_gbps in Gbit/s,
                                             # *_GBps in GB/s as nccl-tests prints; the first size
                                             # is summarised, every size is in "rows"
      "p4": {"drops": {switch: {reason: packets}}, "ecmp_members": {switch: [...]}},
      "pcap_dir": "pcap", "pcaps": ["leaf1-eth1_in.pcap", ...],   # relative to summary.json
      "plots": ["link_load.png", "queue_depth.png", "pfc_ecn.png"],  # those with something to draw
      "errors": ["rank 2 (h3): timeout: ..."],                      # ranks that did not finish
      "status": "ok" | "failed" | "interrupted",  # failed: the collective failed or a process died;
                                             # interrupted: Ctrl-C (SIGINT) or SIGTERM during traffic
      "faults": ["switch leaf1 (pid 123) was killed by SIGKILL", ...],
                                             # processes the run watchdog found dead (they end the run)
      "interrupted_by": "SIGINT" | "SIGTERM" | null,
      # virtual time only:
      "sim_start_s": 0.0012, "sim_end_s": 0.0013,   # the phase's traffic on the simulated clock
                                             # (seconds since boot, as the captures' timestamps):
                                             # from the ranks' start to their exit (duration_s);
                                             # the fabric then idles before the next phase
      "fault_events": [{"t_s", "fault"}],    # the --fault events as they happened
      "faults_not_reached": ["link:leaf1-spine1:down@10000000us"],  # timed after the run ended
      "switch_events": [{"t_s", "switch", "event"}],   # PFC watchdog storms and restorations since
                                             # the previous phase's report
      "wall_clock": {"started", "elapsed_s", "boot_s", "events", "events_per_s"}
    }

Counters are deltas over the traffic phase (a snapshot before, one after). Beside the
summary: queue_samples.json ([t_s, switch, port, priority, depth] for every non-empty
queue, sampled every 0.1 s), ranks/ (the job, each rank's report and log), and, for the
run, fabric.json (the Clos plan) and logs/ (switch logs).
"""
import time

from traffic.collectives import BUSBW_FACTOR

SCHEMA = "rocelab-summary/1"


def collective(job, reports):
    """The `collective` section from the ranks' reports (traffic.report layout)."""
    ok = [r for r in reports if r.get("status") == "ok" and r.get("results")]
    status = "ok" if len(ok) == len(reports) and reports else "failed"
    rows = []
    for i, size in enumerate(job.sizes):
        times = [r["results"][i]["time_us"] for r in ok if i < len(r["results"])]
        if not times:
            continue
        time_us = max(times)
        algbw = size / (time_us * 1e-6) / 1e9  # GB/s
        busbw = algbw * BUSBW_FACTOR[job.pattern](job.n)
        rows.append({"size_bytes": size, "time_us": round(time_us, 2),
                     "algbw_GBps": round(algbw, 6), "busbw_GBps": round(busbw, 6),
                     "algbw_gbps": round(algbw * 8, 6), "busbw_gbps": round(busbw * 8, 6)})
    head = rows[0] if rows else {"size_bytes": job.sizes[0], "time_us": None, "algbw_GBps": None,
                                 "busbw_GBps": None, "algbw_gbps": None, "busbw_gbps": None}
    line_gbps = job.nic.line_rate_bps / 1e9
    return {"pattern": job.pattern, **head,
            "busbw_of_line_rate": round(head["busbw_gbps"] / line_gbps, 4) if head["busbw_gbps"] else None,
            "ranks": job.n, "status": status,
            "failed_ranks": [r.get("rank") for r in reports if r.get("status") != "ok"], "rows": rows}


def hosts(reports):
    out = []
    for r in sorted(reports, key=lambda r: r.get("rank", 0)):
        c = r.get("counters", {})
        out.append({"name": r.get("host"), "rank": r.get("rank"), "status": r.get("status"),
                    **{k: c.get(k, 0) for k in ("tx_packets", "rx_packets", "oos", "cnp_tx", "cnp_rx",
                                                 "retransmits", "lat_timeouts", "pfc_rx", "pfc_tx")},
                    "ecn_ce_rx": c.get("ce_rx", 0), "ack_rtt_us": r.get("ack_rtt_us")})
    return out


def with_utilization(links, duration_s):
    for link in links:
        capacity = link["rate_mbps"] * 1e6 * max(duration_s, 1e-9)
        link["utilization"] = round(link["tx_bytes"] * 8 / capacity, 4) if link["rate_mbps"] else None
    return links


def interesting(queue_rows):
    """Queues where something happened (the rest are all zeros)."""
    keys = ("drops", "max_depth", "ecn_marked", "pfc_tx", "pfc_rx", "paused_us", "headroom_drops",
            "watchdog_storms", "watchdog_drops", "pg_max_bytes")
    return [q for q in queue_rows if any(q[k] for k in keys)]


def p4_section(before, after):
    drops, members = {}, {}
    for name, c1 in after.get("p4", {}).items():
        c0 = before.get("p4", {}).get(name, {})
        d = {k: v - c0.get("drops", {}).get(k, 0) for k, v in c1.get("drops", {}).items()}
        drops[name] = {k: v for k, v in d.items() if v}
        members[name] = c1.get("ecmp_members", [])
    return {"drops": drops, "ecmp_members": members}


def build(name, target, config, clos, job, reports, before, after, queue_rows, duration_s, started, faults=(),
          interrupted=None, clock="real"):
    from testbed.net.telemetry import link_loads
    coll = collective(job, reports)
    # Rank start-up is not traffic: load is measured against the collective's own time.
    traffic_s = sum(r["time_us"] for r in coll["rows"]) * 1e-6 * (job.iterations + job.warmup) or duration_s
    return {
        "schema": SCHEMA, "name": name,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": round(duration_s, 9 if clock == "virtual" else 3), "traffic_s": round(traffic_s, 9),
        "target": target, "clock": clock,
        "config": config, "scale": clos.scale,
        "links": with_utilization(link_loads(clos, before, after), traffic_s),
        "queues": interesting(queue_rows),
        "hosts": hosts(reports),
        "collective": coll,
        "p4": p4_section(before, after),
        "pcap_dir": None, "plots": [],
        "errors": list(faults) + ([f"interrupted by {interrupted}"] if interrupted else [])
                  + [f"rank {r.get('rank')} ({r.get('host')}): {r.get('status')}: {r.get('error')}"
                     for r in reports if r.get("status") != "ok"],
        "status": ("interrupted" if interrupted else
                   "failed" if faults or coll["status"] != "ok" else "ok"),
        "faults": list(faults),
        "interrupted_by": interrupted,
    }
