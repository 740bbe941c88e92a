"""p4/fabric.p4 on the embedded engine, packet in -> packets out, with every entry installed
by the real FabricController over P4Runtime (testbed.p4rt.server on loopback).

The switch is leaf1 of a 4-spine/2-leaf/2-hosts-per-leaf Clos: hosts on ports 1-2, one
uplink per spine on ports 3-6, so remote subnets go through a 4-member ECMP group.
Packets are pushed through the engine's Pipeline (CONTRACT.md): `process` for a
zero-delay traffic manager, `ingress` + `egress` where a test sets queue depths.

Every test also runs on real BMv2 (the `bmv2` marker: simple_switch_grpc on veths, programmed
with p4c-bm2-ss's output by the same controller) where its binaries are on PATH and the tests
run as root; it skips with the reason otherwise. Tests that set queue depths, clocks or
registers, or read the engine's tables, need the engine and say so (`needs_engine`).
"""
import json
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from scapy.all import IP, UDP, Ether, Raw
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import BTH

from testbed.clos import CPU_PORT, ClosSpec, build


def _engine_missing():
    try:
        from testbed.p4engine import compile_file  # noqa: F401
    except ImportError as exc:
        return f"the P4 engine cannot compile programs in this checkout yet ({exc})"
    return None


pytestmark = pytest.mark.skipif(bool(_engine_missing()), reason=_engine_missing() or "")

