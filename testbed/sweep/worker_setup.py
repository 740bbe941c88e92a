"""Dask preload for sweep workers (the LocalCluster's; `dask worker --preload
testbed.sweep.worker_setup` on other machines, optional there).

1. Ctrl-C in the terminal reaches every process of the foreground group, workers included; the
   sweep command handles it (keeps the finished points, closes the cluster), so a worker
   ignores SIGINT instead of dying noisily.
2. Warm-up while the cluster starts, on every worker at once: the run's modules and the P4
   front end (its parser tables are built on first use) are loaded before the first point,
   not inside it. Nothing a point computes is kept: each still compiles its own program.
"""
import signal
import threading


def dask_setup(worker):  # noqa: ARG001 (Dask's preload hook signature)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        warm_up()
    except Exception:   # a broken install shows up as the points' own errors, with their names
        pass


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
