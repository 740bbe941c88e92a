"""Counters and queue state from a running fabric, as plain dicts for summary.json.

Port counters come from each switch node (`node.port_counters()`: the engine's agent,
BMv2's, or the kernel's interface statistics) and host NIC counters from the host's
namespace. A snapshot before and after an experiment gives per-link deltas, one entry
per direction, in the summary's `links` schema.
"""
import json
import threading
import time

from testbed.net.kernel_router import run_in

PORT_FIELDS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")
QUEUE_FIELDS = ("drops", "max_depth", "ecn_marked", "pfc_tx", "pfc_rx", "paused_us")


def port_counters(fabric, switch):
    node = fabric.mn[switch]
    try:
        return node.port_counters()
    except (NotImplementedError, AttributeError, OSError, RuntimeError) as exc:
        print(f"warning: {switch}: port counters unavailable ({exc})")
        return {}


def queue_stats(fabric, switch):
    """[{switch, port, priority, drops, max_depth, ecn_marked, pfc_tx, pfc_rx, paused_us}] or None."""
    node = fabric.mn[switch]
    fn = getattr(node, "queue_stats", None)
    if fn is None:
        return None
    try:
        rows = fn()
    except (NotImplementedError, OSError, RuntimeError):
        return None
    return [{"switch": switch, **row} for row in rows]


def nic_counters(fabric, host):
    """{nic index: {rx_packets, rx_bytes, tx_packets, tx_bytes}} from the host's kernel."""
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
    """Every switch port and host NIC counter now."""
    return {
        "time": time.time(),
        "switches": {name: port_counters(fabric, name) for name in fabric.clos.switches},
        "hosts": {name: nic_counters(fabric, name) for name in fabric.clos.hosts},
    }


def _tx(snap, node, port):
    table = snap["switches"].get(node) if node in snap["switches"] else snap["hosts"].get(node)
    c = (table or {}).get(port, {})
    return c.get("tx_packets", 0), c.get("tx_bytes", 0)


def link_loads(clos, before, after):
    """One entry per link direction: {from, from_port, to, to_port, tx_packets, tx_bytes, rate_mbps}.

    Ports are switch port numbers; a host end's port is its NIC index."""
    rows = []
    for link in clos.links:
        for a, ap, b, bp in ((link.a, link.a_port, link.b, link.b_port), (link.b, link.b_port, link.a, link.a_port)):
            p1, b1 = _tx(after, a, ap)
            p0, b0 = _tx(before, a, ap)
            rows.append({"from": a, "from_port": ap, "to": b, "to_port": bp,
                         "tx_packets": max(p1 - p0, 0), "tx_bytes": max(b1 - b0, 0), "rate_mbps": link.rate_mbps})
    return rows


class QueueSampler:
    """Samples every switch's queue depths every `interval_s` in a thread (for plots).

    Needs `node.queue_depths()` -> {(port, priority): packets}; where a target has none
    (kernel) it records nothing."""

    def __init__(self, fabric, interval_s=0.05):
        self.fabric = fabric
        self.interval_s = interval_s
        self.samples = []  # (t, switch, port, priority, depth)
        self._stop = threading.Event()
        self._thread = None
        self.t0 = None

    def start(self):
        nodes = [n for n in self.fabric.switches if hasattr(n, "queue_depths")]
        if not nodes:
            return self
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(nodes,), name="queue-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self, nodes):
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            for node in nodes:
                try:
                    depths = node.queue_depths()
                except Exception:  # a switch going away ends its samples, not the run
                    continue
                for (port, prio), depth in depths.items():
                    self.samples.append((t, node.name, port, prio, depth))
            self._stop.wait(self.interval_s)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        return self.samples
