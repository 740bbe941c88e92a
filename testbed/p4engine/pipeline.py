"""A compiled program (Program) and its running instances (Pipeline): v1model as BMv2's
simple_switch runs it.

Per packet, the state is one flat list `S` (the compiler's slot layout, compile_values.py) copied from a template.
Ingress: parser (an error is recorded in standard_metadata.parser_error and the packet goes
on), verifyChecksum, ingress, then the PRE in simple_switch's order -- I2E clone (the original
packet parsed again, metadata reset, the field list copied, instance_type 1), digest, resubmit
(instance_type 6, back to the parser), multicast (instance_type 5, one copy per replica with its
egress_rid), egress_spec 511 drops, else unicast (instance_type 0). Egress: queueing metadata,
egress, E2E clone (headers kept, metadata reset, instance_type 2), drop on egress_spec 511,
computeChecksum and deparser (valid headers then the unparsed payload), recirculate
(instance_type 4, the deparsed packet parsed again), truncate.
"""
import copy
import marshal
import random
import struct

from . import codegen, hashes
from .compile_values import (H_CLONE, H_CLONE_FL, H_DIGEST, H_INLEN, H_NOW, H_OUT, H_PKT, H_PLEN, H_POFF,
                             H_RECIRC, H_RESUB, H_RXPORT, H_TRUNC, NUM_HIDDEN)
from .errors import P4RuntimeFault

INSTANCE_NORMAL, INSTANCE_I2E, INSTANCE_E2E, INSTANCE_RECIRC, INSTANCE_REPLICATION, INSTANCE_RESUBMIT = \
    0, 1, 2, 4, 5, 6
# simple_switch keeps 16 bits of clone()'s session id, one of them its "clone requested" flag
# (targets/simple_switch/register_access.h): the session looked up is the id's low 15 bits
CLONE_SESSION_MASK = 0x7FFF
MAX_PASSES = 32            # resubmits/recirculations/E2E clones of one packet before it is dropped


def _noop(S, A):
    pass


class Job:
    """A packet between ingress and egress (what the traffic manager queues)."""

    __slots__ = ("state", "egress_port", "priority", "packet_length", "truncate", "passes")

    def __init__(self, state, egress_port, priority, packet_length, truncate=None, passes=0):
        self.state, self.egress_port, self.priority = state, egress_port, priority
        self.packet_length, self.truncate, self.passes = packet_length, truncate, passes

    def __repr__(self):
        return f"Job(port={self.egress_port}, priority={self.priority}, length={self.packet_length})"


class Program:
    """A checked, compiled P4 program. `compiled` holds the metadata (tables, actions, externs,
    digests, controller headers) that P4Info and the tools read; new_pipeline() runs it."""

    def __init__(self, compiled, source, filename):
        self.compiled = compiled
        self.source = source
        self.filename = filename
        self.code = compile(compiled.source, f"<p4 program {filename}>", "exec")
        self._p4info = None
        self._p4info_built = False

    @property
    def p4info(self):
        """The P4Runtime P4Info (built on first use by p4info.py; None if that module is absent)."""
        if not self._p4info_built:
            try:
                from . import p4info as p4info_module
            except ImportError:
                p4info_module = None
            self._p4info = p4info_module.build_p4info(self.compiled) if p4info_module else None
            self._p4info_built = True
        return self._p4info

    @property
    def tables(self):
        return self.compiled.tables

    @property
    def actions(self):
        return self.compiled.actions

    @property
    def externs(self):
        return self.compiled.externs

    @property
    def digests(self):
        return self.compiled.digests

    def new_pipeline(self, cpu_port=None, drop_port=511, log=None, rng=None):
        return Pipeline(self, cpu_port=cpu_port, drop_port=drop_port, log=log, rng=rng)


