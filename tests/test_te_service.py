"""TE service with an in-memory programmer: placement, failure fallback, manual overrides,
traffic matrix from counters, link events from interface state, the worker process."""
import os
import time

import pytest

from testbed.clos import ClosSpec, build
from testbed.te.collector import OperstateWatcher
from testbed.te.engine import DemandKey
from testbed.te.programmer import (DryRunProgrammer, Override, ProcessProgrammer, ProgrammerError,
                                   normalize_counters)
from testbed.te.service import TEService
from testbed.te.topology import FabricError

L3 = "10.1.3.0/24"
L4 = "10.1.4.0/24"


@pytest.fixture
def clos():
    return build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2))  # uplinks 10 Mb/s


@pytest.fixture
def svc(clos):
    return TEService(clos, DryRunProgrammer(), watch_operstate=False)


def installed(svc):
    return {(o.leaf, o.ingress_port, o.dst_prefix): o.egress_port for o in svc.programmer.installed()}


def test_hints_are_placed_on_disjoint_uplinks(svc):
    svc.add_hint("leaf1", 1, L3, 7)
    svc.add_hint("leaf1", 2, L3, 7)
    run = svc.optimize()
    assert run["placed"] == 2 and not run["errors"] and not run["over_capacity"]
    assert sorted(installed(svc).values()) == [3, 4]  # one per spine: 0.7 each instead of 1.4
    assert run["max_utilization_planned"] == pytest.approx(0.7)
    # a second run with the same matrix changes nothing on the switches
    calls = len(svc.programmer.calls)
    assert svc.optimize()["installed"] == [] and len(svc.programmer.calls) == calls


def test_link_down_withdraws_exactly_the_overrides_using_it_and_next_run_replaces(svc):
    svc.add_hint("leaf1", 1, L3, 7)
    svc.add_hint("leaf1", 2, L3, 7)
    svc.add_hint("leaf2", 1, L4, 2)
    svc.optimize()
    before = installed(svc)
    via_spine1_to_leaf3 = {k for k, port in before.items() if k[2] == L3 and port == 3}
    assert len(via_spine1_to_leaf3) == 1
    # spine1 port 3 faces leaf3: everything to leaf3 via spine1 is black-holed now
    result = svc.link_event("spine1", 3, up=False)
    withdrawn = {(w["leaf"], w["ingress_port"], w["dst_prefix"]) for w in result["withdrawn"]}
    assert withdrawn == via_spine1_to_leaf3
    after = installed(svc)
    assert set(after) == set(before) - withdrawn  # removed at once, the others untouched
    run = svc.optimize()
    assert {(i["leaf"], i["ingress_port"], i["dst_prefix"]) for i in run["installed"]} == withdrawn
    assert all(port == 4 for k, port in installed(svc).items() if k[2] == L3)
    assert run["over_capacity"]  # 7 + 7 over one 10 Mb/s path: placed, and flagged
    # the link returns: the next run spreads the leaf3 traffic again
    svc.link_event("spine1", 3, up=True)
    svc.optimize()
    assert sorted(p for k, p in installed(svc).items() if k[2] == L3) == [3, 4]


def test_switch_down_withdraws_overrides_through_it(svc):
    svc.add_hint("leaf1", 1, L3, 3)
    svc.add_hint("leaf1", 2, L4, 3)
    svc.add_hint("leaf2", 1, L3, 3)
    svc.optimize()
    through_spine2 = {k for k, p in installed(svc).items() if p == 4}
    assert through_spine2
    result = svc.switch_event("spine2", up=False)
    assert {(w["leaf"], w["ingress_port"], w["dst_prefix"]) for w in result["withdrawn"]} == through_spine2
    svc.optimize()
    assert set(installed(svc).values()) == {3}


def test_manual_override_is_pinned_suspended_on_failure_and_restored(svc):
    svc.add_manual("leaf1", 1, L3, 3)
    svc.add_hint("leaf1", 1, L3, 6)
    svc.add_hint("leaf1", 2, L3, 6)
    svc.optimize()
    assert installed(svc)[("leaf1", 1, L3)] == 3
    assert installed(svc)[("leaf1", 2, L3)] == 4  # CSPF works around the manual one
    svc.link_event("leaf1", 3, up=False)
    assert ("leaf1", 1, L3) not in installed(svc)
    assert svc.placements()["suspended_manual"][0]["egress_port"] == 3
    svc.optimize()
    # while its uplink is down, the demand is CSPF's again (on the surviving uplink)
    assert installed(svc)[("leaf1", 1, L3)] == 4
    assert [p["origin"] for p in svc.placements()["placements"] if p["ingress_port"] == 1] == ["cspf"]
    svc.link_event("leaf1", 3, up=True)
    svc.optimize()
    assert installed(svc)[("leaf1", 1, L3)] == 3
    svc.remove_override("leaf1", 1, L3)
    assert ("leaf1", 1, L3) not in installed(svc) and not svc.manual


