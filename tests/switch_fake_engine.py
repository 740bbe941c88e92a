"""A stand-in for the engine's Pipeline (testbed/p4engine/CONTRACT.md) for switch unit tests.

Forwarding: `port_map[in_port]` (or the destination port in the first byte of
the payload if absent); the queue is the IPv4 DSCP's top three bits. Egress
appends enq_qdepth, deq_qdepth and deq_timedelta (4 bytes each) to the frame, so
tests see from outside what a program would see.
"""
import socket
import struct
import time


class SocketPort:
    """A port whose 'wire' is a datagram socketpair: the test holds the far end."""

    def __init__(self, number):
        self.number = number
        self.iface = f"fake{number}"
        self.sock, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.peer.settimeout(5)
        self.fd = self.sock.fileno()
        self.recv = self.sock.recv

    def send(self, frame):
        try:
            self.sock.send(frame)
        except BlockingIOError:
            pass     # nobody reading the far end: the frame is lost, as on a wire

    def close(self):
        self.sock.close()
        self.peer.close()

    def receive_timed(self, count, within=2.0):
        """{tag: seconds after the call} for up to `count` frames."""
        start = time.perf_counter()
        arrivals = {}
        while len(arrivals) < count:
            left = within - (time.perf_counter() - start)
            if left <= 0:
                break
            self.peer.settimeout(left)
            try:
                frame = self.peer.recv(65536)
            except socket.timeout:
                break
            arrivals[frame_tag(frame)] = time.perf_counter() - start
        return arrivals

    def receive_all(self, wait=0.3):
        self.peer.settimeout(wait)
        got = []
        try:
            while True:
                got.append(self.peer.recv(65536))
                self.peer.settimeout(0.1)
        except socket.timeout:
            return got


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


# ---------------------------------------------------------------------------
# A fake compiled Program for the P4Runtime tests: a P4Info written by hand and
# tables/externs that follow the contract's methods.

FAKE_P4INFO = """
pkg_info { arch: "v1model" }
tables {
  preamble { id: 33554433 name: "MyIngress.fwd" alias: "fwd" }
  match_fields { id: 1 name: "standard_metadata.ingress_port" bitwidth: 9 match_type: EXACT }
  action_refs { id: 16777217 }
  action_refs { id: 16777218 }
  action_refs { id: 16777219 }
  size: 64
}
tables {
  preamble { id: 33554434 name: "MyIngress.acl" alias: "acl" }
  match_fields { id: 1 name: "hdr.ethernet.etherType" bitwidth: 16 match_type: TERNARY }
  match_fields { id: 2 name: "hdr.udp.dstPort" bitwidth: 16 match_type: RANGE }
  match_fields { id: 3 name: "standard_metadata.ingress_port" bitwidth: 9 match_type: OPTIONAL }
  action_refs { id: 16777218 }
  action_refs { id: 16777219 }
  direct_resource_ids: 318767105
  size: 64
}
tables {
  preamble { id: 33554435 name: "MyIngress.routes" alias: "routes" }
  match_fields { id: 1 name: "hdr.ipv4.dstAddr" bitwidth: 32 match_type: LPM }
  action_refs { id: 16777217 }
  action_refs { id: 16777219 }
  implementation_id: 285212673
  size: 64
}
actions { preamble { id: 16777217 name: "MyIngress.set_port" alias: "set_port" }
  params { id: 1 name: "port" bitwidth: 9 } }
actions { preamble { id: 16777218 name: "MyIngress.to_cpu" alias: "to_cpu" } }
actions { preamble { id: 16777219 name: "MyIngress.drop" alias: "drop" } }
action_profiles { preamble { id: 285212673 name: "MyIngress.ecmp" alias: "ecmp" }
  table_ids: 33554435 with_selector: true size: 128 max_group_size: 8 }
counters { preamble { id: 302011393 name: "MyIngress.port_pkts" alias: "port_pkts" }
  spec { unit: BOTH } size: 16 }
direct_counters { preamble { id: 318767105 name: "MyIngress.acl_hits" alias: "acl_hits" }
  spec { unit: BOTH } direct_table_id: 33554434 }
meters { preamble { id: 335544321 name: "MyIngress.rate" alias: "rate" }
  spec { unit: BYTES } size: 4 }
registers { preamble { id: 369098753 name: "MyIngress.last_seen" alias: "last_seen" }
  type_spec { bitstring { bit { bitwidth: 32 } } } size: 8 }
controller_packet_metadata { preamble { id: 67146229 name: "packet_in" }
  metadata { id: 1 name: "ingress_port" bitwidth: 9 }
  metadata { id: 2 name: "_pad" bitwidth: 7 } }
controller_packet_metadata { preamble { id: 67121543 name: "packet_out" }
  metadata { id: 1 name: "egress_port" bitwidth: 9 }
  metadata { id: 2 name: "_pad" bitwidth: 7 } }
digests { preamble { id: 385920000 name: "learn_t" alias: "learn_t" }
  type_spec { struct { name: "learn_t" } } }
type_info { structs { key: "learn_t" value {
  members { name: "srcAddr" type_spec { bitstring { bit { bitwidth: 48 } } } }
  members { name: "port" type_spec { bitstring { bit { bitwidth: 9 } } } } } } }
"""


