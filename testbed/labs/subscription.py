"""Lab subscription (virtual time): Meta's four stages of one AI zone (section 6.2, Figure 16).

Stage 1: RTSW uplinks 1:1 with static (ECMP) routing: collisions make AllReduce slow and its
speed depends on where the flows land. Stage 2: uplinks doubled (1:2 under-subscription):
a collision of two flows still fits, the slowdown goes. Stage 3: 1:2 with centralized TE:
the same speed with a tighter band. Stage 4: TE with the uplinks cut back to 1:1.125: no
loss of performance. Each stage is its own fabric (the uplink rate differs); each seed
moves every switch's hash seed, so the band over seeds is the spread from placement luck.
"""
from pathlib import Path

from testbed.labs import metrics, production
from testbed.labs.base import Column, Lab, Phase, run_lab
from testbed.labs.te import start_te, stop_te
from testbed.labs.virtual import Finding, VirtualLab
from testbed.sim import profile

STAGES = [("stage1-1:1-static", 1.0, False), ("stage2-1:2-static", 0.5, False),
          ("stage3-1:2-te", 0.5, True), ("stage4-1:1.125-te", 1 / 1.125, True)]


class _Stage(Lab):
    """One stage: its own Clos (uplinks at the stage's subscription) and one AllReduce."""

    def __init__(self, parent, name, oversubscription, te, quick):
        self.parent, self.name, self.te = parent, name, te
        self.oversubscription = oversubscription
        self.clock = "virtual"
        self.port_defaults = production.PORTS
        self.columns = parent.columns
        self.title = parent.title

    def shape(self, quick):
        return dict(self.parent.base_shape(quick), oversubscription=self.oversubscription)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        job = production.ring_job(clos, self.parent.size(quick), seed=self.parent.seed, name=f"ring-{self.name}")
        return [Phase(self.name, FabricSettings(hash="5tuple"), job,
                      before=start_te(clos, job) if self.te else None, after=stop_te if self.te else None,
                      label={"uplinks": f"1:{1 / self.oversubscription:g}",
                             "routing": "TE (CSPF)" if self.te else "static (5-tuple ECMP)"})]

    def row(self, phase, summary, facts):
        up = metrics.uplinks(summary)
        return {"busbw_gbps": metrics.round_or_none(summary["collective"]["busbw_gbps"]),
                "busbw_of_line": summary["collective"]["busbw_of_line_rate"],
                "uplink_max_mean": metrics.round_or_none(metrics.load_ratio(up)),
                "busiest_uplink_util": max((l["utilization"] or 0 for l in up), default=None),
                "overrides": facts.get("overrides", 0),
                "lossless_drops": sum(q["drops"] for q in summary["queues"] if q["priority"] == 3)}


