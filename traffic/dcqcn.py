"""DCQCN at the sender (the reaction point), one instance per QP.

After Zhu et al., "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM
2015): a CNP cuts the current rate Rc by alpha/2 and remembers the rate before
the cut as the target Rt; alpha moves toward 1 on every CNP and decays by (1-g)
each alpha period without one. Recovery is driven by a timer and a byte counter:
the first F increase events are fast recovery (Rc halves its distance to Rt),
then additive increase (Rt += AI) and, once both counters passed F, hyper
increase (Rt += i * HAI). Times are in seconds and rates in bit/s; the defaults
are scaled to lab link rates (megabits), not to 100G NIC firmware.
"""
from dataclasses import asdict, dataclass, fields


@dataclass
class DcqcnParams:
    g: float = 1 / 256                 # alpha gain
    alpha_init: float = 1.0
    alpha_period_s: float = 0.001      # alpha decays once per period without CNP
    timer_period_s: float = 0.0015     # rate-increase timer
    byte_counter: int = 64 * 1024      # rate-increase byte counter
    fast_recovery_steps: int = 5       # F
    ai_fraction: float = 0.01          # additive increase, as a fraction of line rate
    hai_fraction: float = 0.1          # hyper increase, as a fraction of line rate
    min_rate_fraction: float = 0.001   # floor, as a fraction of line rate
    min_decrease_interval_s: float = 0.0  # ignore CNPs closer together than this

    @classmethod
    def from_dict(cls, data, where="dcqcn"):
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known - {"enabled"}
        if unknown:
            raise ValueError(f"{where}: unknown parameter(s) {sorted(unknown)}; known: {sorted(known)}")
        params = cls(**{k: v for k, v in data.items() if k in known})
        for name in known:
            value = getattr(params, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
                text = repr(value) if len(repr(value)) <= 60 else repr(value)[:60] + "..."
                raise ValueError(f"{where}.{name}: expected a non-negative number below 1e9, got {text}")
        if not 0 < params.g <= 1:
            raise ValueError(f"{where}.g: must be in (0, 1], got {params.g}")
        return params

    def to_dict(self):
        return asdict(self)


class Dcqcn:
    """Rate state of one QP. Call on_cnp / on_sent / tick with the current time."""

    TRACE_LIMIT = 2000

    def __init__(self, line_rate_bps, params=None, now=0.0):
        self.p = params or DcqcnParams()
        self.line = float(line_rate_bps)
        self.rate = self.line            # Rc
        self.target = self.line          # Rt
        self.alpha = self.p.alpha_init
        self.min_rate = self.line * self.p.min_rate_fraction
        self._bytes = 0
        self._t_count = 0
        self._b_count = 0
        self._cnp_in_period = False
        self._next_alpha = now + self.p.alpha_period_s
        self._next_timer = now + self.p.timer_period_s
        self._last_decrease = -1e9
        self.decreases = 0
        self.increases = 0
        self.lowest_rate = self.rate
        self.trace = [(now, self.rate)]

    def on_cnp(self, now):
        self._cnp_in_period = True
        if now - self._last_decrease < self.p.min_decrease_interval_s:
            return
        self._last_decrease = now
        self.target = self.rate
        self.rate = max(self.min_rate, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self._bytes = self._t_count = self._b_count = 0
        self._next_timer = now + self.p.timer_period_s
        self.decreases += 1
        self.lowest_rate = min(self.lowest_rate, self.rate)
        self._record(now)

    def on_sent(self, nbytes, now):
        if self.rate >= self.line:
            return
        self._bytes += nbytes
        if self._bytes >= self.p.byte_counter:
            self._bytes -= self.p.byte_counter
            self._b_count += 1
            self._increase(now)

    def tick(self, now):
        """Run the alpha and increase timers up to `now`; returns the next time it needs a tick."""
        if not self.decreases:
            # The reaction point starts with its first CNP (until then nothing limits the QP):
            # alpha must not decay over the idle time before the flow ever met congestion.
            self._next_alpha = now + self.p.alpha_period_s
            self._next_timer = now + self.p.timer_period_s
            return min(self._next_alpha, self._next_timer)
        while now >= self._next_alpha:
            if not self._cnp_in_period:
                self.alpha *= 1 - self.p.g
            self._cnp_in_period = False
            self._next_alpha += self.p.alpha_period_s
        while now >= self._next_timer:
            self._next_timer += self.p.timer_period_s
            if self.rate < self.line:
                self._t_count += 1
                self._increase(now)
        return min(self._next_alpha, self._next_timer)

    def _increase(self, now):
        f = self.p.fast_recovery_steps
        if max(self._t_count, self._b_count) < f:
            pass                                    # fast recovery: keep the target
        elif min(self._t_count, self._b_count) > f:
            self.target += (min(self._t_count, self._b_count) - f) * self.p.hai_fraction * self.line
        else:
            self.target += self.p.ai_fraction * self.line
        self.target = min(self.target, self.line)
        self.rate = min(self.line, (self.target + self.rate) / 2)
        self.increases += 1
        self._record(now)

    def _record(self, now):
        if len(self.trace) < self.TRACE_LIMIT:
            self.trace.append((now, self.rate))

    def stats(self):
        return {"rate_bps": round(self.rate), "target_bps": round(self.target), "alpha": round(self.alpha, 6),
                "lowest_rate_bps": round(self.lowest_rate), "decreases": self.decreases,
                "increases": self.increases}
