"""The hot path: frames built once with Scapy, then patched as bytes; raw AF_PACKET sockets.

A :class:`FrameTemplate` holds one Scapy-built frame and a second copy of it with
the ICRC-masked fields already set to ones. Rendering a packet patches the few
fields that vary (IP id and checksum, BTH ackreq/PSN, RETH address, immediate
data) in both copies, then runs one ``zlib.crc32`` over the masked copy for the
ICRC. No Scapy build or dissect happens per packet.

:class:`RawSocket` is an AF_PACKET socket on one interface with a classic BPF
filter, so the kernel hands us only RoCEv2 frames for our MAC and 802.1Qbb
frames. Receive-side parsing is :func:`parse_roce` (fixed offsets, struct).
"""
import ctypes
import socket
import struct
import zlib

from traffic import icrc

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32

ETH_LEN = 14
IP_OFF = 14
UDP_OFF = 34          # IPv4 without options: templates are always built that way
BTH_OFF = 42
EXT_OFF = 54          # first byte after the BTH
MASK_SHIFT = ETH_LEN - 8   # masked copy = 8 bytes of LRH stand-in + frame[14:-4]

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
_ICRC = struct.Struct("<I")


class FrameTemplate:
    """A Scapy-built RoCEv2 frame whose per-packet fields are patched in place."""

    __slots__ = ("frame", "masked", "ip_sum", "has_reth", "imm_off", "length", "_crc_slot")

    def __init__(self, frame, has_reth=False, has_imm=False):
        frame = bytearray(frame)
        if (frame[IP_OFF] & 0x0F) != 5:
            raise ValueError("frame templates need an IPv4 header without options")
        self.frame = frame
        self.length = len(frame)
        self.masked = bytearray(b"\xff" * 8) + icrc.masked_bytes(frame)
        self.has_reth = has_reth
        self.imm_off = (EXT_OFF + (16 if has_reth else 0)) if has_imm else None
        # One's-complement sum of the IP header with id and checksum zeroed:
        # each render only adds the new id (RFC 1071 arithmetic).
        hdr = bytearray(frame[IP_OFF:IP_OFF + 20])
        hdr[4:6] = b"\0\0"
        hdr[10:12] = b"\0\0"
        self.ip_sum = sum(struct.unpack("!10H", hdr))
        self._crc_slot = self.length - 4

    def render_ext(self, psn, ip_id, ext):
        """Patch PSN, IP id and the bytes right after the BTH (AETH, CTS payload); returns the frame."""
        end = EXT_OFF + len(ext)
        self.frame[EXT_OFF:end] = ext
        self.masked[EXT_OFF - MASK_SHIFT:end - MASK_SHIFT] = ext
        return self.render(psn, ip_id)

    def render(self, psn, ip_id, ackreq=0, va=None, imm=None, dma_len=None):
        """Patch the frame for one packet and return it (the same bytearray, reused)."""
        f = self.frame
        m = self.masked
        s = self.ip_sum + ip_id
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        _U16.pack_into(f, 18, ip_id)
        _U16.pack_into(f, 24, ~s & 0xFFFF)
        _U16.pack_into(m, 18 - MASK_SHIFT, ip_id)
        word = (ackreq << 31) | psn
        _U32.pack_into(f, BTH_OFF + 8, word)
        _U32.pack_into(m, BTH_OFF + 8 - MASK_SHIFT, word)
        if va is not None and self.has_reth:
            _U64.pack_into(f, EXT_OFF, va)
            _U64.pack_into(m, EXT_OFF - MASK_SHIFT, va)
            if dma_len is not None:
                _U32.pack_into(f, EXT_OFF + 12, dma_len)
                _U32.pack_into(m, EXT_OFF + 12 - MASK_SHIFT, dma_len)
        if imm is not None and self.imm_off is not None:
            _U32.pack_into(f, self.imm_off, imm)
            _U32.pack_into(m, self.imm_off - MASK_SHIFT, imm)
        _ICRC.pack_into(f, self._crc_slot, zlib.crc32(m))
        return f


