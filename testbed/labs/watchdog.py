"""Lab watchdog: the paper's PFC watchdog against a NIC that storms PFC and against a PFC
deadlock, at 400G in virtual time.

Meta enables a PFC watchdog on every RTSW and CTSW "to catch any long-duration PFC pause
(>200ms) which could be because of deadlocks or a bad NIC which continues to send PFC frames"
(section 6.3.2). Two experiments on one 2-spine, 2-leaf fabric (400G everywhere):

* Storm. Every host of leaf1 streams to a host of leaf2, pinned by TE overrides through spine1
  (they share leaf1's uplink, spine1's port to leaf2 and leaf2's ingress PG from spine1); one
  pair streams the other way. 50 us in, one receiver's host stops draining (`nic:H:stop`): its
  NIC keeps refreshing XOFF, the pause climbs to spine1, leaf1 and the senders, and the other
  flows behind the same queues stall with it (head-of-line blocking). At 300 ms the host
  drains again (`nic:H:resume`). Three phases: the watchdog on every switch (the paper's
  setup), the watchdog only on the bad NIC's leaf, no watchdog.
* Deadlock. A transient routing loop (two TE overrides on leaf2 bounce one host's /32 between
  spine1 and spine2) lasts 100 us, then the routing is right again. While it lasted, four
  lossless queues (leaf2->spine1, spine1->leaf2, leaf2->spine2, spine2->leaf2) filled and
  paused each other in a cycle: none can send until the next one does. Without the watchdog
  nothing moves until the ranks give up; with it, the cycle's queues are declared stormed at
  200 ms, dropped, and the traffic completes (the senders retransmit what was dropped).

Figures: when the watchdog declared each storm against when that queue's pause began (both on
the simulated clock), which lossless queues were paused and how long, what the watchdog
dropped, bytes the receivers took in over time, and lossless drops (must be 0: the watchdog's
drops are the only losses).
"""
import random

from testbed.labs import production
from testbed.labs.base import Column, Phase
from testbed.labs.virtual import Finding, VirtualLab
from testbed.sim import profile
from testbed.switch.buffers import WATCHDOG_DETECT_S

LOSSLESS = 3                    # the fabric's lossless priority (DSCP 26)
STOP_AT_S = 50e-6               # the bad NIC stops draining
RESUME_AT_S = 0.3               # ... and drains again
LOOP_FOR_S = 100e-6             # how long the routing loop lasts
DEADLOCK_OBSERVE_S = 0.5        # without the watchdog, the ranks give up after this long
FINE_S, FINE_UNTIL_S, COARSE_S = 10e-6, 1e-3, 1e-3   # progress samples: fine first, then coarse


def storm_bytes(quick):
    return (4 if quick else 16) << 20


def deadlock_bytes(quick):
    return (2 if quick else 8) << 20


class Progress:
    """Bytes into the receivers' NICs over simulated time, and when each watched switch queue's
    pause began (read from the queue itself, so the watchdog's delay is measured, not assumed)."""

    def __init__(self, fabric, receivers, watched):
        self.fabric = fabric
        self.receivers = receivers          # {role: [host, ...]}
        self.watched = list(watched)        # [(switch, port)]
        self.samples = []                   # [(t_s, {role: bytes since the phase began})]
        self.pause_began = {}               # "switch:port" -> t_s (phase time)
        self.t0 = None
        self._timer = None

    def _counts(self):
        return {role: sum(self.fabric.nic_counters(h)[0]["rx_bytes"] for h in hosts)
                for role, hosts in self.receivers.items()}

    def start(self):
        self.t0 = self.fabric.clock()
        self._base = self._counts()        # the NICs count from boot: earlier phases' bytes are not ours
        self._timer = self.fabric.scheduler.after(0.0, self._tick)

    def _tick(self):
        t = self.fabric.clock() - self.t0
        self.samples.append((round(t, 9), {role: n - self._base[role] for role, n in self._counts().items()}))
        for sw, port in self.watched:
            key = f"{sw}:{port}"
            if key not in self.pause_began:
                began = self.fabric.switch(sw).switch.egress_ports[port].pause_started[LOSSLESS]
                if began is not None:
                    self.pause_began[key] = round(began - self.t0, 9)
        self._timer = self.fabric.scheduler.after(FINE_S if t < FINE_UNTIL_S else COARSE_S, self._tick)

    def stop(self):
        if self._timer is not None:
            self._timer.cancel()
        self._tick()                       # the last word: what arrived by the end
        self._timer.cancel()


