"""Counters and queue state from a running fabric, as plain dicts for summary.json.

Three sources, read together by :func:`snapshot`:

* each switch node's ``port_status()``: the switch agent's port record on the P4 targets
  (port counters, per-priority queue depth, tail drops, PFC frames received by the
  port's MAC, time paused) or the kernel's interface counters on the stand-in;
* the fabric controller's P4 counters (``read_counters``): per port and priority the
  packets the program sent, dropped, ECN-marked, and PFC frames it generated;
* each host's NIC counters from its namespace.

A snapshot before and after an experiment gives per-link and per-queue deltas in the
summary's ``links`` and ``queues`` schema (see testbed/net/summary.py).
"""
import json
import threading
import time

PRIORITIES = range(8)


def port_counters(fabric, switch):
    """{port: status dict} of one switch now ({} with a warning if it cannot be read)."""
    try:
        return fabric.switch(switch).port_status()
    except Exception as exc:  # noqa: BLE001 - agent/kernel read failed: report it, keep the run
        print(f"warning: {switch}: port counters unavailable ({exc})")
        return {}


def p4_counters(fabric):
    """{switch: controller counter layout} or {} where there is no controller (kernel)."""
    if fabric.controller is None:
        return {}
    try:
        return fabric.controller.read_counters()
    except Exception as exc:  # noqa: BLE001 - a report without P4 counters beats no report
        print(f"warning: P4 counters unavailable ({exc})")
        return {}


def nic_counters(fabric, host):
    """{nic index: {rx_packets, rx_bytes, tx_packets, tx_bytes}} from the host's kernel (or,
    in virtual time, from the simulated NIC port)."""
    if getattr(fabric, "clock_kind", "real") == "virtual":
        return fabric.nic_counters(host)
    from testbed.net.kernel_router import run_in
    node = fabric.mn[host]
    res = run_in(node, ["ip", "-s", "-j", "link", "show"])
    stats = {d["ifname"]: d.get("stats64", {}) for d in json.loads(res.stdout or "[]")}
    out = {}
    for nic in fabric.clos.hosts[host].nics:
        s = stats.get(fabric.clos.hosts[host].intf(nic.index), {})
        out[nic.index] = {"rx_packets": s.get("rx", {}).get("packets", 0), "rx_bytes": s.get("rx", {}).get("bytes", 0),
                          "tx_packets": s.get("tx", {}).get("packets", 0), "tx_bytes": s.get("tx", {}).get("bytes", 0)}
    return out


def snapshot(fabric):
    """Every switch port, P4 counter and host NIC counter now."""
    return {
        "time": fabric.clock() if getattr(fabric, "clock_kind", "real") == "virtual" else time.time(),
        "switches": {name: port_counters(fabric, name) for name in fabric.clos.switches},
        "p4": p4_counters(fabric),
        "hosts": {name: nic_counters(fabric, name) for name in fabric.clos.hosts},
    }


def _port_tx(snap, node, port):
    """(tx packets, tx bytes) of a switch port or host NIC: the port's own counters,
    else what the P4 program counted as sent there (BMv2's agent has no port counters)."""
    if node in snap["hosts"]:
        c = snap["hosts"][node].get(port, {})
        return c.get("tx_packets", 0), c.get("tx_bytes", 0)
    c = snap["switches"].get(node, {}).get(port, {})
    if "tx_packets" in c:
        return c["tx_packets"], c.get("tx_bytes", 0)
    p4 = snap["p4"].get(node, {}).get("port_totals", {}).get(port, {})
    return p4.get("tx_packets", 0), p4.get("tx_bytes", 0)


def link_loads(clos, before, after):
    """One entry per link direction: {from, from_port, to, to_port, tx_packets, tx_bytes, rate_mbps}.

    Ports are switch port numbers; a host end's port is its NIC index."""
    rows = []
    for link in clos.links:
        for a, ap, b, bp in ((link.a, link.a_port, link.b, link.b_port), (link.b, link.b_port, link.a, link.a_port)):
            p1, b1 = _port_tx(after, a, ap)
            p0, b0 = _port_tx(before, a, ap)
            rows.append({"from": a, "from_port": ap, "to": b, "to_port": bp,
                         "tx_packets": max(p1 - p0, 0), "tx_bytes": max(b1 - b0, 0), "rate_mbps": link.rate_mbps})
    return rows


def _per_prio(status, key, prio):
    values = status.get(key) or ()
    return values[prio] if prio < len(values) else 0


