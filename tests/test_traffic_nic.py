"""The emulated NIC's transport logic on a fake clock and an in-memory wire (no sockets, no root)."""
import pytest

from traffic import packets as P
from traffic.dcqcn import Dcqcn, DcqcnParams
from traffic.fastpath import ip_checksum
from traffic.nic import FRAME_OVERHEAD, Nic, NicConfig
from traffic.samples import Recorder
from scapy.compat import raw

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
A_IP, B_IP = "10.9.0.1", "10.9.0.2"


class Pair:
    """NIC a (requester) and NIC b (responder) joined by a wire this test controls."""

    def __init__(self, **cfg):
        # No pacing unless a test asks for it (burst_bytes): the NICs may hand frames a second
        # ahead of their line-rate slots, as to a wire that serializes them itself.
        lookahead = 0.0 if "burst_bytes" in cfg else 1.0
        self.t = 1000.0
        self.a = Nic("a", A_MAC, A_IP, NicConfig(**cfg), clock=self.clock, open_sockets=False,
                     tx_lookahead_s=lookahead)
        self.b = Nic("b", B_MAC, B_IP, NicConfig(**cfg), clock=self.clock, open_sockets=False,
                     tx_lookahead_s=lookahead)
        self.a.sock, self.b.sock = Recorder(), Recorder()
        self.qa = self.a.create_qp(0x100, 0x200, B_IP, B_MAC)
        self.qb = self.b.create_qp(0x200, 0x100, A_IP, A_MAC)

    def clock(self):
        return self.t

    def a_sends(self):
        self.a._transmit(self.t, budget=10_000)
        frames = list(self.a.sock.frames)
        self.a.sock.frames.clear()
        return frames

    def to_b(self, frames, ce=False):
        for f in frames:
            if ce:
                f = mark_ce(f)
            self.b._on_roce(f, self.t)

    def to_a(self):
        frames = list(self.b.sock.frames)
        self.b.sock.frames.clear()
        for f in frames:
            if f[12:14] == b"\x88\x08":
                self.a._on_mac_control(f, self.t)
            else:
                self.a._on_roce(f, self.t)
        return frames

    def step(self, dt=0.001):
        self.t += dt
        self.a._timers(self.t)
        self.b._timers(self.t)

    def run(self, limit=2000, drop=lambda i, f: False):
        sent = 0
        for _ in range(limit):
            frames = self.a_sends()
            self.to_b([f for i, f in enumerate(frames, sent) if not drop(i, f)])
            sent += len(frames)
            self.to_a()
            if not (self.qa.pending or self.qa.outstanding):
                return
            self.step()
        raise AssertionError("transfer did not finish")


def mark_ce(frame):
    f = bytearray(frame)
    f[15] |= P.CE
    f[24:26] = ip_checksum(bytes(f[14:24]) + b"\0\0" + bytes(f[26:34])).to_bytes(2, "big")
    return bytes(f)


def pfc(quanta_by_prio):
    return raw(P.pfc_frame(B_MAC, quanta_by_prio))


def test_write_is_segmented_by_mtu_with_first_middle_last_and_acks_coalesced():
    p = Pair(mtu=1024, ack_every=16, line_rate_bps=1e9)
    done = []
    p.a.post_write(p.qa, 64 * 1024 + 1, imm=0x1234, on_done=lambda qp, m: done.append(m.nbytes))
    frames = []
    p.run(drop=lambda i, f: frames.append(f) and False)
    ops = [f[42] for f in frames]
    assert ops[0] == P.RC_WRITE_FIRST and ops[-1] == P.RC_WRITE_LAST_IMM
    assert set(ops[1:-1]) == {P.RC_WRITE_MIDDLE} and len(ops) == 65
    assert [f[50] >> 7 for f in frames].count(1) == 1 and frames[-1][50] >> 7 == 1   # ackreq on the last only
    assert p.qb.stats["rx_bytes"] == 64 * 1024 + 1 and p.qb.stats["rx_messages"] == 1
    assert p.qb.stats["acks_tx"] == 5          # after 16, 32, 48, 64 packets and on the ackreq
    assert done == [64 * 1024 + 1] and p.qa.stats["retransmits"] == 0


