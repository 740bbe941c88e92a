"""Every P4Runtime call of the TE app runs in a separate worker process, never under eventlet.

Why a process and not a thread: ryu-manager monkey-patches *threading* too
(``hub.patch(thread=True)`` in its main), and it does so in place, so gRPC's Python
layer and p4runtime-shell (whose stream channel lives in a ``threading.Thread``) would
get green locks and green threads even when called from a native thread. A child
interpreter that never imports eventlet has none of that: gRPC runs there exactly as
in any plain script.

Protocol: length-prefixed pickles over the child's stdin/stdout. The child keeps its
real stdout for frames only and sends everything printed (by p4runtime-shell, grpc) to
stderr. The parent waits by polling the pipe with ``time.sleep``, which yields to other
green threads under Ryu and is a plain sleep elsewhere; reads use the unpatched
``os.read`` on a non-blocking descriptor. The child exits when its stdin closes, so it
never outlives the app.

Child-side operations: ``open(kind, fabric_dict)`` creates the programmer
(:func:`testbed.te.programmer.build_programmer`), ``call(method, *args)`` runs one of its
methods, ``probe(switches, timeout_s)`` asks switches for their P4Runtime Capabilities,
``whoami()`` reports the child's PID and whether eventlet is loaded in it.
"""
import os
import pickle
import struct
import subprocess
import sys
import time

_HEADER = struct.Struct("!I")



def _unpatched_os():
    """The os module as it was before eventlet: under Ryu, os.read is green and blocks.

    Looked up only in the parent: the child must never import eventlet at all.
    """
    if "eventlet" not in sys.modules:
        return os
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from eventlet import patcher
    return patcher.original("os")


class WorkerError(RuntimeError):
    """The worker process failed, timed out or is gone; the message says which call."""


class RemoteError(Exception):
    """An exception raised in the worker, carried back by type name and message."""

    def __init__(self, type_name, message):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message = type_name, message

    def __reduce__(self):
        return (RemoteError, (self.type_name, self.message))


class ProcessWorker:
    def __init__(self, python=None, start_timeout=30.0):
        from testbed import REPO_ROOT
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen([python or sys.executable, "-m", "testbed.te.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     close_fds=True)
        self._os = _unpatched_os()
        self._out = self.proc.stdin.fileno()
        self._in = self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        self._buffer = b""
        self._replies = {}
        self._abandoned = set()  # calls that timed out: their late replies are dropped
        self._next_id = 0
        self.pid = self.proc.pid
        self.call("whoami", timeout=start_timeout)

    def call(self, op, *args, timeout=30.0):
        if self.proc.poll() is not None:
            raise WorkerError(f"the P4Runtime worker process has exited (status {self.proc.returncode})")
        self._next_id += 1
        call_id = self._next_id
        frame = pickle.dumps((call_id, op, args))
        try:
            self._os.write(self._out, _HEADER.pack(len(frame)) + frame)
        except OSError as exc:
            raise WorkerError(f"cannot reach the P4Runtime worker process: {exc}") from None
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while call_id not in self._replies:
            if not self._pump():
                if self.proc.poll() is not None:
                    raise WorkerError(f"the P4Runtime worker process died during {op} "
                                      f"(status {self.proc.returncode})")
                if time.monotonic() > deadline:
                    self._abandoned.add(call_id)
                    raise WorkerError(f"{op} did not finish within {timeout:g} s")
                time.sleep(delay)  # green under Ryu: the REST API keeps answering
                delay = min(delay * 2, 0.02)
        ok, value = self._replies.pop(call_id)
        if ok:
            return value
        raise value

    def _pump(self):
        """Read what the child has written; True when at least one reply was completed."""
        try:
            chunk = self._os.read(self._in, 1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        got = False
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if len(self._buffer) < _HEADER.size + size:
                break
            call_id, ok, value = pickle.loads(self._buffer[_HEADER.size:_HEADER.size + size])
            self._buffer = self._buffer[_HEADER.size + size:]
            if call_id in self._abandoned:
                self._abandoned.discard(call_id)
                continue
            self._replies[call_id] = (ok, value)
            got = True
        return got

    def close(self, timeout=5.0):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # EOF: the child's loop ends
            except OSError:
                pass
            deadline = time.monotonic() + timeout
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.proc.kill()  # our own child, by its Popen handle
                self.proc.wait()


# --- the child side ---------------------------------------------------------------------

def _serve(frames_in, frames_out):
    programmer = None
    while True:
        header = frames_in.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the parent closed the pipe: done
        (size,) = _HEADER.unpack(header)
        call_id, op, args = pickle.loads(frames_in.read(size))
        try:
            if op == "whoami":
                value = {"pid": os.getpid(), "eventlet_loaded": "eventlet" in sys.modules}
            elif op == "open":
                from testbed.te.programmer import build_programmer
                programmer = build_programmer(*args)
                value = None
            elif op == "call":
                if programmer is None:
                    raise RuntimeError("no programmer opened in the worker")
                method, *rest = args
                value = getattr(programmer, method)(*rest)
            elif op == "probe":
                from testbed.clos import Clos
                from testbed.te.p4rt_probe import probe_all
                fabric, *rest = args
                value = probe_all(Clos.from_dict(fabric), *rest)
            else:
                raise RuntimeError(f"unknown worker operation {op!r}")
            reply = (call_id, True, value)
        except Exception as exc:
            reply = (call_id, False, _portable(exc))
        data = pickle.dumps(reply)
        frames_out.write(_HEADER.pack(len(data)) + data)
        frames_out.flush()


def _portable(exc):
    """Exceptions of the project's own types travel as they are; others by name and text."""
    try:
        pickle.loads(pickle.dumps(exc))
        if type(exc).__module__.startswith("testbed."):
            return exc
    except Exception:
        pass
    return RemoteError(type(exc).__name__, str(exc))


def main():
    frames_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by libraries goes to stderr, never into the frame stream
    sys.stdout = sys.stderr
    frames_in = os.fdopen(os.dup(0), "rb")
    try:
        _serve(frames_in, frames_out)
    except (BrokenPipeError, KeyboardInterrupt):
        pass


if __name__ == "__main__":
    # Re-import under the real module name, so pickled exceptions name testbed.te.worker.
    from testbed.te.worker import main as _main
    _main()
