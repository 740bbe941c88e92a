"""A progress bar for a virtual-time run: bytes delivered of the job's total, the simulated
time reached and events per second of wall time. Drawn only on a terminal."""
import sys
import time

from tqdm import tqdm


class RunProgress:
    def __init__(self, runners, stream=None):
        self.runners = runners
        self.stream = stream or sys.stderr
        total = sum(r.expected_bytes()[0] for r in runners) if runners else 0
        # A bar not drawn is not made: tqdm's first bar makes a multiprocessing lock (a named
        # semaphore), which a sweep or lab worker stopped mid-point by Ctrl-C never releases,
        # and the resource tracker warns of "leaked semaphore objects" on the terminal.
        self.bar = None
        if self.stream.isatty():
            self.bar = tqdm(total=total or None, unit="B", unit_scale=True, file=self.stream, leave=False,
                            desc="virtual time", dynamic_ncols=True)
        self._wall0 = time.monotonic()
        self._last = 0.0

    def __call__(self, sim_now, events):
        if self.bar is None:
            return
        wall = time.monotonic()
        if wall - self._last < 0.2:
            return
        self._last = wall
        done = sum(c.acked for r in self.runners for c in r.conns.values())
        if self.bar.total and done > self.bar.total:
            self.bar.total = done
        self.bar.n = done
        rate = events / max(wall - self._wall0, 1e-9)
        self.bar.set_postfix_str(f"t={sim_now * 1e6:,.1f} us, {rate / 1e3:,.0f}k events/s", refresh=False)
        self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.close()