def queue_rows(switches, before, after, max_depths=None):
    """One entry per switch port and priority: {switch, port, priority, drops, max_depth,
    ecn_marked, pfc_tx, pfc_rx, paused_us, tx_packets, headroom_drops, watchdog_storms,
    watchdog_drops, pg_max_bytes} as deltas between two snapshots.

    drops: tail drops of the queue (traffic manager); ecn_marked and pfc_tx: what the P4
    program marked / generated on that egress port (pfc_tx with the XOFFs the port's MAC
    refreshed on its own, testbed/switch/pfc.py PauseRefresh); pfc_rx: PFC frames the port's MAC
    received for that priority (the port's own count, else the program's); paused_us: time
    that queue was paused; max_depth: the largest sampled depth (`max_depths`, packets);
    headroom_drops: lossless packets the ingress PG (this port, this priority) had no
    headroom left for (must be 0); watchdog_storms/drops: PFC storms the watchdog declared
    on this egress queue and the packets it dropped meanwhile; pg_max_bytes: the most the
    ingress PG held (a high-water mark since reset_watermarks, not a delta). The last four
    are the engine's; 0 where a target has no buffer model (BMv2, kernel)."""
    max_depths = max_depths or {}
    rows = []
    for name, sw in switches.items():  # {name: testbed.clos.Switch}
        for port in sorted(sw.ports):
            s0 = before["switches"].get(name, {}).get(port, {})
            s1 = after["switches"].get(name, {}).get(port, {})
            c0 = before["p4"].get(name, {}).get("ports", {}).get(port, {})
            c1 = after["p4"].get(name, {}).get("ports", {}).get(port, {})
            for prio in PRIORITIES:
                def p4(field, _prio=prio):
                    return c1.get(_prio, {}).get(field, 0) - c0.get(_prio, {}).get(field, 0)

                def agent(field, _prio=prio):
                    return _per_prio(s1, field, _prio) - _per_prio(s0, field, _prio)

                rows.append({
                    "switch": name, "port": port, "priority": prio,
                    "drops": agent("tail_drops"),
                    "max_depth": max(max_depths.get((name, port, prio), 0), _per_prio(s1, "queue_depth", prio)),
                    "ecn_marked": p4("ecn_marks"),
                    "pfc_tx": p4("pfc_tx") + agent("pfc_refresh_tx"),
                    "pfc_rx": agent("pfc_rx") if "pfc_rx" in s1 else p4("pfc_rx"),
                    "paused_us": agent("paused_us"),
                    "tx_packets": p4("tx_packets"),
                    "headroom_drops": agent("headroom_drops"),
                    "watchdog_storms": agent("watchdog_storms"),
                    "watchdog_drops": agent("watchdog_drops"),
                    "pg_max_bytes": _per_prio(s1, "pg_max_bytes", prio),
                })
    return rows


def reset_watermarks(fabric):
    """Restart every engine switch's high-water marks and loop-lag statistics (before a phase)."""
    for node in fabric.switches:
        reset = getattr(getattr(node, "agent", None), "reset_watermarks", None)
        if reset is None:
            continue
        try:
            reset()
        except Exception:  # noqa: BLE001 - a target without a buffer model (BMv2): nothing to reset
            pass


def buffer_status(fabric):
    """{switch: its buffer, PG profiles, watchdog and measured loop lag} (engine switches)."""
    out = {}
    for node in fabric.switches:
        status = getattr(getattr(node, "agent", None), "buffer_status", None)
        if status is None:
            continue
        try:
            out[node.name] = status()
        except Exception:  # noqa: BLE001 - BMv2/kernel: no buffer model to report
            pass
    return out


def queue_stats(fabric, switch):
    """Cumulative queue rows of one switch now (the CLI's `queues`), or None on the kernel target."""
    if fabric.controller is None and not hasattr(fabric.mn[switch], "queue_depths"):
        return None
    zero = {"switches": {}, "p4": {}}
    now = {"switches": {switch: port_counters(fabric, switch)},
           "p4": fabric.controller.read_counters(switch) if fabric.controller else {}}
    return queue_rows({switch: fabric.clos.switches[switch]}, zero, now)


class QueueSampler:
    """Samples every switch's queue depths every `interval_s` in a thread (for plots).

    Needs `node.queue_depths()` -> {(port, priority): packets}; where a target has none
    (kernel) it records nothing."""

    def __init__(self, fabric, interval_s=0.1):
        self.fabric = fabric
        self.interval_s = interval_s
        self.samples = []  # (t, switch, port, priority, depth)
        self._stop = threading.Event()
        self._thread = None
        self.t0 = None

    def start(self):
        nodes = [n for n in self.fabric.switches if hasattr(n, "queue_depths")]
        self.t0 = time.monotonic()
        if nodes:
            self._thread = threading.Thread(target=self._run, args=(nodes,), name="queue-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self, nodes):
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            for node in nodes:
                try:
                    depths = node.queue_depths()
                except Exception:  # noqa: BLE001 - a switch going away ends its samples, not the run
                    continue
                for (port, prio), depth in depths.items():
                    if depth:
                        self.samples.append((t, node.name, port, prio, depth))
            self._stop.wait(self.interval_s)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        return self.samples

    def max_depths(self):
        """{(switch, port, priority): the largest depth sampled}."""
        out = {}
        for _t, sw, port, prio, depth in self.samples:
            key = (sw, port, prio)
            out[key] = max(out.get(key, 0), depth)
        return out
