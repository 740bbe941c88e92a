"""The controller's pure parts: routes and ECMP groups from a Clos, knob validation, the
entries that carry the knobs, and the plan/diff that decides what gets written."""
import pytest

from testbed.clos import ClosSpec, build
from testbed.control import program_names as N
from testbed.control.entries import Entry, exact, int_to_mac, mac_to_int
from testbed.control.knobs import EcnProfile, KnobError, Knobs, PfcConfig, knob_entries, knobs_from_entries, \
    pause_quanta
from testbed.control.plan import KNOB_TABLES, PLANNED_TABLES, ROUTING_TABLES, diff, plan_switch
from testbed.control.routes import HOST_ROUTE_BASE, compute_routes, link_key, normalize_prefix


@pytest.fixture(scope="module")
def clos():
    return build(ClosSpec(spines=4, leaves=3, hosts_per_leaf=2))


# --- routes -----------------------------------------------------------------------------

def test_leaf_routes_remote_subnets_over_every_spine_and_own_hosts_direct(clos):
    routes = compute_routes(clos)["leaf1"]
    by_prefix = routes.by_prefix()
    assert set(by_prefix) == {"10.1.2.0/24", "10.1.3.0/24", "10.1.1.1/32", "10.1.1.2/32"}
    remote = by_prefix["10.1.2.0/24"]
    assert [h.port for h in remote.next_hops] == [3, 4, 5, 6]   # uplinks H+1..H+S
    # both remote subnets share one group: same next-hop set
    assert remote.group == by_prefix["10.1.3.0/24"].group == 1
    assert list(routes.groups) == [1]
    host = by_prefix["10.1.1.2/32"]
    assert host.group == 0 and host.route_id == HOST_ROUTE_BASE + 2
    assert host.next_hops[0].dmac == clos.hosts["h2"].nics[0].mac
    assert host.next_hops[0].smac == clos.switches["leaf1"].ports[2].mac
    assert remote.route_id == clos.switches["leaf2"].index


def test_spine_routes_each_leaf_subnet_down_one_port(clos):
    routes = compute_routes(clos)["spine3"]
    assert [(r.prefix, [h.port for h in r.next_hops], r.group) for r in routes.routes] == [
        ("10.1.1.0/24", [1], 0), ("10.1.2.0/24", [2], 0), ("10.1.3.0/24", [3], 0)]
    hop = routes.routes[1].next_hops[0]
    assert hop.dmac == clos.switches["leaf2"].ports[2 + 3].mac   # leaf2's uplink to spine3


def test_down_link_leaves_the_group_and_valley_free_paths_only(clos):
    down = frozenset({link_key("leaf2", "spine1")})
    routes = compute_routes(clos, down)
    # leaf1 can no longer reach leaf2 via spine1 (it would need leaf2<-spine1 link)
    to_leaf2 = routes["leaf1"].by_prefix()["10.1.2.0/24"]
    assert [h.port for h in to_leaf2.next_hops] == [4, 5, 6]
    # and leaf3 still uses all four spines: distinct groups on leaf1
    assert [h.port for h in routes["leaf1"].by_prefix()["10.1.3.0/24"].next_hops] == [3, 4, 5, 6]
    assert len(routes["leaf1"].groups) == 2
    # spine1 must not route leaf2's subnet through another leaf (no valleys): no route at all
    assert "10.1.2.0/24" not in routes["spine1"].by_prefix()


def test_three_tier_routes_cross_zones_through_aggregation():
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=1, zones=2, aggs=2))
    routes = compute_routes(clos)
    leaf = clos.by_role("leaf")[0]
    far = [r for r in routes[leaf.name].routes if r.prefix.startswith("10.2.")]
    assert far and all(len(r.next_hops) == 2 for r in far)   # both spines of its zone
    spine = clos.by_role("spine")[0]
    far_on_spine = [r for r in routes[spine.name].routes if r.prefix.startswith("10.2.")]
    uplinks = [p.number for p in spine.ports.values() if p.peer.startswith("agg")]
    assert far_on_spine and all([h.port for h in r.next_hops] == uplinks for r in far_on_spine)


def test_prefixes_are_normalized_or_rejected_by_name():
    assert normalize_prefix(" 10.1.2.0/24 ") == "10.1.2.0/24"
    assert normalize_prefix("10.1.2.3") == "10.1.2.3/32"
    with pytest.raises(ValueError, match="10.1.2.3/24"):
        normalize_prefix("10.1.2.3/24")
    with pytest.raises(ValueError, match="'leaf9'"):
        normalize_prefix("leaf9")


