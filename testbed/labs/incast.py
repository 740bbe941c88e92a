"""Lab incast: N:1 incast with PFC only vs with receiver-driven CTS admission.

Sixteen ranks write to one receiver at once (nccl-tests' gather; --quick: eight). With PFC
only, every sender starts at line rate, the receiver's leaf port queue fills past the XOFF
threshold and the fabric pauses upstream ports over and over (PFC storms spread the
congestion back to the senders). Two kinds of CTS admission follow: credit per connection
(each sender may have one buffer in flight: N senders, N buffers, the queue still builds)
and a receiver-wide budget (Meta's: the receiver admits a bounded total, a chunk to a few
senders at a time, so the queue in front of it stays below XOFF and nothing is paused).
Same bytes, same fabric; the figures are the peak queue depth (packets), PFC frames the
switches sent, time queues spent paused, drops, and how long the incast took.
"""
from testbed.control.knobs import DEFAULT_PFC_XOFF, DEFAULT_PFC_XON
from testbed.labs import metrics, production
from testbed.labs.base import Column, Lab, Phase, pyplot
from testbed.labs.virtual import Finding, VirtualLab
from testbed.sim import profile

PER_SENDER_BYTES = 64 * 1024
# Grants go out in 4-packet chunks. Per connection every sender may hold 16 KB; the
# receiver-wide budget is 12 KB in total: three senders at a time, at most 12 packets queued
# at the receiver's port, under the controller's PFC XOFF threshold (16 KB per ingress PG).
CHUNK_BYTES = 4 * 1024
BUFFER_BYTES = 16 * 1024
BUDGET_BYTES = 12 * 1024
ADMISSION = [("pfc-only", None), ("cts-per-conn", {"enabled": True, "buffer_bytes": BUFFER_BYTES}),
             ("cts-budget", {"enabled": True, "buffer_bytes": BUFFER_BYTES, "budget_bytes": BUDGET_BYTES})]


