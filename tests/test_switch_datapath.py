"""The switch data path with a fake pipeline over socketpairs: queues, shaping, PFC, robustness."""
import os
import random
import time

import pytest

from switch_fake_engine import FakePipeline, SocketPort, frame_tag, ipv4_frame, trailer
from testbed.switch import pfc
from testbed.switch.buffers import BufferConfig
from testbed.switch.datapath import Switch
from testbed.switch.pcap import PortCaptures, read_pcap


@pytest.fixture
def make_switch(tmp_path):
    made = []

    def make(port_map, nports=3, pcap=False, **kw):
        ports = {n: SocketPort(n) for n in range(1, nports + 1)}
        captures = PortCaptures(str(tmp_path), {n: p.iface for n, p in ports.items()}) if pcap else None
        sw = Switch(ports, captures=captures, **kw)
        sw.set_pipeline(FakePipeline(port_map))
        sw.start()
        made.append(sw)
        return sw, ports

    yield make
    for sw in made:
        sw.close()


def test_forwards_per_pipeline_and_counts(make_switch):
    sw, ports = make_switch({1: 2, 2: 1})
    for i in range(20):
        ports[1].peer.send(ipv4_frame(tag=i))
    got = ports[2].receive_all()
    assert [frame_tag(f) for f in got] == list(range(20))
    assert ports[3].receive_all(wait=0.05) == []
    status = sw.port_status(2)
    assert status["tx_packets"] == 20 and sw.port_status(1)["rx_packets"] == 20


def test_rate_limited_port_builds_queue_seen_as_enq_qdepth(make_switch):
    sw, ports = make_switch({1: 2})
    rate = 8_000_000       # 1000-byte frames (+12 trailer) take ~1 ms each
    sw.egress_port(2).set_rate(rate)
    burst = 30
    t0 = time.perf_counter()
    for i in range(burst):
        ports[1].peer.send(ipv4_frame(size=1000, tag=i))
    got = []
    deadline = time.time() + 3
    while len(got) < burst and time.time() < deadline:
        got += ports[2].receive_all(wait=0.2)
    elapsed = time.perf_counter() - t0
    assert len(got) == burst
    depths = [trailer(f)[0] for f in got]
    assert max(depths) >= 10, depths          # the burst queued inside the switch
    delays = [trailer(f)[2] for f in got]
    assert delays[-1] > delays[0] + 10_000     # the last one waited >10 ms in the queue
    expected = burst * 1012 * 8 / rate
    assert elapsed >= expected * 0.9, (elapsed, expected)


def test_tail_drop_counts_per_queue(make_switch):
    sw, ports = make_switch({1: 2})
    sw.egress_port(2).set_rate(1_000_000)
    sw.egress_port(2).set_depth(5, priority=3)
    for i in range(40):
        ports[1].peer.send(ipv4_frame(dscp=3 << 3, size=500, tag=i))
    time.sleep(0.3)
    status = sw.port_status(2)
    assert status["tail_drops"][3] > 0 and status["tail_drops"][0] == 0
    assert status["queue_depth"][3] <= 5


def test_strict_priority_serves_highest_first(make_switch):
    sw, ports = make_switch({1: 2})
    port = sw.egress_port(2)
    port.set_rate(4_000_000)
    # Fill both queues while the link is busy, then watch the order they leave in.
    for i in range(10):
        ports[1].peer.send(ipv4_frame(dscp=1 << 3, size=1000, tag=100 + i))
    for i in range(10):
        ports[1].peer.send(ipv4_frame(dscp=6 << 3, size=1000, tag=600 + i))
    got = []
    deadline = time.time() + 3
    while len(got) < 20 and time.time() < deadline:
        got += ports[2].receive_all(wait=0.2)
    tags = [frame_tag(f) for f in got]
    assert len(tags) == 20
    # Once a high-priority packet is queued, the low queue waits until the high one is empty.
    first_high = min(i for i, t in enumerate(tags) if t >= 600)
    last_high = max(i for i, t in enumerate(tags) if t >= 600)
    assert all(t >= 600 for t in tags[first_high:last_high + 1])
    assert first_high <= 3


