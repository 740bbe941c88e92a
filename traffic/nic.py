"""An emulated RDMA NIC: RC queue pairs over one raw socket, driven by a single-threaded loop.

Requester side of a QP: messages posted with :meth:`Nic.post_write` are cut into
RC WRITE packets of at most the path MTU (FIRST/MIDDLE/LAST or ONLY, the last
one carrying immediate data when asked and requesting an ACK); packets stay in
an outstanding window until a cumulative ACK covers them; a NAK (PSN sequence
error) or a local ACK timeout (counted: Meta's "LAT" counter) rewinds the send
pointer to the oldest unacknowledged packet (go-back-N). Pacing: a NIC-wide
token bucket at the line rate (its credit covers late wake-ups while packets wait,
never time the wire stood idle) and, with DCQCN on, a per-QP rate that CNPs cut.

The local ACK timer runs only while the oldest unacknowledged packet is on the
wire: it starts when that packet is (re)sent, restarts on every ACK that makes
progress, and stands still while nothing is in flight (after a rewind, before
the resend leaves) or the data priority is paused by PFC (the link holds the
packets; nobody lost them). Consecutive timeouts double it (like ConnectX's
adaptive retransmission), so a queue deeper than the timeout costs one window
resend instead of a cascade of them. Lab rates are scaled down while real
timeouts are not, so the default timeout grows with the time a window of
packets takes at the line rate (see :attr:`NicConfig.ack_timeout`).

Responder side: per-QP expected PSN; in-order packets are accepted and ACKed
(coalesced: every ``ack_every`` packets, on ackreq, or after ``ack_delay_s``);
a packet ahead of the expected PSN is counted out-of-sequence (Meta's "OOS")
and answered with one NAK per gap; a CE-marked packet yields a CNP to the
sender's QP, at most one per ``cnp_interval_s`` per QP.

Link level: received 802.1Qbb frames pause the matching priorities for
quanta x 512 bit times at the NIC's line rate (control frames of a paused
priority are held too). An optional slow receiver (``slow_rx_bps``) hands
in-order payload to its host through a receive buffer drained at that rate —
the queue an incast builds in front of a receiver: it emits PFC when the
buffer passes XOFF and a zero-quanta frame under XON, reports its high-water
mark, and tells the owner what the host consumed (``on_rx_consumed``), which is
what receiver-driven admission (CTS) grants credit on. Without it, payload is
consumed as it arrives.

Everything is byte-level: templates from :mod:`traffic.fastpath`, no Scapy per packet.
"""
import select
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from traffic import icrc
from traffic import packets as P
from traffic.dcqcn import Dcqcn, DcqcnParams
from traffic.fastpath import BTH_OFF, EXT_OFF, FrameTemplate, PortSink, RawSocket, ip_checksum, mac_bytes, mac_text

PSN_MASK = 0xFFFFFF
CTS_QPN = 0x000C75          # the QP number CTS messages are addressed to
QUANTUM_BITS = 512
VALID_MTUS = (256, 512, 1024, 2048, 4096)
FRAME_OVERHEAD = 14 + 20 + 8 + 12 + 16 + 4   # Ethernet, IPv4, UDP, BTH, RETH, ICRC
LAT_WINDOW_PACKETS = 256       # the default ACK timeout covers this many full packets
LAT_BACKOFF_LIMIT = 4          # consecutive timeouts double the timer up to 2**4 times
TIMER_TICK_S = 1e-6            # QP timers (ACK timeout, delayed ACK, DCQCN) are checked this often

_U32 = struct.Struct("!I")
_CTS = struct.Struct("!HHHHQ")
_PFC_TIMES = struct.Struct("!H8H")


def psn_diff(a, b):
    """Signed distance a - b on the 24-bit PSN circle."""
    return ((a - b + 0x800000) & PSN_MASK) - 0x800000


@dataclass
class TrafficClass:
    dscp: int
    priority: int
    ecn: int = P.NOT_ECT

    @classmethod
    def from_dict(cls, data, default, where):
        merged = {"dscp": default.dscp, "priority": default.priority, "ecn": default.ecn}
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object with dscp, priority, ecn")
        for key, value in (data or {}).items():
            if key not in merged:
                raise ValueError(f"{where}: unknown key {key!r} (expected dscp, priority, ecn)")
            merged[key] = value
        ecn = merged["ecn"]
        if isinstance(ecn, str):
            names = {"not-ect": 0, "ect1": 1, "ect(1)": 1, "ect0": 2, "ect(0)": 2, "ce": 3}
            if ecn.lower() not in names:
                raise ValueError(f"{where}.ecn: {str(ecn)[:40]!r} is not one of {sorted(names)}")
            merged["ecn"] = names[ecn.lower()]
        for key, hi in (("dscp", 63), ("priority", 7), ("ecn", 3)):
            if isinstance(merged[key], bool) or not isinstance(merged[key], int) or not 0 <= merged[key] <= hi:
                raise ValueError(f"{where}.{key}: expected an integer 0..{hi}, got {repr(merged[key])[:40]}")
        return cls(**merged)


