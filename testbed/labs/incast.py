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
from testbed.labs import metrics
from testbed.labs.base import Column, Lab, Phase, pyplot

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
