"""Sample frames exactly as the NIC's hot path emits them (for captures, labs and tests).

Two NICs without sockets are wired back to back in memory; a WRITE that needs
FIRST/MIDDLE/LAST-with-immediate, an ONLY, a lost packet (so a NAK and a
retransmission), a CE mark (so a CNP), a CTS and a PFC frame all go through the
same code that runs on the wire, and every frame is recorded.
"""


class Recorder:
    """Stands in for a raw socket: keeps what is sent, delivers nothing by itself."""

    def __init__(self):
        self.frames = []

    def send(self, frame):
        self.frames.append(bytes(frame))
        return len(frame)


def sample_frames():
    from traffic import packets as P
    from traffic.nic import Nic, NicConfig

    clock = [0.0]
    cfg_a = NicConfig(line_rate_bps=1e9)
    cfg_b = NicConfig(line_rate_bps=1e9)
    a = Nic("veth-a", "02:00:00:00:00:0a", "10.0.0.10", cfg_a, clock=lambda: clock[0], open_sockets=False)
    b = Nic("veth-b", "02:00:00:00:00:0b", "10.0.0.11", cfg_b, clock=lambda: clock[0], open_sockets=False)
    a.sock, b.sock = Recorder(), Recorder()
    qa = a.create_qp(0x111, 0x222, b.ip, b.mac)
    qb = b.create_qp(0x222, 0x111, a.ip, a.mac)
    wire = []

    def run(drop_first=None, ce=False):
        while any(qp.has_work() for qp in a.qps.values()):
            a._transmit(clock[0], budget=1000)
            clock[0] += 0.0001                   # let the pacer release the next packets
        for i, frame in enumerate(a.sock.frames):
            wire.append(frame)
            if drop_first is not None and i == drop_first:
                continue
            f = bytearray(frame)
            if ce:
                f[15] |= 3                       # a switch marks CE (the ICRC masks TOS)
                from traffic.fastpath import ip_checksum
                f[24:26] = b"\0\0"
                f[24:26] = ip_checksum(bytes(f[14:34])).to_bytes(2, "big")
            b._on_roce(bytes(f), clock[0])
        a.sock.frames.clear()
        for frame in b.sock.frames:
            wire.append(frame)
            a._on_roce(frame, clock[0])
        b.sock.frames.clear()
        clock[0] += 0.01

    a.post_write(qa, 2 * cfg_a.mtu + 100, imm=0xC0FFEE)     # FIRST, MIDDLE, LAST with immediate
    run()
    a.post_write(qa, 200)                                      # ONLY
    a.post_write(qa, 3 * cfg_a.mtu)
    run(drop_first=1)                                          # lose one: OOS, NAK
    run()                                                      # go-back-N retransmission, ACK
    a.post_write(qa, 64)
    run(ce=True)                                               # CE-marked: CNP back
    b.send_cts(a.ip, a.mac, src_rank=1, channel=0, granted=1 << 20)
    wire.extend(b.sock.frames)
    b.send_pfc({P_PRIORITY: 100})
    wire.extend(b.sock.frames[1:])
    return wire, (qa, qb)


P_PRIORITY = 3


def write_sample_pcap(path):
    from scapy.utils import wrpcap
    from scapy.layers.l2 import Ether
    frames, _ = sample_frames()
    wrpcap(path, [Ether(f) for f in frames])
    return len(frames)