DEFAULT_CLASSES = {
    "data": TrafficClass(dscp=26, priority=3, ecn=P.ECT0),     # RoCE data, lossless priority
    "cnp": TrafficClass(dscp=48, priority=6, ecn=P.NOT_ECT),
    "control": TrafficClass(dscp=46, priority=7, ecn=P.NOT_ECT),  # CTS and the start barrier
}


@dataclass
class NicConfig:
    line_rate_bps: float = 100e6
    mtu: int = 1024                    # path MTU: payload bytes per packet
    ack_every: int = 16
    ack_delay_s: float = 0.0005
    lat_timeout_s: float = None        # local ACK timeout; None: see ack_timeout
    retry_count: int = 7               # consecutive timeouts before the QP errors out
    max_outstanding: int = 512         # packets in flight per QP
    cnp_interval_s: float = 0.0005     # at most one CNP per QP per interval
    burst_bytes: int = 16 * 1024       # token-bucket depth of the pacers
    dcqcn: DcqcnParams = None          # None: DCQCN off
    classes: dict = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    check_icrc: bool = True
    slow_rx_bps: float = 0.0           # >0: receive buffer drained to the host at this rate
    pfc_xoff_bytes: int = 64 * 1024
    pfc_xon_bytes: int = 16 * 1024
    pfc_quanta: int = 0xFFFF

    def validate(self, where="nic"):
        if self.mtu not in VALID_MTUS:
            raise ValueError(f"{where}.mtu: {self.mtu} is not a RoCE path MTU {VALID_MTUS}")
        if self.line_rate_bps <= 0:
            raise ValueError(f"{where}.line_rate: must be positive")
        for name in ("ack_every", "max_outstanding", "retry_count"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{where}.{name}: expected a positive integer, got {getattr(self, name)!r}")
        if not 0 < self.pfc_quanta <= 0xFFFF:
            raise ValueError(f"{where}.pfc_quanta: must be in 1..65535")
        if self.lat_timeout_s is not None and not self.lat_timeout_s > 0:
            raise ValueError(f"{where}.lat_timeout_s: must be positive")

    @property
    def ack_timeout(self):
        """The local ACK timeout in seconds: lat_timeout_s, or by default 50 ms or the time
        LAT_WINDOW_PACKETS full packets take at the line rate, whichever is longer — a
        few switch queues' worth, so queueing at lab rates is not mistaken for loss."""
        if self.lat_timeout_s is not None:
            return self.lat_timeout_s
        return max(0.05, LAT_WINDOW_PACKETS * (self.mtu + FRAME_OVERHEAD) * 8 / self.line_rate_bps)


class Message:
    __slots__ = ("nbytes", "va", "imm", "on_done", "offset", "context")

    def __init__(self, nbytes, va, imm, on_done, context):
        self.nbytes = nbytes
        self.va = va
        self.imm = imm
        self.on_done = on_done
        self.offset = 0
        self.context = context


_SHAPES = {}    # (opcode, paylen, rkey, dscp, ecn) -> that packet built by Scapy with placeholder addresses


def _frame_shape(nic, opcode, paylen, rkey, dscp, ecn):
    """One RoCE packet of this kind, built with Scapy once per process (it takes a millisecond
    or two, and every QP needs a few); QPs patch their addresses in with _addressed."""
    key = (opcode, paylen, rkey, dscp, ecn)
    frame = _SHAPES.get(key)
    if frame is None:
        if opcode in P.WRITE_OPCODES:
            bth = P.write_bth(opcode, 0, 0, rkey=rkey, payload=b"\x5a" * paylen)
        elif opcode == P.RC_ACK:
            bth = P.ack_bth(0, 0, 0)
        else:
            bth = P.cnp_bth(0)
        frame = _SHAPES[key] = bytes(nic.build(P.roce("00:00:00:00:00:00", "00:00:00:00:00:00", "0.0.0.0",
                                                      "0.0.0.0", 0, bth, dscp=dscp, ecn=ecn)))
    return frame


def _addressed(shape, src_mac, dst_mac, src_ip, dst_ip, sport, dqpn):
    """`shape` with these MACs, IPs, UDP source port and destination QP, its IPv4 checksum and
    ICRC made right: the bytes Scapy builds for them (PSN 0)."""
    frame = bytearray(shape)
    frame[0:6] = dst_mac
    frame[6:12] = src_mac
    frame[26:30] = bytes(int(x) for x in src_ip.split("."))
    frame[30:34] = bytes(int(x) for x in dst_ip.split("."))
    frame[24:26] = b"\0\0"
    frame[24:26] = struct.pack("!H", ip_checksum(frame[14:34]))
    frame[34:36] = struct.pack("!H", sport)
    frame[BTH_OFF + 5:BTH_OFF + 8] = (dqpn & PSN_MASK).to_bytes(3, "big")
    frame[-4:] = icrc.pack(icrc.compute(frame))
    return bytes(frame)


def udp_source_port(local_qpn, remote_qpn):
    """The UDP source port of a QP's packets: RoCEv2 NICs derive it from the QP pair, for
    ECMP entropy (0xC000..0xFFFF, like the dynamic port range)."""
    h = (local_qpn * 0x9E3779B1 ^ remote_qpn * 0x85EBCA6B) & 0xFFFFFFFF
    return 0xC000 | ((h ^ (h >> 14)) & 0x3FFF)


class QueuePair:
    """One RC QP: requester and responder state, counters, frame templates."""

    def __init__(self, nic, local_qpn, remote_qpn, peer_ip, peer_mac, context=None, rkey=0x1000):
        self.nic = nic
        self.local_qpn = local_qpn
        self.remote_qpn = remote_qpn
        self.peer_ip = peer_ip
        self.peer_ip_raw = bytes(int(x) for x in peer_ip.split("."))
        self.peer_mac = peer_mac
        self.context = context            # the owner's tag (e.g. a connection); passed to callbacks
        self.rkey = rkey
        self.sport = udp_source_port(local_qpn, remote_qpn)
        self._templates = {}
        # requester
        self.pending = deque()
        self.outstanding = deque()     # (psn, opcode, paylen, va, dma_len, imm, ackreq, msg_or_None)
        self.resend_idx = 0
        self.next_psn = 0
        self.timer_start = 0.0         # when the local ACK timer last (re)started
        self.retries = 0               # consecutive timeouts without progress
        self.error = None
        self.next_send = 0.0
        self.dcqcn = Dcqcn(nic.cfg.line_rate_bps, nic.cfg.dcqcn, nic.now()) if nic.cfg.dcqcn else None
        self.dcqcn_next = 0.0
        self.next_va = 0x10000000
        self.rtt_probe = None          # (psn, sent at): the last packet of a message, timed to its ACK
        # responder
        self.epsn = 0
        self.msn = 0
        self.nak_sent = False
        self.ack_pending = 0
        self.ack_due = None
        self.last_cnp = -1e9
        self.stats = dict.fromkeys((
            "tx_packets", "tx_bytes", "tx_messages", "retransmits", "lat_timeouts", "acks_rx", "naks_rx",
            "cnp_rx", "rx_packets", "rx_bytes", "rx_messages", "oos", "duplicates", "acks_tx", "naks_tx",
            "cnp_tx", "ce_rx"), 0)

    # -- requester ---------------------------------------------------------------------------
    def has_work(self):
        if self.error:
            return False
        return self.resend_idx < len(self.outstanding) or (
            bool(self.pending) and len(self.outstanding) < self.nic.cfg.max_outstanding)

    def template(self, opcode, paylen):
        key = (opcode, paylen)
        t = self._templates.get(key)
        if t is None:
            nic = self.nic
            cls = nic.cfg.classes["data"]
            ecn = cls.ecn
            if opcode == P.RC_ACK:
                ecn = P.NOT_ECT
            elif opcode == P.CNP:
                cls = nic.cfg.classes["cnp"]
                ecn = cls.ecn
            elif opcode not in P.WRITE_OPCODES:
                raise ValueError(f"no template for opcode {opcode:#x}")
            shape = _frame_shape(nic, opcode, paylen, self.rkey, cls.dscp, ecn)
            frame = _addressed(shape, nic.mac_raw, mac_bytes(self.peer_mac), nic.ip, self.peer_ip, self.sport,
                               self.remote_qpn)
            t = FrameTemplate(frame, has_reth=opcode in P.OPCODES_WITH_RETH,
                              has_imm=opcode in P.OPCODES_WITH_IMM)
            self._templates[key] = t
        return t

    def next_packet(self):
        """The next descriptor to (re)send, appending new ones to the outstanding window."""
        if self.resend_idx < len(self.outstanding):
            if self.resend_idx == 0:              # the oldest packet goes out again: (re)arm the timer
                self.timer_start = self.nic.now()
            d = self.outstanding[self.resend_idx]
            self.resend_idx += 1
            self.stats["retransmits"] += 1
            self.rtt_probe = None                 # an ACK now may answer either copy (Karn)
            return d
        msg = self.pending[0]
        mtu = self.nic.cfg.mtu
        first = msg.offset == 0
        paylen = min(mtu, msg.nbytes - msg.offset)
        last = msg.offset + paylen >= msg.nbytes
        if first and last:
            opcode = P.RC_WRITE_ONLY_IMM if msg.imm is not None else P.RC_WRITE_ONLY
        elif first:
            opcode = P.RC_WRITE_FIRST
        elif last:
            opcode = P.RC_WRITE_LAST_IMM if msg.imm is not None else P.RC_WRITE_LAST
        else:
            opcode = P.RC_WRITE_MIDDLE
        d = (self.next_psn, opcode, paylen, msg.va + msg.offset if first else None,
             msg.nbytes, msg.imm, 1 if last else 0, msg if last else None)
        msg.offset += paylen
        if last:
            self.pending.popleft()
        if not self.outstanding:
            self.timer_start = self.nic.now()
        if last and self.rtt_probe is None:       # ACK requested: the responder answers at once
            self.rtt_probe = (self.next_psn, self.nic.now())
        self.outstanding.append(d)
        self.resend_idx = len(self.outstanding)
        self.next_psn = (self.next_psn + 1) & PSN_MASK
        return d

    def _outstanding_psn(self, psn):
        """True when `psn` is a packet this QP has sent and not yet seen acknowledged."""
        out = self.outstanding
        return bool(out) and 0 <= psn_diff(psn, out[0][0]) < len(out)

    def on_ack(self, psn, now):
        """Cumulative ACK up to and including `psn` (stale or impossible PSNs change nothing)."""
        if not self._outstanding_psn(psn):
            return
        popped = 0
        out = self.outstanding
        probe = self.rtt_probe
        if probe is not None and psn_diff(psn, probe[0]) >= 0:
            self.rtt_probe = None
            self.nic.ack_rtt.append(now - probe[1])
        while out and psn_diff(out[0][0], psn) <= 0:
            d = out.popleft()
            popped += 1
            if d[7] is not None:
                msg = d[7]
                self.stats["tx_messages"] += 1
                if msg.on_done:
                    msg.on_done(self, msg)
        self.resend_idx = max(0, self.resend_idx - popped)
        self.timer_start = now
        self.retries = 0

    def on_nak(self, psn, now):
        """PSN sequence error: the responder expects `psn`; resend from there.

        A NAK for a PSN already acknowledged (a late or duplicated NAK) or never
        sent is ignored: rewinding on it would resend a whole window for nothing.
        """
        if not self._outstanding_psn(psn):
            return
        if psn != self.outstanding[0][0]:
            self.on_ack((psn - 1) & PSN_MASK, now)
        self.resend_idx = 0

    def timer_expired(self, now):
        """True when the oldest packet on the wire has waited longer than the (backed-off) timeout."""
        if not self.outstanding or self.resend_idx == 0:
            return False        # nothing on the wire: the timer is not running
        if self.nic.paused_until[self.nic.cfg.classes["data"].priority] > now:
            self.timer_start = now   # PFC holds our data: a pause is not a loss
            return False
        timeout = self.nic.cfg.ack_timeout * (1 << min(self.retries, LAT_BACKOFF_LIMIT))
        return now - self.timer_start > timeout

    def check_timeout(self, now):
        """Local ACK timeout: count it (LAT), back off, and go back to the oldest unacked packet."""
        if not self.timer_expired(now):
            return
        self.stats["lat_timeouts"] += 1
        self.retries += 1
        self.resend_idx = 0
        if self.retries > self.nic.cfg.retry_count and not self.error:
            self.error = f"retry count exceeded at PSN {self.outstanding[0][0]}"
            self.nic.failed_qps += 1

    def summary(self):
        out = {"qpn": self.local_qpn, "remote_qpn": self.remote_qpn, "peer_ip": self.peer_ip,
               "udp_sport": self.sport, "next_psn": self.next_psn, "expected_psn": self.epsn,
               "outstanding": len(self.outstanding), **self.stats}
        if self.dcqcn:
            out["dcqcn"] = self.dcqcn.stats()
        if self.error:
            out["error"] = self.error
        return out


class Nic:
    """The emulated NIC of one host. Single-threaded: call :meth:`poll` in a loop."""

    def __init__(self, iface, mac, ip, cfg=None, clock=time.monotonic, open_sockets=True, port=None, wait=None,
                 tx_lookahead_s=0.0):
        """clock: seconds; port: what frames go out of and come in from (default a raw socket on
        `iface`); wait(seconds): how the loop sleeps until input or a deadline (default select on
        the port and `extra_fds`). Virtual time passes a simulated clock, port and wait.
        tx_lookahead_s: how long before its pacer slot a frame may be handed to a port that
        serializes frames itself at the line rate (virtual time's wire: the next frame waits
        behind the one on the wire, as in a NIC's TX ring). The loop still wakes at a slot, and
        then also sends what is due within the lookahead: with one frame time, two frames per
        wake. 0 (real time): every frame at its slot."""
        self.cfg = cfg or NicConfig()
        self.cfg.validate()
        self.iface = iface
        self.mac = mac_text(mac_bytes(mac))
        self.mac_raw = mac_bytes(mac)
        self.ip = ip
        self.now = clock
        self.qps = {}
        self._qp_list = []
        self.failed_qps = 0          # QPs in the error state (errors() is asked every loop turn)
        self._rr = 0
        self.ip_id = 0
        if port is not None:
            self.sock, self.sink = port, None
        else:
            self.sock = RawSocket(iface, mac) if open_sockets else None
            self.sink = PortSink() if open_sockets else None
        self._wait = wait or self._select
        self.extra_fds = []          # other sockets the loop should wake up for (control plane)
        self.on_rx_bytes = None      # callback(qp, nbytes) for in-order payload
        self.on_rx_consumed = None   # callback(qp, nbytes) when the host has taken payload in
        self.on_rx_message = None    # callback(qp, imm_or_None) when a message completes
        self.on_cts = None           # callback(src_ip, src_rank, channel, granted)
        self.next_send = 0.0
        self._wire_idle = True       # no QP had a packet to send at the last look
        self.tx_lookahead_s = tx_lookahead_s
        self.next_ack_due = None     # the earliest delayed ACK (bounds the loop's sleep)
        self._qp_timers_at = 0.0
        line = self.cfg.line_rate_bps
        self._burst_s = self.cfg.burst_bytes * 8 / line
        self.paused_until = [0.0] * 8
        self._credit_at_pause = 0.0   # pacer state when the data priority was paused
        self._pacer_at_pause = 0.0
        self.held = {prio: deque() for prio in range(8)}
        self._holding = False        # any frame in `held` (checked every loop turn)
        self._cts_templates = {}
        self._cts_seq = 0
        # slow receiver (PFC emitter)
        self.rx_buffer = 0           # bytes received in order, not yet consumed by the host
        self.rx_backlog = deque()    # [qp, bytes] in arrival order
        self._rx_drain_at = self.now()
        self._rx_drain_carry = 0.0
        self._pfc_sent_xoff = False
        self._pfc_refresh = 0.0
        self.stats = dict.fromkeys((
            "tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "pfc_rx", "pfc_tx", "pause_rx",
            "cnp_tx", "cnp_rx", "cts_tx", "cts_rx", "icrc_errors", "unknown_qp", "send_errors",
            "rx_buffer_peak"), 0)
        self.pfc_rx_by_priority = [0] * 8
        self.paused_seconds = [0.0] * 8
        self.ack_rtt = []            # seconds from a message's last packet to its ACK (no resends)

    @staticmethod
    def build(pkt):
        from scapy.compat import raw
        return raw(pkt)

    # -- set-up --------------------------------------------------------------------------------
    def create_qp(self, local_qpn, remote_qpn, peer_ip, peer_mac, context=None):
        if local_qpn in self.qps or local_qpn == CTS_QPN:
            raise ValueError(f"QP number {local_qpn:#x} is already in use on {self.ip}")
        qp = QueuePair(self, local_qpn, remote_qpn, peer_ip, peer_mac, context)
        self.qps[local_qpn] = qp
        self._qp_list.append(qp)
        return qp

    def post_write(self, qp, nbytes, imm=None, on_done=None, context=None):
        """Queue an RDMA WRITE of `nbytes` on `qp`; on_done(qp, msg) runs when it is ACKed."""
        if nbytes < 1:
            raise ValueError("an RDMA WRITE needs at least one byte")
        msg = Message(nbytes, qp.next_va, imm, on_done, context)
        qp.next_va = (qp.next_va + nbytes + 4095) & ~4095 & 0xFFFFFFFFFFFF
        qp.pending.append(msg)
        return msg

    # -- sending -------------------------------------------------------------------------------
    def _next_ip_id(self):
        self.ip_id = (self.ip_id + 1) & 0xFFFF
        return self.ip_id

    def _xmit(self, frame):
        try:
            self.sock.send(frame)
        except (BlockingIOError, OSError):
            self.stats["send_errors"] += 1
            return False
        self.stats["tx_packets"] += 1
        self.stats["tx_bytes"] += len(frame)
        return True

    def _send_ctrl(self, frame, priority):
        """Send a small control frame, or hold it while its priority is paused."""
        if self.paused_until[priority] > self.now():
            self.held[priority].append(bytes(frame))
            self._holding = True
        else:
            self._xmit(frame)

    def send_ack(self, qp, nak=False):
        t = qp.template(P.RC_ACK, 0)
        if nak:
            psn = qp.epsn
            aeth = (P.AETH_NAK_SEQ << 24) | qp.msn
            qp.stats["naks_tx"] += 1
        else:
            psn = (qp.epsn - 1) & PSN_MASK
            aeth = (P.AETH_ACK << 24) | qp.msn
            qp.stats["acks_tx"] += 1
        qp.ack_pending = 0
        qp.ack_due = None
        self._send_ctrl(t.render_ext(psn, self._next_ip_id(), _U32.pack(aeth)),
                        self.cfg.classes["data"].priority)

    def send_cnp(self, qp):
        t = qp.template(P.CNP, 0)
        qp.stats["cnp_tx"] += 1
        self.stats["cnp_tx"] += 1
        self._send_ctrl(t.render(0, self._next_ip_id()), self.cfg.classes["cnp"].priority)

    def send_cts(self, peer_ip, peer_mac, src_rank, channel, granted):
        """Grant `peer` credit up to `granted` cumulative bytes on `channel` (UC SEND to CTS_QPN)."""
        key = (peer_ip, peer_mac)
        t = self._cts_templates.get(key)
        if t is None:
            cls = self.cfg.classes["control"]
            frame = self.build(P.roce(self.mac, peer_mac, self.ip, peer_ip, 0xC000 | CTS_QPN,
                                      P.cts_bth(CTS_QPN, 0, 0, 0), dscp=cls.dscp, ecn=cls.ecn))
            t = self._cts_templates[key] = FrameTemplate(frame)
        self._cts_seq = (self._cts_seq + 1) & 0xFFFF
        payload = _CTS.pack(P.CTS_MAGIC, src_rank, channel, self._cts_seq, granted)
        self.stats["cts_tx"] += 1
        self._send_ctrl(t.render_ext(self._cts_seq, self._next_ip_id(), payload),
                        self.cfg.classes["control"].priority)

    def send_pfc(self, quanta_by_priority):
        from traffic.packets import pfc_frame
        self._xmit(self.build(pfc_frame(self.mac, quanta_by_priority)))
        self.stats["pfc_tx"] += 1

    def _transmit(self, now, budget=64):
        """Send up to `budget` data packets that pacing, PFC and windows allow; returns how many."""
        data_prio = self.cfg.classes["data"].priority
        ahead = now + self.tx_lookahead_s
        if self.paused_until[data_prio] > now or self.next_send > ahead:
            return 0            # paused, or the line-rate pacer has no credit yet
        qps = self._qp_list
        n = len(qps)
        if not n:
            self._wire_idle = True
            return 0
        line = self.cfg.line_rate_bps
        burst = self._burst_s
        max_outstanding = self.cfg.max_outstanding
        sent = 0
        idle_rounds = 0
        i = self._rr
        while sent < budget and idle_rounds < n:
            if self.next_send > ahead:
                break
            qp = qps[i]
            i = (i + 1) % n
            # qp.has_work(), inlined: this loop runs for every packet sent
            if qp.error or qp.next_send > now or not (
                    qp.resend_idx < len(qp.outstanding)
                    or (qp.pending and len(qp.outstanding) < max_outstanding)):
                idle_rounds += 1
                continue
            idle_rounds = 0
            psn, opcode, paylen, va, dma_len, imm, ackreq, _ = qp.next_packet()
            t = qp.template(opcode, paylen)
            frame = t.render(psn, self._next_ip_id(), ackreq, va, imm, dma_len)
            if not self._xmit(frame):
                qp.resend_idx -= 1   # try this packet again later
                break
            size = len(frame)
            bits = size * 8
            if self._wire_idle:
                # An idle wire earns no credit: the bucket makes up for late wake-ups while
                # frames wait; spent after idling, it would be a wire faster than its line rate.
                self._wire_idle = False
                if self.next_send < now:
                    self.next_send = now
            self.next_send = max(self.next_send, now - burst) + bits / line
            if qp.dcqcn:
                qp.next_send = max(qp.next_send, now - burst) + bits / qp.dcqcn.rate
                qp.dcqcn.on_sent(size, now)
            qp.stats["tx_packets"] += 1
            qp.stats["tx_bytes"] += paylen
            sent += 1
        if idle_rounds >= n:
            self._wire_idle = True       # no QP has a packet to send: the wire idles once its last frame is out
        self._rr = i
        return sent

    # -- receiving -----------------------------------------------------------------------------
    def _receive(self, now, budget=256):
        recv = self.sock.recv
        got = 0
        while got < budget:
            try:
                frame = recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            got += 1
            self.stats["rx_packets"] += 1
            self.stats["rx_bytes"] += len(frame)
            if frame[12] == 0x88 and frame[13] == 0x08:
                self._on_mac_control(frame, now)
            elif len(frame) >= EXT_OFF + 4:
                self._on_roce(frame, now)
        return got

    def _on_mac_control(self, frame, now):
        opcode = (frame[14] << 8) | frame[15]
        rate = self.cfg.line_rate_bps
        if opcode == 0x0101 and len(frame) >= 34:
            self.stats["pfc_rx"] += 1
            enable, *times = _PFC_TIMES.unpack_from(frame, 16)
            for prio in range(8):
                if enable & (1 << prio):
                    self.pfc_rx_by_priority[prio] += 1
                    self._pause(prio, now, times[prio] * QUANTUM_BITS / rate)
        elif opcode == 0x0001 and len(frame) >= 18:
            self.stats["pause_rx"] += 1
            quanta = (frame[16] << 8) | frame[17]
            for prio in range(8):
                self._pause(prio, now, quanta * QUANTUM_BITS / rate)

    def _pause(self, prio, now, seconds):
        was = self.paused_until[prio]
        if was > now:   # count only the part of the earlier pause that actually elapsed
            self.paused_seconds[prio] -= was - now
        elif prio == self.cfg.classes["data"].priority:
            # The line-rate pacer's credit when the pause starts: a paused link earns none, so a
            # resumed NIC goes on at line rate instead of bursting a full bucket into the
            # switch queue that just asked for the pause (its headroom would have to absorb it).
            self._pacer_at_pause = self.next_send
            self._credit_at_pause = min(self._burst_s, max(0.0, now - self.next_send))
        self.paused_until[prio] = now + seconds
        self.paused_seconds[prio] += seconds
        if prio == self.cfg.classes["data"].priority:
            self.next_send = max(self._pacer_at_pause, now + seconds - self._credit_at_pause)

    def _on_roce(self, frame, now):
        if frame[IP_PROTO] != 17:
            return
        ihl = (frame[14] & 0x0F) * 4
        bth = 14 + ihl + 8
        opcode = frame[bth]
        word1, word2 = _TWO.unpack_from(frame, bth + 4)
        dqpn = word1 & PSN_MASK
        psn = word2 & PSN_MASK
        if self.cfg.check_icrc and not icrc.trailer_ok(frame):
            self.stats["icrc_errors"] += 1
            return
        if opcode == P.UC_SEND_ONLY and dqpn == CTS_QPN:
            magic, src_rank, channel, _seq, granted = _CTS.unpack_from(frame, bth + 12)
            if magic == P.CTS_MAGIC:
                self.stats["cts_rx"] += 1
                if self.on_cts:
                    self.on_cts(frame[26:30], src_rank, channel, granted)
            return
        qp = self.qps.get(dqpn)
        if qp is None:
            self.stats["unknown_qp"] += 1
            return
        if opcode == P.RC_ACK:
            syndrome = frame[bth + 12]
            if syndrome >> 5 == 0b011:
                qp.stats["naks_rx"] += 1
                qp.on_nak(psn, now)
            elif syndrome >> 5 == 0:
                qp.stats["acks_rx"] += 1
                qp.on_ack(psn, now)
            return
        if opcode == P.CNP:
            qp.stats["cnp_rx"] += 1
            self.stats["cnp_rx"] += 1
            if qp.dcqcn:
                qp.dcqcn.on_cnp(now)
            return
        if opcode not in P.WRITE_OPCODES:
            return
        # responder
        if frame[15] & 3 == P.CE:
            qp.stats["ce_rx"] += 1
            if now - qp.last_cnp >= self.cfg.cnp_interval_s:
                qp.last_cnp = now
                self.send_cnp(qp)
        d = psn_diff(psn, qp.epsn)
        if d == 0:
            qp.epsn = (qp.epsn + 1) & PSN_MASK
            qp.nak_sent = False
            hdr = bth + 12 + (16 if opcode in P.OPCODES_WITH_RETH else 0)
            imm = None
            if opcode in P.OPCODES_WITH_IMM:
                imm = _U32.unpack_from(frame, hdr)[0]
                hdr += 4
            paylen = len(frame) - hdr - 4 - ((frame[bth + 1] >> 4) & 3)
            qp.stats["rx_packets"] += 1
            qp.stats["rx_bytes"] += paylen
            if self.on_rx_bytes:
                self.on_rx_bytes(qp, paylen)
            if self.cfg.slow_rx_bps:
                self._buffer_rx(qp, paylen)
            elif self.on_rx_consumed:
                self.on_rx_consumed(qp, paylen)
            if opcode in P.OPCODES_LAST:
                qp.msn = (qp.msn + 1) & PSN_MASK
                qp.stats["rx_messages"] += 1
                if self.on_rx_message:
                    self.on_rx_message(qp, imm)
            qp.ack_pending += 1
            if (word2 >> 31) or qp.ack_pending >= self.cfg.ack_every:
                self.send_ack(qp)
            elif qp.ack_due is None:
                qp.ack_due = now + self.cfg.ack_delay_s
                if self.next_ack_due is None or qp.ack_due < self.next_ack_due:
                    self.next_ack_due = qp.ack_due
        elif d > 0:
            qp.stats["oos"] += 1
            if not qp.nak_sent:
                qp.nak_sent = True
                self.send_ack(qp, nak=True)
        else:
            qp.stats["duplicates"] += 1
            self.send_ack(qp)

    # -- timers and the loop -------------------------------------------------------------------
    def _timers(self, now):
        if self._holding:
            for prio in range(8):
                held = self.held[prio]
                if held and self.paused_until[prio] <= now:
                    while held:
                        self._xmit(held.popleft())
            self._holding = any(self.held.values())
        if now >= self._qp_timers_at:
            # Like a NIC's timer wheel: a tick, not every loop turn (the timers are >= microseconds).
            self._qp_timers_at = now + TIMER_TICK_S
            next_ack = None
            for qp in self._qp_list:
                if qp.ack_due is not None and qp.ack_pending:
                    if now >= qp.ack_due:
                        self.send_ack(qp)
                    elif next_ack is None or qp.ack_due < next_ack:
                        next_ack = qp.ack_due
                if qp.outstanding:
                    qp.check_timeout(now)
                if qp.dcqcn and now >= qp.dcqcn_next:
                    qp.dcqcn_next = qp.dcqcn.tick(now)
            self.next_ack_due = next_ack
        if self.cfg.slow_rx_bps:
            return self._slow_receiver(now)
        return 0

    def _buffer_rx(self, qp, nbytes):
        backlog = self.rx_backlog
        if backlog and backlog[-1][0] is qp:
            backlog[-1][1] += nbytes
        else:
            if not backlog:
                self._rx_drain_at = self.now()    # an empty buffer saves up no drain time
            backlog.append([qp, nbytes])
        self.rx_buffer += nbytes
        if self.rx_buffer > self.stats["rx_buffer_peak"]:
            self.stats["rx_buffer_peak"] = self.rx_buffer

    def _drain_rx(self, now):
        """Hand the host what the drain rate allows since the last call, oldest bytes first;
        returns how many bytes it took."""
        # rounded so that clock arithmetic (0.005 s x 1 MB/s = 4999.99...) does not lose a byte
        budget = round(self._rx_drain_carry + (now - self._rx_drain_at) * self.cfg.slow_rx_bps / 8, 6)
        self._rx_drain_at = now
        backlog = self.rx_backlog
        taken = 0
        while backlog and budget >= 1:
            entry = backlog[0]
            take = min(entry[1], int(budget))
            budget -= take
            taken += take
            entry[1] -= take
            self.rx_buffer -= take
            if not entry[1]:
                backlog.popleft()
            if self.on_rx_consumed:
                self.on_rx_consumed(entry[0], take)
        self._rx_drain_carry = budget if backlog else 0.0
        return taken

    def _slow_receiver(self, now):
        taken = self._drain_rx(now)
        prio = self.cfg.classes["data"].priority
        if self.rx_buffer > self.cfg.pfc_xoff_bytes:
            if not self._pfc_sent_xoff or now >= self._pfc_refresh:
                self.send_pfc({prio: self.cfg.pfc_quanta})
                self._pfc_sent_xoff = True
                # Refresh before the pause expires, as a switch does while above XOFF.
                self._pfc_refresh = now + self.cfg.pfc_quanta * QUANTUM_BITS / self.cfg.line_rate_bps / 2
        elif self._pfc_sent_xoff and self.rx_buffer < self.cfg.pfc_xon_bytes:
            self.send_pfc({prio: 0})
            self._pfc_sent_xoff = False
        return taken

    def poll(self, max_wait=0.002):
        """One turn of the loop: receive, run timers, transmit; sleep only when there is nothing to do."""
        now = self.now()
        got = self._receive(now)
        consumed = self._timers(now)
        sent = self._transmit(now)
        if got or sent or consumed:      # the host taking payload in can free credit (CTS) to act on
            return True
        wait = max_wait
        soonest = None
        for qp in self._qp_list:
            if (soonest is None or qp.next_send < soonest) and qp.has_work():
                soonest = qp.next_send
        if soonest is not None:
            data_prio = self.cfg.classes["data"].priority
            ready = max(self.next_send, self.paused_until[data_prio], soonest)
            wait = min(wait, max(0.0, ready - now))
        if self.next_ack_due is not None:       # a delayed ACK must not wait for the next frame
            wait = min(wait, max(TIMER_TICK_S, self.next_ack_due - now))
        if self.cfg.slow_rx_bps and (self.rx_buffer or self._pfc_sent_xoff):
            wait = min(wait, max(TIMER_TICK_S, self._slow_receiver_due(now) - now))
        if wait > 0:
            self._wait(wait)
        return False

    def _slow_receiver_due(self, now):
        """When the slow receiver next has something to do while no frame arrives: a paused
        peer sends nothing, so waiting for a frame would let the XOFF lapse (no refresh) or
        hold the peer paused past the drain to XON."""
        bytes_per_s = self.cfg.slow_rx_bps / 8
        # the host takes payload in at least a packet at a time (what CTS grants credit on)
        due = now + self.cfg.mtu / bytes_per_s
        if self._pfc_sent_xoff:
            if self.rx_buffer > self.cfg.pfc_xoff_bytes:
                due = min(due, self._pfc_refresh)
            else:
                due = min(due, now + (self.rx_buffer - self.cfg.pfc_xon_bytes + 1) / bytes_per_s)
        return due

    def _select(self, seconds):
        select.select([self.sock.sock] + self.extra_fds, [], [], seconds)

    def busy(self):
        return any(qp.outstanding or qp.pending for qp in self._qp_list)

    def errors(self):
        if not self.failed_qps:
            return []
        return [f"QP {qp.local_qpn:#x}: {qp.error}" for qp in self._qp_list if qp.error]

    def report(self):
        totals = {k: sum(qp.stats[k] for qp in self._qp_list) for k in (
            "oos", "duplicates", "retransmits", "lat_timeouts", "naks_tx", "naks_rx", "acks_tx", "acks_rx",
            "ce_rx", "tx_messages", "rx_messages")}
        totals["data_tx_bytes"] = sum(qp.stats["tx_bytes"] for qp in self._qp_list)
        totals["data_rx_bytes"] = sum(qp.stats["rx_bytes"] for qp in self._qp_list)
        return {"iface": self.iface, "mac": self.mac, "ip": self.ip, **self.stats, **totals,
                "pfc_rx_by_priority": list(self.pfc_rx_by_priority),
                "paused_seconds_by_priority": [round(s, 6) for s in self.paused_seconds],
                "ack_rtt_us": rtt_summary(self.ack_rtt),
                "qps": [qp.summary() for qp in self._qp_list]}

    def close(self):
        for s in (self.sock, self.sink):
            if s:
                s.close()


def rtt_summary(samples):
    """min/median/max (microseconds) of ACK round trips: the fabric's RTT as this NIC saw it."""
    if not samples:
        return {"samples": 0, "min": None, "median": None, "max": None}
    ordered = sorted(samples)
    return {"samples": len(ordered), "min": round(ordered[0] * 1e6, 1),
            "median": round(ordered[len(ordered) // 2] * 1e6, 1), "max": round(ordered[-1] * 1e6, 1)}


IP_PROTO = 14 + 9
_TWO = struct.Struct("!II")
