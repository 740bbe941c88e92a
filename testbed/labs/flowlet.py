"""Lab flowlet: flowlet switching, and the out-of-order packets it costs vs the flowlet gap.

With flowlet hashing a flow may move to another uplink after an idle gap longer than the
configured flowlet gap. If the gap is shorter than the difference in delay between paths
(the one-way queueing of the old path beyond the new one: about half an RTT only when both
directions queue alike), the packets after the switch overtake those still queued on the old
path and arrive out of sequence: the receiver's OOS counter (Meta's metric) goes up and
go-back-N resends follow. The lab runs the ring AllReduce of the ecmp lab with
flowlet hashing and a sweep of gaps, and states the fabric's base RTT; the figure is the
OOS count per gap.
"""
from testbed.labs import metrics, production
from testbed.labs.base import Column, Lab, Phase, pyplot
from testbed.labs.virtual import Finding, VirtualLab
from testbed.sim import profile

# RoCEv2 WRITE frame overhead on top of the payload: Ethernet 14, IPv4 20, UDP 8, BTH 12,
# RETH 16, ICRC 4; an ACK is Ethernet/IPv4/UDP/BTH/AETH/ICRC.
DATA_OVERHEAD = 14 + 20 + 8 + 12 + 16 + 4
ACK_BYTES = 14 + 20 + 8 + 12 + 4 + 4
CROSS_LEAF_LINKS = 4  # host -> leaf -> spine -> leaf -> host


def base_rtt_us(link_rate_mbps, uplink_rate_mbps, mtu, delay_us=0.0):
    """Unloaded RTT of a cross-leaf data packet and its ACK: serialization on each of the
    four links both ways plus propagation (no queueing)."""
    rates = [link_rate_mbps, uplink_rate_mbps, uplink_rate_mbps, link_rate_mbps]
    data = sum((mtu + DATA_OVERHEAD) * 8 / r for r in rates)
    ack = sum(ACK_BYTES * 8 / r for r in rates)
    return data + ack + 2 * CROSS_LEAF_LINKS * delay_us


