"""PortModel: a switch port's rate, queue depth, delay, jitter and loss (both clocks; no Mininet)."""
import math
from dataclasses import asdict, dataclass, replace

DEFAULT_QUEUE_DEPTH = 64  # packets per priority queue, BMv2's default


@dataclass(frozen=True)
class PortModel:
    rate_mbps: float  # egress rate the port drains at (0 = unshaped)
    queue_depth: int = DEFAULT_QUEUE_DEPTH  # packets per priority queue
    delay_us: float = 0.0  # one-way propagation delay
    jitter_us: float = 0.0  # uniform extra delay 0..jitter
    loss: float = 0.0  # probability a frame is lost on the wire

    def __post_init__(self):
        problems = []
        numbers = (self.rate_mbps, self.queue_depth, self.delay_us, self.jitter_us, self.loss)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers):
            raise ValueError(f"port model: every value must be a finite number (got {numbers})")
        if self.rate_mbps < 0:
            problems.append(f"rate {self.rate_mbps} Mb/s is negative")
        if int(self.queue_depth) != self.queue_depth or self.queue_depth < 1:
            problems.append(f"queue depth {self.queue_depth} must be a whole number of packets >= 1")
        if self.delay_us < 0 or self.jitter_us < 0:
            problems.append("delay and jitter must not be negative")
        if not 0.0 <= self.loss <= 1.0:
            problems.append(f"loss {self.loss} is not a probability between 0 and 1")
        if problems:
            raise ValueError("port model: " + "; ".join(problems))

    def with_rate(self, rate_mbps):
        return replace(self, rate_mbps=rate_mbps)

    def as_dict(self):
        return asdict(self)
