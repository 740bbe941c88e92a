"""The TE service on the simulated clock of a virtual-time fabric (testbed/sim/).

The same collector, CSPF engine and programmer as the Ryu app (testbed/te/service.py), with
the app's timer replaced by scheduler events: every `interval_s` of simulated time the service
reads the switches' counters over P4Runtime, measures rates on the simulated clock, places the
demands with CSPF and installs or removes exact-match overrides through the fabric
controller's `add_te_override` path. Link failures reach it when they happen (SimFabric's
link listeners), and it withdraws the overrides whose path crossed them at once, as the app
does on a REST link event. No Ryu, no eventlet: those belong to real time.

    te = VirtualTE(fabric, interval_s=20e-6).start()
    te.hint(leaf, ingress_port, prefix, rate_mbps)      # what the job will send, if known
    ... fabric.run_ranks(job, ...) ...
    te.stop()
"""
from testbed.te.programmer import FabricProgrammer
from testbed.te.service import TEService

DEFAULT_INTERVAL_S = 20e-6      # a placement run every 20 us of simulated time
MIN_INTERVAL_S = 1e-6


class VirtualTE:
    def __init__(self, fabric, interval_s=DEFAULT_INTERVAL_S):
        self.fabric = fabric
        programmer = FabricProgrammer(fabric.clos, controller=fabric.controller, clock=fabric.clock)
        self.service = TEService(fabric.clos, programmer, interval_s=interval_s, watch_operstate=False,
                                 clock=fabric.clock, min_interval_s=MIN_INTERVAL_S)
        self.runs = []              # [{"t_s", "installed", "removed", "max_utilization_planned", ...}]
        self.link_events = []       # [{"t_s", "link", "up", "withdrawn"}]
        self._timer = None
        self._last_tx = None
        fabric.link_listeners.append(self._link)

    def hint(self, leaf, ingress_port, dst_prefix, rate_mbps, ttl_s=None):
        return self.service.add_hint(leaf, ingress_port, dst_prefix, rate_mbps, ttl_s)

    def start(self):
        """The first placement now, then one every interval (scheduler events)."""
        self._run()
        return self

    def _fabric_tx(self):
        """Frames the switches have sent so far (read in-process: no P4Runtime call)."""
        return sum(c.tx_packets for node in self.fabric.nodes.values() for c in node.switch.counters.values())

    def _run(self):
        # Ranks spend most of a phase's simulated time in barriers, when nothing crosses the
        # switches: then a run would measure zero rates and place the same hints again, so it is
        # skipped (a counter read costs ~0.1 s of wall time per switch; the timer itself is cheap).
        tx = self._fabric_tx()
        idle = self.runs and tx == self._last_tx
        self._last_tx = tx
        result = None if idle else self.service.tick()
        if result is not None:
            self.runs.append({"t_s": round(self.fabric.clock(), 9), "run": result["run"],
                              "installed": len(result["installed"]), "removed": len(result["removed"]),
                              "placed": result["placed"], "demands": result["demands"],
                              "max_utilization_planned": result["max_utilization_planned"],
                              "errors": result["errors"]})
        self._timer = self.fabric.scheduler.after(self.service.interval_s, self._run)

    def stop(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._link in self.fabric.link_listeners:
            self.fabric.link_listeners.remove(self._link)
        return self

    def _link(self, a, b, up):
        """Both ends of every cable between switches `a` and `b` changed state."""
        withdrawn = []
        for sw, peer in ((a, b), (b, a)):
            for number, port in sorted(self.fabric.clos.switches[sw].ports.items()):
                if port.peer == peer:
                    withdrawn += self.service.link_event(sw, number, up)["withdrawn"]
        self.link_events.append({"t_s": round(self.fabric.clock(), 9), "link": f"{a}-{b}", "up": bool(up),
                                 "withdrawn": len(withdrawn)})

    def overrides(self):
        """The overrides the service holds: [{"leaf", "ingress_port", "dst_prefix", "egress_port", ...}]."""
        return self.service.placements()