class Subscription(VirtualLab):
    name = "subscription"
    title = "uplink subscription and routing: 1:1 static, 1:2 static, 1:2 + TE, 1:1.125 + TE (400G hosts)"
    finding = ("1:1 with static routing is slow and inconsistent (collisions); 1:2 under-subscription removes the "
               "slowdown; TE at 1:2 performs the same with a tighter band; TE keeps that at 1:1.125 (Figure 16)")
    columns = [Column("uplinks", "host:uplink capacity"), Column("routing", "routing"),
               Column("overrides", "TE overrides"), Column("uplink_max_mean", "uplink max/mean", "{:.2f}"),
               Column("busbw_gbps", "busbw (Gb/s)", "{:.1f}"), Column("busbw_of_line", "of host line rate", "{:.0%}")]
    findings = [
        Finding("stage2_gain", "busbw, 1:2 static over 1:1 static",
                "a significant performance increase from Stage 1 to Stage 2 (Figure 16)",
                holds=lambda v: v > 0, direction="faster (> 0%)", unit="%", fmt="{:+.0%}"),
        Finding("stage3_vs_stage2", "busbw, 1:2 + TE over 1:2 static", "Stage 3: similar performance to Stage 2",
                holds=lambda v: v > -0.10, direction="similar or better (> -10%)", unit="%", fmt="{:+.0%}"),
        Finding("stage4_vs_stage2", "busbw, 1:1.125 + TE over 1:2 static",
                "Stage 4: no negative impact from reclaiming uplinks to 1:1.125", holds=lambda v: v > -0.10,
                direction="similar or better (> -10%)", unit="%", fmt="{:+.0%}"),
    ]

    def base_shape(self, quick):
        return dict(spines=16, leaves=2, hosts_per_leaf=16, link_rate_mbps=profile.LINK_RATE_MBPS)

    def size(self, quick):
        return (2 if quick else 8) << 20

    def shape(self, quick):
        return dict(self.base_shape(quick), oversubscription=1.0)

    def stages(self, quick):
        return [_Stage(self, name, over, te, quick) for name, over, te in STAGES]

    def phases(self, clos, quick):          # validation: every stage's job builds
        return [p for st in self.stages(quick) for p in st.phases(clos, quick)]

    def run_seed(self, out, seed, quick, pcap=True, log=print):
        self.seed = seed
        rows, errors, first = [], [], None
        for stage in self.stages(quick):
            result = run_lab(stage, Path(out) / stage.name, quick=quick, clock="virtual", seed=seed, pcap=pcap,
                             log=log)
            first = first or result
            for r in result["phases"]:
                rows.append(dict(r, dir=f"{stage.name}/{r['dir']}"))
            errors += result["errors"]
        return {**first, "phases": rows, "errors": errors,
                "notes": {"stages": "each stage boots its own fabric: 16 spines x 2 leaves x 16 hosts at 400G, "
                                    "uplinks at 400, 800, 800 and 450 Gb/s"}}

    def figures(self, seed_lab):
        rows = {r["phase"]: r.get("busbw_gbps") for r in seed_lab["phases"] if r.get("status") == "ok"}
        s1, s2, s3, s4 = (rows.get(name) for name, _o, _t in STAGES)
        out = {}
        if s1 and s2:
            out["stage2_gain"] = s2 / s1 - 1
        if s2 and s3:
            out["stage3_vs_stage2"] = s3 / s2 - 1
        if s2 and s4:
            out["stage4_vs_stage2"] = s4 / s2 - 1
        return out

    def cross_seed(self, result):
        """The band: spread of busbw over the seeds, per stage (the paper's "tighter band")."""
        bands = {}
        for name, _o, _t in STAGES:
            values = [r["busbw_gbps"] for d in result["seeds_detail"] for r in d["phases"]
                      if r["phase"] == name and r.get("busbw_gbps")]
            if values:
                bands[name] = (max(values) - min(values)) / (sum(values) / len(values))
        s1, s3 = bands.get(STAGES[0][0]), bands.get(STAGES[2][0])
        return [{"key": "band", "title": "busbw band over seeds ((max-min)/mean): stage 1 vs stage 3",
                 "paper": "Stage 3 (TE): similar performance with a tighter band",
                 "direction": "TE's band tighter", "seeds": ["all"], "shown": [
                     f"static 1:1 {s1:.0%}, TE 1:2 {s3:.0%}" if s1 is not None and s3 is not None else "-"],
                 "mean_shown": "-", "holds_count": int(s1 is not None and s3 is not None and s3 <= s1),
                 "holds": [s1 is not None and s3 is not None and s3 <= s1], "values": [bands],
                 "text": "busbw band per stage over seeds: " + ", ".join(f"{k} {v:.1%}" for k, v in bands.items())}]

    def plots(self, result, out):
        from testbed.labs.base import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 3.8))
        names = [name for name, _o, _t in STAGES]
        for i, name in enumerate(names):
            values = [r["busbw_of_line"] * 100 for d in result["seeds_detail"] for r in d["phases"]
                      if r["phase"] == name and r.get("busbw_of_line")]
            ax.scatter([i] * len(values), values, color="tab:blue", zorder=3)
            if values:
                ax.plot([i - 0.2, i + 0.2], [sum(values) / len(values)] * 2, color="black")
        ax.set_xticks(range(len(names)), names, rotation=15, ha="right", fontsize=8)
        ax.set_ylabel("AllReduce busbw (% of host line rate)")
        ax.set_xlabel("stage (host:uplink capacity, routing)")
        ax.set_title("Meta's stages on this fabric: busbw per seed (dots) and mean (bar)", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "stages.png", dpi=100)
        plt.close(fig)
        return [{"file": "stages.png", "title": "AllReduce bus bandwidth by stage",
                 "caption": "Each dot is one seed (a different hash placement). Stage 1's dots sit low and apart "
                            "(collisions); stage 2 lifts them; stages 3 and 4 (TE) sit as high with a tighter "
                            "band, as in the paper's Figure 16."}]


VIRTUAL = Subscription()
LAB = None      # virtual time only