@pytest.mark.parametrize("args, message", [
    (("spine1", 1, L3, 3), "is a spine, not a leaf"),
    (("leaf9", 1, L3, 3), "no switch named 'leaf9'"),
    (("leaf1", 3, L3, 3), "not a host-facing port"),
    (("leaf1", 1, "10.1.1.0/24", 3), "local to leaf1"),
    (("leaf1", 1, "10.1.3.7/24", 3), "bad destination prefix"),
    (("leaf1", 1, "172.16.0.0/16", 3), "not inside any leaf's subnet"),
    (("leaf1", 1, "10.1.3.7/32", 3), "not a leaf subnet"),  # the switches key on subnet routes
    (("leaf1", 1, L3, 1), "not an uplink"),
    (("leaf1", "x", L3, 3), "ingress_port must be a port number"),
])
def test_manual_override_rejects_bad_input_with_a_clear_message(svc, args, message):
    with pytest.raises(FabricError, match=message):
        svc.add_manual(*args)
    assert installed(svc) == {}


def test_manual_override_onto_a_dead_path_is_refused(svc):
    svc.link_event("spine2", 3, up=False)
    with pytest.raises(FabricError, match="no working path"):
        svc.add_manual("leaf1", 1, L3, 4)


def test_unreachable_switch_is_taken_down_until_its_counters_read_again(svc):
    svc.add_hint("leaf1", 1, L3, 6)
    svc.add_hint("leaf1", 2, L3, 6)
    svc.optimize()
    assert sorted(installed(svc).values()) == [3, 4]
    svc.programmer.feed(unreachable={"spine2": "UNAVAILABLE: connection refused"})
    run = svc.optimize()
    # the override through spine2 went as soon as the read failed; both now share spine1
    assert installed(svc) == {("leaf1", 1, L3): 3, ("leaf1", 2, L3): 3}
    assert run["over_capacity"]
    status = svc.status()
    assert status["unreachable_switches"] == ["spine2"] and status["down_switches"] == ["spine2"]
    assert any(e["event"] == "switch_unreachable" for e in status["events"])
    svc.programmer.feed()
    svc.optimize()
    assert sorted(installed(svc).values()) == [3, 4] and svc.status()["down_switches"] == []


class RefusingProgrammer(DryRunProgrammer):
    """Refuses the next `refuse` writes of one kind, as a busy or broken switch would."""

    def __init__(self):
        super().__init__()
        self.refuse = {"add": 0, "remove": 0}

    def _maybe_refuse(self, op):
        if self.refuse[op]:
            self.refuse[op] -= 1
            raise ProgrammerError(f"leaf1: {op} refused (test)")

    def add(self, override):
        self._maybe_refuse("add")
        super().add(override)

    def remove(self, override):
        self._maybe_refuse("remove")
        super().remove(override)


def test_a_refused_removal_is_retried_on_the_next_run(clos):
    svc = TEService(clos, RefusingProgrammer(), watch_operstate=False)
    svc.add_hint("leaf1", 1, L3, 4)
    svc.optimize()
    uplink = installed(svc)[("leaf1", 1, L3)]
    svc.programmer.refuse["remove"] = 1
    result = svc.link_event("leaf1", uplink, up=False)
    assert len(result["withdrawn"]) == 1  # withdrawn from the plan at once...
    assert installed(svc)[("leaf1", 1, L3)] == uplink  # ...but the switch still holds it
    assert svc.status()["removals_pending"] == [Override("leaf1", 1, L3, uplink).as_dict()]
    svc.remove_hint("leaf1", 1, L3)
    svc.remembered.clear()
    svc.optimize()
    assert installed(svc) == {} and svc.status()["removals_pending"] == []


def test_a_refused_manual_override_leaves_no_trace(clos):
    svc = TEService(clos, RefusingProgrammer(), watch_operstate=False)
    svc.programmer.refuse["add"] = 1
    with pytest.raises(ProgrammerError, match="refused"):
        svc.add_manual("leaf1", 1, L3, 3)
    assert svc.manual == {} and svc.placements() == {"placements": [], "suspended_manual": []}