def _port_to(clos, switch, peer):
    return next(n for n, p in clos.switches[switch].ports.items() if p.peer == peer)


def _by_leaf(clos, leaf, seed):
    hosts = sorted((h for h in clos.hosts.values() if h.nics[0].leaf == leaf), key=lambda h: h.name)
    random.Random(f"{seed}/{leaf}").shuffle(hosts)
    return hosts


class Watchdog(VirtualLab):
    name = "watchdog"
    title = "PFC watchdog at 400G: a NIC that storms PFC, and a PFC deadlock from a transient routing loop"
    finding = ("a PFC watchdog on every switch catches any pause longer than 200 ms, whether a bad NIC keeps "
               "sending PFC or a deadlock holds a cycle of queues; it drops the stormed queue and the fabric "
               "recovers (section 6.3.2)")
    guide = "topologies/labs/watchdog.md"
    columns = [Column("watchdog", "watchdog"),
               Column("detect_ms", "storm declared after (ms)", "{:.3f}"),
               Column("stormed", "queues stormed"),
               Column("paused_queues", "lossless queues paused"),
               Column("longest_pause_ms", "longest pause (ms)", "{:.1f}"),
               Column("watchdog_drops", "watchdog drops"),
               Column("lossless_drops", "lossless drops"),
               Column("victims_before_gbps", "others before (Gb/s)", "{:.0f}"),
               Column("victims_stalled_gbps", "others while paused (Gb/s)", "{:.2f}"),
               Column("done_ms", "all delivered at (ms)", "{:.1f}")]
    port_defaults = production.PORTS
    findings = [
        Finding("storm_detect_ms", "bad NIC: the watchdog declares its leaf port stormed, after the pause began",
                "\"catch any long-duration PFC pause (>200ms)\" (section 6.3.2)", holds=lambda v: 200 <= v <= 201,
                direction="at 200 ms (200-201 ms)", paper_value=200, unit=" ms", fmt="{:.3f}"),
        Finding("storm_no_watchdog_pause_ms", "bad NIC, no watchdog: how long its leaf port stays paused",
                "\"a bad NIC which continues to send PFC frames\": without the watchdog, nothing ends the pause",
                holds=lambda v: v >= (RESUME_AT_S - STOP_AT_S) * 1e3 - 1,
                direction=f"until the NIC drains again (>= {(RESUME_AT_S - STOP_AT_S) * 1e3 - 1:.0f} ms)",
                unit=" ms", fmt="{:.1f}"),
        Finding("victims_stalled_share", "bad NIC: the other flows through the same queues while paused, over before",
                "hop-by-hop PFC propagation leads to head-of-line blocking (section 5.2)",
                holds=lambda v: v < 0.01, direction="stalled (< 1% of their rate before)", fmt="{:.2%}"),
        Finding("victims_edge_gain_ms", "bad NIC: the others finish this much sooner with the watchdog at the "
                                        "bad NIC's leaf only than on every switch",
                "the paper enables it on RTSW and CTSW alike; it gives no such figure",
                holds=lambda v: v > 0, direction="sooner (> 0 ms)", unit=" ms", fmt="{:.1f}"),
        Finding("deadlock_stall_ms", "deadlock, no watchdog: no byte delivered for",
                "PFC deadlocks (the watchdog is there to catch them)",
                holds=lambda v: v >= (DEADLOCK_OBSERVE_S - 0.01) * 1e3,
                direction=f"to the end ({DEADLOCK_OBSERVE_S * 1e3:.0f} ms)", unit=" ms", fmt="{:.1f}"),
        Finding("deadlock_detect_ms", "deadlock: the watchdog declares the cycle's queues stormed, after their "
                                      "pause began", "\"catch any long-duration PFC pause (>200ms)\"",
                holds=lambda v: 200 <= v <= 201, direction="at 200 ms (200-201 ms)", paper_value=200, unit=" ms",
                fmt="{:.3f}"),
        Finding("deadlock_done_ms", "deadlock with the watchdog: every byte delivered at",
                "the watchdog's mitigation lets the fabric recover", holds=lambda v: v is not None and v > 0,
                direction="completes", unit=" ms", fmt="{:.1f}"),
        Finding("lossless_drops", "lossless drops other than the watchdog's, all phases",
                "a lossless fabric drops nothing", holds=lambda v: v == 0, direction="0", paper_value=0,
                fmt="{:.0f}"),
    ]

    def shape(self, quick):
        return dict(spines=2, leaves=2, hosts_per_leaf=4, link_rate_mbps=profile.LINK_RATE_MBPS,
                    oversubscription=1.0)

    # --- the phases ---
    def phases(self, clos, quick):
        from testbed.net.experiment import FabricSettings
        leaf2 = clos.leaves[1].name
        on, off = WATCHDOG_DETECT_S, 0.0
        storm = self.storm_plan(clos, quick)
        edge = {sw: (on if sw == leaf2 else off) for sw in clos.switches}
        out = [Phase(name, FabricSettings(hash="5tuple", watchdog_s=wd), storm["job"], faults=storm["faults"],
                     before=self._storm_before(clos, storm), after=self._after,
                     label={"experiment": "storm", "watchdog": label, **storm["label"]})
               for name, wd, label in (("storm", on, f"{on * 1e3:g} ms, every switch"),
                                       ("storm-leaf-only", edge, f"{on * 1e3:g} ms, {leaf2} only"),
                                       ("storm-no-watchdog", off, "off"))]
        # The deadlock without the watchdog comes last: nothing ever clears it
        for name, wd, label in (("deadlock", on, f"{on * 1e3:g} ms, every switch"),
                                ("deadlock-no-watchdog", off, "off")):
            loop = self.deadlock_plan(clos, quick, observe=DEADLOCK_OBSERVE_S if not wd else None)
            out.append(Phase(name, FabricSettings(hash="5tuple", watchdog_s=wd), loop["job"],
                             before=self._loop_before(clos, loop), after=self._after,
                             label={"experiment": "deadlock", "watchdog": label, **loop["label"],
                                    **({"expect_status": "failed"} if not wd else {})}))
        return out

    def storm_plan(self, clos, quick):
        """Pairs leaf1 -> leaf2 (the first one's receiver stops), and one leaf2 -> leaf1 when
        there are hosts for it; the leaf1 senders pinned through spine1."""
        from testbed.net.experiment import job_for
        from testbed.sim.faults import parse_fault
        leaf1, leaf2 = clos.leaves[0].name, clos.leaves[1].name
        senders, receivers = _by_leaf(clos, leaf1, self.seed), _by_leaf(clos, leaf2, self.seed)
        pairs = list(zip(senders, receivers))
        reverse = []
        if len(pairs) >= 3:
            s, r = pairs.pop()
            reverse = [(r, s)]
        job = _pairs_job(clos, job_for, pairs + reverse, storm_bytes(quick), "watchdog-storm")
        bad = pairs[0][1]
        faults = (parse_fault(f"nic:{bad.name}:stop@{STOP_AT_S * 1e6:g}us", clos),
                  parse_fault(f"nic:{bad.name}:resume@{RESUME_AT_S * 1e3:g}ms", clos))
        uplink = _port_to(clos, leaf1, "spine1")
        pins = [(leaf1, s.nics[0].leaf_port, clos.switches[leaf2].subnet, uplink) for s, _ in pairs]
        return {"job": job, "faults": faults, "pins": pins, "bad": bad.name,
                "bad_port": (leaf2, bad.nics[0].leaf_port),
                "receivers": {"bad": [bad.name], "others": [r.name for _, r in pairs[1:] + reverse]},
                "label": {"bad_nic": bad.name, "bad_queue": f"{leaf2}:{bad.nics[0].leaf_port}",
                          "pairs": [f"{s.name}->{r.name}" for s, r in pairs + reverse]}}

    def deadlock_plan(self, clos, quick, observe=None):
        """The first pair's receiver is the one the loop bounces; the others only cross the cycle."""
        from testbed.net.experiment import job_for
        leaf1, leaf2 = clos.leaves[0].name, clos.leaves[1].name
        pairs = list(zip(_by_leaf(clos, leaf1, self.seed), _by_leaf(clos, leaf2, self.seed)))[:3]
        job = _pairs_job(clos, job_for, pairs, deadlock_bytes(quick), "watchdog-deadlock", timeout_s=observe)
        target = pairs[0][1]
        up1, up2 = _port_to(clos, leaf2, "spine1"), _port_to(clos, leaf2, "spine2")
        prefix = f"{target.nics[0].ip}/32"
        loop = [(leaf2, up1, prefix, up2), (leaf2, up2, prefix, up1)]
        cycle = [(leaf2, up1), ("spine1", _port_to(clos, "spine1", leaf2)), (leaf2, up2),
                 ("spine2", _port_to(clos, "spine2", leaf2))]
        return {"job": job, "loop": loop, "cycle": cycle,
                "receivers": {"looped": [target.name], "others": [r.name for _, r in pairs[1:]]},
                "label": {"looped": target.name, "pairs": [f"{s.name}->{r.name}" for s, r in pairs],
                          "cycle": [f"{sw}:{p}" for sw, p in cycle]}}

    def _storm_before(self, clos, plan):
        def before(exp):
            ctl = exp.fabric.controller
            for leaf, port, prefix, uplink in plan["pins"]:
                ctl.add_te_override(leaf, port, prefix, uplink)
            exp.progress = Progress(exp.fabric, plan["receivers"], [plan["bad_port"]])
            exp.progress.start()
            return {"watched": [f"{plan['bad_port'][0]}:{plan['bad_port'][1]}"]}
        return before

    def _loop_before(self, clos, plan):
        def before(exp):
            ctl = exp.fabric.controller
            for leaf, port, prefix, out in plan["loop"]:
                ctl.add_te_override(leaf, port, prefix, out)

            def converge():       # the routing is right again: the loop is gone, its deadlock is not
                for leaf, port, prefix, _out in plan["loop"]:
                    ctl.remove_te_override(leaf, port, prefix)
            exp.fabric.scheduler.after(LOOP_FOR_S, converge)
            exp.progress = Progress(exp.fabric, plan["receivers"], plan["cycle"])
            exp.progress.start()
            return {"watched": [f"{sw}:{p}" for sw, p in plan["cycle"]]}
        return before

    @staticmethod
    def _after(exp):
        progress = exp.progress
        progress.stop()
        exp.progress = None
        exp.fabric.controller.clear_te_overrides()
        _settle(exp.fabric)
        return {"t0": progress.t0, "pause_began": progress.pause_began, "samples": progress.samples}

    # --- the figures of one phase ---
    def row(self, phase, summary, facts):
        t0 = facts["t0"]
        lossless = [q for q in summary["queues"] if q["priority"] == LOSSLESS]
        storms = [{"t_ms": round((e["t_s"] - t0) * 1e3, 6), "queue": _queue_of(e)}
                  for e in summary.get("switch_events", []) if e["t_s"] >= t0 - 1e-12 and "stormed" in e["event"]]
        began = facts["pause_began"]
        watched = facts["watched"]
        delays = [s["t_ms"] - began[s["queue"]] * 1e3 for s in storms if s["queue"] in watched and s["queue"] in began]
        paused = {f"{q['switch']}:{q['port']}": round(q["paused_us"] / 1e3, 3) for q in lossless if q["paused_us"]}
        samples = facts["samples"]
        others = [(t, b.get("others", 0)) for t, b in samples]
        # event and pause times are kept to the nanosecond: the delay, to the microsecond
        row = {"detect_ms": round(min(delays), 3) if delays else None,
               "storms": storms, "stormed": len(storms),
               "paused": paused, "paused_queues": len(paused),
               "longest_pause_ms": max(paused.values(), default=0.0),
               "watchdog_drops": sum(q["watchdog_drops"] for q in lossless),
               "lossless_drops": sum(q["drops"] + q["headroom_drops"] for q in lossless),
               "pause_began_ms": {k: round(v * 1e3, 6) for k, v in began.items()},
               "time_ms": (summary["collective"]["time_us"] or 0) / 1e3 or None,
               "series": [[round(t * 1e3, 3), round(b.get("others", 0) / 1e6, 3),
                           round(sum(v for k, v in b.items() if k != "others") / 1e6, 3)] for t, b in samples]}
        row["done_ms"] = _done_ms(others) if summary["collective"]["status"] == "ok" else None
        if phase.label["experiment"] == "storm":
            start = began.get(watched[0])
            row["bad_pause_ms"] = paused.get(watched[0])
            row["victims_before_gbps"] = _rate_gbps(others, 0.0, STOP_AT_S)
            if start is not None:
                # from 1 ms after the pause began to just before the watchdog could act
                row["victims_stalled_gbps"] = _rate_gbps(others, start + 1e-3, start + WATCHDOG_DETECT_S - 1e-3)
        else:
            row["stall_ms"] = _stall_ms(samples)
        return row

    def notes(self, clos, rows):
        return {"storm": f"{STOP_AT_S * 1e6:g} us in, one receiver's host stops draining (its NIC refreshes XOFF); "
                         f"it drains again at {RESUME_AT_S * 1e3:g} ms; the leaf1 senders are pinned through spine1 "
                         "by TE overrides, so every leaf1->leaf2 flow shares the paused queues",
                "deadlock": f"two TE overrides on {clos.leaves[1].name} bounce one host's /32 between spine1 and "
                            f"spine2 for {LOOP_FOR_S * 1e6:g} us (a transient routing loop), then are removed",
                "watchdog": f"detection {WATCHDOG_DETECT_S * 1e3:g} ms of unbroken pause, action drop, restored "
                            "after 200 ms without a pause (testbed/switch/buffers.py)",
                "buffers": _buffer_note()}

    def figures(self, seed_lab):
        rows = {r["phase"]: r for r in seed_lab["phases"]}
        storm, edge, nowd = rows.get("storm", {}), rows.get("storm-leaf-only", {}), rows.get("storm-no-watchdog", {})
        dead_off, dead_on = rows.get("deadlock-no-watchdog", {}), rows.get("deadlock", {})
        out = {"storm_detect_ms": storm.get("detect_ms"),
               "storm_no_watchdog_pause_ms": nowd.get("bad_pause_ms"),
               "deadlock_stall_ms": dead_off.get("stall_ms") if dead_off.get("stormed") == 0 else None,
               "deadlock_detect_ms": dead_on.get("detect_ms"),
               "deadlock_done_ms": dead_on.get("done_ms"),
               "lossless_drops": sum(r.get("lossless_drops") or 0 for r in seed_lab["phases"])}
        before, stalled = storm.get("victims_before_gbps"), storm.get("victims_stalled_gbps")
        if before and stalled is not None:
            out["victims_stalled_share"] = stalled / before
        if storm.get("done_ms") and edge.get("done_ms"):
            out["victims_edge_gain_ms"] = storm["done_ms"] - edge["done_ms"]
        return out

    def plots(self, result, out):
        from testbed.labs.base import pyplot
        plt = pyplot()
        first = result["seeds_detail"][0]
        rows = {r["phase"]: r for r in first["phases"]}
        files = []
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for ax, experiment in zip(axes, ("storm", "deadlock")):
            for name, r in rows.items():
                if not name.startswith(experiment) or not r.get("series"):
                    continue
                series = r["series"]
                ax.plot([s[0] for s in series], [s[1] for s in series], label=f"{name} (watchdog {r['watchdog']})")
            ax.axvline(WATCHDOG_DETECT_S * 1e3, color="tab:red", linestyle="--", label="200 ms: the paper's watchdog")
            if experiment == "storm":
                ax.axvline(RESUME_AT_S * 1e3, color="gray", linestyle=":", label="the bad NIC drains again")
            ax.set_xlabel("simulated time since the phase began (ms)")
            ax.set_ylabel("MB into the other receivers")
            ax.set_title(f"{experiment}: bytes the other flows delivered (seed {first['seed']})", fontsize=10)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "progress.png", dpi=100)
        plt.close(fig)
        files.append({"file": "progress.png", "title": "Progress of the flows that did nothing wrong",
                      "caption": "Left: a host stops draining 50 us in; the flows sharing its queues stall at once. "
                                 "With the watchdog only on the bad NIC's leaf they resume at 200 ms; on every switch "
                                 "the upstream queues are stormed too, their packets dropped, and they wait for the "
                                 "senders' ACK timeouts; with no watchdog they wait until the host drains at 300 ms. "
                                 "Right: a 100 us routing loop leaves a deadlocked cycle of four queues; no watchdog: "
                                 "flat to the end; with it, the cycle is broken at 200 ms."})
        fig, ax = plt.subplots(figsize=(12, 4))
        storm_rows = [r for n, r in rows.items() if r.get("paused")]
        queues = sorted({q for r in storm_rows for q in r["paused"]})
        width = 0.8 / max(1, len(storm_rows))
        for i, r in enumerate(storm_rows):
            ax.bar([x + i * width for x in range(len(queues))], [r["paused"].get(q, 0) for q in queues], width,
                   label=r["phase"])
        ax.axhline(WATCHDOG_DETECT_S * 1e3, color="tab:red", linestyle="--", label="200 ms")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(queues))], queues, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("paused (ms)")
        ax.set_xlabel("lossless egress queue (switch:port)")
        ax.set_title(f"where the pause spread and for how long, per phase (seed {first['seed']})", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "paused.png", dpi=100)
        plt.close(fig)
        files.append({"file": "paused.png", "title": "Paused time of every lossless queue that was paused",
                      "caption": "Storm: the bad NIC's leaf port, spine1's port to that leaf and leaf1's uplink to "
                                 "spine1 are paused together; a watchdog on the bad NIC's leaf ends the others' pause "
                                 "at 200 ms, while the bad NIC's own port keeps receiving pauses until its host "
                                 "drains at 300 ms. Deadlock: the four queues of the cycle and leaf1's two uplinks "
                                 "behind them."})
        return files


