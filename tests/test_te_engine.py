"""TE engine: CSPF against 5-tuple ECMP on a 2-spine/4-leaf Clos, and the forwarding model."""
import random

import pytest

from testbed.clos import ClosSpec, build
from testbed.te.engine import (Demand, DemandKey, Flow, cspf, ecmp_loads, ecmp_route,
                               max_utilization)
from testbed.te.topology import FabricError, FabricGraph


@pytest.fixture
def graph():
    # 4 hosts per leaf at 10 Mb/s, 1:1: each leaf has two 20 Mb/s uplinks.
    return FabricGraph(build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=4)))


def _host_ip(graph, leaf, port):
    for host in graph.clos.hosts.values():
        for nic in host.nics:
            if nic.leaf == leaf and nic.leaf_port == port:
                return nic.ip
    raise KeyError((leaf, port))


def _demand(graph, leaf, port, dst_leaf, rate, sport, dst_host=1):
    """One RoCE flow (one QP) from host port `port` of `leaf` to a host on `dst_leaf`."""
    subnet = graph.clos.switches[dst_leaf].subnet
    dst_ip = subnet.rsplit(".", 1)[0] + f".{dst_host}"
    flow = Flow(_host_ip(graph, leaf, port), dst_ip, sport)
    return Demand(DemandKey(leaf, port, subnet), rate, dst_leaf, [(flow, rate)])


def random_matrix(graph, seed):
    rnd = random.Random(seed)
    leaves = [s.name for s in graph.clos.leaves]
    demands = []
    for leaf in leaves:
        for port in graph.host_ports(leaf):
            if rnd.random() < 0.3:
                continue
            dst = rnd.choice([l for l in leaves if l != leaf])
            demands.append(_demand(graph, leaf, port, dst, rnd.uniform(0.5, 10.0),
                                   rnd.randint(49152, 65535), rnd.randint(1, 4)))
    return demands


def colliding_matrix(graph):
    """Two big flows from leaf1 to leaf3 whose 5-tuples ECMP hashes onto the same uplink,
    plus two from leaf2 to leaf4 that collide likewise."""
    demands = []
    for leaf, dst in (("leaf1", "leaf3"), ("leaf2", "leaf4")):
        first = _demand(graph, leaf, 1, dst, 15.0, 50000)
        first_uplink = ecmp_route(graph, leaf, dst, first.flows[0][0])[0]
        for sport in range(50001, 51000):
            second = _demand(graph, leaf, 2, dst, 15.0, sport)
            if ecmp_route(graph, leaf, dst, second.flows[0][0])[0] == first_uplink:
                break
        demands += [first, second]
    return demands


def test_path_model_of_a_two_tier_clos(graph):
    up = graph.uplinks("leaf1")
    assert up == [5, 6]
    fractions = graph.path_fractions("leaf1", 5, "leaf3")
    # leaf1 port 5 faces spine1, whose port 3 faces leaf3
    assert fractions == {("leaf1", 5): 1.0, ("spine1", 3): 1.0}
    graph.set_link("spine1", 3, up=False)
    assert graph.path_fractions("leaf1", 5, "leaf3") is None  # static routes: spine1 black-holes
    assert graph.path_fractions("leaf1", 5, "leaf2") is not None
    assert graph.usable_uplinks("leaf1", "leaf3") == [6]
    graph.set_switch("spine2", up=False)
    assert graph.usable_uplinks("leaf1", "leaf3") == []
    with pytest.raises(FabricError, match="not inside any leaf"):
        graph.leaf_for_prefix("192.168.0.0/24")
    with pytest.raises(FabricError, match="is a spine"):
        graph.leaf("spine1")


@pytest.mark.parametrize("seed", range(25))
def test_cspf_is_never_worse_than_ecmp(graph, seed):
    demands = random_matrix(graph, seed)
    ecmp = max_utilization(graph, ecmp_loads(graph, demands))
    plan = cspf(graph, demands)
    assert not plan.unroutable
    assert set(plan.placements) == {d.key for d in demands}
    # Every demand's rate is on its path, nothing is lost or invented.
    total = sum(d.rate_mbps for d in demands)
    on_leaf_uplinks = sum(load for (switch, _), load in plan.loads.items()
                          if graph.clos.switches[switch].role == "leaf")
    assert on_leaf_uplinks == pytest.approx(total)
    assert plan.max_utilization(graph) <= ecmp + 1e-9, (plan.max_utilization(graph), ecmp)


