"""The switch buffer (per ingress PG, lossless headroom, lossy dynamic threshold) and the PFC
watchdog, driven on a clock the test owns: Switch._receive / Switch._service(now), as the
virtual-time scheduler drives them, so every time below is exact."""
import pytest

from switch_fake_engine import FakePipeline, ipv4_frame, frame_tag
from testbed.switch import pfc
from testbed.switch.buffers import (BufferConfig, BufferConfigError, PgProfile, headroom_bytes,
                                    max_frame_bytes)
from testbed.switch.datapath import Switch
from testbed.switch.traffic_manager import BufferAccount

LOSSLESS = PgProfile(xoff=3000, xon=1000, headroom=2500, lossless=True)


# --- the account ------------------------------------------------------------------------------

def test_lossless_pg_takes_the_pool_up_to_xoff_then_its_headroom_then_counts_a_drop():
    buf = BufferAccount([1, 2], BufferConfig(total_bytes=100_000))
    buf.set_profiles({3: LOSSLESS})
    assert buf.pool_bytes == 100_000 - 2 * 2500
    keys = [buf.admit(1, 3, 1000, 0) for _ in range(3)]          # 0, 1000, 2000 < XOFF: pool
    assert None not in keys and buf.shared_used == 3000 and buf.in_headroom((1, 3)) == 0
    assert buf.admit(1, 3, 1000, 0) and buf.admit(1, 3, 1000, 0)  # at XOFF: headroom (2000 of 2500)
    assert buf.in_headroom((1, 3)) == 2000 and buf.shared_used == 3000
    assert buf.admit(1, 3, 1000, 0) is None                       # 3000 > 2500: the counted bug
    assert buf.port_state(1)["headroom_drops"][3] == 1
    assert buf.port_state(2)["headroom_drops"][3] == 0            # per ingress port
    assert buf.port_state(1)["pg_max_bytes"][3] == 5000
    buf.release(keys[0], 1000)                                    # headroom drains first
    assert buf.in_headroom((1, 3)) == 1000 and buf.shared_used == 3000
    for _ in range(4):
        buf.release(keys[0], 1000)
    assert buf.held((1, 3)) == 0 and buf.shared_used == 0


def test_a_full_pool_sends_lossless_traffic_to_headroom_before_xoff():
    buf = BufferAccount([1], BufferConfig(total_bytes=2500 + 1500))  # pool 1500
    buf.set_profiles({3: LOSSLESS})
    assert buf.admit(1, 3, 1000, 0)                  # pool
    assert buf.admit(1, 3, 1000, 0)                  # pool has 500 left: headroom
    assert buf.in_headroom((1, 3)) == 1000


def test_reserved_bytes_come_before_the_pool():
    buf = BufferAccount([1], BufferConfig(total_bytes=10_000))
    buf.set_profiles({0: PgProfile(reserved=1500)})
    assert buf.pool_bytes == 8500
    buf.admit(1, 0, 1000, 0)
    buf.admit(1, 0, 1000, 0)
    assert buf.in_reserved((1, 0)) == 1500 and buf.shared_used == 500


def test_lossy_queues_hold_at_most_alpha_times_the_free_pool():
    buf = BufferAccount([1, 2], BufferConfig(total_bytes=10_000, alpha=0.5))
    queue = 0
    admitted = 0
    while buf.admit(1, 0, 1000, queue):
        queue += 1000
        admitted += 1
    # q <= 0.5 * (10000 - q) -> q <= 3333: three 1000-byte packets
    assert admitted == 3 and buf.shared_used == 3000
    assert buf.admit(2, 0, 1000, 0)                   # another queue still gets in


def test_headroom_that_does_not_fit_the_buffer_is_refused_and_the_old_profiles_stay():
    buf = BufferAccount([1, 2, 3], BufferConfig(total_bytes=10_000))
    with pytest.raises(BufferConfigError, match="leave no shared pool"):
        buf.set_profiles({3: PgProfile(xoff=100, xon=50, headroom=4000, lossless=True)})
    assert not buf.lossless(3) and buf.pool_bytes == 10_000
    with pytest.raises(BufferConfigError, match="XON"):
        buf.set_profiles({3: PgProfile(xoff=100, xon=100, headroom=10, lossless=True)})


