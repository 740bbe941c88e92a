"""Lab ecmp: ECMP's low-entropy collisions.

A ring AllReduce whose every hop crosses the spines puts exactly one long-lived flow per
host on its leaf's uplinks: 4 flows onto 4 uplinks per leaf. 5-tuple hashing places them
independently, so two or more usually land on the same uplink while another idles. Each
phase is the same collective with a different placement of ranks on hosts (so different
5-tuples); the figure is max/mean bytes over the leaf->spine uplinks (1.0 = even), next to
what uniform random hashing predicts (balls into bins).
"""
from testbed.labs import metrics, production
from testbed.labs.base import Column, Lab, Phase, bar_plot
from testbed.labs.virtual import Finding, VirtualLab, seeds_plot
from testbed.sim import profile


class EcmpCollisions(Lab):
    name = "ecmp"
    title = "ECMP low-entropy collisions under 5-tuple hashing"
    finding = ("collective traffic has few, long, fat flows; 5-tuple ECMP hashes them onto uplinks "
               "unevenly (hash collisions), so some uplinks carry 2-3x the mean while others idle")
    columns = [Column("placement_seed", "placement"), Column("uplink_max_mean", "uplink max/mean", "{:.2f}"),
               Column("busiest_uplink_kb", "busiest uplink (KB)", "{:.0f}"),
               Column("idle_uplinks", "idle uplinks"), Column("busbw_mbps", "busbw (Mb/s)", "{:.2f}")]

    port_defaults = metrics.RING_PORTS

    def shape(self, quick):
        return dict(metrics.RING_SHAPE)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = metrics.ring_size(quick)
        seeds = range(2 if quick else 4)
        return [Phase(f"placement{s}", FabricSettings(hash="5tuple"),
                      metrics.ring_job(clos, size, seed=s, name=f"ring-placement{s}"), label={"placement_seed": s})
                for s in seeds]

    def row(self, phase, summary, facts):
        up = metrics.uplinks(summary)
        # ACKs and CNPs also cross the uplinks: an uplink is idle when it carried no data flow.
        biggest = max((l["tx_bytes"] for l in up), default=0)
        return {"uplink_max_mean": metrics.round_or_none(metrics.load_ratio(up)),
                "busiest_uplink_kb": round(biggest / 1024, 1),
                "idle_uplinks": sum(1 for l in up if l["tx_bytes"] < 0.1 * biggest),
                "uplink_bytes": metrics.uplink_bytes(summary),
                "busbw_mbps": metrics.round_or_none(metrics.busbw_mbps(summary))}

    def notes(self, clos, rows):
        spec = clos.spec
        expected = metrics.expected_max_mean(spec.hosts_per_leaf, spec.spines, spec.leaves)
        return {"flows per leaf": f"{spec.hosts_per_leaf} ring flows onto {spec.spines} uplinks",
                "random hashing predicts": f"max/mean {expected:.2f} (perfect spread: 1.00)",
                "expected_max_mean": round(expected, 3)}

    def conclusion(self, rows, notes):
        ratios = [r["uplink_max_mean"] for r in rows if r.get("uplink_max_mean")]
        if not ratios:
            return "no uplink carried traffic: see the phases' errors"
        return (f"measured uplink max/mean {min(ratios):.2f}..{max(ratios):.2f} (average "
                f"{sum(ratios) / len(ratios):.2f}) vs {notes['expected_max_mean']:.2f} predicted and 1.00 ideal")

    def plot(self, lab, path):
        return bar_plot(lab, path, "uplink_max_mean", "uplink load max/mean",
                        "ECMP (5-tuple): uplink imbalance per placement",
                        reference=lab["notes"]["expected_max_mean"], reference_label="random hashing (expected)")


LAB = EcmpCollisions()


# --- virtual time: the paper's scale -----------------------------------------------------


FLOWS = 1000                # "1,000 flows on 16 links" (the paper, section 4.1.2)
FLOW_QPS = 4                # QPs per connection of those flows (16 x 16 hosts x 4 > 1,000; more on smaller fabrics)


def flow_mmr(counts, uplinks):
    """Max-mean ratio of flow counts over `uplinks` (every uplink counts, idle ones too)."""
    values = [counts.get(u, 0) for u in uplinks]
    return max(values) / (sum(values) / len(values)) if sum(values) else None