def test_lost_packet_counts_oos_naks_once_and_go_back_n_delivers_every_byte_once():
    p = Pair(mtu=1024, line_rate_bps=1e9)
    p.a.post_write(p.qa, 40 * 1024)
    p.run(drop=lambda i, f: i == 10)
    assert p.qb.stats["oos"] == 29             # packets 11..39 arrived ahead of PSN 10
    assert p.qb.stats["naks_tx"] == 1 and p.qa.stats["naks_rx"] == 1
    assert p.qa.stats["retransmits"] == 30     # go-back-N: PSN 10 and everything after it
    assert p.qb.stats["rx_bytes"] == 40 * 1024 and p.qb.epsn == 40


def test_ack_rtt_times_a_messages_last_packet_to_its_ack_and_skips_resent_ones():
    p = Pair(mtu=1024, line_rate_bps=1e9)
    p.a.post_write(p.qa, 4 * 1024)
    p.to_b(p.a_sends())
    p.t += 0.0042                               # the ACK to the ackreq packet comes back 4.2 ms later
    p.to_a()
    assert p.a.report()["ack_rtt_us"] == {"samples": 1, "min": 4200.0, "median": 4200.0, "max": 4200.0}
    # A lost message: its last packet goes out twice, so its ACK cannot be timed (Karn's rule).
    p.a.post_write(p.qa, 2 * 1024)
    p.to_b([f for i, f in enumerate(p.a_sends()) if i != 0])
    p.to_a()                                    # the NAK: go back and resend both
    p.to_b(p.a_sends())
    p.t += 0.001
    p.to_a()
    assert p.qa.stats["retransmits"] == 2 and not p.qa.outstanding
    assert p.a.report()["ack_rtt_us"]["samples"] == 1


def test_duplicates_are_acked_not_delivered_twice():
    p = Pair(line_rate_bps=1e9)
    p.a.post_write(p.qa, 2048)
    frames = p.a_sends()
    p.to_b(frames)
    p.to_b(frames[:1])
    assert p.qb.stats["duplicates"] == 1 and p.qb.stats["rx_bytes"] == 2048


def test_local_ack_timeout_is_counted_backs_off_and_finally_errors():
    p = Pair(lat_timeout_s=0.01, retry_count=2, line_rate_bps=1e9)
    p.a.post_write(p.qa, 4096)
    assert len(p.a_sends()) == 4               # nothing comes back: all ACKs lost
    p.step(0.005)
    assert p.qa.stats["lat_timeouts"] == 0
    p.step(0.006)
    assert p.qa.stats["lat_timeouts"] == 1 and len(p.a_sends()) == 4 and p.qa.stats["retransmits"] == 4
    p.step(0.015)                              # the second timeout waits twice as long (20 ms)
    assert p.qa.stats["lat_timeouts"] == 1
    p.step(0.006)
    assert p.qa.stats["lat_timeouts"] == 2 and len(p.a_sends()) == 4
    p.step(0.041)                              # then 40 ms: the third exceeds retry_count
    assert p.qa.stats["lat_timeouts"] == 3 and p.qa.error and p.a.errors()
    assert not p.qa.has_work()


def test_an_ack_that_makes_progress_resets_the_backoff():
    p = Pair(lat_timeout_s=0.01, line_rate_bps=1e9)
    p.a.post_write(p.qa, 8192)
    frames = p.a_sends()
    for wait in (0.011, 0.021):
        p.step(wait)
        p.a_sends()
    assert p.qa.stats["lat_timeouts"] == 2 and p.qa.retries == 2
    p.to_b(frames[:2])
    p.b.send_ack(p.qb)                         # PSNs 0..1 acknowledged
    p.to_a()
    assert p.qa.retries == 0 and len(p.qa.outstanding) == 6
    p.a_sends()
    p.step(0.011)                              # back to the base timeout
    assert p.qa.stats["lat_timeouts"] == 3


