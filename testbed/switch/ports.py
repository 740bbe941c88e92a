"""Switch ports as AF_PACKET raw sockets bound to named interfaces.

The kernel takes the 802.1Q tag off every received frame (VLAN offload, also on veths)
and hands it over separately in PACKET_AUXDATA; a port puts it back where it was, so the
pipeline sees the frame as it was on the wire -- as BMv2 does (its pcap reader does the
same). Frames the kernel refuses to send (EMSGSIZE, a full buffer, a link that is down)
are reported by send() so the switch counts them as drops, not as transmitted.
"""
import socket
import struct
import subprocess
import sys

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8            # ancillary data with the VLAN tag the kernel took off
PACKET_IGNORE_OUTGOING = 23   # Linux >= 4.20: do not read back what we send
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
ETH_P_8021Q = 0x8100
# struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid
_AUXDATA = struct.Struct("=IIIHHHH")
AUX_SPACE = socket.CMSG_SPACE(_AUXDATA.size)
_STATUS_FLAGS_BYTE = 0 if sys.byteorder == "little" else 3   # where the VLAN flags of tp_status are
SOCKET_BUFFER = 4 << 20
MAX_FRAME = 65536


class PortError(Exception):
    pass


def parse_port_spec(spec):
    """'1@veth1' -> (1, 'veth1'), with an error that names the bad part."""
    number, sep, iface = spec.partition("@")
    if not sep or not iface:
        raise PortError(f"-i {spec!r}: expected PORT@IFACE, e.g. 1@veth1")
    try:
        port = int(number, 0)
    except ValueError:
        raise PortError(f"-i {spec!r}: port number {number!r} is not an integer") from None
    if not 0 <= port < 511:
        raise PortError(f"-i {spec!r}: port {port} out of range 0..510 (511 is the drop port)")
    if len(iface) > 15:
        raise PortError(f"-i {spec!r}: interface name longer than 15 characters")
    return port, iface


class RawPort:
    """One switch port: receives every frame on `iface`, sends frames out of it."""

    def __init__(self, number, iface, tune_offloads=True):
        self.number = number
        self.iface = iface
        if tune_offloads:
            disable_offloads(iface)
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            sock.bind((iface, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise PortError(f"port {number}: cannot open interface {iface!r}: {exc.strerror}") from None
        ifindex = socket.if_nametoindex(iface)
        # Promiscuous: a switch port takes frames for any destination MAC.
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:
                pass
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self._recvmsg = sock.recvmsg
        self._send = sock.send
        self.tx_errors = 0
        self.last_tx_error = None

    def recv(self, bufsize=MAX_FRAME):
        """One received frame, with its 802.1Q tag back in place if the kernel took it off."""
        frame, ancillary, _flags, _addr = self._recvmsg(bufsize, AUX_SPACE)
        return with_vlan_tag(frame, ancillary)

    def send(self, frame):
        try:
            self._send(frame)
            return True
        except OSError as exc:
            # A full socket buffer, a downed link or a frame over the MTU (EMSGSIZE) loses
            # the frame, as a wire would; the caller counts it as a drop.
            self.tx_errors += 1
            self.last_tx_error = exc.strerror or type(exc).__name__
            return False

    def close(self):
        self.sock.close()


def with_vlan_tag(frame, ancillary):
    """`frame` with the tag from PACKET_AUXDATA re-inserted after the MAC addresses."""
    for level, kind, data in ancillary:
        # fast path: the status flag's byte, before unpacking anything (most frames are untagged)
        if kind == PACKET_AUXDATA and level == SOL_PACKET and len(data) >= _AUXDATA.size \
                and data[_STATUS_FLAGS_BYTE] & TP_STATUS_VLAN_VALID:
            status, _len, _snap, _mac, _net, tci, tpid = _AUXDATA.unpack_from(data)
            if len(frame) >= 12:
                if not (status & TP_STATUS_VLAN_TPID_VALID and tpid):
                    tpid = ETH_P_8021Q
                return frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
    return frame


def enable_vlan_auxdata(sock):
    """Ask the kernel for PACKET_AUXDATA on an AF_PACKET socket (read it with with_vlan_tag)."""
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)


def disable_offloads(iface):
    """Turn off VLAN stripping and segmentation offloads so frames arrive as sent (best effort)."""
    try:
        subprocess.run(["ethtool", "-K", iface, "rxvlan", "off", "txvlan", "off", "gro", "off",
                        "tso", "off", "gso", "off"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5)
    except (OSError, subprocess.SubprocessError):
        pass
