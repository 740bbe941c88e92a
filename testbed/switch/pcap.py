"""Per-port capture files, named like BMv2's: <iface>_in.pcap and <iface>_out.pcap."""
import os
import struct
import time

LINKTYPE_ETHERNET = 1
SNAPLEN = 65535


class PcapWriter:
    """A classic libpcap file (microsecond timestamps), buffered; flush() makes it readable."""

    def __init__(self, path):
        self.path = path
        self._file = open(path, "wb", buffering=1 << 16)
        self._file.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        self.packets = 0

    def write(self, frame, when=None):
        when = time.time() if when is None else when
        sec = int(when)
        usec = int((when - sec) * 1_000_000)
        caplen = min(len(frame), SNAPLEN)
        self._file.write(struct.pack("<IIII", sec, usec, caplen, len(frame)))
        self._file.write(frame[:caplen])
        self.packets += 1

    def flush(self):
        if not self._file.closed:
            self._file.flush()

    def close(self):
        if not self._file.closed:
            self._file.close()


class PortCaptures:
    """The in/out writers of every port, or nothing at all when captures are off."""

    def __init__(self, directory, port_names):
        if not os.path.isdir(directory):
            raise ValueError(f"--pcap: directory {directory!r} does not exist")
        self.ingress = {}
        self.egress = {}
        for port, name in port_names.items():
            self.ingress[port] = PcapWriter(os.path.join(directory, f"{name}_in.pcap"))
            self.egress[port] = PcapWriter(os.path.join(directory, f"{name}_out.pcap"))

    def flush(self):
        for writer in (*self.ingress.values(), *self.egress.values()):
            writer.flush()

    def close(self):
        for writer in (*self.ingress.values(), *self.egress.values()):
            writer.close()


def read_pcap(path):
    """[(timestamp, frame)] of a file written by PcapWriter (for tests and reports)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24 or struct.unpack_from("<I", data)[0] != 0xA1B2C3D4:
        raise ValueError(f"{path}: not a little-endian microsecond pcap file")
    out = []
    offset = 24
    while offset + 16 <= len(data):
        sec, usec, caplen, _length = struct.unpack_from("<IIII", data, offset)
        offset += 16
        out.append((sec + usec / 1e6, data[offset:offset + caplen]))
        offset += caplen
    return out
