"""Lab te: centralized traffic engineering with exact-match overrides vs ECMP.

The ring AllReduce of the ecmp lab (every hop crosses the spines, a placement whose
flows collide under 5-tuple hashing) runs twice on one fabric: with ECMP alone, then
with the TE app's placement installed. The demands are what the job will send (each
cross-leaf ring hop: <leaf, host port, destination leaf prefix> at the host rate); the TE
engine (testbed.te.engine.cspf, the same code the Ryu app runs) places them on uplinks,
and each placement becomes an exact-match override <ingress port, prefix> -> uplink on
the leaf, installed through the fabric controller before traffic starts. The figures:
overrides installed, the busiest fabric link's utilisation, uplink max/mean and busbw.
"""
from testbed.labs import metrics
from testbed.labs.base import Column, Lab, Phase, pyplot

PLACEMENT_SEED = 0


def ring_demands(clos, job):
    """The TE demands of a ring job: one per rank whose next rank is on another leaf."""
    from testbed.te.engine import Demand, DemandKey
    ranks = job["ranks"]
    demands = []
    for i, r in enumerate(ranks):
        nxt = ranks[(i + 1) % len(ranks)]
        if nxt["leaf"] == r["leaf"]:
            continue
        nic = clos.hosts[r["host"]].nics[0]
        demands.append(Demand(DemandKey(r["leaf"], nic.leaf_port, clos.switches[nxt["leaf"]].subnet),
                              job["nic"]["line_rate_mbps"], nxt["leaf"]))
    return demands


def install_plan(clos, job):
    """A `before` step: place the job's demands with CSPF and install the overrides."""
    from testbed.te.engine import cspf
    from testbed.te.topology import FabricGraph

    def before(exp):
        graph = FabricGraph(clos)
        plan = cspf(graph, ring_demands(clos, job))
        ctl = exp.fabric.controller
        for p in plan.placements.values():
            ctl.add_te_override(p.key.leaf, p.key.ingress_port, p.key.dst_prefix, p.uplink)
        exp.log(f"*** TE: {len(plan.placements)} override(s) installed, CSPF predicts max link utilisation "
                f"{plan.max_utilization(graph):.2f}")
        return {"overrides": len(plan.placements), "predicted_max_util": round(plan.max_utilization(graph), 3),
                "override_list": [p.as_dict(graph) for p in plan.placements.values()]}
    return before


class TrafficEngineering(Lab):
    name = "te"
    title = "centralized TE (CSPF exact-match overrides) vs ECMP on a colliding matrix"
    finding = ("a centralized controller that knows the demand matrix places flows with CSPF and pins them "
               "with exact-match overrides, avoiding ECMP's collisions: lower max link utilisation, faster "
               "collectives")
    columns = [Column("routing", "routing"), Column("overrides", "overrides"),
               Column("max_link_util", "max link util", "{:.0%}"),
               Column("uplink_max_mean", "uplink max/mean", "{:.2f}"),
               Column("busbw_mbps", "busbw (Mb/s)", "{:.2f}")]

    port_defaults = metrics.RING_PORTS

    def shape(self, quick):
        return dict(metrics.RING_SHAPE)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = metrics.ring_size(quick)
        job = metrics.ring_job(clos, size, seed=PLACEMENT_SEED, name="ring-te")
        return [Phase("ecmp", FabricSettings(hash="5tuple"), job, label={"routing": "ECMP 5-tuple", "overrides": 0}),
                Phase("te", FabricSettings(hash="5tuple"), job, before=install_plan(clos, job),
                      label={"routing": "TE (CSPF)"})]

    def row(self, phase, summary, facts):
        return {**{k: v for k, v in facts.items() if k != "dir"},   # what install_plan returned
                "max_link_util": metrics.round_or_none(metrics.max_fabric_utilization(summary), 4),
                "uplink_max_mean": metrics.round_or_none(metrics.load_ratio(metrics.uplinks(summary))),
                "uplink_bytes": metrics.uplink_bytes(summary),
                "busbw_mbps": metrics.round_or_none(metrics.busbw_mbps(summary))}

    def conclusion(self, rows, notes):
        if len(rows) < 2 or not all(r.get("busbw_mbps") for r in rows):
            return "no comparison: a phase did not complete"
        ecmp, te = rows[0], rows[1]
        return (f"TE with {te['overrides']} overrides: uplink max/mean {ecmp['uplink_max_mean']:.2f} -> "
                f"{te['uplink_max_mean']:.2f}, busbw {ecmp['busbw_mbps']:.2f} -> {te['busbw_mbps']:.2f} Mb/s "
                f"({te['busbw_mbps'] / ecmp['busbw_mbps'] - 1:+.0%})")

    def plot(self, lab, path):
        """Bytes per uplink, ECMP next to TE: the collisions and their removal."""
        rows = [r for r in lab["phases"] if r.get("uplink_bytes")]
        if not rows:
            return None
        plt = pyplot()
        names = sorted(rows[0]["uplink_bytes"])
        fig, ax = plt.subplots(figsize=(8, 3.6))
        width = 0.8 / len(rows)
        for i, r in enumerate(rows):
            ax.bar([x + i * width for x in range(len(names))], [r["uplink_bytes"].get(n, 0) / 1024 for n in names],
                   width, label=r["routing"])
        ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(names))], names, rotation=30,
                      ha="right", fontsize=7)
        ax.set_ylabel("KB sent")
        ax.set_title("bytes per leaf->spine uplink", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path.name


LAB = TrafficEngineering()