def ip_checksum(header):
    s = sum(struct.unpack("!%dH" % (len(header) // 2), header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


# --- receive side -----------------------------------------------------------------------------

_RX_HDR = struct.Struct("!6s6sH")


def mac_bytes(mac):
    if isinstance(mac, (bytes, bytearray)):
        return bytes(mac)
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"MAC address {mac!r} is not six colon-separated bytes")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"MAC address {mac!r} is not hexadecimal") from None


def mac_text(raw):
    return ":".join(f"{b:02x}" for b in raw)


def parse_roce(frame):
    """(src_ip, ecn, opcode, padcount, becn, dqpn, ackreq, psn, bth_end) of an IPv4 RoCEv2 frame.

    The BPF filter has already checked EtherType, protocol and port; this only
    reads fixed offsets (the IP header length is honoured).
    """
    ihl = (frame[IP_OFF] & 0x0F) * 4
    bth = IP_OFF + ihl + 8
    opcode = frame[bth]
    word1 = _U32.unpack_from(frame, bth + 4)[0]
    word2 = _U32.unpack_from(frame, bth + 8)[0]
    return (frame[IP_OFF + 12:IP_OFF + 16], frame[IP_OFF + 1] & 3, opcode, (frame[bth + 1] >> 4) & 3,
            (word1 >> 30) & 1, word1 & 0xFFFFFF, word2 >> 31, word2 & 0xFFFFFF, bth + 12)


# --- raw socket ---------------------------------------------------------------------------------

def _bpf_program(mac):
    """Accept 802.1Qbb/MAC-control frames, and IPv4 UDP/4791 frames addressed to `mac`."""
    hi = _U32.unpack(mac[:4])[0]
    lo = _U16.unpack(mac[4:])[0]
    # (code, jt, jf, k); jumps are relative to the next instruction.
    prog = [
        (0x28, 0, 0, 12),          # 0 ldh [12]            ethertype
        (0x15, 10, 0, 0x8808),     # 1 jeq MAC control  -> accept (12)
        (0x15, 0, 10, 0x0800),     # 2 jeq IPv4 ?       : reject (13)
        (0x20, 0, 0, 0),           # 3 ld [0]              dst MAC, high 4 bytes
        (0x15, 0, 8, hi),          # 4 jeq              : reject
        (0x28, 0, 0, 4),           # 5 ldh [4]             dst MAC, low 2 bytes
        (0x15, 0, 6, lo),          # 6 jeq              : reject
        (0x30, 0, 0, 23),          # 7 ldb [23]            IP protocol
        (0x15, 0, 4, 17),          # 8 jeq UDP          : reject
        (0xB1, 0, 0, 14),          # 9 ldxb 4*([14]&0xf)   IP header length
        (0x48, 0, 0, 16),          # 10 ldh [x+16]         UDP destination port
        (0x15, 0, 1, 4791),        # 11 jeq 4791        : reject
        (0x06, 0, 0, 0x40000),     # 12 accept
        (0x06, 0, 0, 0),           # 13 reject
    ]
    return prog


class RawSocket:
    """AF_PACKET socket on `iface` that receives RoCEv2 for `mac` plus PFC, and sends raw frames."""

    def __init__(self, iface, mac, buffer_bytes=8 << 20):
        self.iface = iface
        self.mac = mac_bytes(mac)
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open a raw socket for interface {iface!r}: {exc.strerror}") from None
        try:
            self._attach_filter(sock)
            sock.bind((iface, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"cannot open raw socket on interface {iface!r}: {exc.strerror}") from None
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass   # older kernels: our own frames fail the BPF destination-MAC test anyway
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, buffer_bytes)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, buffer_bytes)
        sock.setblocking(False)
        self.sock = sock
        self.send = sock.send
        self.recv = sock.recv
        self.fileno = sock.fileno

    def _attach_filter(self, sock):
        prog = _bpf_program(self.mac)
        buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
        self._filter_buf = buf     # must outlive the setsockopt call
        fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        # Frames queued before the filter was attached may still be there: drain them.
        sock.setblocking(False)
        try:
            while True:
                sock.recv(65536)
        except (BlockingIOError, OSError):
            pass

    def close(self):
        self.sock.close()


class PortSink:
    """A UDP socket bound to 4791 that discards, so the kernel sends no ICMP port-unreachable.

    The kernel also receives the RoCEv2 frames our raw socket reads; without a
    listener it would answer each with ICMP. A tiny receive buffer makes it drop
    them cheaply instead (drops on a full socket buffer are silent).
    """

    def __init__(self, ip="0.0.0.0", port=4791):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        try:
            self.sock.bind((ip, port))
        except OSError as exc:
            self.sock.close()
            raise OSError(exc.errno, f"cannot bind UDP {ip}:{port} to silence ICMP: {exc.strerror}") from None

    def close(self):
        self.sock.close()