def test_the_timer_stands_still_while_nothing_is_on_the_wire():
    p = Pair(lat_timeout_s=0.01, line_rate_bps=1e9)
    p.a.post_write(p.qa, 8192)
    frames = p.a_sends()
    p.to_b(frames[:3] + frames[4:])            # PSN 3 lost: NAK
    p.to_a()
    assert p.qa.stats["naks_rx"] == 1 and p.qa.resend_idx == 0
    p.step(0.05)                               # the rewound packets have not left yet (busy loop, pacing)
    assert p.qa.stats["lat_timeouts"] == 0
    resent = p.a_sends()
    assert [f[52] << 8 | f[53] for f in resent] == [3, 4, 5, 6, 7]
    p.step(0.011)                              # now they are in flight and unanswered: a real timeout
    assert p.qa.stats["lat_timeouts"] == 1


def test_a_pfc_pause_longer_than_the_timeout_is_not_a_loss():
    # At lab rates one pause lasts seconds; a real NIC's transport timer is tuned for microsecond
    # pauses. In-flight packets held by a paused fabric must not be retransmitted, nor error the QP.
    p = Pair(lat_timeout_s=0.01, retry_count=2, line_rate_bps=10e6)
    p.a.post_write(p.qa, 4096)
    frames = p.a_sends()                       # in flight, held somewhere in the paused fabric
    for _ in range(10):                        # refreshed pause, 0xFFFF quanta = 3.4 s at 10 Mb/s
        p.a._on_mac_control(pfc({3: 0xFFFF}), p.t)
        for _ in range(30):
            p.step(0.01)
    assert p.qa.stats["lat_timeouts"] == 0 and not p.qa.error
    p.a._on_mac_control(pfc({3: 0}), p.t)      # XON: the fabric delivers, the peer acknowledges
    p.to_b(frames)
    p.to_a()
    assert not p.qa.outstanding and p.qa.stats["retransmits"] == 0


def test_late_naks_and_impossible_acks_change_nothing():
    p = Pair(line_rate_bps=1e9)
    p.a.post_write(p.qa, 8192)
    frames = p.a_sends()
    p.to_b(frames[:4])
    p.b.send_ack(p.qb)
    p.to_a()
    assert [d[0] for d in p.qa.outstanding] == [4, 5, 6, 7] and p.qa.resend_idx == 4
    p.qb.epsn = 2                              # a NAK for PSN 2, already acknowledged: stale
    p.b.send_ack(p.qb, nak=True)
    p.qb.epsn = 100                            # an ACK for PSN 99, never sent
    p.b.send_ack(p.qb)
    p.to_a()
    assert p.qa.resend_idx == 4 and len(p.qa.outstanding) == 4 and p.a_sends() == []
    assert p.qa.stats["retransmits"] == 0


class DelayWire:
    """Both directions of a wire with a one-way delay, seeded loss and reordering, on the Pair's clock."""

    def __init__(self, pair, delay, loss=0.0, reorder=0.0, seed=1):
        import heapq
        import random
        self.p, self.delay, self.loss, self.reorder = pair, delay, loss, reorder
        self.rnd = random.Random(seed)
        self.heap, self.seq, self.push, self.pop = [], 0, heapq.heappush, heapq.heappop

    def run(self, until, dt=0.0002, limit_s=30.0):
        p = self.p
        end = p.t + limit_s
        while not until() and p.t < end:
            for src, dst in ((p.a, p.b), (p.b, p.a)):
                src._timers(p.t)
                src._transmit(p.t, budget=1000)
                for f in src.sock.frames:
                    if self.rnd.random() < self.loss:
                        continue
                    extra = 0.0005 if self.rnd.random() < self.reorder else 0.0
                    self.seq += 1
                    self.push(self.heap, (p.t + self.delay + extra, self.seq, dst, bytes(f)))
                src.sock.frames.clear()
            p.t += dt
            while self.heap and self.heap[0][0] <= p.t:
                _, _, dst, f = self.pop(self.heap)
                dst._on_roce(f, p.t)
        assert until(), "transfer did not finish"


