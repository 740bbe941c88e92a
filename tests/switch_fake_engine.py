"""A stand-in for the engine's Pipeline (testbed/p4engine/CONTRACT.md) for switch unit tests.

Forwarding: `port_map[in_port]` (or the destination port in the first byte of
the payload if absent); the queue is the IPv4 DSCP's top three bits. Egress
appends enq_qdepth, deq_qdepth and deq_timedelta (4 bytes each) to the frame, so
tests see from outside what a program would see.
"""
import struct


class FakeJob:
    __slots__ = ("egress_port", "priority", "packet_length", "data", "ingress_port")

    def __init__(self, ingress_port, egress_port, priority, data):
        self.ingress_port = ingress_port
        self.egress_port = egress_port
        self.priority = priority
        self.packet_length = len(data)
        self.data = data


class FakePipeline:
    def __init__(self, port_map=None, explode_on=None):
        self.port_map = dict(port_map or {})
        self.explode_on = explode_on      # a payload prefix that makes ingress raise
        self.seen = []

    def ingress(self, port, data, now_us):
        if self.explode_on is not None and data[14:14 + len(self.explode_on)] == self.explode_on:
            raise RuntimeError("fake pipeline fault")
        out = self.port_map.get(port)
        if out is None:
            if len(data) < 15:
                return []
            out = data[14]
        prio = 0
        if len(data) >= 16 and data[12:14] == b"\x08\x00":
            prio = data[15] >> 5
        return [FakeJob(port, out, prio, data)]

    def egress(self, job, now_us, enq_timestamp, enq_qdepth, deq_timedelta, deq_qdepth):
        self.seen.append((job.egress_port, job.priority, enq_qdepth, deq_qdepth, deq_timedelta))
        trailer = struct.pack("!III", enq_qdepth, deq_qdepth, deq_timedelta)
        return [(job.egress_port, job.data + trailer)], []


def trailer(frame):
    """(enq_qdepth, deq_qdepth, deq_timedelta) appended by FakePipeline.egress."""
    return struct.unpack("!III", frame[-12:])


def ipv4_frame(dscp=0, size=100, tag=0):
    """An Ethernet/IPv4 frame (contents only matter for DSCP); `tag` marks it."""
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = bytes([0x45, dscp << 2]) + struct.pack("!H", size - 14) + struct.pack("!I", tag) + b"\x40\x11\x00\x00" + bytes(8)
    return (eth + ip).ljust(size, b"\x00")


def frame_tag(frame):
    return struct.unpack("!I", frame[18:22])[0]