def test_pfc_pauses_only_named_priority_for_quanta_time(make_switch):
    # a 307 ms pause is longer than the PFC watchdog's 200 ms: without it here
    sw, ports = make_switch({1: 2}, buffer_config=BufferConfig(watchdog_detect_s=0))
    port = sw.egress_port(2)
    rate = 10_000_000
    port.set_rate(rate)
    port.set_pfc(range(8))
    quanta = 6000                     # 6000 * 512 / 10 Mb/s = 307 ms
    expected = pfc.pause_seconds(quanta, rate)
    ports[2].peer.send(pfc.build_pfc("02:00:00:00:00:09", {3: quanta}))
    time.sleep(0.02)
    ports[1].peer.send(ipv4_frame(dscp=3 << 3, tag=3))
    ports[1].peer.send(ipv4_frame(dscp=4 << 3, tag=4))
    arrivals = ports[2].receive_timed(2)
    assert set(arrivals) == {3, 4}
    assert arrivals[4] < 0.05                       # other priorities flow
    assert arrivals[3] >= expected - 0.03           # the named one waits out the pause
    assert arrivals[3] < expected + 0.1
    status = sw.port_status(2)
    assert status["pfc_frames"] == 1 and status["pfc_rx"][3] == 1
    assert abs(status["paused_us"][3] / 1e6 - expected) < 0.05
    assert status["paused_us"][4] == 0
    assert status["rx_packets"] == 1 and status["pfc_consumed"] == 1   # consumed, not forwarded
    assert ports[1].receive_all(wait=0.05) == []


def _frames_for(port, seconds):
    end = time.monotonic() + seconds
    got = []
    while (left := end - time.monotonic()) > 0:
        port.peer.settimeout(left)
        try:
            got.append(port.peer.recv(65536))
        except OSError:        # socket.timeout
            break
    return got


def test_the_mac_keeps_an_xoff_up_until_an_xon_lifts_it(make_switch):
    """An XOFF the program sent stands: the port's MAC sends it again at half its pause time
    while no XON follows (no packet need pass the PG for that), and stops after the XON."""
    sw, ports = make_switch({1: 2})
    sw.egress_port(2).set_rate(10_000_000)
    quanta = 2000                     # 2000 * 512 / 10 Mb/s = 102 ms: refreshed every 51 ms
    ports[1].peer.send(pfc.build_pfc("02:00:00:00:00:09", {3: quanta}))
    got = _frames_for(ports[2], 0.4)       # receive_all would wait for a silence that never comes
    assert len(got) >= 2 and {tuple(pfc.decode_pfc(f)) for f in got} == {((3, quanta),)}
    assert all(f[6:12] == bytes.fromhex("020000000009") for f in got)
    assert sw.port_status(2)["pfc_refresh_tx"][3] == len(got) - 1
    ports[1].peer.send(pfc.build_pfc("02:00:00:00:00:09", {3: 0}))
    got = _frames_for(ports[2], 0.3)
    assert [pfc.decode_pfc(f) for f in got[-1:]] == [[(3, 0)]]
    assert ports[2].receive_all(wait=0.2) == []         # lifted: no refresh after the XON


def test_zero_quanta_resumes(make_switch):
    sw, ports = make_switch({1: 2})
    port = sw.egress_port(2)
    port.set_rate(10_000_000)
    port.set_pfc([5])
    ports[2].peer.send(pfc.build_pfc("02:00:00:00:00:09", {5: 0xFFFF}))   # ~3.4 s
    time.sleep(0.02)
    ports[1].peer.send(ipv4_frame(dscp=5 << 3, tag=5))
    assert ports[2].receive_all(wait=0.15) == []
    ports[2].peer.send(pfc.build_pfc("02:00:00:00:00:09", {5: 0}))
    arrivals = ports[2].receive_timed(1, within=1.0)
    assert list(arrivals) == [5] and arrivals[5] < 0.1