class Incast(Lab):
    name = "incast"
    title = "N:1 incast: PFC only vs receiver-driven CTS admission"
    finding = ("under incast, PFC alone lets queues fill and pauses spread upstream; Meta's receiver-driven "
               "CTS admission keeps the queue at the receiver bounded with few or no PFC pauses")
    columns = [Column("incast", "incast"), Column("cts", "CTS admission"),
               Column("receiver_queue_pkts", "receiver port peak (pkts)"),
               Column("peak_queue_pkts", "any port peak (pkts)"), Column("pfc_frames", "PFC frames"),
               Column("paused_ms", "paused (ms)", "{:.1f}"), Column("drops", "drops"),
               Column("lossless_drops", "lossless drops"),
               Column("time_ms", "time (ms)", "{:.0f}")]

    # Before the per-PG buffer (issue 14) this was the lossless class's headroom: with 64-packet
    # queues the PFC-only phase tail-dropped. Lossless queues have no packet limit now (the PGs'
    # headroom is what absorbs late reactions); this only sizes the lossy queues.
    port_defaults = {"queue_depth": 256}

    def shape(self, quick):
        # One spine: half the senders share the receiver's leaf, half come through the spine.
        return dict(spines=1, leaves=2, hosts_per_leaf=5 if quick else 9, link_rate_mbps=10.0, oversubscription=1.0)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings, job_for
        n = 9 if quick else 17
        out = []
        for name, cts in ADMISSION:
            job = job_for(clos, "incast", [n * PER_SENDER_BYTES], nranks=n, cts=bool(cts), chunk_bytes=CHUNK_BYTES,
                          name=f"incast-{name}")
            if cts:
                job["cts"] = dict(cts)
            receiver = clos.hosts[job["ranks"][0]["host"]].nics[0]
            out.append(Phase(name, FabricSettings(hash="5tuple", pfc=True), job,
                             label={"incast": f"{n - 1}:1", "cts": _admission(cts),
                                    "receiver_switch": receiver.leaf, "receiver_port": receiver.leaf_port}))
        return out

    def row(self, phase, summary, facts):
        root = (phase.label["receiver_switch"], phase.label["receiver_port"])
        receiver = [q for q in summary["queues"] if (q["switch"], q["port"]) == root]
        return {**metrics.queue_figures(summary),
                "receiver_queue_pkts": max((q["max_depth"] for q in receiver), default=0),
                "time_ms": metrics.round_or_none(summary["collective"]["time_us"] and
                                                 summary["collective"]["time_us"] / 1000, 1),
                "retransmits": metrics.host_total(summary, "retransmits")}

    def notes(self, clos, rows):
        r = rows[0] if rows else {}
        return {"receiver": f"rank 0 behind {r.get('receiver_switch')} port {r.get('receiver_port')}",
                "queue limit": f"{self.port_defaults['queue_depth']} packets per lossy priority queue on every "
                               f"port; PFC XOFF/XON at the controller's thresholds ({DEFAULT_PFC_XOFF}/"
                               f"{DEFAULT_PFC_XON} bytes per ingress PG) with the calculator's headroom",
                "CTS": f"grants of {CHUNK_BYTES // 1024} KB chunks; per connection {BUFFER_BYTES // 1024} KB each; "
                       f"receiver-wide budget {BUDGET_BYTES // 1024} KB in total"}

    def conclusion(self, rows, notes):
        done = [r for r in rows if r["status"] == "ok"]
        if not done:
            return "no phase completed: see the errors"
        return "receiver queue peak / PFC frames / paused / drops: " + "; ".join(
            f"{r['phase']} {r['receiver_queue_pkts']} pkts, {r['pfc_frames']} PFC, {r['paused_ms']:.0f} ms, "
            f"{r['drops']} drops" for r in done)

    def plot(self, lab, path):
        rows = lab["phases"]
        if not rows:
            return None
        plt = pyplot()
        keys = [("receiver_queue_pkts", "receiver queue peak (pkts)"), ("pfc_frames", "PFC frames sent"),
                ("paused_ms", "paused (ms)")]
        fig, axes = plt.subplots(1, len(keys), figsize=(9, 3.2))
        for ax, (key, label) in zip(axes, keys):
            ax.bar([r["phase"] for r in rows], [r.get(key) or 0 for r in rows],
                   color=["tab:red", "tab:orange", "tab:green"][:len(rows)])
            ax.set_title(label, fontsize=9)
            ax.tick_params(labelsize=8)
        fig.suptitle(f"{rows[0]['incast']} incast: PFC only vs CTS admission", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path.name


def _admission(cts):
    if not cts:
        return "off"
    if cts.get("budget_bytes"):
        return f"receiver-wide {cts['budget_bytes'] // 1024} KB"
    return f"{cts['buffer_bytes'] // 1024} KB per sender"


LAB = Incast()


# --- virtual time: the paper's Table 3 ---------------------------------------------------

# Receiver-wide CTS budget: 2 chunks of 64 KB = 128 KB in flight per receiver at most. Every
# admitted byte enters the receiver's leaf through one uplink, whose ingress priority group
# pauses the spine past its XOFF (~132 KB, testbed/sim/profile.py): a budget below it is what
# lets the leaf absorb a slow receiver (Meta tuned channel counts and buffer sizes the same
# way: congestion spreading against under-utilization). 128 KB is about one RTT at 400G.
V_CHUNK_BYTES = 64 * 1024
V_BUDGET_BYTES = 2 * V_CHUNK_BYTES
SLOW_RECEIVER = 0.25           # "restricted the bandwidth of the receiver ... to only 25%"


def _rank_pauses(phase_dir):
    """{host: seconds its NIC spent paused on the lossless priority} from the phase's rank reports."""
    import json
    from pathlib import Path
    out = {}
    for path in sorted(Path(phase_dir, "ranks").glob("rank*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        paused = report.get("paused_seconds_by_priority") or [0.0] * 8
        out[report.get("host")] = paused[3]
    return out


def _buffer_note():
    pfc = profile.knobs().pfc[3]
    return (f"{profile.QUEUE_PACKETS} frames per egress queue; per ingress port and priority group: PFC XOFF "
            f"{pfc.xoff} B, XON {pfc.xon} B, headroom {pfc.headroom} B, refresh {pfc.refresh_us} us")


class VirtualIncast(Incast, VirtualLab):
    title = "16:1 incast at 400G: streaming vs receiver-driven (CTS) Gather vs Gather with a slow receiver"
    finding = ("with PFC only, streaming 16:1 incast pauses every tier back to the sending NICs; NCCL Gather "
               "with receiver-driven admission (CTS) causes no PFC; with the receiver at 25% its NIC pauses "
               "its leaf ~75% of the time but the leaf absorbs it: no back-pressure to the spine (Table 3)")
    columns = [Column("admission", "admission"),
               Column("down_pfc_per_s", "leaf1->spine PFC (/s)", "{:.0f}"),
               Column("spine_pfc_per_s", "spine->sender leaves PFC (/s)", "{:.0f}"),
               Column("sender_paused_share", "sender NICs paused", "{:.1%}"),
               Column("receiver_pause_share", "receiver pauses its leaf", "{:.0%}"),
               Column("receiver_queue_pkts", "receiver port peak (pkts)"),
               Column("drops", "drops"), Column("time_us", "time (us)", "{:.0f}")]
    port_defaults = production.PORTS
    findings = [
        Finding("stream_sender_paused", "streaming (perftest-like): PFC reaches the sending NICs",
                "Perftest: PFC 350K/s leaf->spine, 183K/s spine->leaves, sender NICs paused 10% of the time",
                holds=lambda v: v > 0, direction="sender NICs paused (> 0%)", paper_value=0.10, fmt="{:.1%}"),
        Finding("gather_pfc", "Gather with CTS: PFC frames anywhere in the fabric",
                "Gather: 0 PFC on every tier", holds=lambda v: v == 0, direction="none (0)", paper_value=0,
                fmt="{:.0f}"),
        Finding("slow_receiver_pause_share", "Gather, receiver at 25%: share of time the receiver pauses its leaf",
                "receiving NIC sent TX pause to its leaf 75% of the time", holds=lambda v: v > 0.5,
                direction="most of the time (> 50%)", paper_value=0.75, fmt="{:.0%}"),
        Finding("slow_receiver_upstream_pfc", "Gather, receiver at 25%: PFC from its leaf to the spine",
                "the leaf absorbed it all: no back-pressure to the spines", holds=lambda v: v == 0,
                direction="none (0)", paper_value=0, fmt="{:.0f}"),
        Finding("lossless_drops", "lossless drops, all phases", "a lossless fabric drops nothing",
                holds=lambda v: v == 0, direction="0", paper_value=0, fmt="{:.0f}"),
    ]

    def shape(self, quick):
        # The paper's 16:1: every sender behind its own leaf (RTSW), all through one spine (CTSW).
        # Uplinks 1:1, so the congestion point is the spine's port to the receiver's leaf. (With
        # 1:2 uplinks, where the receiver's leaf would congest first as in the paper, the buffer
        # model drops lossless packets at the spine's 800G ingress: reported, not hidden here.)
        return dict(spines=1, leaves=17, hosts_per_leaf=1, link_rate_mbps=profile.LINK_RATE_MBPS,
                    oversubscription=1.0)

    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings, job_for
        from testbed.sim.faults import parse_fault
        n = len(clos.hosts)          # 17 on the lab's fabric: 16:1
        out = []
        for name, cts, slow in (("stream", None, False), ("gather-cts", V_BUDGET_BYTES, False),
                                ("gather-cts-slow-rx", V_BUDGET_BYTES, True)):
            per_sender = self.per_sender_bytes(quick, bool(cts))
            job = job_for(clos, "incast", [n * per_sender], nranks=n, cts=bool(cts), chunk_bytes=V_CHUNK_BYTES,
                          mtu=profile.NIC_MTU, name=f"incast-{name}")
            if cts:
                job["cts"] = {"enabled": True, "buffer_bytes": V_CHUNK_BYTES, "budget_bytes": cts}
            receiver = clos.hosts[job["ranks"][0]["host"]]
            faults = (parse_fault(f"nic:{receiver.name}:slow={SLOW_RECEIVER:.0%}@0", clos),) if slow else ()
            label = {"admission": ("none (streaming)" if not cts else f"CTS, {cts >> 10} KB receiver budget")
                     + (f", receiver at {SLOW_RECEIVER:.0%}" if slow else ""),
                     "incast": f"{n - 1}:1", "receiver": receiver.name,
                     "receiver_switch": receiver.nics[0].leaf, "receiver_port": receiver.nics[0].leaf_port}
            out.append(Phase(name, FabricSettings(hash="5tuple", pfc=True), job, label=label, faults=faults))
        return out

    @staticmethod
    def per_sender_bytes(quick, gather):
        """Streaming must outlast the buffers (~4 MB XOFF per hop) for pauses to reach the senders;
        a Gather's in-flight bytes are bounded by the CTS budget whatever its volume, so it runs a
        smaller one (each CTS grant costs simulated events: a budget of chunks is slow to simulate)."""
        if gather:
            return (1 if quick else 2) << 20
        return (6 if quick else 8) << 20

    def row(self, phase, summary, facts):
        row = super().row(phase, summary, facts)
        seconds = (summary["collective"]["time_us"] or 0) / 1e6 or None
        leaf, port = phase.label["receiver_switch"], phase.label["receiver_port"]
        clos_links = {(l["from"], l["from_port"]): l["to"] for l in summary["links"]}
        q = summary["queues"]
        # PFC a switch's MAC received on a port = pauses sent to it by the switch on the other end.
        down = sum(r["pfc_rx"] for r in q if r["switch"].startswith("spine") and clos_links.get(
            (r["switch"], r["port"])) == leaf)
        up = sum(r["pfc_rx"] for r in q if r["switch"].startswith("leaf") and r["switch"] != leaf
                 and clos_links.get((r["switch"], r["port"]), "").startswith("spine"))
        receiver_q = [r for r in q if (r["switch"], r["port"]) == (leaf, port)]
        pauses = _rank_pauses(facts["dir"])
        senders = [s for h, s in pauses.items() if h != phase.label["receiver"]]
        row.update({"down_pfc": down, "spine_pfc": up,
                    "down_pfc_per_s": down / seconds if seconds else None,
                    "spine_pfc_per_s": up / seconds if seconds else None,
                    "sender_paused_share": (max(senders, default=0.0) / seconds) if seconds else None,
                    "receiver_pause_share": (sum(r["paused_us"] for r in receiver_q) / 1e6 / seconds
                                             if seconds else None),
                    "time_us": summary["collective"]["time_us"],
                    "lossless_drops": sum(r["drops"] for r in q if r["priority"] == 3)})
        return row

    def notes(self, clos, rows):
        return {"receiver": "rank 0 behind leaf1; 16 senders, each behind its own leaf, all through spine1",
                "buffers": _buffer_note(),
                "CTS": f"Gather: one {V_CHUNK_BYTES >> 10} KB chunk per grant, {V_BUDGET_BYTES >> 10} KB in flight "
                       "per receiver at most",
                "volume": "per sender: streaming 6 MB (--quick) / 8 MB, Gather 1 MB / 2 MB (the paper ran both for "
                          "five minutes; here Gather's in-flight bytes are bounded by CTS whatever its volume)"}

    def figures(self, seed_lab):
        rows = {r["phase"]: r for r in seed_lab["phases"]}
        stream, gather, slow = rows.get("stream", {}), rows.get("gather-cts", {}), rows.get("gather-cts-slow-rx", {})
        return {"stream_sender_paused": stream.get("sender_paused_share"),
                "gather_pfc": (gather.get("pfc_frames") if gather.get("status") == "ok" else None),
                "slow_receiver_pause_share": slow.get("receiver_pause_share"),
                "slow_receiver_upstream_pfc": (slow.get("down_pfc") if slow.get("status") == "ok" else None),
                "lossless_drops": sum(r.get("lossless_drops") or 0 for r in seed_lab["phases"])}

    def plots(self, result, out):
        from testbed.labs.base import pyplot
        plt = pyplot()
        keys = [("down_pfc_per_s", "leaf1 -> spine PFC (frames/s)", None),
                ("spine_pfc_per_s", "spine -> sender leaves PFC (frames/s)", None),
                ("sender_paused_share", "sender NICs paused (% of time)", 10),
                ("receiver_pause_share", "receiver pauses its leaf (% of time)", 75)]
        fig, axes = plt.subplots(1, len(keys), figsize=(13, 3.6))
        phases = [r["phase"] for r in result["seeds_detail"][0]["phases"]]
        width = 0.8 / len(result["seeds_detail"])
        for ax, (key, label, paper) in zip(axes, keys):
            scale = 100 if "share" in key else 1
            for i, d in enumerate(result["seeds_detail"]):
                ax.bar([x + i * width for x in range(len(d["phases"]))],
                       [(r.get(key) or 0) * scale for r in d["phases"]], width, label=f"seed {d['seed']}")
            if paper is not None:
                ax.axhline(paper, color="tab:red", linestyle="--", label=f"the paper: {paper}%")
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(phases))], phases, rotation=20, ha="right",
                          fontsize=7)
            ax.set_title(label, fontsize=9)
            ax.set_ylabel("%" if scale == 100 else "frames per second")
        axes[-1].legend(fontsize=7)
        fig.suptitle("16:1 incast at 400G: where PFC goes (per phase, per seed)", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "incast.png", dpi=100)
        plt.close(fig)
        return [{"file": "incast.png", "title": "PFC by tier, streaming vs CTS-admitted Gather",
                 "caption": "Streaming (no admission) fills the spine's port to the receiver's leaf: pauses go from "
                            "the spine to every sender's leaf and on to the sending NICs. Gather with CTS keeps at most 128 KB in "
                            "flight: no PFC anywhere. With the receiver at 25% its NIC pauses leaf1 most of the time, "
                            "yet leaf1 never pauses the spine. Red dashes: the paper's Table 3."}]


VIRTUAL = VirtualIncast()
