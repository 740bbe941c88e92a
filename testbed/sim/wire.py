"""Cables on the simulated clock: serialization at the link rate, then propagation delay.

A frame is counted as the switch's shaper counts it (its bytes, no preamble, IFG or FCS), so
a switch port that starts a frame only when its link is free never finds this wire busy; a
NIC that hands over a small burst has it serialized here, back to back.
"""


class Wire:
    """One direction of a cable; `deliver(frame)` runs at the far end when the last bit lands."""

    __slots__ = ("scheduler", "rate_bps", "delay_s", "deliver", "free_at", "up", "frames", "bytes", "lost")

    def __init__(self, scheduler, rate_bps, delay_s, deliver):
        if not rate_bps > 0:
            raise ValueError(f"wire rate {rate_bps} b/s must be positive")
        if not delay_s >= 0:
            raise ValueError(f"wire delay {delay_s} s must not be negative")
        self.scheduler = scheduler
        self.rate_bps = float(rate_bps)
        self.delay_s = float(delay_s)
        self.deliver = deliver
        self.free_at = 0.0
        self.up = True
        self.frames = 0
        self.bytes = 0
        self.lost = 0

    def send(self, frame):
        sched = self.scheduler
        if not self.up:
            self.lost += 1
            return False
        frame = bytes(frame)      # senders patch one buffer per packet (traffic/fastpath.py)
        now = sched.now()
        start = self.free_at if self.free_at > now else now
        self.free_at = end = start + len(frame) * 8 / self.rate_bps
        self.frames += 1
        self.bytes += len(frame)
        sched.at(end + self.delay_s, self._arrive, frame)
        return True

    def _arrive(self, frame):
        if self.up:          # a link taken down loses what was on it
            self.deliver(frame)
        else:
            self.lost += 1