class Pipeline:
    """One running instance of a Program with its own tables, externs and PRE state
    (testbed/p4engine/CONTRACT.md)."""

    def __init__(self, program, cpu_port=None, drop_port=511, log=None, rng=None):
        """rng: the random.Random behind the `random` extern (virtual time seeds one per switch;
        by default the process-wide generator, like BMv2's)."""
        c = program.compiled
        self.program = program
        self.cpu_port = cpu_port
        self.drop_port = drop_port
        # simple_switch's egress_thread sets egress_spec to drop_port + 1 so that only an explicit
        # drop matches; the 9-bit field keeps 512 as 0, which is what egress reads
        self._egress_spec_at_egress = (drop_port + 1) & 0x1FF
        self.log = log
        self.digest_callback = None
        self.clone_sessions = {}       # session -> ([(port, instance)], truncate)
        self.mc_groups = {}            # group -> [(port, rid)]

        # fresh runtime objects per pipeline (deep-copied together so shared ones stay shared)
        objects = {k: v for k, v in c.namespace.items() if not isinstance(v, tuple) and v is not None}
        objects = copy.deepcopy(objects)
        g = {"ParserError": codegen.ParserError, "ExitControl": codegen.ExitControl,
             "shl": codegen.shl, "div": codegen.div, "mod": codegen.mod, "packbits": codegen.packbits,
             "stack_slot": codegen.stack_slot,
             "logfmt": codegen.logfmt, "reject_parse": codegen.reject_parse, "PARSER_STEPS": codegen.PARSER_STEPS,
             "parser_extra_steps": codegen.parser_extra_steps, "parser_budget": codegen.parser_budget,
             "PARSE_STEPS": None, "RANDINT": (rng or random).randint, "P4RuntimeFault": P4RuntimeFault,
             "LOG": log}
        g.update(objects)
        for k, v in c.namespace.items():
            if isinstance(v, tuple) and v[0] == "hash":
                g[k] = hashes.algorithm(v[1])
            elif isinstance(v, tuple) and v[0] == "struct":
                g[k] = struct.Struct(v[1])
        # a copy of the code per pipeline (0.1 ms): CPython specializes code for the globals it
        # last ran with, and a fabric's switches sharing one copy would thrash it frame by frame
        exec(marshal.loads(marshal.dumps(program.code)), g)
        for info in c.tables.values():
            dname, acts = info.dispatch
            d = {name: g[fn] for name, fn in acts.items()}
            d.setdefault("NoAction", _noop)
            d[None] = _noop
            g[dname] = d
        self.namespace = g

        self.tables = {name: g[info.pyname] for name, info in c.tables.items()}
        self.action_profiles, self.registers, self.counters, self.meters = {}, {}, {}, {}
        by_kind = {"action_profile": self.action_profiles, "action_selector": self.action_profiles,
                   "register": self.registers, "counter": self.counters, "meter": self.meters}
        for name, info in c.externs.items():
            if info.type_name in by_kind:
                by_kind[info.type_name][name] = g[info.pyname]
        self.value_sets = {name: g[info.pyname] for name, info in c.value_sets.items()}

        ep = c.entry_points
        self._parse = g[ep["parser"]]
        self._verify = g[ep["verify"]]
        self._ingress = g[ep["ingress"]]
        self._egress = g[ep["egress"]]
        self._compute = g[ep["compute"]]
        self._deparse = g[ep["deparser"]]

        template = list(c.template)
        template[:NUM_HIDDEN] = [None, 0, 0, None, None, None, None, None, None, None, 0, 0, 0]
        self.template = template
        sm = c.sm
        self._sm = sm
        self._queueing_slots = tuple(sm[f] for f in ("enq_timestamp", "enq_qdepth", "deq_timedelta",
                                                     "deq_qdepth", "egress_global_timestamp"))
        self._ingress_ts = sm["ingress_global_timestamp"]
        # queueing_metadata.qid, the priority queue the packet left from (BMv2 fills it where the
        # program's v1model declares it; elsewhere it is a slot nothing reads)
        self._qid = sm["qid"]
        self._hdr_lo, n = c.hdr_region
        self._hdr_hi = self._hdr_lo + n
        self._field_lists = c.field_lists
        self._errors = c.errors
        (self._ingress_port, self._egress_spec, self._egress_port, self._instance_type,
         self._packet_length, self._mcast_grp, self._egress_rid, self._priority, self._parser_error) = (
            sm["ingress_port"], sm["egress_spec"], sm["egress_port"], sm["instance_type"],
            sm["packet_length"], sm["mcast_grp"], sm["egress_rid"], sm["priority"], sm["parser_error"])

    # ---------------------------------------------------------------- control plane (PRE)
    def set_clone_session(self, session_id, replicas, truncate=0):
        self.clone_sessions[session_id] = ([(int(p), int(i)) for p, i in replicas], truncate or None)

    def delete_clone_session(self, session_id):
        self.clone_sessions.pop(session_id, None)

    def set_mc_group(self, group_id, replicas):
        self.mc_groups[group_id] = [(int(p), int(r)) for p, r in replicas]

    def delete_mc_group(self, group_id):
        self.mc_groups.pop(group_id, None)

    # ---------------------------------------------------------------- packet state helpers
    def _fresh(self, data, now_us, rx_port):
        S = self.template[:]
        S[H_PKT] = data
        S[H_NOW] = now_us
        S[H_RXPORT] = rx_port
        return S

    def _reset_metadata(self, S):
        """BMv2's reset_metadata: everything but headers (and the packet itself) to initial values."""
        t = self.template
        lo, hi = self._hdr_lo, self._hdr_hi
        S[NUM_HIDDEN:lo] = t[NUM_HIDDEN:lo]
        S[hi:] = t[hi:]
        S[H_CLONE] = S[H_CLONE_FL] = S[H_RESUB] = S[H_RECIRC] = S[H_TRUNC] = S[H_DIGEST] = None

    def _copy_field_list(self, dst, src, index):
        if index is None:
            return
        slots = self._field_lists.get(index)
        if slots is None:
            if self.log:
                self.log(f"field list {index} is not declared (no @field_list({index}) in the metadata)")
            return
        for i in slots:
            dst[i] = src[i]

    # ---------------------------------------------------------------- ingress
    def ingress(self, port, data, now_us):
        S = self.template[:]
        S[H_PKT] = data
        S[H_NOW] = now_us
        S[self._ingress_port] = S[H_RXPORT] = port
        S[self._packet_length] = S[H_INLEN] = S[H_PLEN] = len(data)
        S[self._ingress_ts] = now_us & 0xFFFFFFFFFFFF
        if self.log:
            self.log(f"Processing packet received on port {port} ({len(data)} bytes)")
        return self._run_ingress(S, len(data), 0)

    def _run_ingress(self, S, ingress_len, passes):
        jobs = []
        while True:
            S[H_POFF] = self._parse(S, S[H_PKT])
            try:
                self._verify(S)
            except codegen.ExitControl:
                pass
            if self.log and S[self._parser_error]:
                self.log(f"Parser error: {self._errors[S[self._parser_error]]}")
            try:
                self._ingress(S)
            except codegen.ExitControl:
                pass
            if S[H_CLONE] is not None:
                self._ingress_clone(S, ingress_len, jobs, passes)
            if S[H_DIGEST] is not None:
                name, values = S[H_DIGEST]
                S[H_DIGEST] = None
                if self.digest_callback is not None:
                    self.digest_callback(name, values)
            if S[H_RESUB] is not None:
                passes += 1
                if passes > MAX_PASSES:
                    if self.log:
                        self.log("Resubmitted too many times: packet dropped")
                    return jobs
                R = self._fresh(S[H_PKT], S[H_NOW], S[H_RXPORT])
                self._copy_field_list(R, S, S[H_RESUB])
                R[self._instance_type] = INSTANCE_RESUBMIT
                R[self._packet_length] = R[H_INLEN] = R[H_PLEN] = ingress_len
                if self.log:
                    self.log("Resubmitting packet")
                S = R
                continue
            break
        mgid = S[self._mcast_grp]
        if mgid:
            S[self._instance_type] = INSTANCE_REPLICATION
            S[H_TRUNC] = None
            self._multicast(S, mgid, ingress_len, jobs, passes)
            return jobs
        egress_spec = S[self._egress_spec]
        if egress_spec == self.drop_port:
            if self.log:
                self.log("Dropping packet at the end of ingress")
            return jobs
        S[self._instance_type] = INSTANCE_NORMAL
        if self.log:
            self.log(f"Egress port is {egress_spec}")
        jobs.append(Job(S, egress_spec, S[self._priority], ingress_len, None, passes))
        return jobs

    def _ingress_clone(self, S, ingress_len, jobs, passes):
        session, field_list = S[H_CLONE] & CLONE_SESSION_MASK, S[H_CLONE_FL]
        S[H_CLONE] = S[H_CLONE_FL] = None
        config = self.clone_sessions.get(session)
        if config is None:
            if self.log:
                self.log(f"Clone session {session} is not configured: no clone")
            return
        C = self._fresh(S[H_PKT], S[H_NOW], S[H_RXPORT])
        # the parse sees the port the packet came in on, whatever ingress wrote into the field or
        # (resubmitted, recirculated) found there (simple_switch.cpp's ingress_thread)
        C[self._ingress_port] = S[H_RXPORT]
        C[H_INLEN] = C[H_PLEN] = ingress_len      # before the parse, whose setValid()s count
        C[H_POFF] = self._parse(C, C[H_PKT])
        self._reset_metadata(C)
        self._copy_field_list(C, S, field_list)
        C[self._instance_type] = INSTANCE_I2E
        self._clone_out(C, config, ingress_len, jobs, passes)

    def _clone_out(self, C, config, length, jobs, passes):
        replicas, truncate = config
        for i, (port, instance) in enumerate(replicas):
            R = C if i == len(replicas) - 1 else C[:]
            R[self._egress_rid] = instance
            jobs.append(Job(R, port, R[self._priority], length, truncate, passes))

    def _multicast(self, S, mgid, length, jobs, passes):
        replicas = self.mc_groups.get(mgid)
        if not replicas:
            if self.log:
                self.log(f"Multicast group {mgid} has no replicas: packet dropped")
            return
        for port, rid in replicas:
            R = S[:]
            R[self._egress_rid] = rid
            jobs.append(Job(R, port, R[self._priority], length, None, passes))

    # ---------------------------------------------------------------- egress
    def egress(self, job, now_us, enq_timestamp, enq_qdepth, deq_timedelta, deq_qdepth):
        S = job.state
        S[H_NOW] = now_us
        enq_ts, enq_depth, deq_delta, deq_depth, egress_ts = self._queueing_slots
        S[enq_ts] = enq_timestamp & 0xFFFFFFFF
        S[enq_depth] = enq_qdepth & 0x7FFFF
        S[deq_delta] = deq_timedelta & 0xFFFFFFFF
        S[deq_depth] = deq_qdepth & 0x7FFFF
        S[egress_ts] = now_us & 0xFFFFFFFFFFFF
        S[self._egress_port] = job.egress_port
        S[self._egress_spec] = self._egress_spec_at_egress
        S[self._qid] = job.priority
        # the packet-length register (what setValid/setInvalid in ingress made of the received
        # length), as simple_switch's egress_thread sets it; job.packet_length stays the bytes
        # the traffic manager charged
        S[self._packet_length] = S[H_PLEN]
        try:
            self._egress(S)
        except codegen.ExitControl:
            pass
        more = []
        if S[H_CLONE] is not None:
            self._egress_clone(S, job, more)
        if S[self._egress_spec] == self.drop_port:
            if self.log:
                self.log("Dropping packet at the end of egress")
            return [], more
        try:
            self._compute(S)
        except codegen.ExitControl:
            pass
        S[H_OUT] = out = []
        self._deparse(S)
        out.append(memoryview(S[H_PKT])[S[H_POFF]:])    # the payload, copied once by join
        frame = b"".join(out)
        if S[H_RECIRC] is not None:
            if job.passes >= MAX_PASSES:
                if self.log:
                    self.log("Recirculated too many times: packet dropped")
                return [], more
            R = self._fresh(frame, now_us, S[H_RXPORT])
            self._copy_field_list(R, S, S[H_RECIRC])
            R[self._instance_type] = INSTANCE_RECIRC
            R[self._packet_length] = R[H_INLEN] = R[H_PLEN] = len(frame)
            if self.log:
                self.log("Recirculating packet")
            more.extend(self._run_ingress(R, len(frame), job.passes + 1))
            return [], more
        limit = S[H_TRUNC]
        if job.truncate is not None and (limit is None or job.truncate < limit):
            limit = job.truncate
        if limit is not None:
            frame = frame[:limit]
        if self.log:
            self.log(f"Transmitting packet of size {len(frame)} out of port {job.egress_port}")
        return [(job.egress_port, frame)], more

    def _egress_clone(self, S, job, more):
        session, field_list = S[H_CLONE] & CLONE_SESSION_MASK, S[H_CLONE_FL]
        S[H_CLONE] = S[H_CLONE_FL] = None
        config = self.clone_sessions.get(session)
        if config is None:
            if self.log:
                self.log(f"Clone session {session} is not configured: no clone")
            return
        C = S[:]
        self._reset_metadata(C)
        self._copy_field_list(C, S, field_list)
        C[self._instance_type] = INSTANCE_E2E
        # a clone counts as a pass: an egress that clones every packet it sees (clones included)
        # would otherwise make packets forever
        if job.passes >= MAX_PASSES:
            if self.log:
                self.log("Cloned too many times: no clone")
            return
        self._clone_out(C, config, job.packet_length, more, job.passes + 1)

    # ---------------------------------------------------------------- zero-delay switch
    def process(self, port, data, now_us=0):
        """Ingress, then egress for every job until none remain (a traffic manager with no delay)."""
        sent = []
        pending = self.ingress(port, data, now_us)     # FIFO: jobs are taken in list order
        done = 0
        while done < len(pending) and done < 4096:
            tx, more = self.egress(pending[done], now_us, now_us, 0, 0, 0)
            done += 1
            if tx:
                sent += tx
            if more:
                pending += more
        return sent
