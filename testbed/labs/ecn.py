"""Lab ecn (virtual time): tight ECN thresholds slow a collective down.

Meta first ran DCQCN with strict ECN thresholds to avoid PFC; tight thresholds cut collective
throughput, and a 32-GPU AllReduce was about 5% slower with ECN at 300 KB / 600 KB than with
the relaxed 5 MB / 5 MB of their CTSWs (Figure 12), so they went back to 5 MB. The lab runs a
32-rank ring AllReduce with DCQCN on every NIC on a 16-uplink Clos where 5-tuple ECMP
collides some ring flows: the queues that form behind collisions cross 300 KB but never
5 MB, so the tight profile marks, the receivers send CNPs and the senders cut their rates
below what the links could carry.
"""
from testbed.labs import metrics, production
from testbed.labs.base import Column, Phase
from testbed.labs.virtual import Finding, VirtualLab, seeds_plot
from testbed.sim import profile

RELAXED = (5_000_000, 5_000_000)     # the paper's baseline: 5 MB as both low and high thresholds
TIGHT = (300_000, 600_000)           # the tighter threshold: 300 KB low, 600 KB high
PMAX = 1.0                           # marking probability at Kmax (a step for the relaxed profile)
NCCL_BUFFER_BYTES = 4 << 20
# DCQCN at its published timescales (Zhu et al., SIGCOMM 2015: a CNP per flow at most every
# 50 us, alpha updated and rate increased every 55 us, 10 MB byte counter), not the job's lab
# defaults, which are stretched for megabit links.
CNP_INTERVAL_S = 50e-6
DCQCN = {"g": 1 / 256, "alpha_period_s": 55e-6, "timer_period_s": 55e-6, "byte_counter": 10_000_000}


def ecn_packets(kmin_bytes, kmax_bytes):
    """The program's packet thresholds for a byte profile (Kmin < Kmax, as the knobs require)."""
    kmax = profile.packets(kmax_bytes)
    return min(profile.packets(kmin_bytes), kmax - 1), kmax, PMAX


class TightEcn(VirtualLab):
    name = "ecn"
    title = "ECN thresholds with DCQCN: relaxed 5 MB vs tight 300 KB / 600 KB (32-rank AllReduce, 400G)"
    finding = ("tight ECN thresholds (300 KB / 600 KB) with DCQCN made a 32-GPU AllReduce ~5% slower than the "
               "relaxed 5 MB; Meta reverted to 5 MB (Figure 12, section 5.2.1)")
    columns = [Column("ecn", "ECN Kmin/Kmax"), Column("time_us", "AllReduce time (us)", "{:.1f}"),
               Column("busbw_gbps", "busbw (Gb/s)", "{:.1f}"), Column("ecn_marked", "CE marks"),
               Column("cnp", "CNPs"), Column("pfc_frames", "PFC frames"),
               Column("peak_queue_kb", "peak queue (KB)", "{:.0f}"), Column("slowdown", "vs relaxed", "{:+.1%}")]
    port_defaults = production.PORTS
    findings = [
        Finding("slowdown", "AllReduce completion time, tight over relaxed ECN (DCQCN on)",
                "tight 300 KB / 600 KB thresholds: ~5% longer completion time (Figure 12)",
                holds=lambda v: v > 0, direction="tight slower (> 0%)", paper_value=0.05, unit="%", fmt="{:+.1%}"),
        Finding("tight_marks", "CE marks with the tight profile", "tight thresholds mark (and trigger DCQCN)",
                holds=lambda v: v > 0, direction="marks (> 0)", fmt="{:.0f}"),
    ]

    def shape(self, quick):
        return dict(spines=16, leaves=2, hosts_per_leaf=16, link_rate_mbps=profile.LINK_RATE_MBPS,
                    oversubscription=1.0)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = (4 if quick else 16) << 20
        job = production.ring_job(clos, size, seed=self.seed, name="ring-ecn", dcqcn=True)
        # NCCL's default channel buffer (NCCL_BUFFSIZE, 4 MiB) as each connection's CTS credit:
        # collided flows can then queue past 300 KB, as they do in production
        job["cts"] = {"enabled": True, "buffer_bytes": NCCL_BUFFER_BYTES}
        job["dcqcn"] = dict(DCQCN, enabled=True)
        job["nic"]["cnp_interval_s"] = CNP_INTERVAL_S
        out = []
        for name, (kmin, kmax) in (("relaxed-5MB", RELAXED), ("tight-300KB-600KB", TIGHT)):
            out.append(Phase(name, FabricSettings(hash="5tuple", ecn=ecn_packets(kmin, kmax)), job,
                             label={"ecn": f"{kmin / 1e3:g} KB / {kmax / 1e3:g} KB"}))
        return out

    def row(self, phase, summary, facts):
        q = summary["queues"]
        return {"time_us": summary["collective"]["time_us"],
                "busbw_gbps": metrics.round_or_none(summary["collective"]["busbw_gbps"]),
                "ecn_marked": sum(r["ecn_marked"] for r in q),
                "cnp": metrics.host_total(summary, "cnp_tx"),
                "pfc_frames": sum(r["pfc_tx"] for r in q),
                "peak_queue_kb": max((r["max_depth"] for r in q), default=0) * profile.FRAME_BYTES / 1024,
                "lossless_drops": sum(r["drops"] for r in q if r["priority"] == 3)}

    def build(self, clos, rows, quick, target, scale, errors):
        base = rows[0].get("time_us") if rows else None
        for r in rows:
            r["slowdown"] = round(r["time_us"] / base - 1, 5) if base and r.get("time_us") else None
        return super().build(clos, rows, quick, target, scale, errors)

    def notes(self, clos, rows):
        return {"thresholds": f"in the program's packets of {profile.FRAME_BYTES} B: relaxed "
                              f"{ecn_packets(*RELAXED)[:2]}, tight {ecn_packets(*TIGHT)[:2]}; marking probability "
                              f"{PMAX:g} at Kmax",
                "traffic": "ring AllReduce on 32 ranks, every hop across the spines, DCQCN on every NIC, "
                           "4 MiB of CTS credit per connection (NCCL's channel buffer); DCQCN: CNPs at most every 50 us per flow, "
                           "alpha and rate timers 55 us, byte counter 10 MB, g 1/256 (the DCQCN paper's values)"}

    def figures(self, seed_lab):
        rows = {r["phase"]: r for r in seed_lab["phases"] if r.get("status") == "ok"}
        tight = rows.get("tight-300KB-600KB")
        return {"slowdown": tight.get("slowdown") if tight and "relaxed-5MB" in rows else None,
                "tight_marks": tight.get("ecn_marked") if tight else None}

    def plots(self, result, out):
        seeds_plot(result, out / "time.png", lambda r: r.get("time_us"), "AllReduce completion time (us)",
                   "ECN thresholds with DCQCN: completion time per seed")
        return [{"file": "time.png", "title": "AllReduce completion time, relaxed vs tight ECN",
                 "caption": "One line per seed: the same 32-rank AllReduce with DCQCN, first with ECN at 5 MB (the "
                            "paper's baseline), then at 300 KB / 600 KB. The line rises: tight thresholds mark the "
                            "queues behind ECMP collisions and DCQCN slows the senders (the paper: ~5% slower)."}]


VIRTUAL = TightEcn()
LAB = None      # virtual time only: the paper's byte thresholds mean nothing at lab rates