def test_headroom_calculator_is_the_standard_sum():
    # 100 Gb/s, 100 m (2 x 500 ns), 1 us response: 2 us in flight = 25,000 bytes, + 2 frames
    assert headroom_bytes(100e9, 100, 1500, 1.0) == 25_000 + 2 * max_frame_bytes(1500)
    assert headroom_bytes(10e6, 0, 1500, 0) == 2 * 1518
    with pytest.raises(BufferConfigError, match="rate"):
        headroom_bytes(float("nan"), 0, 1500, 0)


# --- the switch, on a clock the test owns -----------------------------------------------------

class ListPort:
    def __init__(self, number):
        self.number, self.iface, self.fd, self.sent = number, f"p{number}", -1, []

    def send(self, frame):
        self.sent.append(frame)

    def close(self):
        pass


def make(buffer_config=None, profiles=None, rate=10_000_000):
    clock = [0.0]
    ports = {n: ListPort(n) for n in (1, 2, 3)}
    sw = Switch(ports, clock=lambda: clock[0], buffer_config=buffer_config)
    sw.set_pipeline(FakePipeline({1: 3, 2: 3, 3: 1}))
    if profiles:
        sw.buffer.set_profiles(profiles)
    for number in ports:
        sw.egress_port(number).set_rate(rate)
        sw.egress_port(number).set_pfc(range(8))
    return sw, ports, clock


def run_until(sw, clock, t_end, step=0.001):
    while clock[0] < t_end:
        sw._service(clock[0])
        clock[0] = round(clock[0] + step, 9)


def test_lossless_traffic_is_not_tail_dropped_on_packet_depth_but_lossy_is():
    sw, ports, clock = make(profiles={3: PgProfile(xoff=10**6, xon=1, headroom=1, lossless=True)})
    for n in (1, 2, 3):
        sw.egress_port(n).set_depth(4)
    for i in range(20):
        sw._receive(1, ipv4_frame(dscp=3 << 3, size=500, tag=i), 0.0)
        sw._receive(2, ipv4_frame(dscp=0, size=500, tag=100 + i), 0.0)
    status = sw.port_status(3)
    assert status["tail_drops"][3] == 0 and status["queue_depth"][3] == 20
    assert status["tail_drops"][0] == 16
    assert sw.port_status(1)["pg_bytes"][3] == 20 * 500          # held by the ingress PG ...
    run_until(sw, clock, 1.0)
    assert sw.port_status(1)["pg_bytes"][3] == 0                  # ... until it left
    assert sw.buffer.shared_used == 0
    assert len(ports[3].sent) == 24


def storm(sw, clock, until, every=0.010, prio=3, port=3, start=None):
    """A NIC on `port` sending XOFF for `prio` every `every` seconds until `until`."""
    t = clock[0] if start is None else start
    while t < until:
        run_until(sw, clock, t)
        sw._receive(port, pfc.build_pfc("02:00:00:00:00:09", {prio: 0xFFFF}), clock[0])
        t = round(t + every, 9)


