"""The Clos description: numbering, addressing, validation (no network needed)."""
import ipaddress

import pytest

from testbed.clos import ClosSpec, TopologyError, build, Clos


def test_two_by_two_layout_and_addresses():
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2))
    assert sorted(clos.switches) == ["leaf1", "leaf2", "spine1", "spine2"]
    assert sorted(clos.hosts) == ["h1", "h2", "h3", "h4"]
    leaf1 = clos.switches["leaf1"]
    # host ports first, then one uplink per spine
    assert {p: leaf1.ports[p].peer for p in leaf1.ports} == {1: "h1", 2: "h2", 3: "spine1", 4: "spine2"}
    assert clos.switches["spine2"].ports[1].peer == "leaf1"
    assert clos.switches["spine2"].ports[1].peer_port == 4
    h3 = clos.hosts["h3"]
    assert (h3.ip, h3.nics[0].leaf, h3.nics[0].leaf_port) == ("10.1.2.1", "leaf2", 1)
    assert h3.nics[0].gateway_mac == clos.switches["leaf2"].ports[1].mac
    assert ipaddress.ip_address(h3.ip) in ipaddress.ip_network(clos.switches["leaf2"].subnet)
    # every link appears once and matches both port tables
    assert len(clos.links) == 2 * 2 + 4
    macs = [p.mac for s in clos.switches.values() for p in s.ports.values()]
    macs += [n.mac for h in clos.hosts.values() for n in h.nics]
    assert len(macs) == len(set(macs))
    assert len({s.device_id for s in clos.switches.values()}) == 4
    assert len({s.grpc_port for s in clos.switches.values()}) == 4


def test_oversubscription_sets_uplink_rate():
    clos = build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=4, link_rate_mbps=10, oversubscription=2))
    assert clos.switches["leaf1"].ports[5].rate_mbps == pytest.approx(10.0)  # 40 down / (2 * 2)
    assert clos.scale["time_dilation"] == pytest.approx(40000.0)


def test_rails_put_each_nic_on_a_different_leaf():
    clos = build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2, rails=2))
    h1 = clos.hosts["h1"]
    assert [n.leaf for n in h1.nics] == ["leaf1", "leaf2"]
    assert len(clos.hosts) == 4


def test_three_tier_zones():
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=1, zones=2, aggs=2))
    assert len(clos.aggs) == 2 and len(clos.spines) == 4 and len(clos.leaves) == 4
    agg1 = clos.switches["agg1"]
    assert sorted(p.peer for p in agg1.ports.values()) == ["z1spine1", "z1spine2", "z2spine1", "z2spine2"]
    assert len({s.subnet for s in clos.leaves}) == 4


def test_roundtrip_through_json(tmp_path):
    clos = build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2))
    clos.save(tmp_path / "fabric.json")
    again = Clos.load(tmp_path / "fabric.json")
    assert again.to_dict() == clos.to_dict()


@pytest.mark.parametrize("kwargs, words", [
    (dict(spines=0), "--spines"),
    (dict(leaves=3, rails=2), "--rails 2 must divide --leaves 3"),
    (dict(link_rate_mbps=-1), "--link-rate"),
    (dict(oversubscription=100), "--oversubscription"),
    (dict(zones=2), "--aggs"),
    (dict(aggs=1), "--zones"),
    (dict(spines=40, leaves=40), "more than one machine"),
])
def test_invalid_shapes_are_rejected_with_the_parameter_named(kwargs, words):
    with pytest.raises(TopologyError, match=words.replace("-", r"\-")):
        build(ClosSpec(**kwargs))