def _settle(fabric, limit_s=1.0, step_s=0.01):
    """Run the simulated clock, with no traffic, until no queue is stormed any more (restored
    200 ms after its last pause): a stormed queue left over would ignore the next phase's pauses."""
    def stormed():
        return any(any(port.stormed) for node in fabric.switches for port in node.switch.egress_ports.values())
    end = fabric.clock() + limit_s
    while stormed() and fabric.clock() < end:
        before = fabric.clock()
        fabric.scheduler.run(until=before + step_s)
        if fabric.clock() == before:
            break               # nothing left to happen


def _pairs_job(clos, job_for, pairs, size, name, timeout_s=None):
    """A stream job: rank 2i sends to rank 2i+1, the pairs in order."""
    job = job_for(clos, "stream", [size], mtu=profile.NIC_MTU, cts=False, name=name, timeout_s=timeout_s)
    by_host = {r["host"]: r for r in job["ranks"]}
    job["ranks"] = [by_host[h.name] for pair in pairs for h in pair]
    return job


def _queue_of(event):
    """"switch:port" of a watchdog event ("PFC watchdog: port 4 priority 3 stormed at ...")."""
    words = event["event"].split()
    return f"{event['switch']}:{words[words.index('port') + 1]}"


def _bytes_at(samples, t):
    """Bytes by time `t` (the last sample at or before it)."""
    value = 0
    for when, b in samples:
        if when > t:
            break
        value = b
    return value


def _rate_gbps(samples, t1, t2):
    if t2 <= t1:
        return None
    return (_bytes_at(samples, t2) - _bytes_at(samples, t1)) * 8 / (t2 - t1) / 1e9


def _done_ms(samples):
    """When the last byte came in: the first sample holding the final count."""
    final = samples[-1][1] if samples else 0
    return next((round(t * 1e3, 3) for t, b in samples if b >= final), None)


def _stall_ms(samples):
    """The longest stretch with no byte into any receiver."""
    longest, since, last = 0.0, None, None
    for t, b in samples:
        total = sum(b.values())
        if total != last:
            since, last = t, total
        elif since is not None:
            longest = max(longest, t - since)
    return round(longest * 1e3, 3)


def _buffer_note():
    pfc = profile.knobs().pfc[LOSSLESS]
    return (f"per ingress port and priority group: PFC XOFF {pfc.xoff} B, XON {pfc.xon} B, headroom from the "
            f"controller's calculator; the MAC refreshes a standing XOFF at half the pause it asked for (a full "
            f"pause lasts 84 us at 400G, 42 us at 800G)")


VIRTUAL = Watchdog()
