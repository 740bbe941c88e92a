"""Dask preload for sweep workers (the LocalCluster's; `dask worker --preload
testbed.sweep.worker_setup` on other machines, optional there).

1. Ctrl-C in the terminal reaches every process of the foreground group, workers included; the
   sweep command handles it (keeps the finished points, closes the cluster), so a worker
   ignores SIGINT instead of dying noisily. (The local cluster's workers already ignore it from
   birth: testbed.sweep.cluster forks them from a server that does.)
2. A worker being closed does not log Dask's heartbeat traceback (QuietHeartbeatOnClose).
3. Warm-up while the cluster starts, on every worker at once: the run's modules and the P4
   front end (its parser tables are built on first use) are loaded before the first point,
   not inside it. Nothing a point computes is kept: each still compiles its own program.
"""
import logging
import signal
import threading

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


def dask_setup(worker):
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("distributed.worker").addFilter(QuietHeartbeatOnClose(worker))
    try:
        warm_up()
    except Exception:   # a broken install shows up as the points' own errors, with their names
        pass


class QuietHeartbeatOnClose(logging.Filter):
    """Drops "Failed to communicate with scheduler during heartbeat" and its CommClosedError
    traceback while the worker closes. Worker.close() shuts the worker's connections while a
    heartbeat may still be on one of them (dask/distributed#7891); a point running in the
    worker's thread holds the GIL and stretches each heartbeat, so after a Ctrl-C the traceback
    came often. While the worker runs the message stays: the scheduler is really unreachable."""

    def __init__(self, worker):
        super().__init__()
        self.worker = worker

    def filter(self, record):
        from distributed.core import Status
        closing = self.worker.status in (Status.closing, Status.closed)
        return not (closing and record.getMessage().startswith(HEARTBEAT_FAILED))


def warm_up():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import testbed.net.cli  # noqa: F401
    import testbed.net.experiment  # noqa: F401
    import testbed.sim.fabric  # noqa: F401
    import traffic.runner  # noqa: F401
    from testbed.control.controller import DEFAULT_PROGRAM
    from testbed.p4engine import compile_file
    compile_file(str(DEFAULT_PROGRAM))
