"""802.1Qbb priority flow control frames: recognise, decode and build them.

A PFC frame is a MAC Control frame (EtherType 0x8808) with opcode 0x0101, a
class-enable vector (bit i set = priority i carries a valid time) and eight
16-bit pause times in quanta of 512 bit-times at the receiving port's speed.
"""
import struct

ETHERTYPE_MAC_CONTROL = 0x8808
OPCODE_PFC = 0x0101
PFC_DEST_MAC = bytes.fromhex("0180c2000001")
QUANTUM_BITS = 512
# Leading bytes that identify a PFC frame after the two MAC addresses.
PFC_SIGNATURE = struct.pack("!HH", ETHERTYPE_MAC_CONTROL, OPCODE_PFC)
MIN_PFC_LEN = 14 + 2 + 2 + 16


def is_pfc(frame):
    """True for an 802.1Qbb frame (cheap: compares four bytes)."""
    return frame[12:16] == PFC_SIGNATURE


def is_mac_control(frame):
    return frame[12:14] == b"\x88\x08"


def decode_pfc(frame):
    """Return [(priority, quanta)] for every priority whose class-enable bit is set.

    Raises ValueError for a frame too short to carry the vector and times.
    """
    if len(frame) < MIN_PFC_LEN or not is_pfc(frame):
        raise ValueError(f"not a complete PFC frame ({len(frame)} bytes)")
    enable = struct.unpack_from("!H", frame, 16)[0]
    times = struct.unpack_from("!8H", frame, 18)
    return [(prio, times[prio]) for prio in range(8) if enable & (1 << prio)]


def build_pfc(src_mac, quanta_by_priority, dst_mac=PFC_DEST_MAC):
    """A minimum-size (60-byte, no FCS) PFC frame pausing {priority: quanta}."""
    enable = 0
    times = [0] * 8
    for prio, quanta in quanta_by_priority.items():
        if not 0 <= prio <= 7:
            raise ValueError(f"PFC priority {prio} is not in 0..7")
        if not 0 <= quanta <= 0xFFFF:
            raise ValueError(f"PFC quanta {quanta} is not in 0..65535")
        enable |= 1 << prio
        times[prio] = quanta
    if isinstance(src_mac, str):
        src_mac = bytes.fromhex(src_mac.replace(":", ""))
    frame = dst_mac + src_mac + PFC_SIGNATURE + struct.pack("!H8H", enable, *times)
    return frame.ljust(60, b"\x00")


def pause_seconds(quanta, rate_bps):
    """How long `quanta` pause a port running at `rate_bps`."""
    return quanta * QUANTUM_BITS / rate_bps


class PauseRefresh:
    """What an 802.1Qbb MAC does on its own between the frames its client asks for.

    The program decides XOFF and XON (fabric.p4, from its PG registers, as packets pass), but
    the pause it sent runs out at the peer after `quanta` x 512 bit times. While no XON has
    followed, the MAC sends the XOFF again at half that time. Without it, a PG that no packet
    passes through any more (its upstream paused, its egress paused downstream, as in a PFC
    storm) lets the upstream resume into a full headroom, over and over."""

    def __init__(self):
        self._standing = {}      # port -> (src_mac, {priority: quanta}) of XOFFs not yet lifted
        self._due = {}           # port -> when to send them again
        self.sent = {}           # port -> [refresh frames per priority]

    def transmitted(self, port, frame, rate_bps, now):
        """Note a PFC frame the port sent: XOFFs start standing, XONs lift them."""
        try:
            entries = decode_pfc(frame)
        except ValueError:
            return
        standing = self._standing.get(port, (frame[6:12], {}))[1]
        for prio, quanta in entries:
            if quanta:
                standing[prio] = quanta
            else:
                standing.pop(prio, None)
        if standing:
            self._standing[port] = (frame[6:12], standing)
            self._due[port] = now + pause_seconds(min(standing.values()), rate_bps) / 2
        else:
            self._standing.pop(port, None)
            self._due.pop(port, None)

    def __bool__(self):
        """True while some XOFF stands (what the caller's per-service check asks first)."""
        return bool(self._due)

    def next_due(self):
        return min(self._due.values(), default=None)

    def due_frames(self, now):
        """(port, frame) for every standing XOFF whose refresh is due (the caller sends them,
        which reschedules them through `transmitted`)."""
        out = []
        for port, when in list(self._due.items()):
            if when <= now:
                src, standing = self._standing[port]
                counts = self.sent.setdefault(port, [0] * 8)
                for prio in standing:
                    counts[prio] += 1
                out.append((port, build_pfc(src, standing)))
        return out

    def forget(self, port):
        """The link went down or the port was reset: nothing stands on it any more."""
        self._standing.pop(port, None)
        self._due.pop(port, None)