def fake_p4info():
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2
    return text_format.Parse(FAKE_P4INFO, p4info_pb2.P4Info())


class KeySpec:
    def __init__(self, name, match_kind, width):
        self.name, self.match_kind, self.width = name, match_kind, width


class FakeEntry:
    def __init__(self, keys, action, priority):
        self.keys, self.action, self.priority = list(keys), action, priority
        self.counter = (0, 0)
        self.meter_config = None


def _form(keys):
    from testbed.p4rt.entities import _key_form
    return [_key_form(k) for k in keys]


class FakeTable:
    def __init__(self, name, keys, default):
        from testbed.p4engine import tables as E
        self.E = E
        self.name, self.keys, self.size = name, keys, 64
        self._entries = []
        self._default = self._initial_default = default

    def _find(self, keys, priority):
        for e in self._entries:
            if _form(e.keys) == _form(keys) and e.priority == priority:
                return e
        return None

    def insert(self, keys, action, priority=None):
        if self._find(keys, priority):
            raise self.E.TableError("ALREADY_EXISTS", f"{self.name}: entry exists")
        if len(self._entries) >= self.size:
            raise self.E.TableError("RESOURCE_EXHAUSTED", f"{self.name}: full")
        self._entries.append(FakeEntry(keys, action, priority))

    def modify(self, keys, action, priority=None):
        e = self._find(keys, priority)
        if e is None:
            raise self.E.TableError("NOT_FOUND", f"{self.name}: no such entry")
        e.action = action

    def delete(self, keys, priority=None):
        e = self._find(keys, priority)
        if e is None:
            raise self.E.TableError("NOT_FOUND", f"{self.name}: no such entry")
        self._entries.remove(e)

    def set_default(self, action):
        self._default = action

    def reset_default(self):
        self._default = self._initial_default

    def get_default(self):
        return self._default

    def entries(self):
        return list(self._entries)

    def lookup(self, values):
        for e in self._entries:
            if all(k is None or k.value == v for k, v in zip(e.keys, values)):
                e.counter = (e.counter[0] + 1, e.counter[1])
                return e.action, True, e
        return self._default, False, None


class FakeProfile:
    def __init__(self):
        self._members, self._groups = {}, {}

    def insert_member(self, id_, call):
        from testbed.p4engine import tables as E
        if id_ in self._members:
            raise E.TableError("ALREADY_EXISTS", f"member {id_} exists")
        self._members[id_] = call

    def modify_member(self, id_, call):
        self._members[id_] = call

    def delete_member(self, id_):
        del self._members[id_]

    def insert_group(self, id_, members):
        from testbed.p4engine import tables as E
        for m, _w in members:
            if m not in self._members:
                raise E.TableError("NOT_FOUND", f"member {m} does not exist")
        self._groups[id_] = list(members)

    modify_group = insert_group

    def delete_group(self, id_):
        del self._groups[id_]

    def members(self):
        return dict(self._members)

    def groups(self):
        return dict(self._groups)


class FakeCounter:
    def __init__(self, size):
        self.size = size
        self.cells = [(0, 0)] * size

    def read(self, i):
        return self.cells[i]

    def write(self, i, packets, nbytes):
        self.cells[i] = (packets, nbytes)


class FakeMeter:
    def __init__(self, size):
        self.size = size
        self.configs = [None] * size

    def set_config(self, i, cir, cburst, pir, pburst):
        self.configs[i] = (cir, cburst, pir, pburst)

    def get_config(self, i):
        return self.configs[i]


class FakeRegister:
    def __init__(self, size, width):
        self.size, self.width = size, width
        self.cells = [0] * size

    def read(self, i):
        return self.cells[i]

    def write(self, i, v):
        self.cells[i] = v