class Flowlets(Lab):
    name = "flowlet"
    title = "flowlet switching: out-of-order packets vs the flowlet gap"
    finding = ("flowlet switching rebalances at idle gaps; a gap shorter than the path delay difference "
               "reorders packets (receiver OOS counter), and OOS falls as the gap grows toward half an RTT")
    columns = [Column("gap_us", "flowlet gap (us)"), Column("gap_of_rtt", "gap / base RTT", "{:.2f}"),
               Column("rtt_us", "measured RTT (us)", "{:.0f}"),
               Column("oos", "OOS packets"), Column("retransmits", "resent"),
               Column("uplink_max_mean", "uplink max/mean", "{:.2f}"),
               Column("busbw_mbps", "busbw (Mb/s)", "{:.2f}")]

    port_defaults = metrics.RING_PORTS

    def shape(self, quick):
        return dict(metrics.RING_SHAPE)

    def gaps(self, quick):
        # At 2 Mb/s a flow's packets are 4.4 ms apart and the base RTT is ~18.6 ms: from
        # per-packet spraying (gap < spacing) to above the RTT.
        return [1000, 40000] if quick else [1000, 3000, 6000, 10000, 20000, 40000]

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = metrics.ring_size(quick)
        job = metrics.ring_job(clos, size, seed=0, name="ring-flowlet")
        rtt = self._rtt(clos, job)
        return [Phase(f"gap{gap}us", FabricSettings(hash="flowlet", flowlet_gap_us=gap), job,
                      label={"gap_us": gap, "gap_of_rtt": round(gap / rtt, 3), "mtu": job["nic"]["mtu"]})
                for gap in self.gaps(quick)]

    def _rtt(self, clos, job):
        return base_rtt_us(clos.spec.link_rate_mbps, clos.spec.uplink_rate_mbps, job["nic"]["mtu"],
                           self.port_defaults.get("delay_us", 0.0))

    def row(self, phase, summary, facts):
        median, _ = metrics.ack_rtt_us(summary)
        return {"oos": metrics.host_total(summary, "oos"), "rtt_us": median,
                "retransmits": metrics.host_total(summary, "retransmits"),
                "uplink_max_mean": metrics.round_or_none(metrics.load_ratio(metrics.uplinks(summary))),
                "busbw_mbps": metrics.round_or_none(metrics.busbw_mbps(summary))}

    def notes(self, clos, rows):
        mtu = rows[0]["mtu"] if rows else 1024
        rtt = base_rtt_us(clos.spec.link_rate_mbps, clos.spec.uplink_rate_mbps, mtu, self.port_defaults.get("delay_us", 0.0))
        spacing = (mtu + DATA_OVERHEAD) * 8 / clos.spec.link_rate_mbps
        measured = sorted(r["rtt_us"] for r in rows if r.get("rtt_us"))
        return {"base RTT": f"{rtt:.0f} us unloaded (half RTT {rtt / 2:.0f} us); queueing adds to it",
                "measured RTT": (f"{measured[0]:.0f}..{measured[-1]:.0f} us (median ACK RTT of the ranks, per phase: "
                                 "serialization, queueing and the emulation's own delay)" if measured else "-"),
                "packet spacing": f"{spacing:.0f} us between a flow's packets at line rate: a gap below it "
                                  "makes every packet a new flowlet",
                "rtt_us": round(rtt, 1), "packet_spacing_us": round(spacing, 1)}

    def conclusion(self, rows, notes):
        done = [r for r in rows if r["status"] == "ok"]
        if len(done) < 2:
            return "no comparison: phases did not complete"
        return "OOS by gap: " + ", ".join(f"{r['gap_us']} us: {r['oos']}" for r in done) + \
            f" (half RTT {notes['rtt_us'] / 2:.0f} us)"

    def plot(self, lab, path):
        rows = [r for r in lab["phases"] if r.get("oos") is not None]
        if not rows:
            return None
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.plot([r["gap_us"] for r in rows], [r["oos"] for r in rows], "o-", color="tab:blue", label="OOS packets")
        ax.axvline(lab["notes"]["rtt_us"] / 2, color="tab:red", linestyle="--", label="half base RTT")
        ax.set_xscale("log")
        ax.set_xlabel("flowlet gap (us)")
        ax.set_ylabel("out-of-sequence packets (all receivers)")
        ax.set_title("flowlet gap vs reordering", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path.name


LAB = Flowlets()


# --- virtual time: the paper's gaps, against the measured RTT -----------------------------

# The paper's 16 us .. 2 ms, and below it: at 400G with this fabric's queues the RTT is some
# microseconds to tens of microseconds (Meta's deep-buffered 200G fabric: ~0.5-1 ms), so half
# the RTT falls below 16 us and only the smaller gaps can reorder.
V_GAPS_US = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
V_QUICK_GAPS_US = [1, 4, 16, 256, 2048]


class VirtualFlowlets(Flowlets, VirtualLab):
    title = "flowlet switching at 400G: out-of-order packets vs the flowlet gap (16 us .. 2 ms)"
    finding = ("out-of-order packets fall non-linearly as the flowlet interval grows, below 1 packet/s around "
               "half the RTT (256-512 us in Meta's 200G setup; Figure 11)")
    columns = [Column("gap_us", "flowlet gap (us)"), Column("gap_of_rtt", "gap / measured RTT", "{:.2f}"),
               Column("rtt_us", "measured RTT (us)", "{:.1f}"),
               Column("path_queue_us", "peak path queueing (us)", "{:.1f}"),
               Column("oos", "OOS packets"), Column("oos_per_s", "OOS per second", "{:.3g}"),
               Column("retransmits", "resent"),
               Column("uplink_max_mean", "uplink max/mean", "{:.2f}"),
               Column("busbw_gbps", "busbw (Gb/s)", "{:.1f}")]
    port_defaults = production.PORTS
    findings = [
        Finding("oos_smallest_gap", "OOS packets per second at the smallest gap (1 us)",
                "short intervals reorder: OOS is highest at the smallest interval (Figure 11)",
                holds=lambda v: v > 0, direction="reordering (> 0)", fmt="{:.3g}"),
        Finding("oos_fall", "OOS at the smallest gap over OOS at gaps of half the measured RTT and above",
                "OOS goes down non-linearly as the interval increases", holds=lambda v: v > 1,
                direction="falls (> 1x)", fmt="{:.3g}x"),
        Finding("oos_per_s_large_gaps", "OOS packets per second with gaps of half the measured RTT and above",
                "below 1 packet/s in the 256-512 us range (about half their RTT)", holds=lambda v: v < 1,
                direction="< 1 /s",
                paper_value=1.0, fmt="{:.3g}"),
        # The mechanism behind the rule of thumb, with this fabric's own delays: half an RTT
        # stands for the old path's one-way delay only when both directions queue alike. Here
        # the ACKs queue far less than the data (`rocelab captures` of the full lab's seed 1:
        # one-way median 1.0-4.0 us for ACKs, 2.3-10.5 us for data; unloaded 1.0 / 1.3 us), and
        # what reorders is the peak of the data's queueing (21-27 us in the phases that
        # reorder), not the median RTT's half.
        Finding("oos_per_s_above_queueing",
                "OOS packets per second with gaps above the phase's peak path queueing (the most one path "
                "delays a packet beyond another)",
                "the paper's reason for half an RTT: a flow moves only once its earlier packets have reached "
                "the destination (section 4.5)", holds=lambda v: v < 1, direction="< 1 /s", fmt="{:.3g}"),
    ]

    def run_seed(self, out, seed, quick, pcap=True, log=print):
        """The seed, then (with captures) each phase's packet-level figures from them, into the
        seed's rows (row["captures"]) and lab.json: what tables() shows."""
        from testbed.labs import captures
        from testbed.labs.base import write
        result = super().run_seed(out, seed, quick, pcap=pcap, log=log)
        if not pcap:
            return result
        try:
            seen = captures.analyse(out)
        except captures.CaptureError as exc:      # the phases' figures stand without it
            result["errors"].append(f"captures: {exc}")
        else:
            by_dir = {p["dir"]: p for p in seen["phases"]}
            for row in result["phases"]:
                if row["dir"] in by_dir:
                    row["captures"] = {c.key: by_dir[row["dir"]].get(c.key) for c in captures.COLUMNS[1:]}
            u = seen["unloaded"]
            result["notes"]["unloaded one-way"] = (f"{u['data_oneway_us']:.2f} us for a {u['frame_bytes']} B data "
                                                   f"frame, {u['ack_oneway_us']:.2f} us for an ACK (leaf to leaf "
                                                   "through a spine, from the captures)")
        write(result, out)
        return result

    def tables(self, result, out):
        from pathlib import Path
        from testbed.labs import captures
        detail = next((d for d in result["seeds_detail"] if any(r.get("captures") for r in d["phases"])), None)
        if detail is None:
            return []
        unloaded = detail["notes"].get("unloaded one-way")
        return [{"title": f"Seed {detail['seed']}'s captures, per gap (one-way delays leaf to leaf through a spine"
                          + (f", unloaded {unloaded.split(' (')[0]}" if unloaded else "")
                          + "; OOS: the packets replayed through a go-back-N receiver in the order they left the "
                            "receiving leaf)",
                 "command": f"rocelab captures {Path(out) / detail['dir']}",
                 "columns": [Column("gap_us", "flowlet gap (us)")] + captures.COLUMNS[1:],
                 "rows": [{"gap_us": r["gap_us"], **r["captures"]} for r in detail["phases"] if r.get("captures")]}]

    def shape(self, quick):
        # 2:1 uplinks (200G): queues build behind collisions, so paths differ in delay
        return dict(spines=8, leaves=2, hosts_per_leaf=8, link_rate_mbps=profile.LINK_RATE_MBPS, oversubscription=2.0)

    def gaps(self, quick):
        return V_QUICK_GAPS_US if quick else V_GAPS_US

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        size = (2 if quick else 8) << 20
        job = production.ring_job(clos, size, seed=self.seed, name="ring-flowlet")
        return [Phase(f"gap{gap}us", FabricSettings(hash="flowlet", flowlet_gap_us=gap), job,
                      label={"gap_us": gap, "mtu": job["nic"]["mtu"]},
                      after=lambda exp: {"path_queue_us": path_queueing_us(exp.clos, queue_peaks(exp))})
                for gap in self.gaps(quick)]

    def row(self, phase, summary, facts):
        row = super().row(phase, summary, facts)
        row["path_queue_us"] = metrics.round_or_none(facts.get("path_queue_us"), 2)
        seconds = (summary["collective"]["time_us"] or 0) / 1e6
        row.update({"oos_per_s": row["oos"] / seconds if seconds else None, "time_us": summary["collective"]["time_us"],
                    "gap_of_rtt": round(phase.label["gap_us"] / row["rtt_us"], 3) if row.get("rtt_us") else None,
                    "busbw_gbps": metrics.round_or_none(summary["collective"]["busbw_gbps"])})
        return row

    def _rtt(self, clos, job):
        return virtual_base_rtt_us(clos, job["nic"]["mtu"])

    def notes(self, clos, rows):
        mtu = rows[0]["mtu"] if rows else profile.NIC_MTU
        rtt = virtual_base_rtt_us(clos, mtu)
        measured = sorted(r["rtt_us"] for r in rows if r.get("rtt_us"))
        return {"base RTT": f"{rtt:.1f} us unloaded (serialization + {profile.HOST_CABLE_M} m and "
                            f"{profile.FABRIC_CABLE_M} m cables); queueing adds to it",
                "measured RTT": (f"{measured[0]:.1f}..{measured[-1]:.1f} us (median ACK RTT of the ranks, per phase)"
                                 if measured else "-"),
                "reordering": reordering_note(rows),
                "rtt_us": round(rtt, 2)}

    def figures(self, seed_lab):
        rows = [r for r in seed_lab["phases"] if r.get("status") == "ok"]
        if len(rows) < 2:
            return {}
        small = rows[0]
        rtts = sorted(r["rtt_us"] for r in rows if r.get("rtt_us"))
        half_rtt = rtts[len(rtts) // 2] / 2 if rtts else 256
        large = [r for r in rows if r["gap_us"] >= half_rtt]
        large_oos = sum(r["oos"] for r in large)
        large_s = sum(r["time_us"] for r in large) / 1e6
        # gaps longer than the phase's own peak path queueing: an earlier packet has left the
        # slow path before a later one can take a fast one
        above = [r for r in rows if r.get("path_queue_us") is not None and r["gap_us"] > r["path_queue_us"]]
        above_s = sum(r["time_us"] for r in above) / 1e6
        return {"oos_smallest_gap": small.get("oos_per_s"),
                # the smallest gap's OOS over the mean of the large gaps' (at least one packet)
                "oos_fall": small["oos"] / max(1.0, large_oos / len(large)) if large else None,
                "oos_per_s_large_gaps": large_oos / large_s if large_s else None,
                "oos_per_s_above_queueing": sum(r["oos"] for r in above) / above_s if above_s else None}

    def plots(self, result, out):
        from testbed.labs.base import pyplot
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 3.8))
        for d in result["seeds_detail"]:
            rows = [r for r in d["phases"] if r.get("oos_per_s") is not None]
            # log axis: a zero is drawn at 0.1/s, below the paper's 1/s line
            ax.plot([r["gap_us"] for r in rows], [max(r["oos_per_s"], 0.1) for r in rows], "o-",
                    label=f"seed {d['seed']}")
        rtts = [r["rtt_us"] for d in result["seeds_detail"] for r in d["phases"] if r.get("rtt_us")]
        if rtts:
            ax.axvline(sorted(rtts)[len(rtts) // 2] / 2, color="tab:purple", linestyle=":",
                       label="half the measured RTT (median)")
        queues = sorted(r["path_queue_us"] for d in result["seeds_detail"] for r in d["phases"]
                        if r.get("path_queue_us") is not None)
        if queues:
            ax.axvline(queues[len(queues) // 2], color="black", linestyle="-.",
                       label="peak path queueing (median)")
        ax.axhline(1.0, color="tab:red", linestyle="--", label="the paper: < 1 OOS packet/s at 256-512 us")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("flowlet gap (us)")
        ax.set_ylabel("out-of-sequence packets per second")
        ax.set_title("flowlet gap vs reordering at 400G", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "oos.png", dpi=100)
        plt.close(fig)
        return [{"file": "oos.png", "title": "Out-of-order packets per second against the flowlet gap",
                 "caption": "Receivers' OOS counters (Meta's metric) over the collective's time, one line per seed; a "
                            "phase without any OOS packet is drawn at 0.1/s. Look at how steeply OOS falls once the "
                            "gap passes half the measured RTT (dotted) and the peak queueing one path adds "
                            "(dash-dot: how much later the slowest path delivers than an idle one), and where it "
                            "crosses the paper's 1/s line."}]


def reordering_note(rows):
    """Which gaps reordered, against half the measured RTT and each phase's peak path queueing."""
    done = [r for r in rows if r.get("status") == "ok" and r.get("oos") is not None]
    if not done:
        return "-"
    rtts = sorted(r["rtt_us"] for r in done if r.get("rtt_us"))
    half = f"{rtts[len(rtts) // 2] / 2:.1f} us" if rtts else "-"
    judged = [r for r in done if r.get("path_queue_us") is not None]
    below = [r for r in judged if r["gap_us"] <= r["path_queue_us"]]
    above = [r for r in judged if r["gap_us"] > r["path_queue_us"]]
    reordered = [r["gap_us"] for r in done if r["oos"]]
    said = (f"OOS at gaps of {', '.join(str(g) for g in reordered)} us" if reordered else "no gap reordered")
    said += f"; half the measured RTT (median over phases) {half}"
    if judged:
        queues = sorted(r["path_queue_us"] for r in judged)
        said += (f"; peak path queueing {queues[0]:.1f}..{queues[-1]:.1f} us: {sum(1 for r in below if r['oos'])} of "
                 f"{len(below)} gaps at or below it reordered, {sum(1 for r in above if r['oos'])} of {len(above)} "
                 "above it")
    return said


def queue_peaks(exp):
    """{(switch, port): the most bytes its egress queues held in the phase} (the engine's
    high-water mark, restarted before each phase; the fullest priority of the port)."""
    from testbed.net import telemetry
    peaks = {}
    for name in exp.clos.switches:
        for port, status in telemetry.port_counters(exp.fabric, name).items():
            held = status.get("max_queue_bytes")
            if held:
                peaks[(name, port)] = max(held)
    return peaks


def path_queueing_us(clos, peaks):
    """The most queueing one leaf-to-leaf path can add to a packet: over every path (leaf
    uplink, then the spine's port down to another leaf), the peak bytes of both queues drained
    at their ports' rates. Only paths differ here (the receiver's leaf port is the same for
    every path of a flow), so this bounds how much later a packet on the slowest path arrives
    than one sent after it on an idle path: a flowlet gap above it cannot reorder. The two
    peaks may not have coincided, and a PFC pause holds a queue longer than its bytes take: an
    estimate, not a bound. None without peaks (a target with no queue watermarks)."""
    if not peaks:
        return None
    worst = 0.0
    for leaf in clos.by_role("leaf"):
        for up in leaf.ports.values():
            if up.kind != "uplink" or up.peer not in clos.switches:
                continue
            spine = clos.switches[up.peer]
            wait_up = peaks.get((leaf.name, up.number), 0) * 8 / up.rate_mbps
            for down in spine.ports.values():
                other = clos.switches.get(down.peer)
                if other is None or other.role != "leaf" or other.name == leaf.name:
                    continue
                worst = max(worst, wait_up + peaks.get((spine.name, down.number), 0) * 8 / down.rate_mbps)
    return worst


def virtual_base_rtt_us(clos, mtu):
    """Unloaded cross-leaf RTT at production units: base_rtt_us plus the cables' propagation."""
    spec = clos.spec
    cable_us = 2 * (2 * profile.HOST_CABLE_M + 2 * profile.FABRIC_CABLE_M) * profile.NS_PER_METER / 1000
    return base_rtt_us(spec.link_rate_mbps, spec.uplink_rate_mbps, mtu) + cable_us


VIRTUAL = VirtualFlowlets()
