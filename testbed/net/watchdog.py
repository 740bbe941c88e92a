"""The run watchdog: notices a switch or rank process that died while traffic runs.

Without it a killed switch is named nowhere: every rank waits for its job's timeout and
summary.json blames the ranks. :class:`Watchdog` is polled from the rank loop (every
:data:`CHECK_INTERVAL_S`, well within the 2 s a user waits at most) and returns one line
per dead process, which ends the run as "failed" naming it.
"""
import os
import signal
import time

CHECK_INTERVAL_S = 0.25


def _exit_text(returncode):
    if returncode is None:
        return "is gone"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Watchdog:
    """Dead processes of a running phase: the fabric's switches and the job's ranks.

    ranks: [(rank, host name, is_running(), report path)]; a rank that is no longer
    running and left no report died (a finished rank always writes its report first)."""

    def __init__(self, fabric, ranks=(), clock=time.monotonic):
        self.fabric = fabric
        self.ranks = list(ranks)
        self.clock = clock
        self.next_check = 0.0
        self.faults = []

    def _switch_faults(self):
        found = []
        for node in getattr(self.fabric, "switches", ()):
            for proc in getattr(node, "processes", lambda: [])():
                code = proc.poll()
                if code is None:
                    continue
                line = f"switch {node.name} (pid {proc.pid}) {_exit_text(code)}"
                # a switch that exited by itself said why at the end of its log; a killed one did not
                last = _last_line(getattr(node, "log_path", None)) if code >= 0 else None
                found.append(line + (f"; its log ends: {last}" if last else ""))
        return found

    def _rank_faults(self):
        found = []
        for rank, host, is_running, report in self.ranks:
            if not is_running() and not os.path.exists(report):
                found.append(f"rank {rank} ({host}) process died without writing its report")
        return found

    def check(self, force=False):
        """New faults since the last call (at most every CHECK_INTERVAL_S unless forced)."""
        now = self.clock()
        if not force and now < self.next_check:
            return []
        self.next_check = now + CHECK_INTERVAL_S
        new = [f for f in self._switch_faults() + self._rank_faults() if f not in self.faults]
        self.faults.extend(new)
        return new


def _last_line(path):
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 2048))
            lines = [l for l in f.read().decode("utf-8", "replace").splitlines() if l.strip()]
    except OSError:
        return None
    return lines[-1].strip()[:200] if lines else None
