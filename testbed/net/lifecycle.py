"""Signals and teardown: whatever happens, a run leaves no namespaces, veths or processes.

Three rules make that true:

* every resource is written into the run's :class:`testbed.cleanup.Ledger` before it is
  created (a process right after it is spawned, with SIGINT/SIGTERM held back so the
  spawn and the record cannot be split) -- so `rocelab clean` can finish a killed run;
* SIGTERM and SIGHUP become an exception (:class:`Terminated`), so the ``finally`` that
  tears down always runs; it is not a KeyboardInterrupt, because the Mininet CLI treats
  Ctrl-C as "interrupt this command" and carries on, while SIGTERM must end the run;
* teardown kills every process still inside a host namespace we created (found by the
  namespace's inode, never by name), so a namespace cannot outlive the run.
"""
import contextlib
import os
import signal
import threading
import time

from testbed.cleanup import pid_alive

_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind everything and exit (status 143 / 129)."""

    def __init__(self, signum):
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self):
        return 128 + self.signum


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM/SIGHUP back for a short window (spawn + record, teardown).

    A signal that arrives meanwhile acts when the window closes, so the interruption still
    happens -- just not between creating something and writing it down."""
    with _signals_held(second_acts_at_once=False):
        yield


@contextlib.contextmanager
def interruptions_held():
    """A first SIGINT/SIGTERM/SIGHUP inside the block waits for its end; a second one acts at
    once. For the seconds a finished phase's report takes to write: Ctrl-C there lost the
    whole summary."""
    with _signals_held(second_acts_at_once=True):
        yield


@contextlib.contextmanager
def ctrl_c_held(act_after=True):
    """interruptions_held() for SIGINT alone (SIGTERM and SIGHUP keep their way). Yields the list
    of the Ctrl-Cs held so far, so that a loop can stop at its next turn rather than wherever
    the main thread was (inside a library, halfway through a write). `act_after=False`: a first
    Ctrl-C is dropped, for a block that ends the command anyway (nothing is left to stop)."""
    with _signals_held(second_acts_at_once=True, signals=(signal.SIGINT,), act_after=act_after) as held:
        yield held


@contextlib.contextmanager
def _signals_held(second_acts_at_once, signals=_DEFERRED, act_after=True):
    """Handlers that note the signal, not a signal mask: a process-directed signal goes to any
    thread that does not block it (gRPC's, a pcap writer's), and Python then runs its handler
    in the main thread all the same, so a mask on the main thread held nothing back. Yields
    the list of the signals held."""
    held = []
    if not _in_main_thread():
        yield held
        return

    def hold(signum, _frame):
        if held and second_acts_at_once:
            _act_on(signum, previous[signum])
        held.append(signum)

    # An ignored signal stays ignored (`cmd &` in a script, nohup): noted, it stopped a sweep's
    # loop and cancelled its points while nothing else acted on it.
    previous = {s: signal.signal(s, hold) for s in signals if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held and act_after:
        _act_on(held[0], previous[held[0]])


def _act_on(signum, handler):
    """What `handler` (the one the window replaced) would have done with the signal; the default
    action becomes the exception a run unwinds (and tears down) with."""
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, None)
        return
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


@contextlib.contextmanager
def termination_as_exception():
    """Inside this block SIGTERM/SIGHUP raise :class:`Terminated` in the main thread."""
    if not _in_main_thread():
        yield
        return

    def raise_terminated(signum, _frame):
        raise Terminated(signum)

    previous = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C must raise even if a caller (e.g. a test runner) changed its handler.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def netns_id(pid):
    """The network namespace of `pid` as 'net:[inode]', or None if it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def pids_in_netns(ns):
    """Every process whose network namespace is `ns` (as returned by :func:`netns_id`)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and netns_id(entry) == ns:
            found.append(int(entry))
    return found


def _root_namespaces():
    return {netns_id(1), netns_id(os.getpid())}


def stop_process(proc, timeout=2.0):
    """SIGTERM, then SIGKILL after `timeout`; reaps it if it is our child.

    `proc` is a subprocess.Popen or a PID."""
    pid = proc if isinstance(proc, int) else proc.pid
    if isinstance(proc, int):
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.02)
        if pid_alive(pid):
            _signal(pid, signal.SIGKILL)
            _reap(pid, block=True)
        return
    if proc.poll() is not None:
        return
    _signal(pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except Exception:  # subprocess.TimeoutExpired
        _signal(pid, signal.SIGKILL)
        proc.wait()


def stop_processes(procs, timeout=2.0):
    """stop_process for many Popen objects at once: all get SIGTERM, then share one deadline."""
    procs = [p for p in procs if p.poll() is None]
    for proc in procs:
        _signal(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.01))
        except Exception:  # subprocess.TimeoutExpired
            _signal(proc.pid, signal.SIGKILL)
            proc.wait()


def kill_namespace(ns, leader=None):
    """SIGKILL every process inside network namespace `ns` (never the root one)."""
    if ns is None or ns in _root_namespaces():
        return 0
    killed = 0
    for _ in range(5):  # processes may fork while we kill: repeat until none is left
        pids = pids_in_netns(ns)
        if not pids:
            break
        for pid in pids:
            if _signal(pid, signal.SIGKILL):
                killed += 1
        for pid in pids:
            _reap(pid, block=(pid == leader))
        time.sleep(0.01)
    return killed


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _reap(pid, block=False):
    try:
        os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        pass