def test_watchdog_declares_a_storm_within_the_detection_time_and_restores_after_it_ends():
    sw, ports, clock = make(BufferConfig(watchdog_detect_s=0.2, watchdog_restore_s=0.2, watchdog_action="drop"))
    notices = []
    sw.notice = notices.append
    # a NIC behind port 1 keeps pausing priority 3 (port 1 is where traffic to it leaves)
    storm(sw, clock, 0.5, port=1)
    # other priorities keep flowing through the paused port meanwhile
    sw._receive(3, ipv4_frame(dscp=5 << 3, tag=5), clock[0])
    run_until(sw, clock, clock[0] + 0.01)
    assert [frame_tag(f) for f in ports[1].sent] == [5]
    status = sw.port_status(1)
    assert status["watchdog_storms"][3] == 1 and status["watchdog_stormed"] == [3]
    stormed_at = [n for n in notices if "stormed" in n]
    assert len(stormed_at) == 1
    detected = float(stormed_at[0].split(" at ")[1].split(" s")[0])
    assert 0.18 <= detected <= 0.22, notices                       # detection time +- 10%
    # the stormed queue's packets are dropped, not held behind the pause
    for i in range(3):
        sw._receive(3, ipv4_frame(dscp=3 << 3, tag=30 + i), clock[0])
    run_until(sw, clock, clock[0] + 0.01)
    assert sw.port_status(1)["watchdog_drops"][3] == 3 and sw.port_status(1)["queue_depth"][3] == 0
    assert [frame_tag(f) for f in ports[1].sent] == [5]
    # the NIC stopped at 0.5 s: restored 0.2 s after its last pause, and pauses count again
    last_pause = 0.49
    run_until(sw, clock, last_pause + 0.2 + 0.005)
    assert sw.port_status(1)["watchdog_stormed"] == [] and any("restored" in n for n in notices)
    sw._receive(1, pfc.build_pfc("02:00:00:00:00:09", {3: 0xFFFF}), clock[0])
    sw._receive(3, ipv4_frame(dscp=3 << 3, tag=40), clock[0])
    run_until(sw, clock, clock[0] + 0.05)
    assert sw.port_status(1)["queue_depth"][3] == 1                # paused again, not dropped


def test_watchdog_forward_mode_sends_the_stormed_queue_and_off_mode_never_storms():
    sw, ports, clock = make(BufferConfig(watchdog_action="forward"))
    sw._receive(3, ipv4_frame(dscp=3 << 3, tag=7), 0.0)
    storm(sw, clock, 0.3, port=1, start=0.0)
    assert [frame_tag(f) for f in ports[1].sent] == [7]
    assert sw.port_status(1)["watchdog_drops"][3] == 0

    sw, ports, clock = make(BufferConfig(watchdog_detect_s=0))
    storm(sw, clock, 0.5, port=1, start=0.0)
    assert sw.port_status(1)["watchdog_storms"][3] == 0


def test_turning_the_watchdog_off_releases_a_stormed_queue():
    from testbed.switch.agent import EngineAgent
    sw, ports, clock = make(BufferConfig(watchdog_detect_s=0.2))
    notices = []
    sw.notice = notices.append
    storm(sw, clock, 0.25, port=1, start=0.0)
    assert sw.port_status(1)["watchdog_stormed"] == [3]
    EngineAgent(sw).set_watchdog(detect_ms=0)
    run_until(sw, clock, clock[0] + 0.002)
    assert sw.port_status(1)["watchdog_stormed"] == [] and "watchdog off" in notices[-1]
    # pauses count again: the packet waits behind the NIC's last XOFF instead of being dropped
    sw._receive(3, ipv4_frame(dscp=3 << 3, tag=9), clock[0])
    run_until(sw, clock, clock[0] + 0.01)
    assert sw.port_status(1)["queue_depth"][3] == 1 and sw.port_status(1)["watchdog_drops"][3] == 0


def test_service_wakes_for_the_watchdog_when_nothing_else_is_due():
    sw, ports, clock = make(BufferConfig(watchdog_detect_s=0.2))
    sw._receive(1, pfc.build_pfc("02:00:00:00:00:09", {3: 0xFFFF}), 0.0)   # 3.4 s at 10 Mb/s
    assert sw._service(0.001) == pytest.approx(0.2)
    assert sw._service(0.2) == pytest.approx(0.2 + 0.2)   # stormed: restore 0.2 s after the last pause


class Forward(FakePipeline):
    """Frames leave as they came (the NICs check lengths and ICRCs)."""

    def egress(self, job, now_us, enq_timestamp, enq_qdepth, deq_timedelta, deq_qdepth):
        return [(job.egress_port, job.data)], []


