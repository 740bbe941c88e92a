"""Switch ports as AF_PACKET raw sockets bound to named interfaces."""
import socket
import struct
import subprocess

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23   # Linux >= 4.20: do not read back what we send
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
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:
                pass
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.recv = sock.recv
        self._send = sock.send
        self.tx_errors = 0

    def send(self, frame):
        try:
            self._send(frame)
            return True
        except (BlockingIOError, OSError):
            # A full socket buffer or a downed link loses the frame, as a wire would.
            self.tx_errors += 1
            return False

    def close(self):
        self.sock.close()


def disable_offloads(iface):
    """Turn off VLAN stripping and segmentation offloads so frames arrive as sent (best effort)."""
    try:
        subprocess.run(["ethtool", "-K", iface, "rxvlan", "off", "txvlan", "off", "gro", "off",
                        "tso", "off", "gso", "off"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5)
    except (OSError, subprocess.SubprocessError):
        pass