class FakeP4Pipeline:
    """Forwards by table MyIngress.fwd (ingress port -> set_port/to_cpu/drop); packets from
    the CPU port carry a 2-byte packet_out header naming the egress port; packets to the
    CPU get a 2-byte packet_in header with the ingress port. Each packet raises a digest."""

    def __init__(self, cpu_port):
        from testbed.p4engine import tables as E
        self.E = E
        self.cpu_port = cpu_port
        self.tables = {
            "MyIngress.fwd": FakeTable("MyIngress.fwd", [KeySpec("standard_metadata.ingress_port", "exact", 9)],
                                       E.ActionCall("MyIngress.drop", {})),
            "MyIngress.acl": FakeTable("MyIngress.acl", [KeySpec("hdr.ethernet.etherType", "ternary", 16),
                                                         KeySpec("hdr.udp.dstPort", "range", 16),
                                                         KeySpec("standard_metadata.ingress_port", "optional", 9)],
                                       E.ActionCall("MyIngress.drop", {})),
            "MyIngress.routes": FakeTable("MyIngress.routes", [KeySpec("hdr.ipv4.dstAddr", "lpm", 32)],
                                          E.ActionCall("MyIngress.drop", {})),
        }
        self.action_profiles = {"MyIngress.ecmp": FakeProfile()}
        self.counters = {"MyIngress.port_pkts": FakeCounter(16)}
        self.meters = {"MyIngress.rate": FakeMeter(4)}
        self.registers = {"MyIngress.last_seen": FakeRegister(8, 32)}
        self.digest_callback = None
        self.mc_groups, self.clone_sessions = {}, {}

    def set_mc_group(self, gid, replicas):
        self.mc_groups[gid] = replicas

    def delete_mc_group(self, gid):
        del self.mc_groups[gid]

    def set_clone_session(self, sid, replicas, truncate=0):
        self.clone_sessions[sid] = (replicas, truncate)

    def delete_clone_session(self, sid):
        del self.clone_sessions[sid]

    def ingress(self, port, data, now_us):
        if port == self.cpu_port:
            out = int.from_bytes(data[:2], "big") >> 7
            return [FakeJob(port, out, 0, data[2:])]
        if self.digest_callback and len(data) >= 12:
            self.digest_callback("learn_t", (int.from_bytes(data[6:12], "big"), port))
        action, _hit, _entry = self.tables["MyIngress.fwd"].lookup((port,))
        if action.action == "MyIngress.set_port":
            return [FakeJob(port, action.args["port"], 0, data)]
        if action.action == "MyIngress.to_cpu":
            return [FakeJob(port, self.cpu_port, 0, ((port << 7).to_bytes(2, "big")) + data)]
        return []

    def egress(self, job, now_us, enq_timestamp, enq_qdepth, deq_timedelta, deq_qdepth):
        return [(job.egress_port, job.data)], []


class FakeProgram:
    def __init__(self):
        self.p4info = fake_p4info()
        self.source = "// fake program"
        self.pipelines = []

    def new_pipeline(self, cpu_port=None, drop_port=511, log=None):
        pipeline = FakeP4Pipeline(cpu_port)
        self.pipelines.append(pipeline)
        return pipeline


class RealTablesPipeline(FakeP4Pipeline):
    """FakeP4Pipeline's layout built from the engine's own runtime classes
    (testbed.p4engine.tables/externs), to check the P4Runtime translation against them."""

    def __init__(self, cpu_port):
        super().__init__(cpu_port)
        from testbed.p4engine import externs, tables as T
        params = {"MyIngress.set_port": [("port", 9)], "MyIngress.to_cpu": [], "MyIngress.drop": []}
        acts = list(params)
        acl_hits = externs.DirectCounter("MyIngress.acl_hits", "packets_and_bytes")
        ecmp = T.ActionProfile("MyIngress.ecmp", size=128, algorithm="crc16", max_group_size=8,
                               actions=["MyIngress.set_port", "MyIngress.drop"], action_params=params)
        self.tables = {
            "MyIngress.fwd": T.Table("MyIngress.fwd", [T.KeySpec("standard_metadata.ingress_port", "exact", 9)],
                                     acts, size=64, default_action=T.ActionCall("MyIngress.drop", {}),
                                     action_params=params),
            "MyIngress.acl": T.Table("MyIngress.acl", [T.KeySpec("hdr.ethernet.etherType", "ternary", 16),
                                                       T.KeySpec("hdr.udp.dstPort", "range", 16),
                                                       T.KeySpec("standard_metadata.ingress_port", "optional", 9)],
                                     ["MyIngress.to_cpu", "MyIngress.drop"], size=64,
                                     default_action=T.ActionCall("MyIngress.drop", {}),
                                     direct_counter=acl_hits, action_params=params),
            "MyIngress.routes": T.Table("MyIngress.routes", [T.KeySpec("hdr.ipv4.dstAddr", "lpm", 32)],
                                        ["MyIngress.set_port", "MyIngress.drop"], size=64,
                                        default_action=T.ActionCall("MyIngress.drop", {}),
                                        implementation=ecmp,
                                        selector_keys=[T.KeySpec("hdr.ipv4.srcAddr", "selector", 32)],
                                        action_params=params),
        }
        self.action_profiles = {"MyIngress.ecmp": ecmp}
        self.counters = {"MyIngress.port_pkts": externs.Counter("MyIngress.port_pkts", 16, "packets_and_bytes")}
        self.meters = {"MyIngress.rate": externs.Meter("MyIngress.rate", 4, "bytes")}
        self.registers = {"MyIngress.last_seen": externs.Register("MyIngress.last_seen", 8, 32)}


class RealTablesProgram(FakeProgram):
    def new_pipeline(self, cpu_port=None, drop_port=511, log=None):
        pipeline = RealTablesPipeline(cpu_port)
        self.pipelines.append(pipeline)
        return pipeline
