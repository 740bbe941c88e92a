"""The traffic manager of one egress port: 8 strict-priority queues, tail drop,
byte-accurate rate shaping, PFC pause state, and the link's delay/jitter/loss.

Times are seconds of one monotonic clock (the switch's); queue depths are in
packets and are reported to the program like BMv2 does: enq_qdepth is the
depth of the packet's queue just before it was added, deq_qdepth just after it
left.
"""
from collections import deque
import heapq
import random

NUM_PRIORITIES = 8
DEFAULT_QUEUE_DEPTH = 64            # packets, BMv2's default
PFC_REFERENCE_BPS = 10_000_000_000  # the speed pause quanta refer to on an unshaped port
# A late wake-up may send what was due up to this long ago back to back, so the
# average rate stays exact despite millisecond timer granularity.
CATCH_UP_SECONDS = 0.002


class EgressPort:
    __slots__ = ("number", "queues", "depth_limit", "tail_drops", "enqueued", "dequeued",
                 "rate_bps", "link_free_at", "backlog",
                 "pfc_enabled", "pause_until", "pause_started", "paused_seconds",
                 "pfc_frames", "pfc_rx", "delay", "jitter", "loss", "loss_drops", "_rng")

    def __init__(self, number, rate_bps=0, depth=DEFAULT_QUEUE_DEPTH):
        self.number = number
        self.queues = [deque() for _ in range(NUM_PRIORITIES)]
        self.depth_limit = [depth] * NUM_PRIORITIES
        self.tail_drops = [0] * NUM_PRIORITIES
        self.enqueued = [0] * NUM_PRIORITIES
        self.dequeued = [0] * NUM_PRIORITIES
        self.rate_bps = rate_bps          # 0 = unlimited
        self.link_free_at = 0.0
        self.backlog = 0
        self.pfc_enabled = 0              # bit i = PFC honoured for priority i
        self.pause_until = [0.0] * NUM_PRIORITIES
        self.pause_started = [None] * NUM_PRIORITIES
        self.paused_seconds = [0.0] * NUM_PRIORITIES
        self.pfc_frames = 0
        self.pfc_rx = [0] * NUM_PRIORITIES
        self.delay = 0.0
        self.jitter = 0.0
        self.loss = 0.0
        self.loss_drops = 0
        self._rng = random.Random()

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
    def enqueue(self, job, priority, now_us):
        """Queue `job`; returns enq_qdepth, or -1 when the queue is full (tail drop)."""
        queue = self.queues[priority]
        depth = len(queue)
        if depth >= self.depth_limit[priority]:
            self.tail_drops[priority] += 1
            return -1
        queue.append((job, now_us, depth))
        self.enqueued[priority] += 1
        self.backlog += 1
        return depth

    def next_eligible(self, now):
        """(priority, 0) of the queue to serve now, or (None, when) with the time something
        may become eligible (None: nothing queued)."""
        if self.rate_bps and self.link_free_at > now:
            return None, self.link_free_at
        wake = None
        pause_until = self.pause_until
        for prio in range(NUM_PRIORITIES - 1, -1, -1):
            if self.queues[prio]:
                until = pause_until[prio]
                if until > now:
                    if wake is None or until < wake:
                        wake = until
                    continue
                if until:
                    self._end_pause(prio, until)
                return prio, 0
        return None, wake

    def dequeue(self, priority):
        """(job, enq_timestamp_us, enq_qdepth) from the head of queue `priority`."""
        item = self.queues[priority].popleft()
        self.backlog -= 1
        self.dequeued[priority] += 1
        return item

    def occupy_link(self, nbytes, now):
        """Account `nbytes` leaving at the shaped rate: the link is busy until the returned time."""
        if not self.rate_bps:
            return now
        start = self.link_free_at
        if start < now - CATCH_UP_SECONDS:
            start = now
        self.link_free_at = start + nbytes * 8 / self.rate_bps
        return self.link_free_at

    def depth(self, priority):
        return len(self.queues[priority])

    def clear(self):
        for queue in self.queues:
            queue.clear()
        self.backlog = 0

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
