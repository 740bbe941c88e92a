"""Run blocking calls (gRPC / P4Runtime) in one native OS thread, never in a green thread.

Ryu's manager monkey-patches sockets, select and time with eventlet. gRPC's client
blocks inside its C core on native locks: run from a green thread it would freeze the
whole hub (REST included) or deadlock on callbacks. So every P4Runtime call goes to a
dedicated thread created with eventlet's *original* threading module, fed by an
original queue; the caller waits by polling with ``time.sleep``, which under the
monkey-patch yields to other green threads and without it is a plain sleep. The
worker is the only thread that ever touches the gRPC objects, so they need no locks.
"""
import time

import warnings

try:  # eventlet is there with Ryu; without it, the stdlib modules are already native
    with warnings.catch_warnings():  # its import-time deprecation notice is not ours to show
        warnings.simplefilter("ignore")
        from eventlet import patcher as _patcher
    _threading = _patcher.original("threading")
    _queue = _patcher.original("queue")
except ImportError:  # pragma: no cover
    import queue as _queue
    import threading as _threading


class WorkerError(RuntimeError):
    pass


class _Job:
    __slots__ = ("fn", "args", "kwargs", "done", "result", "error")

    def __init__(self, fn, args, kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done, self.result, self.error = False, None, None


class NativeWorker:
    """One native thread executing submitted calls in order."""

    def __init__(self, name="te-p4runtime"):
        self._jobs = _queue.Queue()
        self._thread = _threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.ident = self._thread.ident

    def _run(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.result = job.fn(*job.args, **job.kwargs)
            except BaseException as exc:  # handed back to the caller, re-raised there
                job.error = exc
            job.done = True

    def call(self, fn, *args, timeout=30.0, **kwargs):
        """Run ``fn(*args, **kwargs)`` on the worker; wait (yielding) for its result."""
        if not self._thread.is_alive():
            raise WorkerError("the P4Runtime worker thread has stopped")
        if _threading.get_ident() == self.ident:
            return fn(*args, **kwargs)  # already on the worker (nested call)
        job = _Job(fn, args, kwargs)
        self._jobs.put(job)
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while not job.done:
            if time.monotonic() > deadline:
                raise WorkerError(f"{getattr(fn, '__name__', fn)} did not finish within {timeout:g} s")
            time.sleep(delay)  # green under Ryu: other requests keep being served
            delay = min(delay * 2, 0.02)
        if job.error is not None:
            raise job.error
        return job.result

    def close(self, timeout=5.0):
        self._jobs.put(None)
        self._thread.join(timeout)


def current_thread_is_native():
    """True when the calling code runs outside any eventlet green thread."""
    try:
        from eventlet import greenthread
        import greenlet
    except ImportError:  # pragma: no cover
        return True
    # Green threads are greenlets with a parent (the hub); a native thread's code runs
    # in that thread's root greenlet.
    return greenlet.getcurrent().parent is None and not isinstance(greenlet.getcurrent(),
                                                                 greenthread.GreenThread)