# --- knobs ------------------------------------------------------------------------------

@pytest.mark.parametrize("update, message", [
    (lambda k: k.with_hash_mode("crc"), "choose one of 5tuple, qpn, flowlet"),
    (lambda k: k.with_hash_mode("5tuple", qp_aware=True), "use mode qpn"),
    (lambda k: k.with_flowlet(gap_us=0), "flowlet gap"),
    (lambda k: k.with_flowlet(choice="smallest"), "random, least_loaded"),
    (lambda k: k.with_ecn(20, 5, 0.1), r"Kmin \(20\) must be below Kmax \(5\)"),
    (lambda k: k.with_ecn(5, 20, 1.5), "Pmax must be a probability"),
    (lambda k: k.with_ecn(5, 20, 0.1, priority=8), "priority in 0..7"),
    (lambda k: k.with_pfc(10, 20), r"XON \(20\) must be below XOFF \(10\)"),
    (lambda k: k.with_pfc(-1, 0), "XOFF must be a whole number"),
    (lambda k: k.with_dscp_map({64: 3}), "DSCP 64 is not in 0..63"),
    (lambda k: k.with_dscp_map({26: 9}), "DSCP 26 -> priority 9"),
])
def test_bad_knobs_are_refused_with_the_knob_named(update, message):
    with pytest.raises(KnobError, match=message):
        update(Knobs())


def test_knob_updates_are_pure_and_keep_the_rest():
    base = Knobs()
    qpn = base.with_hash_mode("qpn")
    assert (qpn.hash_mode, qpn.qp_aware) == ("qpn", True)
    assert (base.hash_mode, base.qp_aware) == ("5tuple", False)
    flowlet = qpn.with_hash_mode("flowlet")
    assert flowlet.qp_aware is True          # flowlet keeps the QP-awareness it had
    assert flowlet.with_hash_mode("5tuple").qp_aware is False
    pfc = base.with_pfc(40, 30, priorities=(3, 4))
    assert pfc.pfc == {3: PfcConfig(40, 30, 10_000), 4: PfcConfig(40, 30, 10_000)}
    assert pfc.with_pfc(priorities=(4,), enabled=False).pfc == {3: PfcConfig(40, 30, 10_000)}
    assert base.without_ecn(3).ecn == {}


def test_pause_quanta_follow_the_link_rate():
    # 512 bit times per quantum: 20 ms at 10 Mb/s is 200 000 bits = 390.6 quanta
    assert pause_quanta(20_000, 10.0) == 391
    assert pause_quanta(1, 0.001) == 1
    assert pause_quanta(10**9, 10_000) == 0xFFFF


def test_knob_entries_round_trip_through_what_a_switch_holds(clos):
    knobs = Knobs(hash_mode="flowlet", qp_aware=True, flowlet_gap_us=300, flowlet_choice="least_loaded",
                  hash_seed=7, dscp_map={26: 3, 10: 1}, ecn={3: EcnProfile(4, 16, 0.5)},
                  pfc={3: PfcConfig(30, 10, 500, headroom=20000, reserved=3000)}).check()
    entries = knob_entries(knobs, clos.switches["leaf1"])
    config = [e for e in entries if e.table == N.ECMP_CONFIG]
    assert config == [Entry(N.ECMP_CONFIG, (), N.SET_ECMP_CONFIG,
                            (("mode", N.HASH_MODE_FLOWLET), ("qp_aware", 1), ("flowlet_gap_us", 300),
                             ("least_loaded", 1), ("seed", 7)), default=True)]
    ecn = [e for e in entries if e.table == N.ECN_CONFIG]
    assert ecn[0].param("pmax") == 32768 and ecn[0].match == (exact(3),)
    pfc_ports = [e for e in entries if e.table == N.PFC_PORT]
    assert [e.match[0][1] for e in pfc_ports] == sorted(clos.switches["leaf1"].ports)
    assert int_to_mac(pfc_ports[0].param("smac")) == clos.switches["leaf1"].ports[1].mac
    assert knobs_from_entries(entries, Knobs(pfc_pause_us=knobs.pfc_pause_us)) == knobs
    # the pause time comes back from the port quanta (and rewrites the same quanta)
    slow = knobs.with_pfc(pause_us=12_345)
    back = knobs_from_entries(knob_entries(slow, clos.switches["leaf1"]), Knobs(), clos.switches["leaf1"])
    assert abs(back.pfc_pause_us - 12_345) <= 52   # one quantum at 10 Mb/s is 51.2 us
    assert knob_entries(back, clos.switches["leaf1"]) == knob_entries(slow, clos.switches["leaf1"])


