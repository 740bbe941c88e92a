"""Where points run: a Dask distributed client, either on a LocalCluster this command starts
(single-threaded worker processes, one per core, on 127.0.0.1 only; Dask's HTTP port is any
free one there, so that runs side by side do not contend for 8787) and stops,
or on an existing scheduler (`--scheduler tcp://HOST:PORT`, workers started with
`dask worker` on machines that have the project installed).
"""
import contextlib
import logging
import os
import re
import sys

CONNECT_TIMEOUT_S = 5
_ADDRESS = re.compile(r"^(tcp|tls|inproc|ws|wss|ucx)://\S+$|^[A-Za-z0-9.\-\[\]:]+:\d+$")
WORKER_SETUP = "testbed.sweep.worker_setup"
LOCAL_WORKER_CONFIG = {"distributed.worker.profile.enabled": False,
                       "distributed.admin.system-monitor.interval": "2s",
                       # forked from a server that ignores Ctrl-C (_start_fork_server)
                       "distributed.worker.multiprocessing-method": "forkserver"}
# the resource tracker's warning filter (start_quiet_resource_tracker)
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


class ClusterError(RuntimeError):
    """The cluster cannot be reached or started; one line."""


def check_address(address):
    if not _ADDRESS.match(address or ""):
        raise ClusterError(f"--scheduler {address!r}: expected an address such as tcp://10.0.0.5:8786")
    return address


@contextlib.contextmanager
def client_for(scheduler=None, workers=None, timeout_s=CONNECT_TIMEOUT_S):
    """A connected dask.distributed Client (and the LocalCluster behind it, closed on exit)."""
    from distributed import Client, LocalCluster
    _quiet_dask_logs()      # after Dask's first import, which sets its loggers' levels

    if scheduler:
        check_address(scheduler)
        _probe(scheduler, timeout_s)
        try:
            client = Client(scheduler, timeout=f"{timeout_s}s", set_as_default=False)
        except Exception as exc:    # refused, timed out, or not a Dask scheduler at all
            raise ClusterError(f"--scheduler {scheduler}: no Dask scheduler answered within {timeout_s} s "
                               f"({_one_line(exc)})") from None
        try:
            yield client
        finally:
            client.close()
        return
    import dask
    from testbed.net.lifecycle import ctrl_c_held, interruptions_held
    n = workers or os.cpu_count() or 1
    cluster = client = None
    from distributed.deploy.spec import SpecCluster
    existing = set(SpecCluster._instances)
    # The workers' statistical profiler samples the running point's stack every 10 ms: CPU a
    # pure-Python simulation pays for a profile nobody reads here. The configuration holds for
    # the cluster's life: a worker that dies is restarted the same way.
    with dask.config.set(LOCAL_WORKER_CONFIG):
        try:
            # A first Ctrl-C while the cluster starts acts once it is up, so it is closed: a
            # LocalCluster interrupted halfway is left to Dask's exit hook, which fails on it
            # with a traceback ("Status.init").
            with interruptions_held():
                _start_fork_server()
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
                                       preload=[WORKER_SETUP])   # its HTTP port: any free one, on loopback
                client = Client(cluster, set_as_default=False)
            yield client
        finally:
            # The client first, then the cluster: its workers, then its scheduler. That takes
            # seconds (a worker busy with a point is given 4 s, then killed); a Ctrl-C meanwhile
            # has nothing left to stop and is dropped: the cluster is closed whole and the
            # command goes on to write what it has.
            with ctrl_c_held(act_after=False):
                for closing in (client, cluster):
                    if closing is not None:
                        closing.close()
                if cluster is None:
                    _close_half_made(set(SpecCluster._instances) - existing)


