"""Lab ecmp: ECMP's low-entropy collisions.

A ring AllReduce whose every hop crosses the spines puts exactly one long-lived flow per
host on its leaf's uplinks: 4 flows onto 4 uplinks per leaf. 5-tuple hashing places them
independently, so two or more usually land on the same uplink while another idles. Each
phase is the same collective with a different placement of ranks on hosts (so different
5-tuples); the figure is max/mean bytes over the leaf->spine uplinks (1.0 = even), next to
what uniform random hashing predicts (balls into bins).
"""
from testbed.labs import metrics
from testbed.labs.base import Column, Lab, Phase, bar_plot


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
