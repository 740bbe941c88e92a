"""Per-port capture files, named like BMv2's: <iface>_in.pcap and <iface>_out.pcap."""
import os
import struct
import time

LINKTYPE_ETHERNET = 1
SNAPLEN = 65535


MAGIC_USEC = 0xA1B2C3D4
MAGIC_NSEC = 0xA1B23C4D   # the same format with nanosecond timestamps (tshark reads both)


class PcapWriter:
    """A classic libpcap file, buffered; flush() makes it readable.

    Timestamps come from `clock` (seconds): the wall clock in real time, in microseconds;
    the simulated clock in virtual time, in nanoseconds (`nanoseconds=True`). `snaplen`
    keeps that many leading bytes of each frame (its original length is still recorded), as
    `tcpdump -s` does: headers are what a lab reads, and 400G of payload is gigabytes."""

    def __init__(self, path, clock=time.time, nanoseconds=False, snaplen=SNAPLEN):
        self.path = path
        self.clock = clock
        self.snaplen = snaplen
        self._scale = 1_000_000_000 if nanoseconds else 1_000_000
        self._file = open(path, "wb", buffering=1 << 16)
        magic = MAGIC_NSEC if nanoseconds else MAGIC_USEC
        self._file.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self.packets = 0

    def write(self, frame, when=None):
        when = self.clock() if when is None else when
        ticks = round(when * self._scale)
        sec, frac = divmod(ticks, self._scale)
        caplen = min(len(frame), self.snaplen)
        self._file.write(struct.pack("<IIII", sec, frac, caplen, len(frame)))
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

    def __init__(self, directory, port_names, clock=time.time, nanoseconds=False, snaplen=SNAPLEN):
        if not os.path.isdir(directory):
            raise ValueError(f"--pcap: directory {directory!r} does not exist")
        self.ingress = {}
        self.egress = {}
        for port, name in port_names.items():
            for suffix, writers in (("in", self.ingress), ("out", self.egress)):
                writers[port] = PcapWriter(os.path.join(directory, f"{name}_{suffix}.pcap"), clock, nanoseconds,
                                           snaplen)

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
    magic = struct.unpack_from("<I", data)[0] if len(data) >= 24 else None
    if magic not in (MAGIC_USEC, MAGIC_NSEC):
        raise ValueError(f"{path}: not a little-endian pcap file")
    scale = 1e9 if magic == MAGIC_NSEC else 1e6
    out = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, caplen, _length = struct.unpack_from("<IIII", data, offset)
        offset += 16
        out.append((sec + frac / scale, data[offset:offset + caplen]))
        offset += caplen
    return out