def _close_half_made(clusters):
    """Close the LocalCluster a second Ctrl-C cut short while it started (it acts at once, inside
    Dask's constructor): left to Dask's exit hook, it failed with a traceback ("Exception ignored
    in atexit callback ... AssertionError: Status.init") for the workers it was still starting.
    Closing it here stops what did start; the workers it stops while they start are not an
    error (unretrieved, Dask's start tasks printed "Task exception was never retrieved")."""
    for cluster in clusters:
        loop = getattr(getattr(cluster, "loop", None), "asyncio_loop", None)
        if loop is not None:
            loop.set_exception_handler(_unless_a_stopped_start)
        try:
            cluster.close(timeout=10)
        except (AssertionError, TimeoutError, OSError):
            pass
        cluster.shutdown_on_close = False      # nothing left for the exit hook


def _unless_a_stopped_start(loop, context):
    exc = context.get("exception")
    if isinstance(exc, RuntimeError) and str(exc).startswith("Nanny failed to start"):
        return
    loop.default_exception_handler(context)


def _start_fork_server():
    """Start multiprocessing's fork server, which the local cluster's workers are forked from,
    with Ctrl-C ignored. Ctrl-C reaches every process of the terminal's foreground group: a
    worker spawned afresh took it while it imported Dask, before the preload that ignores it
    ran, and printed a KeyboardInterrupt traceback, and the cluster's start then failed with
    "Nanny failed to start". The server keeps the ignored SIGINT it starts with and hands it to
    every worker it forks (restarted ones too), from their first instruction. A Ctrl-C in the
    few milliseconds the server takes to start is lost (it is ignored then)."""
    import multiprocessing.forkserver
    import signal
    import threading

    import dask
    from distributed.utils import get_mp_context
    start_quiet_resource_tracker()
    if threading.current_thread() is not threading.main_thread():
        return          # Ctrl-C is the main thread's business; Dask starts the server itself
    get_mp_context()    # Dask's list of modules the server imports once for all its workers
    # What the Nanny sets in this process before each spawn; a forked worker has the server's.
    for name, value in dask.config.get("distributed.nanny.pre-spawn-environ").items():
        if value is not None:
            os.environ.setdefault(name, str(value))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _probe(address, timeout_s):
    """A refused or unroutable TCP address fails here at once (Dask would retry until its timeout)."""
    import socket
    from urllib.parse import urlsplit
    if not address.startswith(("tcp://", "tls://")) and "://" in address:
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise ClusterError(f"--scheduler {address}: not reachable ({_one_line(exc)})") from None
    # Something listens: is it a Dask scheduler? (Dask's own Client, given another server, can
    # hang in its handshake and again when it is collected; a bare handshake fails cleanly.)
    import asyncio
    try:
        asyncio.run(_handshake(address, timeout_s))
    except Exception as exc:
        raise ClusterError(f"--scheduler {address}: no Dask scheduler answered within {timeout_s} s "
                           f"({_one_line(exc)})") from None


async def _handshake(address, timeout_s):
    import asyncio
    from distributed.comm import connect
    from distributed.security import Security
    args = Security().get_connection_args("client")     # TLS settings from Dask's configuration
    comm = await asyncio.wait_for(connect(address, timeout=timeout_s, **args), timeout_s + 1)
    await comm.close()


def worker_threads(client):
    """Threads across the cluster's workers right now (what can run at once)."""
    try:
        return sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
    except Exception:     # the scheduler is going away: the progress display only
        return 0


def _quiet_dask_logs():
    # Worker deaths and restarts are handled here and reported per point; Dask's own warnings
    # about them (and its tornado noise) would only break the progress bar.
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _one_line(exc):
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def start_quiet_resource_tracker():
    """Start multiprocessing's resource tracker (if it is not running yet) without its warnings.
    A second Ctrl-C that kills workers Dask is still starting can leave the tracker holding a
    semaphore of theirs; at exit it unlinks what is left, and printed "There appear to be 1 leaked
    semaphore objects" and "[Errno 2] No such file or directory" (already gone) under the one
    line a Ctrl-C prints. It cleans up all the same; only the warnings go. The tracker takes
    its warning filters from the command line it is started with (sys.warnoptions)."""
    import multiprocessing.resource_tracker
    sys.warnoptions.append(QUIET_TRACKER)
    try:
        multiprocessing.resource_tracker.ensure_running()
    finally:
        sys.warnoptions.remove(QUIET_TRACKER)