def test_a_nic_that_keeps_sending_pfc_is_stormed_the_rest_flows_and_it_is_restored_once_it_stops():
    """The emulated NIC (traffic/nic.py) as a slow receiver whose host stalls: its buffer stays
    above XOFF, so it refreshes its XOFF for ever. Sender NIC a on switch port 1, the stalled
    NIC b on port 2; everything on one clock the test steps 1 ms at a time."""
    from traffic.nic import Nic, NicConfig
    from traffic.samples import Recorder

    t = [0.0]
    cfg = dict(line_rate_bps=10e6, burst_bytes=1 << 20, slow_rx_bps=8.0,      # 1 byte/s: stalled
               pfc_xoff_bytes=2000, pfc_xon_bytes=1000, pfc_quanta=1000)      # 51 ms, refreshed each 26 ms
    a = Nic("a", "02:00:00:00:00:0a", "10.9.0.1", NicConfig(**cfg), clock=lambda: t[0], open_sockets=False)
    b = Nic("b", "02:00:00:00:00:0b", "10.9.0.2", NicConfig(**cfg), clock=lambda: t[0], open_sockets=False)
    a.sock, b.sock = Recorder(), Recorder()
    qa = a.create_qp(0x100, 0x200, "10.9.0.2", "02:00:00:00:00:0b")
    b.create_qp(0x200, 0x100, "10.9.0.1", "02:00:00:00:00:0a")
    ports = {1: ListPort(1), 2: ListPort(2)}
    sw = Switch(ports, clock=lambda: t[0], buffer_config=BufferConfig(watchdog_detect_s=0.2, watchdog_restore_s=0.2))
    sw.set_pipeline(Forward({1: 2, 2: 1}))
    sw.buffer.set_profiles({3: PgProfile(xoff=50_000, xon=20_000, headroom=20_000, lossless=True)})
    for n in ports:
        sw.egress_port(n).set_rate(10_000_000)
        sw.egress_port(n).set_pfc([3])
    notices = []
    sw.notice = notices.append
    a.post_write(qa, 200 * 1024)

    def step(until, lossy_every=None):
        while t[0] < until:
            a._timers(t[0])
            b._timers(t[0])
            a._transmit(t[0], budget=64)
            for nic, port in ((a, 1), (b, 2)):
                for frame in nic.sock.frames:
                    if nic is b and frame[12:14] == b"\x88\x08" and first_pause == []:
                        first_pause.append(t[0])
                    sw._receive(port, frame, t[0])
                nic.sock.frames.clear()
            if lossy_every and round(t[0] * 1000) % lossy_every == 0:
                sw._receive(1, ipv4_frame(dscp=0, tag=int(t[0] * 1000)), t[0])
            sw._service(t[0])
            for port, nic in ((1, a), (2, b)):
                for frame in ports[port].sent:
                    if frame[12:14] == b"\x88\x08":
                        nic._on_mac_control(frame, t[0])
                    elif frame[12:14] == b"\x08\x00" and frame[15] >> 2 == 0:
                        lossy_out.append(frame)            # the lossy probe reached port 2
                    else:
                        nic._on_roce(frame, t[0])
                ports[port].sent.clear()
            t[0] = round(t[0] + 0.001, 9)

    lossy_out, first_pause = [], []
    step(1.0, lossy_every=50)
    status = sw.port_status(2)
    assert b.stats["pfc_tx"] > 10 and status["watchdog_storms"][3] == 1, (b.stats, notices)
    assert status["watchdog_stormed"] == [3] and status["watchdog_drops"][3] > 0
    # detected 200 ms (+-10%) after b's first XOFF paused the port
    (stormed,) = [n for n in notices if "stormed" in n]
    detected = float(stormed.split(" at ")[1].split(" s")[0])
    assert 0.18 <= detected - first_pause[0] <= 0.22, (first_pause, stormed)
    # the other priorities kept flowing through the stormed port
    assert len(lossy_out) >= 19
    assert status["headroom_drops"] == [0] * 8
    # b's host catches up: it drains, sends XON, stops pausing; 200 ms later the queue is restored
    b.cfg.slow_rx_bps = 1e9
    step(1.5)
    assert sw.port_status(2)["watchdog_stormed"] == [] and any("restored" in n for n in notices)