def hash_flows(clos, leaf, count=FLOWS, qpn_base=0x100):
    """A phase's `before`: the leaf's pipeline forwards one frame of each of `count` realistic
    RoCE flows under 5-tuple hashing; the flow count per uplink and its MMR."""
    def before(exp):
        from testbed.net.experiment import FabricSettings
        exp.apply(FabricSettings(hash="5tuple"))
        uplinks = sorted(n for n, p in clos.switches[leaf].ports.items() if p.kind == "uplink")
        local = sum(1 for h in clos.hosts.values() if h.nics[0].leaf == leaf)
        pairs = local * (len(clos.hosts) - local)
        qps = max(FLOW_QPS, -(-count // pairs))
        counts = production.flow_counts(exp.fabric.switch(leaf).switch,
                                        production.roce_flows(clos, leaf, count, qps, qpn_base))
        return {"flows": count, "flow_mmr": round(flow_mmr(counts, uplinks), 4),
                "flows_per_uplink": [counts.get(u, 0) for u in uplinks]}
    return before


class VirtualEcmp(EcmpCollisions, VirtualLab):
    title = "ECMP low-entropy collisions under 5-tuple hashing (400G, 16 uplinks)"
    columns = [Column("flows", "flows hashed"), Column("flow_mmr", "flow-count MMR", "{:.2f}"),
               Column("uplink_max_mean", "collective: uplink bytes max/mean", "{:.2f}"),
               Column("idle_uplinks", "idle uplinks"), Column("busbw_gbps", "busbw (Gb/s)", "{:.1f}")]
    port_defaults = production.PORTS
    findings = [
        Finding("flow_mmr", "flow-count max/mean, 1,000 RoCE flows over 16 uplinks (5-tuple)",
                "average MMR over 1.2 for 1,000 flows on 16 links (section 4.1.2, simulation)",
                holds=lambda v: v > 1.1, direction="uneven: MMR > 1.1 (the paper's average: > 1.2)",
                paper_value=1.2),
        Finding("uplink_max_mean", "collective on a 16-uplink leaf: uplink bytes max/mean",
                "collisions: some uplinks carry several flows while others idle (Table 2)",
                holds=lambda v: v > 1.5, direction="max/mean well above 1 (> 1.5)"),
    ]

    def shape(self, quick):
        return dict(spines=16, leaves=2, hosts_per_leaf=16, link_rate_mbps=profile.LINK_RATE_MBPS,
                    oversubscription=1.0)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = (1 if quick else 4) << 20
        return [Phase("ring-5tuple", FabricSettings(hash="5tuple"),
                      production.ring_job(clos, size, seed=self.seed, name="ring-5tuple"),
                      before=hash_flows(clos, clos.leaves[0].name, qpn_base=0x100 + 0x1000 * self.seed))]

    def row(self, phase, summary, facts):
        row = super().row(phase, summary, facts)
        row["busbw_gbps"] = metrics.round_or_none(summary["collective"]["busbw_gbps"])
        return {**row, **{k: v for k, v in facts.items() if k != "dir"}}

    def notes(self, clos, rows):
        spec = clos.spec
        expected = metrics.expected_max_mean(spec.hosts_per_leaf, spec.spines, spec.leaves, trials=4000)
        return {"flows": f"{FLOWS} RoCE flows ({FLOW_QPS} QPs per connection, UDP source port from the QP pair) "
                         f"from {clos.leaves[0].name}'s hosts to the other leaf's, through the P4 pipeline",
                "collective": f"ring AllReduce, {spec.hosts_per_leaf} ring flows per leaf onto {spec.spines} uplinks",
                "random hashing predicts": f"collective max/mean {expected:.2f} (perfect spread: 1.00)",
                "expected_max_mean": round(expected, 3)}

    def figures(self, seed_lab):
        row = seed_lab["phases"][0]
        return {"flow_mmr": row.get("flow_mmr"), "uplink_max_mean": row.get("uplink_max_mean")}

    def plots(self, result, out):
        from testbed.labs.base import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 3.8))
        details = result["seeds_detail"]
        width = 0.8 / len(details)
        for i, d in enumerate(details):
            counts = d["phases"][0].get("flows_per_uplink") or []
            ax.bar([x + i * width for x in range(len(counts))], counts, width, label=f"seed {d['seed']}")
        if details and details[0]["phases"][0].get("flows_per_uplink"):
            n = len(details[0]["phases"][0]["flows_per_uplink"])
            ax.axhline(FLOWS / n, color="black", linestyle=":", label=f"even spread ({FLOWS / n:.1f})")
            ax.axhline(1.2 * FLOWS / n, color="tab:red", linestyle="--", label="the paper: MMR 1.2")
            ax.set_xticks([x + 0.4 - width / 2 for x in range(n)], [str(u + 1) for u in range(n)])
        ax.set_xlabel("uplink (leaf1 to spine N)")
        ax.set_ylabel("flows hashed onto it (count)")
        ax.set_title(f"{FLOWS} RoCE flows over 16 uplinks, 5-tuple hashing", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(out / "flows.png", dpi=100)
        plt.close(fig)
        seeds_plot(result, out / "collective.png", lambda r: r.get("uplink_max_mean"),
                   "uplink bytes max/mean (1 = even)", "ring AllReduce: uplink imbalance per seed",
                   reference=result["notes"].get("expected_max_mean"), reference_label="random hashing (expected)")
        return [{"file": "flows.png", "title": "Flows per uplink under 5-tuple ECMP",
                 "caption": "Each bar is one uplink's share of 1,000 realistic RoCE flows, as the leaf's P4 pipeline "
                            "hashed them. Look at the tallest bar against the dotted even line: its ratio is the MMR; "
                            "the dashed line is the paper's 1.2."},
                {"file": "collective.png", "title": "A collective's uplink bytes, max over mean",
                 "caption": "One point per seed: the busiest uplink carried this many times the mean, because few "
                            "long ring flows hash onto 16 uplinks. The dashed line is what random hashing predicts."}]


VIRTUAL = VirtualEcmp()
