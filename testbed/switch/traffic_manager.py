"""The traffic manager: the switch's shared buffer (BufferAccount: bytes per ingress
priority group, lossless headroom, lossy dynamic thresholds) and, per egress port
(EgressPort), 8 strict-priority queues, byte-accurate rate shaping, PFC pause state,
the PFC watchdog, and the link's delay/jitter/loss.

Times are seconds of the switch's clock, always passed in as `now` (real or virtual:
nothing here reads a clock); queue depths are in packets and are reported to the
program like BMv2 does: enq_qdepth is the depth of the packet's queue just before it
was added, deq_qdepth just after it left. Buffer sizes are bytes (testbed/switch/buffers.py).
"""
from collections import deque
from dataclasses import asdict
import heapq
import random

from testbed.switch.buffers import LOSSY_PROFILE, BufferConfig, BufferConfigError

NUM_PRIORITIES = 8
DEFAULT_QUEUE_DEPTH = 64            # packets, BMv2's default
PFC_REFERENCE_BPS = 10_000_000_000  # the speed pause quanta refer to on an unshaped port
# A late wake-up may send what was due up to this long ago back to back, so the
# average rate stays exact despite millisecond timer granularity.
CATCH_UP_SECONDS = 0.002


class EgressPort:
    __slots__ = ("number", "queues", "depth_limit", "tail_drops", "enqueued", "dequeued",
                 "queue_bytes", "max_queue_bytes",
                 "rate_bps", "link_free_at", "backlog",
                 "pfc_enabled", "pause_until", "pause_started", "paused_seconds",
                 "pfc_frames", "pfc_rx", "last_pause_rx", "stormed", "storm_since", "storms", "storm_drops",
                 "delay", "jitter", "loss", "loss_drops", "_rng", "catch_up")

    def __init__(self, number, rate_bps=0, depth=DEFAULT_QUEUE_DEPTH, catch_up=CATCH_UP_SECONDS):
        self.number = number
        self.queues = [deque() for _ in range(NUM_PRIORITIES)]
        self.depth_limit = [depth] * NUM_PRIORITIES
        self.tail_drops = [0] * NUM_PRIORITIES
        self.enqueued = [0] * NUM_PRIORITIES
        self.dequeued = [0] * NUM_PRIORITIES
        self.queue_bytes = [0] * NUM_PRIORITIES
        self.max_queue_bytes = [0] * NUM_PRIORITIES
        self.rate_bps = rate_bps          # 0 = unlimited
        self.link_free_at = 0.0
        self.backlog = 0
        self.pfc_enabled = 0              # bit i = PFC honoured for priority i
        self.pause_until = [0.0] * NUM_PRIORITIES
        self.pause_started = [None] * NUM_PRIORITIES
        self.paused_seconds = [0.0] * NUM_PRIORITIES
        self.pfc_frames = 0
        self.pfc_rx = [0] * NUM_PRIORITIES
        self.last_pause_rx = [0.0] * NUM_PRIORITIES   # when a non-zero pause last arrived
        self.stormed = [False] * NUM_PRIORITIES       # PFC watchdog: pauses ignored
        self.storm_since = [0.0] * NUM_PRIORITIES
        self.storms = [0] * NUM_PRIORITIES
        self.storm_drops = [0] * NUM_PRIORITIES
        self.delay = 0.0
        self.jitter = 0.0
        self.loss = 0.0
        self.loss_drops = 0
        self._rng = random.Random()
        self.catch_up = catch_up          # 0 on a clock whose wake-ups are exact (virtual time)

    # -- configuration -------------------------------------------------
    def set_rate(self, rate_bps):
        if rate_bps < 0:
            raise ValueError(f"port {self.number}: rate {rate_bps} b/s is negative")
        self.rate_bps = int(rate_bps)

    def set_depth(self, depth, priority=None):
        if depth < 1:
            raise ValueError(f"port {self.number}: queue depth {depth} must be at least 1 packet")
        for prio in _priorities(priority):
            self.depth_limit[prio] = int(depth)

    def set_impairments(self, delay_us=0.0, jitter_us=0.0, loss=0.0, seed=None):
        if delay_us < 0 or jitter_us < 0:
            raise ValueError(f"port {self.number}: delay and jitter must not be negative")
        if not 0.0 <= loss <= 1.0:
            raise ValueError(f"port {self.number}: loss {loss} is not a probability in 0..1")
        self.delay = delay_us / 1e6
        self.jitter = jitter_us / 1e6
        self.loss = float(loss)
        if seed is not None:
            self._rng.seed(seed)

    def set_pfc(self, priorities):
        mask = 0
        for prio in priorities:
            mask |= 1 << _check_priority(prio)
        self.pfc_enabled = mask

    # -- queues ----------------------------------------------------------
    def enqueue(self, job, priority, now_us, nbytes=0, charge=None, lossless=False):
        """Queue `job`; returns enq_qdepth, or -1 when the queue is full (tail drop).

        The packet limit applies to lossy queues only: what a lossless queue may hold is the
        buffer's decision (BufferAccount, at ingress), never a tail drop here. `charge` is the
        buffer charge the packet releases when it leaves (see Switch._release)."""
        queue = self.queues[priority]
        depth = len(queue)
        if depth >= self.depth_limit[priority] and not lossless:
            self.tail_drops[priority] += 1
            return -1
        queue.append((job, now_us, depth, nbytes, charge))
        self.enqueued[priority] += 1
        self.backlog += 1
        held = self.queue_bytes[priority] + nbytes
        self.queue_bytes[priority] = held
        if held > self.max_queue_bytes[priority]:
            self.max_queue_bytes[priority] = held
        return depth

    def next_eligible(self, now):
        """(priority, 0) of the queue to serve now, or (None, when) with the time something
        may become eligible (None: nothing queued). A stormed queue ignores its pause."""
        if self.rate_bps and self.link_free_at > now:
            return None, self.link_free_at
        wake = None
        pause_until = self.pause_until
        for prio in range(NUM_PRIORITIES - 1, -1, -1):
            if self.queues[prio]:
                until = pause_until[prio]
                if until > now and not self.stormed[prio]:
                    if wake is None or until < wake:
                        wake = until
                    continue
                if until and until <= now:
                    self._end_pause(prio, until)
                return prio, 0
        return None, wake

    def dequeue(self, priority):
        """(job, enq_timestamp_us, enq_qdepth) from the head of queue `priority`."""
        return self.pop(priority)[:3]

    def pop(self, priority):
        """(job, enq_timestamp_us, enq_qdepth, nbytes, charge) from the head of queue `priority`."""
        item = self.queues[priority].popleft()
        self.backlog -= 1
        self.dequeued[priority] += 1
        self.queue_bytes[priority] -= item[3]
        return item

    def occupy_link(self, nbytes, now):
        """Account `nbytes` leaving at the shaped rate: the link is busy until the returned time."""
        if not self.rate_bps:
            return now
        start = self.link_free_at
        if start < now - self.catch_up:
            start = now
        self.link_free_at = start + nbytes * 8 / self.rate_bps
        return self.link_free_at

    def depth(self, priority):
        return len(self.queues[priority])

    def clear(self):
        """Empty every queue; returns the charges of what was queued (to release)."""
        charges = [(item[3], item[4]) for queue in self.queues for item in queue]
        for queue in self.queues:
            queue.clear()
        self.backlog = 0
        self.queue_bytes = [0] * NUM_PRIORITIES
        return charges

    # -- PFC reception -----------------------------------------------------
    def apply_pfc(self, entries, now):
        """Apply decoded PFC [(priority, quanta)]; returns the priorities actually acted on."""
        self.pfc_frames += 1
        rate = self.rate_bps or PFC_REFERENCE_BPS
        acted = []
        for prio, quanta in entries:
            self.pfc_rx[prio] += 1
            if not self.pfc_enabled & (1 << prio):
                continue
            acted.append(prio)
            if quanta:
                self.last_pause_rx[prio] = now
            if quanta == 0:
                if self.pause_until[prio] > now:
                    self._end_pause(prio, now)
                self.pause_until[prio] = 0.0
                continue
            if self.pause_started[prio] is None or self.pause_until[prio] <= now:
                if self.pause_started[prio] is not None:
                    self._end_pause(prio, self.pause_until[prio])
                self.pause_started[prio] = now
            # A new frame restarts the timer from now, as in 802.1Qbb.
            self.pause_until[prio] = now + quanta * 512 / rate
        return acted

    def _end_pause(self, prio, at):
        started = self.pause_started[prio]
        if started is not None:
            self.paused_seconds[prio] += max(0.0, at - started)
            self.pause_started[prio] = None
        self.pause_until[prio] = 0.0

    def paused_time(self, prio, now):
        """Seconds priority `prio` has spent paused, including a pause in progress."""
        total = self.paused_seconds[prio]
        started = self.pause_started[prio]
        if started is not None:
            total += max(0.0, min(now, self.pause_until[prio]) - started)
        return total

    def pause_remaining(self, prio, now):
        return max(0.0, self.pause_until[prio] - now)

    # -- PFC watchdog --------------------------------------------------------
    def watchdog(self, now, detect_s, restore_s):
        """Declare stormed the priorities paused without a break for `detect_s`, restore
        those that received no pause for `restore_s`. Returns (events, wake): events are
        (priority, "stormed" | "restored"), wake the next time this needs a look (or None)."""
        events = []
        wake = None
        for prio in range(NUM_PRIORITIES):
            if self.stormed[prio]:
                # restored once no pause has come for restore_s (counted from the storm at least)
                due = max(self.last_pause_rx[prio], self.storm_since[prio]) + restore_s
                if now >= due:
                    self.stormed[prio] = False
                    if self.pause_until[prio]:
                        self._end_pause(prio, min(now, self.pause_until[prio]))
                    events.append((prio, "restored"))
                    continue
            else:
                started = self.pause_started[prio]
                if started is None:
                    continue
                if self.pause_until[prio] <= now:   # ran out with nothing queued behind it
                    self._end_pause(prio, self.pause_until[prio])
                    continue
                due = started + detect_s
                if now >= due:
                    self.stormed[prio] = True
                    self.storm_since[prio] = now
                    self.storms[prio] += 1
                    events.append((prio, "stormed"))
                    due = now + restore_s
            if wake is None or due < wake:
                wake = due
        return events, wake

    def release_storms(self, now):
        """The watchdog was turned off: stormed priorities obey pauses again (the pause in
        force, if any, resumes from now). Returns the priorities released."""
        released = [prio for prio in range(NUM_PRIORITIES) if self.stormed[prio]]
        for prio in released:
            self.stormed[prio] = False
            if self.pause_until[prio] <= now:
                self._end_pause(prio, self.pause_until[prio] or now)
        return released

    def watching(self):
        """True while a pause is in progress or a queue is stormed."""
        return any(self.stormed) or any(s is not None for s in self.pause_started)

    # -- the wire ----------------------------------------------------------
    def wire_delay(self):
        """Seconds until a frame leaving now arrives, or None if the link loses it."""
        if self.loss and self._rng.random() < self.loss:
            self.loss_drops += 1
            return None
        delay = self.delay
        if self.jitter:
            delay = max(0.0, delay + self._rng.uniform(-self.jitter, self.jitter))
        return delay


