"""The sweep's progress bar: points done of the total, running, failed, and tqdm's ETA.
Drawn only on a terminal; silent otherwise (logs, CI, tests)."""
import sys

from tqdm import tqdm


class SweepProgress:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.bar = None
        self.failed = 0

    def start(self, total, resumed=0):
        self.bar = tqdm(total=total, initial=resumed, unit="pt", file=self.stream, desc="points",
                        disable=not self.enabled, dynamic_ncols=True, leave=True)
        self._postfix(0)

    def finished(self, result, running):
        if result.status not in ("ok",):
            self.failed += 1
        self.bar.update(1)
        self._postfix(running)

    def tick(self, running):
        self._postfix(running)

    def _postfix(self, running):
        self.bar.set_postfix_str(f"running {running}, failed {self.failed}", refresh=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