def test_pfc_disabled_priority_is_not_paused(make_switch):
    sw, ports = make_switch({1: 2})
    sw.egress_port(2).set_pfc([3])
    ports[2].peer.send(pfc.build_pfc("02:00:00:00:00:09", {2: 0xFFFF}))
    time.sleep(0.02)
    ports[1].peer.send(ipv4_frame(dscp=2 << 3, tag=2))
    assert [frame_tag(f) for f in ports[2].receive_all(wait=0.2)] == [2]
    assert sw.port_status(2)["pfc_rx"][2] == 1


def test_loss_and_delay_impairments(make_switch):
    sw, ports = make_switch({1: 2})
    sw.egress_port(2).set_impairments(delay_us=50_000, loss=0.5, seed=7)
    t = time.perf_counter()
    for i in range(200):
        ports[1].peer.send(ipv4_frame(tag=i))
    got = ports[2].receive_all(wait=0.4)
    first = time.perf_counter() - t
    assert 50 < len(got) < 150
    assert sw.port_status(2)["loss_drops"] == 200 - len(got)
    assert first >= 0.05


def test_garbage_and_pipeline_faults_do_not_stop_it(make_switch):
    sw, ports = make_switch({1: 2})
    sw.pipeline.explode_on = b"\xde\xad"
    rng = random.Random(1)
    for _ in range(2000):
        ports[1].peer.send(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 80))))
    ports[1].peer.send(ipv4_frame()[:14] + b"\xde\xad")
    time.sleep(0.3)
    ports[2].receive_all(wait=0.05)
    ports[1].peer.send(ipv4_frame(tag=77))
    assert 77 in [frame_tag(f) for f in ports[2].receive_all(wait=0.3)]
    assert sw.pipeline_errors >= 1 and sw._thread.is_alive()


def test_pcaps_written_per_port(make_switch, tmp_path):
    sw, ports = make_switch({1: 2}, pcap=True)
    for i in range(5):
        ports[1].peer.send(ipv4_frame(tag=i))
    assert len(ports[2].receive_all()) == 5
    sw.close()
    ins = read_pcap(os.path.join(tmp_path, "fake1_in.pcap"))
    outs = read_pcap(os.path.join(tmp_path, "fake2_out.pcap"))
    assert [frame_tag(f) for _, f in ins] == list(range(5))
    assert [frame_tag(f) for _, f in outs] == list(range(5))
    assert read_pcap(os.path.join(tmp_path, "fake3_out.pcap")) == []


def test_packet_out_and_packet_in_via_cpu_port(make_switch):
    got = []
    sw, ports = make_switch({1: 64, 64: 2}, cpu_port=64)
    sw.packet_in_handler = got.append
    ports[1].peer.send(ipv4_frame(tag=9))
    sw.inject(64, ipv4_frame(tag=10))
    deadline = time.time() + 1
    while not got and time.time() < deadline:
        time.sleep(0.01)
    assert [frame_tag(f) for f in got] == [9]
    assert [frame_tag(f) for f in ports[2].receive_all()] == [10]


def test_vlan_tag_from_auxdata_is_put_back_where_it_was():
    import struct
    from testbed.switch.ports import PACKET_AUXDATA, SOL_PACKET, with_vlan_tag
    frame = bytes(range(12)) + b"\x08\x00" + b"payload"

    def aux(status, tci, tpid):
        return [(SOL_PACKET, PACKET_AUXDATA, struct.pack("=IIIHHHH", status, 0, 0, 0, 0, tci, tpid))]
    assert with_vlan_tag(frame, aux(0x10 | 0x40, 5 << 13 | 42, 0x8100)) == frame[:12] + bytes.fromhex("8100a02a") + frame[12:]
    assert with_vlan_tag(frame, aux(0x10 | 0x40, 1, 0x88A8))[12:16] == bytes.fromhex("88a80001")   # 802.1ad
    assert with_vlan_tag(frame, aux(0x10, 0, 0))[12:16] == bytes.fromhex("81000000")   # priority tag, old kernel
    assert with_vlan_tag(frame, aux(0x01, 7, 0x8100)) == frame                         # no tag: unchanged
    assert with_vlan_tag(frame, []) == frame
