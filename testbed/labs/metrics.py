"""The figures a lab reads from one phase's summary.json (schema: testbed/net/summary.py),
and the rank placements the labs share. Pure functions: testable on synthetic summaries.
"""
import random


def _role(node):
    for role in ("leaf", "spine", "agg"):
        if role in node:
            return role
    return "host"


def uplinks(summary):
    """The leaf -> spine link directions, each with its tx_bytes and utilization."""
    return [l for l in summary["links"] if _role(l["from"]) == "leaf" and _role(l["to"]) == "spine"]


def uplink_bytes(summary):
    """{"leaf1:5->spine1": bytes}: what each uplink carried (the labs' per-link plots)."""
    return {f"{l['from']}:{l['from_port']}->{l['to']}": l["tx_bytes"] for l in uplinks(summary)}


def load_ratio(links, key="tx_bytes"):
    """max/mean of `key` over `links` (1.0 = perfectly even); None when nothing was carried."""
    values = [l[key] or 0 for l in links]
    if not values or not sum(values):
        return None
    return max(values) / (sum(values) / len(values))


def max_fabric_utilization(summary):
    """The busiest switch-to-switch link direction's utilization (0..1) over the traffic time."""
    fabric = [l["utilization"] for l in summary["links"]
              if _role(l["from"]) != "host" and _role(l["to"]) != "host" and l["utilization"] is not None]
    return max(fabric, default=0.0)


def busbw_mbps(summary):
    c = summary["collective"]
    return c["busbw_gbps"] * 1000 if c["busbw_gbps"] else None


def host_total(summary, key):
    return sum(h.get(key, 0) for h in summary["hosts"])


def queue_figures(summary):
    """Peak queue depth (packets), PFC frames the switches sent, time queues spent paused
    (ms, summed over queues), tail drops: the incast lab's columns."""
    q = summary["queues"]
    return {"peak_queue_pkts": max((r["max_depth"] for r in q), default=0),
            "pfc_frames": sum(r["pfc_tx"] for r in q),
            "paused_ms": round(sum(r["paused_us"] for r in q) / 1000, 1),
            "drops": sum(r["drops"] for r in q),
            "lossless_drops": lossless_drops(summary),
            "host_pfc_rx": host_total(summary, "pfc_rx")}


def lossless_drops(summary):
    """Packets of the PFC priorities the switches lost: tail drops of their queues, headroom
    drops of their ingress PGs, PFC watchdog drops. Wherever PFC is on this must be 0."""
    fabric = (summary.get("config") or {}).get("fabric") or {}
    prios = {int(p) for p in ((fabric.get("effective") or {}).get("pfc") or {})}
    return sum(r["drops"] + r.get("headroom_drops", 0) + r.get("watchdog_drops", 0)
               for r in summary["queues"] if r["priority"] in prios)


def round_or_none(value, digits=3):
    return None if value is None else round(value, digits)


# --- placements -------------------------------------------------------------------------

def by_leaf(ranks):
    groups = {}
    for r in ranks:
        groups.setdefault(r["leaf"], []).append(r)
    return [groups[leaf] for leaf in sorted(groups, key=lambda n: (len(n), n))]


def interleaved(ranks, seed=0):
    """The job's ranks reordered so that ring neighbours sit on different leaves (every ring
    hop crosses the spines), hosts within a leaf shuffled by `seed`: the same traffic
    matrix with different 5-tuples (QP numbers follow ranks, UDP ports follow QPs)."""
    rng = random.Random(seed)
    groups = [list(g) for g in by_leaf(ranks)]
    for g in groups:
        rng.shuffle(g)
    out = []
    while any(groups):
        for g in groups:
            if g:
                out.append(g.pop(0))
    return out


def expected_max_mean(flows_per_leaf, uplinks_per_leaf, leaves, trials=20000, seed=1):
    """What uniform random hashing predicts for max/mean uplink load when each of `leaves`
    leaves hashes `flows_per_leaf` equal flows onto `uplinks_per_leaf` uplinks (balls into
    bins, averaged over `trials`; seeded, so the same every time)."""
    rng = random.Random(seed)
    total_bins = leaves * uplinks_per_leaf
    mean = leaves * flows_per_leaf / total_bins
    acc = 0.0
    for _ in range(trials):
        worst = 0
        for _leaf in range(leaves):
            bins = [0] * uplinks_per_leaf
            for _flow in range(flows_per_leaf):
                bins[rng.randrange(uplinks_per_leaf)] += 1
            worst = max(worst, max(bins))
        acc += worst / mean
    return acc / trials


# NCCL-style slicing: a ring step's data moves in RING_SLICE_BYTES messages, each forwarded
# as soon as it arrived, and steps do not wait for ACKs. Without it every step of 32 KB
# (~130 ms at 2 Mb/s) also waited a full ACK round trip (70-170 ms, mostly queueing), so the
# ring was latency-bound and busbw hardly followed the uplink balance (+10% with 8 QPs).
# Slices are also what QP scaling spreads: round robin over QPs works per message, so one
# 32 KB message a step put a whole step on one QP (one uplink) at a time.
RING_SLICE_BYTES = 8192


def ring_job(clos, size, seed=0, qps=1, name=None):
    """Ring AllReduce on every host, ring neighbours on different leaves (see interleaved),
    pipelined in slices, with the runner's default per-connection CTS admission."""
    from testbed.net.experiment import job_for
    job = job_for(clos, "ring_allreduce", [size], qps_per_connection=qps, name=name, chunk_bytes=RING_SLICE_BYTES)
    job["ranks"] = interleaved(job["ranks"], seed)
    job["slicing"] = True
    return job


# The Clos the ring labs share: each leaf's 4 hosts send 4 ring flows up over 4 uplinks
# that run at the host rate (1:1), so where the hash puts them decides the collective's speed.
# 2 Mb/s, not 10: at 10 Mb/s on a loaded 2-core machine the engine switches could not drain
# their ports at line rate (qpscaling, 5-tuple: uplinks 7-14% utilized with 30-90 packets
# queued, busbw 6-9% of line whatever the hashing), so the CPU, not the links, set the pace
# and hashing could not matter. At 2 Mb/s the doubled uplink ran at 84%: link-bound again.
RING_SHAPE = dict(spines=4, leaves=2, hosts_per_leaf=4, link_rate_mbps=2.0, oversubscription=1.0)
# Headroom above XOFF before the per-PG buffer (issue 14): with the default 64-packet queues the
# collided uplink tail-dropped (qpscaling, 5-tuple: 159 drops at leaf1 port 5 despite PFC), and
# each loss cost go-back-N and local ACK timeouts of ~1 s at 2 Mb/s, which swamped the hashing
# effect. Lossless queues have no packet limit now (PG headroom absorbs late reactions); the
# 256 packets only size the lossy queues.
RING_PORTS = {"queue_depth": 256}


def ring_size(quick):
    """The ring labs' AllReduce size: ~7 s per phase at 2 Mb/s with a collided uplink."""
    return (128 if quick else 256) * 1024


def ack_rtt_us(summary):
    """The median of the ranks' median ACK RTTs (hosts' ack_rtt_us: resends excluded), and their min."""
    medians, mins = [], []
    for host in summary["hosts"]:
        rtt = host.get("ack_rtt_us") or {}
        if rtt.get("samples"):
            medians.append(rtt["median"])
            mins.append(rtt["min"])
    if not medians:
        return None, None
    return sorted(medians)[len(medians) // 2], min(mins)