@pytest.mark.parametrize("loss, reorder, seed", [(0.01, 0.0, 1), (0.0, 0.02, 2), (0.01, 0.02, 3)])
def test_go_back_n_recovers_every_byte_under_loss_and_reordering(loss, reorder, seed):
    p = Pair(line_rate_bps=100e6, burst_bytes=16384)
    done = []
    p.a.post_write(p.qa, 1 << 20, on_done=lambda qp, m: done.append(p.t))
    DelayWire(p, delay=0.0005, loss=loss, reorder=reorder, seed=seed).run(lambda: done)
    assert p.qb.stats["rx_bytes"] == 1 << 20 and p.qb.stats["rx_messages"] == 1
    assert p.qb.stats["oos"] > 0 and p.qa.stats["naks_rx"] > 0 and p.qa.stats["retransmits"] > 0
    assert p.qa.stats["lat_timeouts"] <= 3 and not p.qa.error
    assert done[0] - 1000.0 < 3 * (1 << 20) * 8 / 100e6      # no stall: within 3x the line-rate time


def test_queueing_delay_at_lab_rates_is_not_taken_for_loss():
    # 10 Mb/s, the lab's default host link: one 64-packet switch queue is ~56 ms, more than the
    # 50 ms a fixed timeout allows. The default timeout scales with the rate; a fixed one fires.
    def transfer(**cfg):
        p = Pair(line_rate_bps=10e6, burst_bytes=4096, **cfg)
        p.a.post_write(p.qa, 64 * 1024)
        DelayWire(p, delay=0.06).run(lambda: not (p.qa.pending or p.qa.outstanding))
        return p
    scaled = transfer()
    assert scaled.a.cfg.ack_timeout == pytest.approx(256 * (1024 + FRAME_OVERHEAD) * 8 / 10e6)
    assert scaled.qa.stats["lat_timeouts"] == 0 and scaled.qa.stats["retransmits"] == 0
    fixed = transfer(lat_timeout_s=0.05)
    assert fixed.qa.stats["lat_timeouts"] >= 1 and fixed.qb.stats["duplicates"] > 0


def test_oos_is_counted_per_qp_for_out_of_order_arrivals():
    p = Pair(line_rate_bps=1e9)
    qa2 = p.a.create_qp(0x101, 0x201, B_IP, B_MAC)
    qb2 = p.b.create_qp(0x201, 0x101, A_IP, A_MAC)
    p.a.post_write(p.qa, 2048)                 # two packets on QP 0x100
    p.a.post_write(qa2, 4096)                  # four on QP 0x101
    frames = p.a_sends()
    first = [f for f in frames if f[49] == 0x00]     # BTH destination QP, low byte
    second = [f for f in frames if f[49] == 0x01]
    p.to_b([first[1], first[0]] + second)      # a flowlet switch reorders QP 0x100 only
    assert p.qb.stats["oos"] == 1 and qb2.stats["oos"] == 0
    assert p.qb.stats["naks_tx"] == 1 and qb2.stats["naks_tx"] == 0
    p.to_a()
    p.to_b(p.a_sends())                        # go-back-N resends PSN 1 only
    assert p.qb.stats["rx_bytes"] == 2048 and qb2.stats["rx_bytes"] == 4096
    by_qpn = {q["qpn"]: q for q in p.b.report()["qps"]}
    assert by_qpn[0x200]["oos"] == 1 and by_qpn[0x201]["oos"] == 0 and p.b.report()["oos"] == 1


def test_ce_marks_yield_rate_limited_cnps_and_a_dcqcn_rate_cut():
    p = Pair(line_rate_bps=1e9, cnp_interval_s=0.005, dcqcn=DcqcnParams())
    p.a.post_write(p.qa, 8 * 1024)
    p.to_b(p.a_sends(), ce=True)
    assert p.qb.stats["ce_rx"] == 8 and p.qb.stats["cnp_tx"] == 1       # one per interval per QP
    cnps = [f for f in p.b.sock.frames if f[42] == P.CNP]
    assert len(cnps) == 1 and cnps[0][15] == 48 << 2 and cnps[0][46] & 0x40
    p.to_a()
    assert p.qa.stats["cnp_rx"] == 1 and p.qa.dcqcn.rate == pytest.approx(0.5e9)
    p.t += 0.006
    p.a.post_write(p.qa, 1024)
    p.to_b(p.a_sends(), ce=True)
    assert p.qb.stats["cnp_tx"] == 2