def test_cspf_strictly_beats_ecmp_on_a_colliding_matrix(graph):
    demands = colliding_matrix(graph)
    ecmp = max_utilization(graph, ecmp_loads(graph, demands))
    plan = cspf(graph, demands)
    assert ecmp == pytest.approx(1.5)  # two 15 Mb/s flows on one 20 Mb/s uplink
    assert plan.max_utilization(graph) == pytest.approx(0.75)
    assert plan.max_utilization(graph) < ecmp
    # the two flows of each leaf were split over both spines, and every placement fits
    for leaf in ("leaf1", "leaf2"):
        assert {p.uplink for p in plan.placements.values() if p.key.leaf == leaf} == {5, 6}
    assert all(p.fits for p in plan.placements.values())


def test_largest_demand_placed_first_and_constraint_respected(graph):
    # Uplinks are 20 Mb/s; 12 + 9 + 8 from leaf1 to leaf2: 12 alone, 9 + 8 together.
    demands = [_demand(graph, "leaf1", p, "leaf2", r, 50000 + p) for p, r in ((1, 9.0), (2, 12.0), (3, 8.0))]
    plan = cspf(graph, demands)
    by_rate = {p.rate_mbps: p.uplink for p in plan.placements.values()}
    assert by_rate[9.0] == by_rate[8.0] != by_rate[12.0]
    assert all(p.fits for p in plan.placements.values())
    assert plan.max_utilization(graph) == pytest.approx(17 / 20)


def test_demand_that_fits_nowhere_is_flagged_not_dropped(graph):
    demands = [_demand(graph, "leaf1", p, "leaf2", 15.0, 50000 + p) for p in (1, 2, 3)]
    plan = cspf(graph, demands)
    assert len(plan.placements) == 3
    assert sum(not p.fits for p in plan.placements.values()) == 1
    assert plan.max_utilization(graph) == pytest.approx(30 / 20)


def test_cspf_avoids_failed_links_and_respects_pinned(graph):
    graph.set_link("leaf1", 5, up=False)
    d = _demand(graph, "leaf1", 1, "leaf3", 5.0, 50000)
    assert cspf(graph, [d]).placements[d.key].uplink == 6
    graph.set_link("leaf1", 5, up=True)
    pinned_key = DemandKey("leaf1", 2, graph.clos.switches["leaf3"].subnet)
    plan = cspf(graph, [d], pinned=[(pinned_key, 18.0, 6)])
    assert plan.placements[pinned_key].pinned and plan.placements[pinned_key].uplink == 6
    assert plan.placements[d.key].uplink == 5  # works around the pinned 18 Mb/s


def test_three_tier_paths_conserve_traffic():
    g = FabricGraph(build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, zones=2, aggs=2)))
    dst = g.leaf_for_prefix("10.2.4.0/24")
    fractions = g.path_fractions("z1leaf1", g.uplinks("z1leaf1")[0], dst)
    # leaf -> spine -> 2 aggs (half each) -> zone-2 spines -> leaf: every tier carries 100 %
    by_tier = {}
    for (switch, _), share in fractions.items():
        role = g.clos.switches[switch].role
        by_tier[role] = by_tier.get(role, 0.0) + share
    assert by_tier["leaf"] == pytest.approx(1.0)
    assert by_tier["agg"] == pytest.approx(1.0)
    assert by_tier["spine"] == pytest.approx(2.0)  # one spine up to the aggs, one down to the leaf
    demand = Demand(DemandKey("z1leaf1", 1, "10.2.4.0/24"), 4.0, dst,
                    [(Flow("10.1.1.1", "10.2.4.1", 50000), 4.0)])
    assert max_utilization(g, cspf(g, [demand]).loads) <= max_utilization(g, ecmp_loads(g, [demand])) + 1e-9