def test_auto_watchdog_waits_twice_the_longest_pause_a_full_pg_can_legitimately_cause():
    sw, ports, clock = make(profiles={3: PgProfile(xoff=16_000, xon=8_000, headroom=190_000, lossless=True)})
    # 3 ports at 10 Mb/s: a PG drains at 1/2 of 10 Mb/s from XOFF + headroom to XON
    assert sw.watchdog_detect_s() == pytest.approx(2 * (16_000 + 190_000 - 8_000) * 8 * 2 / 10e6)
    sw.buffer.set_profiles({})                                   # nothing lossless: Meta's 200 ms
    assert sw.watchdog_detect_s() == pytest.approx(0.2)
    from testbed.switch.buffers import production_pg_profile, auto_watchdog_detect_s
    assert auto_watchdog_detect_s([production_pg_profile()], 63, 400e9) == pytest.approx(0.2)


def test_the_agent_sets_the_watchdog_and_reports_the_buffer():
    from testbed.switch.agent import AgentError, EngineAgent, check_request
    sw, ports, clock = make(profiles={3: LOSSLESS})
    agent = EngineAgent(sw)
    agent.set_watchdog(detect_ms=350, restore_ms=100, action="forward")
    status = agent.buffer_status()
    assert status["watchdog"] == {"detect_s": 0.35, "restore_s": 0.1, "action": "forward", "auto": False}
    assert status["profiles"][3]["headroom"] == 2500 and status["loop_lag"]["samples"] == 0
    agent.set_watchdog(detect_ms=-1)
    assert agent.buffer_status()["watchdog"]["auto"] is True
    with pytest.raises(AgentError, match="drop, forward"):
        check_request(b'{"op": "set_watchdog", "args": {"action": "ignore"}}')


def test_headroom_calculator_cli_prints_bytes_and_refuses_bad_input_in_one_line():
    import subprocess
    import sys
    run = [sys.executable, "-m", "testbed.cli", "fabric", "headroom"]
    done = subprocess.run(run + ["--rate", "100G", "--cable-m", "100", "--mtu", "1500", "--response-us", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"{25_000 + 2 * 1518}\n", done.stderr
    for bad in (["--rate", "fast"], ["--cable-m", "-3"], ["--mtu", "x"]):
        done = subprocess.run(run + bad, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_pg_profiles_come_from_the_program_table_and_one_that_does_not_fit_is_refused_aloud():
    from types import SimpleNamespace
    from testbed.p4engine.tables import ActionCall, Exact
    from testbed.switch.buffers import PG_PROFILE_TABLE

    def entry(prio, headroom):
        return SimpleNamespace(keys=[Exact(prio)], action=ActionCall("set_pfc_ingress", {
            "xoff": 4000, "xon": 2000, "headroom": headroom, "reserved": 0, "refresh_us": 100}))

    sw, ports, clock = make(BufferConfig(total_bytes=100_000))
    rows = [entry(3, 10_000)]
    sw.pipeline.tables = {PG_PROFILE_TABLE: SimpleNamespace(entries=lambda: rows)}
    notices = []
    sw.notice = notices.append
    assert sw.sync_pg_profiles() is None
    assert sw.buffer.profiles[3] == PgProfile(4000, 2000, 10_000, 0, True)
    rows[:] = [entry(3, 40_000)]                   # 3 ports x 40 KB: more than the buffer
    assert "leave no shared pool" in sw.sync_pg_profiles() and notices
    assert sw.buffer.profiles[3].headroom == 10_000