def test_dcqcn_pacing_slows_the_qp_to_its_rate():
    p = Pair(line_rate_bps=100e6, burst_bytes=1100, dcqcn=DcqcnParams(timer_period_s=10, alpha_period_s=10))
    p.a.post_write(p.qa, 1 << 20)

    def sent_in_10ms():
        count = 0
        for _ in range(100):
            count += len(p.a_sends())
            p.step(0.0001)
        return count
    sent_full = sent_in_10ms()                                              # at line rate
    p.qa.dcqcn.on_cnp(p.t)
    p.qa.dcqcn.on_cnp(p.t)                                                  # alpha 1: 100 -> 50 -> 25 Mb/s
    assert p.qa.dcqcn.rate == pytest.approx(25e6)
    sent_cut = sent_in_10ms()
    assert 0.2 < sent_cut / sent_full < 0.32, (sent_full, sent_cut)


def test_dcqcn_alpha_does_not_decay_before_the_first_cnp():
    """The reaction point starts with its first CNP: a QP idle (or at line rate) for a while
    still halves its rate on the first one, however long set-up took."""
    d = Dcqcn(1e9, DcqcnParams(g=1 / 16, alpha_period_s=0.001), now=0.0)
    d.tick(0.25)
    d.on_cnp(0.25)
    assert d.alpha == pytest.approx(1.0) and d.rate == pytest.approx(0.5e9)


def test_dcqcn_alpha_decay_and_recovery_stages():
    params = DcqcnParams(g=1 / 16, alpha_period_s=0.001, timer_period_s=0.002, byte_counter=10**12,
                         fast_recovery_steps=2, ai_fraction=0.05, hai_fraction=0.2)
    d = Dcqcn(1e9, params, now=0.0)
    d.on_cnp(0.0)
    assert d.rate == pytest.approx(0.5e9) and d.target == pytest.approx(1e9) and d.alpha == pytest.approx(1.0)
    d.tick(0.0035)           # 3 alpha periods, the first had the CNP: 2 decays; 1 timer event
    assert d.alpha == pytest.approx((15 / 16) ** 2)
    assert d.rate == pytest.approx(0.75e9)             # fast recovery: halfway to the target
    d.on_cnp(0.0036)
    cut = 0.75e9 * (1 - (15 / 16) ** 2 / 2)
    assert d.rate == pytest.approx(cut) and d.target == pytest.approx(0.75e9)
    rates = [d.rate]
    for k in range(1, 40):
        d.tick(0.0036 + 0.002 * k)
        rates.append(d.rate)
    assert all(b >= a for a, b in zip(rates, rates[1:])) and rates[-1] == pytest.approx(1e9)
    assert d.decreases == 2 and d.lowest_rate == pytest.approx(cut)


def test_pfc_pauses_the_data_priority_for_quanta_times_512_bit_times():
    p = Pair(line_rate_bps=100e6, burst_bytes=4096)
    p.a.post_write(p.qa, 1 << 20)
    assert p.a_sends()
    p.a._on_mac_control(pfc({3: 10_000}), p.t)                 # 10000 x 512 bits at 100 Mb/s = 51.2 ms
    p.t += 0.0511
    assert p.a_sends() == [] and p.a.stats["pfc_rx"] == 1 and p.a.pfc_rx_by_priority[3] == 1
    p.t += 0.0002
    assert p.a_sends()
    p.a._on_mac_control(pfc({5: 0xFFFF}), p.t)                 # another priority: data keeps flowing
    p.t += 0.001
    assert p.a_sends()
    p.a._on_mac_control(pfc({3: 0xFFFF}), p.t)
    p.t += 0.001
    assert p.a_sends() == []
    p.a._on_mac_control(pfc({3: 0}), p.t)                      # zero quanta: resume at once
    assert p.a_sends()


