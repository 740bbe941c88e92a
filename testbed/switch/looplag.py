"""How late a real-time switch loop runs: the part of the PFC response time that comes from
the machine, not the model.

The loop asks to wake at the next time something is due (a queue may send, a delayed frame
arrives); when it gets to run later than that (other processes had the CPU), every frame
that arrived meanwhile waited in the socket, and an XOFF it should have sent left that much
later. `LagHistogram` keeps those lateness samples in logarithmic buckets (1 us .. 10 s, 20
per decade: percentiles within 12%) so the headroom can be sized from a high percentile.
"""
import math

BUCKETS_PER_DECADE = 20
MIN_LAG_S = 1e-6
MAX_LAG_S = 10.0
_DECADES = round(math.log10(MAX_LAG_S / MIN_LAG_S))
NUM_BUCKETS = _DECADES * BUCKETS_PER_DECADE + 1


class LagHistogram:
    __slots__ = ("counts", "samples", "max_s")

    def __init__(self):
        self.counts = [0] * NUM_BUCKETS
        self.samples = 0
        self.max_s = 0.0

    def add(self, lag_s):
        if lag_s < MIN_LAG_S:
            bucket = 0
        else:
            bucket = min(NUM_BUCKETS - 1, 1 + int(math.log10(lag_s / MIN_LAG_S) * BUCKETS_PER_DECADE))
        self.counts[bucket] += 1
        self.samples += 1
        if lag_s > self.max_s:
            self.max_s = lag_s

    def percentile(self, q):
        """The lag (seconds) that `q` percent of the samples do not exceed (upper bucket edge)."""
        if not self.samples:
            return 0.0
        rank = math.ceil(self.samples * q / 100.0)
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(self.max_s, _upper_edge(bucket))
        return self.max_s

    def summary(self):
        return {"samples": self.samples,
                "p50_us": round(self.percentile(50) * 1e6), "p99_us": round(self.percentile(99) * 1e6),
                "p99_9_us": round(self.percentile(99.9) * 1e6), "max_us": round(self.max_s * 1e6)}

    def reset(self):
        self.counts = [0] * NUM_BUCKETS
        self.samples = 0
        self.max_s = 0.0


def _upper_edge(bucket):
    return MIN_LAG_S * 10 ** (bucket / BUCKETS_PER_DECADE)