def test_traffic_matrix_from_counters_and_memory_after_withdrawal(svc):
    prog = svc.programmer
    key = DemandKey("leaf1", 1, L3)
    prog.feed(demand_bytes={key: 0}, port_tx_bytes={("leaf1", 3): 0})
    svc.collect()
    time.sleep(0.2)
    prog.feed(demand_bytes={key: 125_000}, port_tx_bytes={("leaf1", 3): 250_000})  # ~5 / ~10 Mb/s
    run = svc.optimize()
    demand = svc.demands()[0]
    assert demand.key == key and 3.0 < demand.rate_mbps < 5.5
    assert run["placed"] == 1
    util = {(l["switch"], l["port"]): l for l in svc.utilization()["links"]}
    assert 0.6 < util[("leaf1", 3)]["measured_utilization"] < 1.1
    # withdrawn on failure, the override no longer counts bytes; the demand is remembered
    uplink = installed(svc)[("leaf1", 1, L3)]
    svc.link_event("leaf1", uplink, up=False)
    prog.feed(demand_bytes={}, port_tx_bytes={})
    run = svc.optimize()
    assert installed(svc)[("leaf1", 1, L3)] != uplink


def test_only_traffic_entering_at_a_leaf_host_port_is_a_demand(svc):
    # every switch counts <ingress port, prefix> bytes; spines and uplinks see transit traffic
    entering, transit_spine, transit_uplink = (DemandKey("leaf1", 1, L3), DemandKey("spine1", 1, L3),
                                               DemandKey("leaf2", 3, L3))
    svc.programmer.feed(demand_bytes={entering: 0, transit_spine: 0, transit_uplink: 0})
    svc.collect()
    time.sleep(0.1)
    svc.programmer.feed(demand_bytes={entering: 50_000, transit_spine: 50_000, transit_uplink: 50_000})
    run = svc.optimize()
    assert [d.key for d in svc.demands()] == [entering]
    assert run["placed"] == 1 and not run["errors"]


def test_a_demand_cell_first_seen_counts_from_zero_if_its_switch_was_read(svc):
    # the controller lists only non-zero demand cells: absence in a read switch means 0 bytes
    new_flow, unread_switch = DemandKey("leaf1", 2, L3), DemandKey("leaf2", 1, L4)
    svc.programmer.feed(port_tx_bytes={("leaf1", 3): 0})
    svc.collect()
    time.sleep(0.1)
    svc.programmer.feed(port_tx_bytes={("leaf1", 3): 0, ("leaf2", 3): 0},
                        demand_bytes={new_flow: 100_000, unread_switch: 10**9})
    svc.collect()
    assert svc.meter.demand_mbps[new_flow] > 0
    assert unread_switch not in svc.meter.demand_mbps  # its count covers unknown time: no rate


def test_counter_reset_gives_no_negative_rate(svc):
    key = DemandKey("leaf1", 1, L3)
    svc.programmer.feed(demand_bytes={key: 10_000_000})
    svc.collect()
    svc.programmer.feed(demand_bytes={key: 100})
    svc.collect()
    assert all(rate >= 0 for rate in svc.meter.demand_mbps.values())


def test_interval_is_validated(svc):
    assert svc.set_interval(2) == {"interval_s": 2.0}
    for bad in (0, -1, "soon", 10_000):
        with pytest.raises(FabricError, match="interval"):
            svc.set_interval(bad)


def test_normalize_counters_accepts_the_controller_layouts():
    raw = {"leaf1": {"ports": {3: {"tx_bytes": 100}, 4: {0: {"tx_bytes": 5}, 3: {"tx_bytes": 7}}},
                     "te_overrides": [{"ingress_port": 1, "dst_prefix": L3, "bytes": 42}]},
           "leaf2": {"ports": {"3": 9}, "te_overrides": {(2, L4): {"bytes": 8}}}}
    sample = normalize_counters(raw)
    assert sample.port_tx_bytes == {("leaf1", 3): 100, ("leaf1", 4): 12, ("leaf2", 3): 9}
    assert sample.demand_bytes == {DemandKey("leaf1", 1, L3): 42, DemandKey("leaf2", 2, L4): 8}
    # the controller's own shape: one switch, port totals, and the all-traffic demand counter
    one = {"switch": "leaf1", "role": "leaf",
           "ports": {3: {0: {"tx_bytes": 1}}}, "port_totals": {3: {"tx_bytes": 70, "rx_bytes": 5}},
           "te_overrides": [{"ingress_port": 1, "dst_prefix": L3, "egress_port": 3, "packets": 1, "bytes": 40}],
           "demands": [{"ingress_port": 1, "dst_prefix": L3, "route_id": 3, "packets": 2, "bytes": 90},
                       {"ingress_port": 2, "dst_prefix": L4, "route_id": 4, "packets": 1, "bytes": 30}]}
    for shape in (one, [one], {"leaf1": one}):
        sample = normalize_counters(shape)
        assert sample.port_tx_bytes == {("leaf1", 3): 70}
        assert sample.demand_bytes == {DemandKey("leaf1", 1, L3): 90, DemandKey("leaf1", 2, L4): 30}