def test_a_resumed_sender_goes_on_at_line_rate_without_a_burst():
    # A paused link earns no pacer credit: a full bucket sent back to back on resume would land
    # in the very switch queue that asked for the pause.
    p = Pair(line_rate_bps=100e6, burst_bytes=16 * 1024)
    p.a.post_write(p.qa, 1 << 20)
    assert len(p.a_sends()) == 1                              # an idle NIC starts at line rate
    p.t += 0.0005                                             # woken 0.5 ms late (~86.6 us a frame):
    assert len(p.a_sends()) == 5                              # it catches up
    p.a._on_mac_control(pfc({3: 20_000}), p.t)                 # 102.4 ms at 100 Mb/s
    p.t += 0.1025
    assert len(p.a_sends()) <= 2                               # 0.1 ms at line rate, no bucket
    p.t += 0.001                                              # 1 ms = 12500 B at 100 Mb/s
    assert 10 <= len(p.a_sends()) <= 13
    p.a._on_mac_control(pfc({3: 0xFFFF}), p.t)
    p.t += 0.01
    p.a._on_mac_control(pfc({3: 0}), p.t)                      # XON ends the pause early
    assert len(p.a_sends()) <= 1


def test_an_idle_wire_earns_no_credit_so_no_burst_beats_the_line_rate():
    # The bucket makes up for late wake-ups while packets wait. A NIC that had nothing to send
    # starts at its line rate: bursting a bucket then would be a wire faster than its rate
    # (a ring AllReduce's busbw came out above the line rate, its NICs idle between steps).
    p = Pair(line_rate_bps=100e6, burst_bytes=16 * 1024)      # 1082 B frames: 86.56 us each
    assert p.a_sends() == []
    p.t += 1.0                                                # a second of idle wire
    start = p.t
    p.a.post_write(p.qa, 1 << 20)
    frames = p.a_sends()
    assert len(frames) == 1
    for step in [0.001] + [0.00025] * 100:                    # woken late, then often
        p.t += step
        frames += p.a_sends()
    assert len(frames) > 290
    bits_beyond_the_first = sum(len(f) for f in frames[1:]) * 8
    assert bits_beyond_the_first <= 100e6 * (p.t - start)      # never above the line rate


def test_acks_of_a_paused_priority_are_held_until_the_pause_ends():
    p = Pair(line_rate_bps=100e6)
    p.b._on_mac_control(pfc({3: 1000}), p.t)                   # 5.12 ms
    p.a.post_write(p.qa, 1024)
    p.to_b(p.a_sends())
    assert p.to_a() == [] and p.b.held[3]
    p.step(0.006)
    assert len(p.to_a()) == 1 and p.qa.stats["acks_rx"] == 1


def test_slow_receiver_emits_pfc_above_xoff_and_resumes_below_xon():
    p = Pair(line_rate_bps=1e9, slow_rx_bps=8e6, pfc_xoff_bytes=20_000, pfc_xon_bytes=5_000, pfc_quanta=5000)
    p.a.post_write(p.qa, 30 * 1024)
    p.to_b(p.a_sends())
    p.step(0.0001)
    sent = [f for f in p.b.sock.frames if f[12:14] == b"\x88\x08"]
    assert len(sent) == 1 and sent[0][16:18] == b"\x00\x08" and sent[0][24:26] == (5000).to_bytes(2, "big")
    p.to_a()
    assert p.a.paused_until[3] > p.t
    for _ in range(40):                                        # 1 MB/s drains 30 KB in ~30 ms
        p.step(0.001)
    xon = [f for f in p.b.sock.frames if f[12:14] == b"\x88\x08"]
    assert xon and xon[-1][24:26] == b"\x00\x00" and p.b.stats["pfc_tx"] >= 2


def test_slow_receiver_hands_payload_to_the_host_at_its_drain_rate_oldest_first():
    p = Pair(line_rate_bps=1e9, slow_rx_bps=8e6)               # 1 MB/s
    qa2 = p.a.create_qp(0x101, 0x201, B_IP, B_MAC)
    qb2 = p.b.create_qp(0x201, 0x101, A_IP, A_MAC)
    consumed = []
    p.b.on_rx_consumed = lambda qp, n: consumed.append((qp.local_qpn, n))
    p.a.post_write(p.qa, 4096)
    p.to_b(p.a_sends())
    p.a.post_write(qa2, 2048)
    p.to_b(p.a_sends())
    assert consumed == [] and p.b.rx_buffer == 6144 and p.b.stats["rx_buffer_peak"] == 6144
    p.step(0.005)                                              # 5 ms: 5000 bytes
    assert sum(n for _, n in consumed) == 5000 and {q for q, _ in consumed} == {0x200, 0x201}
    assert sum(n for q, n in consumed if q == 0x200) == 4096   # the first QP's bytes went first
    p.step(0.005)
    assert sum(n for _, n in consumed) == 6144 and p.b.rx_buffer == 0 and not p.b.rx_backlog


