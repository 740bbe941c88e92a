"""Dask preload for the sweep's LocalCluster workers: Ctrl-C in the terminal reaches every
process of the foreground group, workers included; the sweep command handles it (keeps the
finished points, closes the cluster), so a worker ignores SIGINT instead of dying noisily."""
import signal
import threading


def dask_setup(worker):  # noqa: ARG001 (Dask's preload hook signature)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