def test_operstate_watcher_reports_changes(clos, tmp_path):
    for sw in clos.switches.values():
        for port in sw.ports.values():
            if port.kind != "host":
                (tmp_path / sw.intf(port.number)).mkdir()
                (tmp_path / sw.intf(port.number) / "operstate").write_text("up\n")
    (tmp_path / "spine2-eth1" / "operstate").write_text("down\n")
    watcher = OperstateWatcher(clos, sysfs=str(tmp_path))
    assert watcher.poll() == [("spine2", 1, False)]  # already down at start is news
    assert watcher.poll() == []
    (tmp_path / "leaf3-eth3" / "operstate").write_text("down\n")
    (tmp_path / "spine2-eth1" / "operstate").write_text("up\n")
    assert sorted(watcher.poll()) == [("leaf3", 3, False), ("spine2", 1, True)]
    svc = TEService(clos, DryRunProgrammer(), watch_operstate=False)
    svc.watcher = watcher
    (tmp_path / "leaf1-eth3" / "operstate").write_text("down\n")
    svc.add_hint("leaf2", 1, L4, 1)
    svc.optimize()
    assert svc.poll_links() and ("leaf1", 3) in svc.graph.down_ports


def test_worker_process_runs_the_programmer_without_eventlet(clos):
    prog = ProcessProgrammer("dry-run", clos)
    try:
        who = prog.worker.call("whoami")
        assert who["pid"] == prog.worker.pid != os.getpid()
        assert who["eventlet_loaded"] is False
        svc = TEService(clos, prog, watch_operstate=False)
        svc.add_hint("leaf1", 1, L3, 4)
        svc.optimize()
        assert prog.installed() == [Override("leaf1", 1, L3, svc.placements()["placements"][0]["egress_port"])]
        # an error inside the worker comes back as an exception, the worker survives
        with pytest.raises(Exception, match="no attribute 'nonexistent'"):
            prog._call("nonexistent")
        assert prog.worker.call("whoami")["pid"] == who["pid"]
    finally:
        prog.close()
    assert prog.worker.proc.returncode is not None  # the child is gone, reaped


def test_operstate_watcher_follows_a_custom_interface_naming(clos, tmp_path):
    (tmp_path / "rlx3p3").mkdir()
    (tmp_path / "rlx3p3" / "operstate").write_text("down\n")  # leaf1 is device 3
    watcher = OperstateWatcher(clos, sysfs=str(tmp_path), intf_format="rlx{device_id}p{port}")
    assert watcher.poll() == [("leaf1", 3, False)]
    with pytest.raises(ValueError, match="fields"):
        OperstateWatcher(clos, intf_format="{nope}")


def test_tick_runs_only_when_the_interval_is_up(svc):
    svc.set_interval(0.3)
    assert svc.tick() is not None  # the first tick runs at once
    assert svc.tick() is None
    time.sleep(0.35)
    assert svc.tick()["reason"] == "interval" and svc.runs == 2


def test_fabric_programmer_reports_a_dead_switch_instead_of_failing_the_read(clos):
    from testbed.te.programmer import FabricProgrammer

    class Controller:  # the slice of FabricController the programmer reads counters through
        def read_counters(self, switch):
            if switch == "spine1":
                raise ConnectionError("spine1: UNAVAILABLE")
            return {switch: {"port_totals": {1: {"tx_bytes": 10}}, "demands": []}}

    sample = FabricProgrammer(clos, controller=Controller()).read_counters()
    assert sample.unreachable == {"spine1": "ConnectionError: spine1: UNAVAILABLE"}
    assert sample.port_tx_bytes == {(name, 1): 10 for name in clos.switches if name != "spine1"}


def test_a_timed_out_worker_call_does_not_confuse_later_ones(clos):
    import socket
    from testbed.te.worker import ProcessWorker, WorkerError
    silent = socket.socket()  # accepts TCP but never speaks gRPC: Capabilities waits its timeout
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    fabric = build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2, grpc_base_port=port - 3)).to_dict()
    worker = ProcessWorker()
    try:
        with pytest.raises(WorkerError, match="did not finish"):
            worker.call("probe", fabric, ["leaf1"], 1.0, timeout=0.2)
        who = worker.call("whoami", timeout=10)  # answered after the late probe reply
        assert who["pid"] == worker.pid
        assert worker._replies == {}  # the late reply was dropped, not kept forever
    finally:
        worker.close()
        silent.close()