class BufferAccount:
    """The shared buffer of one switch, charged per (ingress port, priority group).

    Every admitted packet is held by its ingress PG (here) and its egress queue (EgressPort)
    until it leaves. A PG's bytes sit in three places, filled in this order and released in
    the reverse one: its reservation, the shared pool, its headroom (lossless PGs only).

    lossless PG  reservation, then the shared pool while the PG holds less than XOFF (the P4
                 program pauses the upstream at XOFF), then the headroom; a packet the
                 headroom cannot take is dropped and counted in headroom_drops: the one
                 number that must stay 0.
    lossy PG     reservation, then the shared pool if the egress queue stays below alpha x
                 the free shared pool (dynamic threshold); otherwise a tail drop.

    The pool is what is left of total_bytes after every port's reservations and headrooms.
    PG = priority (one PG per priority). Packets with no ingress port (copies the pipeline
    makes, PFC frames) are charged to the pool only, like a lossy PG."""

    def __init__(self, ports, config=None):
        self.ports = sorted(ports)
        self.config = (config or BufferConfig()).check()
        self.profiles = [LOSSY_PROFILE] * NUM_PRIORITIES
        # (port, pg) -> [reserved, shared, headroom, most held, headroom drops]: one record
        # per PG, so a packet costs one lookup to admit and one to release
        self.pgs = {}
        self.shared_used = 0
        self.pool_bytes = 0
        self._resize()

    # -- configuration -------------------------------------------------------
    def configure(self, config):
        old = self.config
        self.config = config.check()
        try:
            self._resize()
        except BufferConfigError:
            self.config = old
            raise

    def set_profiles(self, profiles):
        """{pg: PgProfile}; PGs not named become lossy with no reservation."""
        new = [LOSSY_PROFILE] * NUM_PRIORITIES
        for pg, profile in profiles.items():
            if not isinstance(pg, int) or not 0 <= pg < NUM_PRIORITIES:
                raise BufferConfigError(f"PG {pg!r} is not a priority in 0..7")
            new[pg] = profile.check(f"PG {pg}")
        old = self.profiles
        self.profiles = new
        try:
            self._resize()
        except BufferConfigError:
            self.profiles = old
            raise

    def _resize(self):
        carved = len(self.ports) * sum(p.reserved + (p.headroom if p.lossless else 0) for p in self.profiles)
        pool = self.config.total_bytes - carved
        if pool <= 0:
            raise BufferConfigError(f"buffer: reservations and headroom of {len(self.ports)} ports "
                                    f"({carved} bytes) leave no shared pool in {self.config.total_bytes} bytes")
        self.pool_bytes = pool

    def lossless(self, pg):
        return self.profiles[pg].lossless

    # -- the data path -------------------------------------------------------
    def admit(self, port, pg, nbytes, queue_bytes):
        """Charge `nbytes` to (port, pg) if the buffer takes it; returns the charge (the PG's
        record, for release), or None for a drop (headroom_drops counts the lossless ones)."""
        key = (port, pg)
        rec = self.pgs.get(key)
        if rec is None:
            rec = self.pgs[key] = [0, 0, 0, 0, 0]
        profile = self.profiles[pg] if port is not None else LOSSY_PROFILE
        reserved, shared, headroom = rec[0], rec[1], rec[2]
        take_reserved = profile.reserved - reserved
        take_reserved = 0 if take_reserved <= 0 else (nbytes if take_reserved > nbytes else take_reserved)
        need_shared = nbytes - take_reserved
        free = self.pool_bytes - self.shared_used
        if profile.lossless:
            if need_shared == 0 or (reserved + shared + headroom < profile.xoff and need_shared <= free):
                rec[0] = reserved + take_reserved
                rec[1] = shared + need_shared
                self.shared_used += need_shared
            elif headroom + nbytes <= profile.headroom:
                rec[2] = headroom + nbytes
            else:
                rec[4] += 1
                return None
        else:
            if need_shared and (need_shared > free or queue_bytes + nbytes > self.config.alpha * free):
                return None
            rec[0] = reserved + take_reserved
            rec[1] = shared + need_shared
            self.shared_used += need_shared
        held = rec[0] + rec[1] + rec[2]
        if held > rec[3]:
            rec[3] = held
        return rec

    def release(self, rec, nbytes):
        """The packet charged to `rec` (what admit returned) left: headroom first, then the
        pool, then the reservation."""
        headroom = rec[2]
        if headroom:
            part = headroom if headroom < nbytes else nbytes
            rec[2] = headroom - part
            nbytes -= part
        shared = rec[1]
        if nbytes and shared:
            part = shared if shared < nbytes else nbytes
            rec[1] = shared - part
            self.shared_used -= part
            nbytes -= part
        if nbytes:
            rec[0] = max(0, rec[0] - nbytes)

    # -- state -----------------------------------------------------------------
    def held(self, key):
        rec = self.pgs.get(key)
        return rec[0] + rec[1] + rec[2] if rec else 0

    def in_headroom(self, key):
        rec = self.pgs.get(key)
        return rec[2] if rec else 0

    def in_reserved(self, key):
        rec = self.pgs.get(key)
        return rec[0] if rec else 0

    def port_state(self, port):
        """Per-PG lists of one ingress port: bytes held, headroom in use, the most held, drops."""
        recs = [self.pgs.get((port, pg)) or (0, 0, 0, 0, 0) for pg in range(NUM_PRIORITIES)]
        return {
            "pg_bytes": [r[0] + r[1] + r[2] for r in recs],
            "pg_headroom_bytes": [r[2] for r in recs],
            "pg_max_bytes": [r[3] for r in recs],
            "headroom_drops": [r[4] for r in recs],
        }

    def reset_watermarks(self):
        """Start the high-water marks (pg_max_bytes) again from what is held now."""
        for rec in self.pgs.values():
            rec[3] = rec[0] + rec[1] + rec[2]

    def status(self):
        return {"total_bytes": self.config.total_bytes, "pool_bytes": self.pool_bytes,
                "shared_used": self.shared_used, "alpha": self.config.alpha,
                "profiles": {pg: asdict(p) for pg, p in enumerate(self.profiles) if p != LOSSY_PROFILE},
                "watchdog": {"detect_s": self.config.watchdog_detect_s,
                             "restore_s": self.config.watchdog_restore_s,
                             "action": self.config.watchdog_action}}


class DelayLine:
    """Frames in flight on the wires of all ports, released in time order."""

    def __init__(self):
        self._heap = []
        self._seq = 0

    def push(self, when, port, frame):
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, port, frame))

    def next_time(self):
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now):
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _seq, port, frame = heapq.heappop(heap)
            yield port, frame

    def __len__(self):
        return len(self._heap)


def _check_priority(prio):
    if not isinstance(prio, int) or not 0 <= prio < NUM_PRIORITIES:
        raise ValueError(f"priority {prio!r} is not in 0..7")
    return prio


def _priorities(priority):
    return range(NUM_PRIORITIES) if priority is None else (_check_priority(priority),)