UPLINKS = (3, 4, 5, 6)
ROCE_DSCP, CNP_DSCP = 26, 48
REGISTERS = ("pfc_paused", "pfc_last_xoff_us", "pg_bytes", "FabricIngress.flowlet_last_seen",
             "FabricIngress.flowlet_member", "FabricIngress.ecmp_member_load")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=["engine", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def fab(request, tmp_path_factory):
    from testbed.control import FabricController

    if request.param == "bmv2":
        from fabric_bmv2 import bmv2_missing
        if bmv2_missing():
            pytest.skip(bmv2_missing())
    spec = ClosSpec(spines=4, leaves=2, hosts_per_leaf=2)
    leaf_device = 5                        # spines are devices 1-4, then leaf1
    spec.grpc_base_port = _free_port() - leaf_device
    clos = build(spec)
    leaf = clos.switches["leaf1"]
    assert leaf.device_id == leaf_device
    workdir = tmp_path_factory.mktemp("fabric")
    path = workdir / "fabric.json"
    clos.save(path)
    switch = server = bmv2 = None
    if request.param == "engine":
        from testbed.p4rt.server import P4RuntimeServer
        from testbed.switch.datapath import Switch
        switch = Switch({}, cpu_port=CPU_PORT)
        server = P4RuntimeServer(switch, device_id=leaf.device_id, address=leaf.grpc_addr).start()
    else:
        from fabric_bmv2 import Bmv2Leaf
        bmv2 = Bmv2Leaf(leaf, CPU_PORT, workdir)
    ctl = FabricController(clos, switches=["leaf1"], target=request.param)
    try:
        ctl.connect(timeout=10)
        ctl.push_pipeline()
        ctl.install_defaults()
        yield SimpleNamespace(target=request.param, clos=clos, leaf=leaf, switch=switch, server=server, bmv2=bmv2,
                              ctl=ctl, defaults=ctl.get_knobs("leaf1"), path=str(path))
    finally:
        ctl.close()
        if server is not None:
            server.stop()
        if bmv2 is not None:
            bmv2.close()


def needs_engine(fab, why):
    """Skip on BMv2 a test that drives or reads what only the engine exposes."""
    if fab.target != "engine":
        pytest.skip(f"engine only: {why}")


@pytest.fixture(autouse=True)
def fresh(fab):
    """Every test starts from the default knobs, no overrides and empty PFC/flowlet state
    (on BMv2 the registers are not reset: the tests that run there do not read them)."""
    fab.ctl.set_knobs(fab.defaults)
    fab.ctl.clear_te_overrides()
    if fab.switch is not None:
        pipeline = fab.switch.pipeline
        with fab.switch.lock:
            for name in REGISTERS:
                reg = pipeline.registers[name]
                for i in range(reg.size):
                    reg.write(i, 0)
    yield


# --- packets ------------------------------------------------------------------------------

def roce(fab, src="10.1.1.1", dst="10.1.2.1", sport=49152, qpn=0x11, dscp=ROCE_DSCP, ecn=2, ttl=64,
         in_port=1, payload=64):
    """A RoCEv2 SEND-only frame as the host (or spine) on `in_port` sends it to leaf1."""
    port = fab.leaf.ports[in_port]
    frame = (Ether(src="02:99:00:00:00:01", dst=port.mac)
             / IP(src=src, dst=dst, tos=(dscp << 2) | ecn, ttl=ttl)
             / UDP(sport=sport, dport=4791) / BTH(opcode=0x04, dqpn=qpn, psn=7) / Raw(bytes(payload)))
    return bytes(frame)


def process(fab, port, frame, now_us=0):
    if fab.bmv2 is not None:
        return fab.bmv2.process(port, frame)       # BMv2 keeps its own clock
    with fab.switch.lock:
        return fab.switch.pipeline.process(port, frame, now_us)


def out_port(fab, frame, port=1, now_us=0):
    out = process(fab, port, frame, now_us)
    assert len(out) == 1, out
    return out[0][0]


def ingress(fab, port, frame, now_us=0):
    with fab.switch.lock:
        return fab.switch.pipeline.ingress(port, frame, now_us)


def egress(fab, job, depth, now_us=0, deq_depth=None):
    with fab.switch.lock:
        return fab.switch.pipeline.egress(job, now_us, now_us, depth, 0, depth if deq_depth is None else deq_depth)


def counters(fab):
    return fab.ctl.read_counters("leaf1")["leaf1"]


def pfc_out(fab, clone, now_us=0):
    """Follow a PFC copy through its passes: the CPU port's egress recirculates it, ingress queues
    it at priority 7 of the port it pauses, that port's egress writes the frame: (port, frame, job)."""
    assert clone.egress_port == CPU_PORT, clone
    tx, more = egress(fab, clone, 0, now_us=now_us)
    assert tx == [] and len(more) == 1, (tx, more)
    (job,) = more
    assert job.priority == 7, job
    tx, again = egress(fab, job, 0, now_us=now_us)
    assert len(tx) == 1 and again == [], (tx, again)
    return tx[0][0], tx[0][1], job


def pfc_target(fab, clone):
    """The port a PFC copy is sent to pause (its second pass), whether or not that port exists."""
    tx, (job,) = egress(fab, clone, 0)
    assert tx == [] and job.priority == 7
    return job.egress_port


def pfc_frame(data):
    """(port-facing fields of) a generated PFC frame: dst, ethertype, opcode, class vector, times."""
    assert len(data) == 60, data.hex()
    return {"dst": data[0:6].hex(), "src": data[6:12].hex(), "type": data[12:14].hex(), "opcode": data[14:16].hex(),
            "classes": int.from_bytes(data[16:18], "big"),
            "times": [int.from_bytes(data[18 + 2 * i:20 + 2 * i], "big") for i in range(8)]}


# --- routing --------------------------------------------------------------------------------

def test_host_route_rewrites_macs_decrements_ttl_and_fixes_the_checksum(fab):
    frame = roce(fab, dst="10.1.1.2", ttl=9)
    out = process(fab, 1, frame)
    assert [port for port, _ in out] == [2]
    pkt = Ether(out[0][1])
    assert pkt.src == fab.leaf.ports[2].mac
    assert pkt.dst == fab.clos.hosts["h2"].nics[0].mac
    assert pkt[IP].ttl == 8
    check = IP(bytes(pkt[IP]))
    sent = check.chksum
    del check.chksum
    assert IP(bytes(check)).chksum == sent
    assert out[0][1][34:] == frame[34:]            # UDP, BTH, payload and ICRC untouched


def test_longest_prefix_wins_and_misses_ttl_and_bad_checksums_drop_with_reasons(fab):
    needs_engine(fab, "inserts a route straight into the engine's ipv4_lpm")
    from testbed.p4engine.tables import ActionCall, Lpm
    lpm = fab.switch.pipeline.tables["FabricIngress.ipv4_lpm"]
    wide = [Lpm(0x0A010000, 16)]                                 # 10.1.0.0/16 -> port 2
    with fab.switch.lock:
        lpm.insert(wide, ActionCall("FabricIngress.route_to_port",
                                    {"route_id": 200, "port": 2, "smac": 1, "dmac": 2}))
    try:
        assert out_port(fab, roce(fab, dst="10.1.7.7")) == 2        # only the /16 covers it
        assert out_port(fab, roce(fab, dst="10.1.2.1")) in UPLINKS  # the /24 is longer
        assert out_port(fab, roce(fab, dst="10.1.1.2")) == 2        # the /32 is longest
    finally:
        with fab.switch.lock:
            lpm.delete(wide)

    before = counters(fab)["drops"]
    assert process(fab, 1, roce(fab, dst="10.9.9.9")) == []
    assert process(fab, 1, roce(fab, ttl=1)) == []
    assert process(fab, 1, roce(fab, ttl=0)) == []
    bad = bytearray(roce(fab))
    bad[24] ^= 0xFF                                                 # IPv4 header checksum
    assert process(fab, 1, bytes(bad)) == []
    after = counters(fab)["drops"]
    delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    assert delta == {"no_route": 1, "ttl_expired": 2, "bad_checksum": 1}


def _with_ipv4(frame, offset=14, **fields):
    """`frame` with IPv4 header fields changed and the header checksum made right again, so
    only the changed field is wrong."""
    data = bytearray(frame)
    if "version" in fields:
        data[offset] = (fields["version"] << 4) | (data[offset] & 0x0F)
    if "total_len" in fields:
        data[offset + 2:offset + 4] = fields["total_len"].to_bytes(2, "big")
    data[offset + 10:offset + 12] = b"\0\0"
    words = sum(int.from_bytes(data[offset + i:offset + i + 2], "big") for i in range(0, 20, 2))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    data[offset + 10:offset + 12] = (~words & 0xFFFF).to_bytes(2, "big")
    return bytes(data)


def test_ipv4_with_a_wrong_version_or_a_lying_total_length_is_dropped_as_a_parser_error(fab):
    good = roce(fab, dst="10.1.1.2")
    ip_len = len(good) - 14
    assert out_port(fab, _with_ipv4(good, total_len=ip_len)) == 2
    assert out_port(fab, _with_ipv4(good, total_len=ip_len) + bytes(20)) == 2   # Ethernet padding is fine
    tagged = good[:12] + bytes.fromhex("8100a00a") + good[12:]                  # the tag moves the header
    assert out_port(fab, tagged) == 2
    before = counters(fab)["drops"]
    for bad in (_with_ipv4(good, version=6), _with_ipv4(good, version=0), _with_ipv4(good, version=15),
                _with_ipv4(good, total_len=ip_len + 1), _with_ipv4(good, total_len=0xFFFF),
                _with_ipv4(good, total_len=19), _with_ipv4(good, total_len=0),
                _with_ipv4(tagged, offset=18, total_len=ip_len + 1)):
        assert process(fab, 1, bad) == [], bad.hex()
    after = counters(fab)["drops"]
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {"parser_error": 8}


# --- ECMP -----------------------------------------------------------------------------------

def test_64_qps_of_one_5tuple_share_one_member_in_5tuple_mode_and_spread_in_qpn_mode(fab):
    qps = [roce(fab, qpn=0x100 + q) for q in range(64)]
    fab.ctl.set_hash_mode("5tuple")
    assert len({out_port(fab, f) for f in qps}) == 1
    fab.ctl.set_hash_mode("qpn")
    spread = [out_port(fab, f) for f in qps]
    assert set(spread) == set(UPLINKS)
    assert min(spread.count(p) for p in UPLINKS) >= 4        # not 61 on one and 1 on the rest
    # the choice is a function of the packet: the same QP always takes the same member
    assert [out_port(fab, f) for f in qps] == spread


def test_another_hash_seed_groups_the_flows_differently_not_just_relabelled(fab):
    """A CRC is linear: a seed among its inputs would XOR a constant into every flow's hash,
    and with 4 members the same flows would still share a member under any seed."""
    from dataclasses import replace
    flows = [roce(fab, sport=0xC000 + 97 * i, qpn=0x100 + i) for i in range(24)]
    fab.ctl.set_hash_mode("qpn")

    def groups(seed):
        fab.ctl._set_knobs(["leaf1"], lambda k: replace(k, hash_seed=seed))
        ports = [out_port(fab, f) for f in flows]
        return {frozenset(i for i, p in enumerate(ports) if p == port) for port in set(ports)}
    original = fab.ctl.get_knobs("leaf1").hash_seed
    try:
        assert len({frozenset(groups(seed)) for seed in (1, 2, 3, 0xBEEF)}) == 4
    finally:
        groups(original)            # the fixture's reset keeps each switch's seed


def test_ecmp_rewrites_macs_for_the_chosen_spine(fab):
    out = process(fab, 1, roce(fab))
    port, data = out[0]
    spine = fab.leaf.ports[port].peer
    pkt = Ether(data)
    assert pkt.src == fab.leaf.ports[port].mac
    assert pkt.dst == fab.clos.switches[spine].ports[fab.leaf.ports[port].peer_port].mac


def test_a_flow_keeps_its_member_within_the_flowlet_gap_and_may_move_after_it(fab):
    needs_engine(fab, "sets the packets' arrival clock")
    gap = 1000
    fab.ctl.set_hash_mode("flowlet")
    fab.ctl.set_flowlet_gap_us(gap)
    frame = roce(fab)
    now, members = 0, []
    for _flowlet in range(12):
        ports = {out_port(fab, frame, now_us=now + i * (gap // 2)) for i in range(20)}  # 19 gaps < gap
        assert len(ports) == 1, f"a flowlet was split across {ports}"
        members.append(ports.pop())
        now += 20 * (gap // 2) + 5 * gap                                             # idle > gap
    # a random choice per flowlet: 12 flowlets on one member of 4 would be (1/4)^11
    assert len(set(members)) > 1, members


def test_least_loaded_flowlets_prefer_the_member_that_carried_fewer_bytes(fab):
    needs_engine(fab, "writes the member-load register and sets the clock")
    fab.ctl.set_hash_mode("flowlet")
    fab.ctl.set_flowlet_gap_us(10)
    fab.ctl.set_flowlet_choice("least_loaded")
    load = fab.switch.pipeline.registers["FabricIngress.ecmp_member_load"]
    with fab.switch.lock:
        for member in range(3):
            load.write((1 << 6) | member, 10**9)                 # group 1, members 0-2 busy
    ports = [out_port(fab, roce(fab), now_us=100 * i) for i in range(300)]
    idle = fab.leaf.ports[UPLINKS[3]].number
    # power of two choices: the idle member wins whenever it is drawn (p = 1/2, mean 150, sd 8.7;
    # a random choice would give it 1/4, mean 75)
    assert ports.count(idle) > 112, {p: ports.count(p) for p in UPLINKS}


# --- QoS, ECN, PFC --------------------------------------------------------------------------

def test_dscp_selects_the_queue_and_the_map_is_a_runtime_knob(fab):
    needs_engine(fab, "reads the queue a packet is given between ingress and egress")
    def queue(dscp):
        jobs = ingress(fab, 1, roce(fab, dscp=dscp, dst="10.1.1.2"))
        assert len(jobs) == 1
        return jobs[0].priority

    assert [queue(d) for d in (ROCE_DSCP, CNP_DSCP, 46, 56, 0, 10)] == [3, 6, 7, 7, 0, 0]
    fab.ctl.set_dscp_map({10: 5, 26: 2})
    assert [queue(d) for d in (10, ROCE_DSCP, CNP_DSCP)] == [5, 2, 0]


def test_ecn_marking_probability_follows_kmin_kmax_pmax(fab):
    needs_engine(fab, "sets the queue depth egress sees")
    fab.ctl.set_pfc(False)                      # deep queues here must not also pause anyone
    fab.ctl.set_ecn(10, 30, 0.5)
    frame = roce(fab, dst="10.1.1.2", ecn=2)
    n = 1000                                    # binomial sd <= 0.016: 0.07 is over 4 sd

    def marked_fraction(depth, data=frame):
        marked = 0
        for _ in range(n):
            (job,) = ingress(fab, 1, data)
            tx, more = egress(fab, job, depth)
            assert len(tx) == 1 and more == []
            marked += Ether(tx[0][1])[IP].tos & 3 == 3
        return marked / n

    before = counters(fab)["ports"][2][3]["ecn_marks"]
    # probability pmax * (depth - kmin) / (kmax - kmin) between the thresholds, all above Kmax
    expected = {5: 0.0, 10: 0.0, 20: 0.25, 30: 0.5, 31: 1.0, 60: 1.0}
    seen = {depth: marked_fraction(depth) for depth in expected}
    for depth, p in expected.items():
        assert abs(seen[depth] - p) < 0.07, seen
    assert marked_fraction(60, roce(fab, dst="10.1.1.2", ecn=0)) == 0.0     # not ECN-capable
    marks = counters(fab)["ports"][2][3]["ecn_marks"] - before
    assert marks == round(sum(seen.values()) * n)
    fab.ctl.disable_ecn()
    assert marked_fraction(60) == 0.0


def test_ingress_pg_above_xoff_sends_pfc_to_the_ingress_port_then_xon(fab):
    needs_engine(fab, "reads the PG registers and sets the clock")
    frame = roce(fab, dst="10.1.1.2", in_port=3, src="10.1.2.1")   # from spine1 to h2
    size = len(frame)
    fab.ctl.set_pfc(xoff=24 * size, xon=12 * size, refresh_us=500)
    before = counters(fab)["ports"][3][3]["pfc_tx"]
    pg_bytes = fab.switch.pipeline.registers["pg_bytes"]

    # the PG (port 3, priority 3) holds what came in: packets 1-23 stay below XOFF, the 24th
    # takes it to XOFF -> XOFF to port 3
    originals = []
    for i in range(23):
        jobs = ingress(fab, 3, frame, now_us=10)
        assert [j.egress_port for j in jobs] == [2], f"packet {i + 1}"
        originals += jobs
    assert pg_bytes.read((3 << 3) | 3) == 23 * size
    jobs = ingress(fab, 3, frame, now_us=10)
    assert sorted(j.egress_port for j in jobs) == [2, CPU_PORT]
    originals += [j for j in jobs if j.egress_port != CPU_PORT]
    port, data, _ = pfc_out(fab, next(j for j in jobs if j.egress_port == CPU_PORT), now_us=10)
    assert port == 3
    xoff = pfc_frame(data)
    expected_quanta = round(fab.defaults.pfc_pause_us * fab.leaf.ports[3].rate_mbps / 512)
    assert xoff == {"dst": "0180c2000001", "src": fab.leaf.ports[3].mac.replace(":", ""), "type": "8808",
                    "opcode": "0101", "classes": 1 << 3,
                    "times": [0, 0, 0, expected_quanta, 0, 0, 0, 0]}
    # the MAC-control dissector agrees
    assert Ether(data)[MACControlClassBasedFlowControl].c3_pause_time == expected_quanta

    # rate-limited: no second XOFF within the refresh interval, one after it (26 held now)
    assert len(ingress(fab, 3, frame, now_us=400)) == 1
    refreshed = ingress(fab, 3, frame, now_us=600)
    assert sorted(j.egress_port for j in refreshed) == [2, CPU_PORT]
    assert pfc_frame(pfc_out(fab, next(j for j in refreshed if j.egress_port == CPU_PORT), now_us=600)[1]) == xoff

    # leaving packets release the PG; while it stays at XOFF, egress refreshes the pause
    assert egress(fab, originals[0], 0, now_us=700)[1] == []          # 25 held, refreshed 100 us ago
    tx, more = egress(fab, originals[1], 0, now_us=1200)                # 24 held, 600 us later
    assert [p for p, _ in tx] == [2] and len(more) == 1
    assert pfc_frame(pfc_out(fab, more[0], now_us=1200)[1]) == xoff
    for job in originals[2:13]:                                         # 23 .. 13 held
        assert egress(fab, job, 0, now_us=1300)[1] == []
    # at XON (12 held) the PG's own packet carries the zero-quanta XON to its upstream
    tx, more = egress(fab, originals[13], 0, now_us=1300)
    assert [p for p, _ in tx] == [2] and len(more) == 1
    port, data, _ = pfc_out(fab, more[0], now_us=1300)
    xon = pfc_frame(data)
    assert (port, xon["classes"], xon["times"]) == (3, 1 << 3, [0] * 8)
    assert pg_bytes.read((3 << 3) | 3) == 12 * size
    # and only once
    assert egress(fab, originals[14], 0, now_us=1400)[1] == []
    assert counters(fab)["ports"][3][3]["pfc_tx"] - before == 4      # XOFF, 2 refreshes, XON


def test_a_pfc_frame_is_served_before_the_full_data_queues_of_the_port_it_leaves_by(fab):
    """The issue-6 starvation: h1 -> h2 congests port 2, so XOFF must leave by port 1, whose own
    lossless (priority 3) and best-effort (priority 0) queues towards h1 are full."""
    needs_engine(fab, "fills the engine's egress queues")
    from testbed.switch.traffic_manager import EgressPort
    to_h2 = roce(fab, dst="10.1.1.2", in_port=1)
    fab.ctl.set_pfc(xoff=24 * len(to_h2), xon=12 * len(to_h2))
    towards_h1 = EgressPort(1)
    for dscp, prio in ((ROCE_DSCP, 3), (0, 0)):
        for _ in range(towards_h1.depth_limit[prio]):
            jobs = ingress(fab, 3, roce(fab, src="10.1.2.1", dst="10.1.1.1", in_port=3, dscp=dscp))
            # (filling it also pauses spine1: the other job would be that XOFF's copy)
            job = next(j for j in jobs if j.egress_port != CPU_PORT)
            assert (job.egress_port, job.priority) == (1, prio)
            assert towards_h1.enqueue(job, job.priority, 0) >= 0
    for _ in range(23):
        ingress(fab, 1, to_h2)
    clone = next(j for j in ingress(fab, 1, to_h2) if j.egress_port == CPU_PORT)
    tx, (pfc_job,) = egress(fab, clone, 0)
    assert pfc_job.egress_port == 1
    assert towards_h1.enqueue(pfc_job, pfc_job.priority, 0) >= 0     # not tail-dropped
    prio, _ = towards_h1.next_eligible(0.0)
    job, _, _ = towards_h1.dequeue(prio)
    assert job is pfc_job                                             # strict priority: it leaves first
    (port, data), = egress(fab, job, 0)[0]
    assert port == 1 and pfc_frame(data)["classes"] == 1 << 3
    assert towards_h1.depth(3) == towards_h1.depth_limit[3]           # the data still waits behind it


def test_each_ingress_pg_pauses_its_own_upstream_and_its_own_packets_carry_the_xon(fab):
    """Two upstreams feed one queue: each PG counts only its own bytes, so each upstream is
    paused when it has sent XOFF's worth, and resumed when its own packets have left."""
    needs_engine(fab, "runs egress on the jobs it holds")
    to_h2 = {port: roce(fab, dst="10.1.1.2", in_port=port, src=src)
             for port, src in ((1, "10.1.1.1"), (3, "10.1.2.1"))}
    size = len(to_h2[1])
    fab.ctl.set_pfc(xoff=4 * size, xon=2 * size, refresh_us=500)
    data, xoff_to = {1: [], 3: []}, []
    for port in (1, 1, 3, 3, 1, 1, 3, 3):            # each PG reaches XOFF on its 4th packet
        for job in ingress(fab, port, to_h2[port], now_us=10):
            if job.egress_port == CPU_PORT:
                xoff_to.append(pfc_out(fab, job, now_us=10)[0])
            else:
                data[port].append(job)
    assert xoff_to == [1, 3]

    def dequeue(job):
        tx, more = egress(fab, job, 0, now_us=20)
        assert [p for p, _ in tx] == [2]
        return [(port, pfc_frame(frame)["times"][3]) for port, frame, _ in (pfc_out(fab, m, 20) for m in more)]

    assert dequeue(data[1][0]) == []                 # port 1's PG: 3 held, between XON and XOFF
    assert dequeue(data[3][0]) == []                 # port 3's PG: 3 held
    assert dequeue(data[1][1]) == [(1, 0)]           # port 1's PG at XON: its XON
    assert dequeue(data[1][2]) == []                 # once
    assert dequeue(data[3][1]) == [(3, 0)]           # port 3's own packet resumes port 3


def test_every_port_has_its_own_pg_and_gets_its_xoff_and_xon(fab):
    """pg_bytes and pfc_paused are indexed (port << 3) | priority: no bitmap, no shift by a port
    number (BMv2 shifts by at most 8 bits), so ports 63, 64, 256 and 509 are no different."""
    needs_engine(fab, "reads the PG registers and follows PFC copies by hand")
    frame = roce(fab, dst="10.1.1.2", src="10.1.2.1", in_port=3)
    fab.ctl.set_pfc(xoff=1, xon=0, refresh_us=500)
    registers = fab.switch.pipeline.registers
    for upstream in (5, 63, 64, 256, 259, 509):
        slot = (upstream << 3) | 3
        jobs = ingress(fab, upstream, frame, now_us=10)
        assert sorted(j.egress_port for j in jobs) == [2, CPU_PORT], upstream
        assert pfc_target(fab, next(j for j in jobs if j.egress_port == CPU_PORT)) == upstream
        assert registers["pfc_paused"].read(slot) == 1 and registers["pg_bytes"].read(slot) == len(frame)
        (job,) = [j for j in jobs if j.egress_port != CPU_PORT]
        (xon,) = egress(fab, job, 0, now_us=20)[1]
        assert pfc_target(fab, xon) == upstream
        assert registers["pfc_paused"].read(slot) == 0 and registers["pg_bytes"].read(slot) == 0


def test_the_pfc_knobs_set_the_engine_buffers_pg_profiles_over_p4runtime(fab):
    needs_engine(fab, "reads the engine's buffer")
    from testbed.switch.buffers import REALTIME_RESPONSE_US, PgProfile, headroom_bytes
    # the default: the calculator's headroom for leaf1's fastest port
    fastest = max(p.rate_mbps for p in fab.leaf.ports.values()) * 1e6
    profile = fab.switch.buffer.profiles[3]
    assert profile.lossless and profile.headroom == headroom_bytes(fastest, 0, 1500, REALTIME_RESPONSE_US)
    fab.ctl.set_pfc(20_000, 9_000, headroom=50_000, reserved=3_000, priorities=(3, 5))
    assert fab.switch.buffer.profiles[3] == fab.switch.buffer.profiles[5] == \
        PgProfile(xoff=20_000, xon=9_000, headroom=50_000, reserved=3_000, lossless=True)
    assert not fab.switch.buffer.lossless(0)
    fab.ctl.set_pfc(False, priorities=(3, 5))
    assert not any(p.lossless for p in fab.switch.buffer.profiles)


def test_pfc_stays_quiet_on_lossy_priorities_and_when_off(fab):
    needs_engine(fab, "sets the queue depth egress sees")
    lossy = roce(fab, dst="10.1.1.2", dscp=0)
    assert all(len(ingress(fab, 1, lossy)) == 1 for _ in range(40))
    fab.ctl.set_pfc(False)
    lossless = roce(fab, dst="10.1.1.2")
    assert all(len(ingress(fab, 1, lossless)) == 1 for _ in range(40))
    (job,) = ingress(fab, 1, lossless)
    assert egress(fab, job, 100)[1] == []


def test_received_pfc_is_counted_and_punted_to_the_controller(fab):
    needs_engine(fab, "reads the packet-in frame the CPU port gets")
    pause = bytes(Ether(src="02:10:00:01:00:01", dst="01:80:c2:00:00:01", type=0x8808)
                  / MACControlClassBasedFlowControl(c3_enabled=1, c3_pause_time=100, c6_enabled=1, c6_pause_time=5))
    before = counters(fab)
    punted = fab.ctl.punted["leaf1"]["pfc"]
    out = process(fab, 4, pause)
    assert [p for p, _ in out] == [CPU_PORT]
    header = int.from_bytes(out[0][1][:3], "big")               # packet_in: port 9, reason 8, pad 7
    assert (header >> 15, (header >> 7) & 0xFF) == (4, 1)
    assert out[0][1][3:3 + len(pause)] == pause
    fab.switch.packet_in_handler(out[0][1])                      # what the datapath does with CPU frames
    deadline = time.monotonic() + 5
    while fab.ctl.punted["leaf1"]["pfc"] == punted and time.monotonic() < deadline:
        time.sleep(0.02)
    after = counters(fab)
    assert after["punted"]["pfc"] == punted + 1
    assert [after["ports"][4][q]["pfc_rx"] - before["ports"][4][q]["pfc_rx"] for q in range(8)] == \
        [0, 0, 0, 1, 0, 0, 1, 0]


def test_packet_out_leaves_by_the_port_the_controller_names(fab):
    needs_engine(fab, "injects a packet-out frame on the CPU port")
    frame = roce(fab)
    header = ((5 << 7) | 0).to_bytes(2, "big")                   # packet_out: port 9, pad 7
    assert process(fab, CPU_PORT, header + frame) == [(5, frame)]


# --- TE overrides, links, counters ----------------------------------------------------------

def test_te_override_beats_ecmp_and_its_removal_restores_ecmp(fab):
    from testbed.control import ControlError
    frame = roce(fab, sport=50001)
    ecmp_port = out_port(fab, frame, port=1)
    assert out_port(fab, frame, port=2) == ecmp_port             # the ingress port is not hashed
    other = next(p for p in UPLINKS if p != ecmp_port)
    fab.ctl.add_te_override("leaf1", 1, "10.1.2.0/24", other)
    out = process(fab, 1, frame)
    assert [p for p, _ in out] == [other]
    assert Ether(out[0][1]).src == fab.leaf.ports[other].mac
    assert out_port(fab, frame, port=2) == ecmp_port             # other ingress ports keep ECMP
    held = fab.ctl.te_overrides()
    assert [(o["leaf"], o["ingress_port"], o["dst_prefix"], o["egress_port"], o["packets"]) for o in held] == \
        [("leaf1", 1, "10.1.2.0/24", other, 1)]
    assert [(t["ingress_port"], t["egress_port"]) for t in counters(fab)["te_overrides"]] == [(1, other)]
    assert fab.ctl.remove_te_override("leaf1", 1, "10.1.2.0/24") is True
    assert out_port(fab, frame, port=1) == ecmp_port
    assert fab.ctl.te_overrides() == []
    assert fab.ctl.remove_te_override("leaf1", 1, "10.1.2.0/24") is False
    with pytest.raises(ControlError, match="egress port 9 does not exist"):
        fab.ctl.add_te_override("leaf1", 1, "10.1.2.0/24", 9)
    with pytest.raises(ControlError, match="no route for 10.7.0.0/16"):
        fab.ctl.add_te_override("leaf1", 1, "10.7.0.0/16", 3)


def test_link_down_takes_the_member_out_of_the_group_and_up_brings_it_back(fab):
    fab.ctl.set_hash_mode("qpn")
    qps = [roce(fab, qpn=q) for q in range(64)]
    fab.ctl.link_status("leaf1", "spine2", up=False)
    try:
        assert set(out_port(fab, f) for f in qps) == {3, 5, 6}
    finally:
        fab.ctl.link_status("leaf1", "spine2", up=True)
    assert set(out_port(fab, f) for f in qps) == set(UPLINKS)


def test_counters_count_rx_tx_drops_members_and_demands(fab):
    before = counters(fab)
    local = [roce(fab, dst="10.1.1.2", payload=100 + i) for i in range(5)]
    remote = [roce(fab, qpn=q) for q in range(4)]
    expired = [roce(fab, ttl=1) for _ in range(3)]
    for frame in local + remote + expired:
        process(fab, 1, frame)
    after = counters(fab)

    def delta(*path):
        a, b = after, before
        for key in path:
            a, b = a[key], b[key]
        return a - b

    sent = local + remote + expired
    assert delta("ports", 1, 3, "rx_packets") == len(sent)
    assert delta("ports", 1, 3, "rx_bytes") == sum(len(f) for f in sent)
    assert delta("ports", 1, 3, "drop_packets") == 3
    assert delta("port_totals", 1, "rx_packets") == len(sent)
    assert delta("ports", 2, 3, "tx_packets") == 5
    assert sum(delta("ports", p, 3, "tx_packets") for p in UPLINKS) == 4
    assert delta("drops", "ttl_expired") == 3
    members = lambda c: sum(m["packets"] for m in c["ecmp_members"])   # noqa: E731
    assert members(after) - members(before) == 4
    # each member names its port (a direct counter read alone gives the key, not the action)
    assert sorted(m["port"] for m in after["ecmp_members"]) == list(UPLINKS)
    demand = {d["dst_prefix"]: d for d in after["demands"] if d["ingress_port"] == 1}
    old = {d["dst_prefix"]: d for d in before["demands"] if d["ingress_port"] == 1}
    assert demand["10.1.1.2/32"]["packets"] - old.get("10.1.1.2/32", {"packets": 0})["packets"] == 5
    assert demand["10.1.2.0/24"]["bytes"] - old.get("10.1.2.0/24", {"bytes": 0})["bytes"] == \
        sum(len(f) for f in remote)


# --- controller behaviour against a switch ---------------------------------------------------

def test_setting_a_knob_twice_writes_nothing_the_second_time(fab):
    needs_engine(fab, "reads the entry from the engine's table")
    writes = []
    conn = fab.ctl.connections["leaf1"]
    original = conn.write_entries
    conn.write_entries = lambda kind, entries, what="": (writes.append((kind, len(entries))),
                                                         original(kind, entries, what))[1]
    try:
        fab.ctl.set_ecn(8, 40, 0.3)
        fab.ctl.set_ecn(8, 40, 0.3)
        fab.ctl.install_defaults()
    finally:
        del conn.write_entries
    assert writes == [("MODIFY", 1)]
    table = fab.switch.pipeline.tables["FabricEgress.ecn_config"]
    (entry,) = table.entries()
    assert entry.action.args == {"kmin": 8, "kmax": 40, "pmax": round(0.3 * 65536)}


def test_a_second_controller_learns_the_knobs_from_the_switch(fab):
    """The CLI's and the TE app's sessions open beside the fabric controller's and read what it
    wrote. On BMv2 (PI has no roles: one arbitration per device) they need election ids of their
    own: with the fabric controller's they got "Election id already exists"."""
    from testbed.control import FabricController
    from testbed.control.cli import CLI_ELECTION_ID, CLI_ROLE
    from testbed.te.programmer import TE_ELECTION_ID, TE_ROLE
    fab.ctl.set_hash_mode("flowlet", qp_aware=True)
    fab.ctl.set_pfc(30, 10, priorities=(3, 5), pause_us=5000)
    others = [FabricController(fab.clos, switches=["leaf1"], role=role, election_id=eid)
              for role, eid in ((TE_ROLE, TE_ELECTION_ID), (CLI_ROLE, CLI_ELECTION_ID))]
    try:
        for other in others:
            other.connect(timeout=5)
            assert other.get_knobs("leaf1") == fab.ctl.get_knobs("leaf1")
    finally:
        for other in others:
            other.close()


def test_bad_knobs_are_refused_before_anything_is_written(fab):
    from testbed.control import KnobError
    with pytest.raises(KnobError, match="XON"):
        fab.ctl.set_pfc(10, 20)
    with pytest.raises(KnobError, match="hash mode 'ecmp'"):
        fab.ctl.set_hash_mode("ecmp")
    assert fab.ctl.get_knobs("leaf1") == fab.defaults


def test_cli_tunes_the_running_switch_and_reads_its_counters(fab):
    needs_engine(fab, "reads the default action from the engine's table")
    rocelab = [sys.executable, "-m", "testbed.cli"]
    env = dict(os.environ, ROCELAB_FABRIC=fab.path)

    def run(*args):
        return subprocess.run(rocelab + list(args), capture_output=True, text=True, env=env, timeout=60)

    done = run("fabric", "hash", "qpn", "--switch", "leaf1")
    assert done.returncode == 0, done.stderr
    done = run("fabric", "ecn", "4", "12", "0.75", "--switch", "leaf1")
    assert done.returncode == 0, done.stderr
    fab.ctl.refresh()
    knobs = fab.ctl.get_knobs("leaf1")
    assert (knobs.hash_mode, knobs.ecn[3].kmin, knobs.ecn[3].kmax, knobs.ecn[3].pmax) == ("qpn", 4, 12, 0.75)
    config = fab.switch.pipeline.tables["FabricIngress.ecmp_config"].get_default()
    assert config.args["qp_aware"] == 1

    process(fab, 1, roce(fab, dst="10.1.1.2"))
    done = run("stats", "leaf1", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["leaf1"]["port_totals"]["2"]["tx_packets"] >= 1
    done = run("stats", "leaf1")
    assert done.returncode == 0 and "leaf1 (leaf)" in done.stdout

    # user errors: one line naming the problem, no traceback
    done = run("fabric", "ecn", "30", "10", "0.5", "--switch", "leaf1")
    assert done.returncode == 2 and "Kmin (30) must be below Kmax (10)" in done.stderr
    assert "Traceback" not in done.stderr
    done = run("fabric", "te", "add", "leaf1", "1", "10.1.2.0/24", "77", "--switch", "leaf1")
    assert done.returncode == 2 and "egress port 77 does not exist" in done.stderr
    done = run("fabric", "show", "--switch", "leaf9")
    assert done.returncode == 2 and "unknown switch(es) leaf9" in done.stderr