# --- plan and diff ----------------------------------------------------------------------

def test_plan_holds_routes_members_knobs_and_the_pfc_session(clos):
    routes = compute_routes(clos)
    plan = plan_switch(clos, "leaf1", routes["leaf1"], Knobs())
    tables = {e.table for e in plan.entries.values()}
    assert tables == set(PLANNED_TABLES)
    group = [e for e in plan.entries.values() if e.action == N.ROUTE_TO_GROUP]
    assert {e.param("size") for e in group} == {4}
    members = sorted((e.match[1][1], e.param("port")) for e in plan.entries.values() if e.table == N.ECMP_MEMBER)
    assert members == [(0, 3), (1, 4), (2, 5), (3, 6)]
    assert list(plan.clone_sessions) == [N.PFC_SESSION]
    assert plan.clone_sessions[N.PFC_SESSION].replicas == ((N.CPU_PORT, 0),)
    assert mac_to_int("02:10:00:03:01:05") == 0x021000030105


def test_diff_is_make_before_break_and_idempotent(clos):
    routes = compute_routes(clos)
    wanted = plan_switch(clos, "leaf1", routes["leaf1"], Knobs()).entries
    inserts, modifies, deletes = diff(wanted, {}, PLANNED_TABLES)
    # a fresh switch: every keyed entry is inserted, the keyless config is a default MODIFY
    assert len(inserts) + len(modifies) == len(wanted) and not deletes
    assert [e.table for e in modifies] == [N.ECMP_CONFIG]
    assert diff(wanted, dict(wanted), PLANNED_TABLES) == ([], [], [])

    changed = plan_switch(clos, "leaf1", compute_routes(clos, {link_key("leaf1", "spine2")})["leaf1"],
                          Knobs()).entries
    inserts, modifies, deletes = diff(changed, wanted, ROUTING_TABLES)
    # group 1 shrinks to 3 members: routes modified (size 3), member 3 deleted, members 1-2 re-pointed
    assert {e.table for e in modifies} == {N.IPV4_LPM, N.ECMP_MEMBER}
    assert all(e.param("size") == 3 for e in modifies if e.table == N.IPV4_LPM)
    assert [(e.table, e.match) for e in deletes] == [(N.ECMP_MEMBER, (exact(1), exact(3)))]
    assert not inserts


def test_diff_only_touches_the_tables_it_is_given(clos):
    routes = compute_routes(clos)
    installed = plan_switch(clos, "leaf1", routes["leaf1"], Knobs()).entries
    override = Entry(N.TE_OVERRIDE, (exact(1), exact(2)), N.FORWARD, (("port", 4), ("smac", 1), ("dmac", 2)))
    installed = {**installed, override.key: override}
    wanted = plan_switch(clos, "leaf1", routes["leaf1"], Knobs().with_hash_mode("qpn")).entries
    inserts, modifies, deletes = diff(wanted, installed, KNOB_TABLES)
    assert (inserts, deletes) == ([], [])
    assert [(e.table, e.param("qp_aware")) for e in modifies] == [(N.ECMP_CONFIG, 1)]


def test_the_controller_fills_unset_pfc_headroom_for_its_clock():
    """Real time (default): the measured-loop-lag response time; virtual time passes physical
    values (a 300 ms response at production rates would be gigabytes)."""
    from testbed.control import FabricController
    from testbed.switch import buffers
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2))
    real = FabricController(clos, switches=["leaf1"])
    fastest = max(p.rate_mbps for p in clos.switches["leaf1"].ports.values()) * 1e6
    assert real.knobs["leaf1"].pfc[3].headroom == buffers.headroom_bytes(
        fastest, buffers.LAB_CABLE_M, 1500, buffers.REALTIME_RESPONSE_US)
    virtual = FabricController(clos, switches=["leaf1"], headroom_response_us=1.0, headroom_cable_m=100)
    assert virtual.knobs["leaf1"].pfc[3].headroom == buffers.headroom_bytes(fastest, 100, 1500, 1.0)
    explicit = FabricController(clos, switches=["leaf1"], knobs=Knobs(pfc={3: PfcConfig(9000, 3000, 100, 7777)}))
    assert explicit.knobs["leaf1"].pfc[3].headroom == 7777