def test_bad_icrc_is_counted_and_dropped():
    p = Pair(line_rate_bps=1e9)
    p.a.post_write(p.qa, 1024)
    f = bytearray(p.a_sends()[0])
    f[60] ^= 0xFF
    p.to_b([bytes(f)])
    assert p.b.stats["icrc_errors"] == 1 and p.qb.stats["rx_bytes"] == 0


def test_tx_lookahead_hands_over_the_next_frame_early_and_none_by_default():
    """Virtual time's wire serializes frames itself: with a lookahead of one frame time the NIC
    gives it the frame of the next pacer slot too (two per wake); the default (real time) sends
    each frame at its own slot, and a pause holds both alike."""
    def sent_in_one_slot(lookahead):
        p = Pair(mtu=1024, line_rate_bps=1e9, burst_bytes=1)
        if lookahead is not None:
            p.a.tx_lookahead_s = lookahead
        p.a.post_write(p.qa, 64 * 1024)
        return p, len(p.a_sends())

    frame_s = (1024 + FRAME_OVERHEAD) * 8 / 1e9
    p, n = sent_in_one_slot(None)
    assert p.a.tx_lookahead_s == 0.0 and n == 1 and p.a.next_send > p.t
    p, n = sent_in_one_slot(frame_s)
    assert n == 2 and p.a.next_send > p.t + frame_s
    p.t = p.a.next_send                      # the next slot: again the frame due then and one more
    assert len(p.a_sends()) == 2
    p.a._pause(3, p.t, 1e-3)                 # PFC on the data priority: nothing, lookahead or not
    p.t += frame_s
    assert p.a_sends() == []


def test_qp_templates_are_the_frames_scapy_builds_for_that_qp():
    """Templates are built by Scapy once per packet kind and addressed per QP: byte for byte
    what Scapy builds with the QP's own MACs, IPs, UDP port and QP number."""
    from traffic.fastpath import FrameTemplate
    from traffic.nic import udp_source_port
    p = Pair(dcqcn=DcqcnParams())
    other = p.a.create_qp(0x345678, 0xABCDEF, "192.168.7.9", "12:34:56:78:9a:bc")
    for qp in (p.qa, other, p.qb):
        nic = qp.nic
        for opcode, paylen in ((P.RC_WRITE_FIRST, 1024), (P.RC_WRITE_MIDDLE, 1024), (P.RC_WRITE_LAST_IMM, 333),
                               (P.RC_WRITE_ONLY_IMM, 5), (P.RC_ACK, 0), (P.CNP, 0)):
            if opcode in P.WRITE_OPCODES:
                bth, cls = P.write_bth(opcode, qp.remote_qpn, 0, rkey=qp.rkey, payload=b"\x5a" * paylen), "data"
            elif opcode == P.RC_ACK:
                bth, cls = P.ack_bth(qp.remote_qpn, 0, 0), "data"
            else:
                bth, cls = P.cnp_bth(qp.remote_qpn), "cnp"
            tc = nic.cfg.classes[cls]
            ecn = P.NOT_ECT if opcode == P.RC_ACK else tc.ecn
            scapy = raw(P.roce(nic.mac, qp.peer_mac, nic.ip, qp.peer_ip, udp_source_port(qp.local_qpn, qp.remote_qpn),
                               bth, dscp=tc.dscp, ecn=ecn))
            t = qp.template(opcode, paylen)
            assert bytes(t.frame) == scapy, (hex(qp.local_qpn), hex(opcode))
            expected = FrameTemplate(scapy, has_reth=opcode in P.OPCODES_WITH_RETH,
                                     has_imm=opcode in P.OPCODES_WITH_IMM)
            assert bytes(t.render(77, 9, 1, 0x1000, 5, 4096)) == bytes(expected.render(77, 9, 1, 0x1000, 5, 4096))
