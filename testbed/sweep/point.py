"""What a worker does with one point: `rocelab run --clock virtual` of its options into a
private temporary directory, and the whole run directory sent back packed (a tar), so the
client alone writes DIR/points/<id>/ — workers on other machines need no shared disk, and a
point that ran twice (its first worker died after finishing) is still written once.
A worker that shares the client's disk (a LocalCluster, or the client itself) runs the point
straight into a hidden scratch directory beside its destination instead (`into`), which the
client renames into place: a lab's first seed has gigabytes of captures, not worth a tar.
"""
import contextlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

RUN_LOG = "run.log"         # what the run printed (its nccl-tests table, its one-line errors)


def execute(argv, into=None):
    """Run the point (into `into` on a shared disk, see run_captured); never raises for a point's own failure (it is in the returned dict):
    {"exit": status or None, "error": one line or None, "summary": dict or None,
     "files": tar bytes of the run directory, "elapsed_s", "cpu_s" (this process's CPU time
     meanwhile), "worker"}."""
    from testbed.net.cli import run_point

    return run_captured(lambda out: (run_point(list(argv), out), None), into=into)


def run_captured(body, into=None):
    """What every kind of point shares: `body(out)` -> (exit status, summary or None; None reads
    OUT/summary.json) runs with its output captured into OUT/run.log; returns execute()'s dict.
    An exception in `body` is the point's error. OUT is a private temporary directory, packed
    into the reply's "files"; or `into` (emptied first: a retried point's earlier attempt), left
    in place and named by the reply's "path", when the client shares this disk."""
    if into is None:
        tmp = Path(tempfile.mkdtemp(prefix="rocelab-point-"))
        out = tmp / "run"
    else:
        tmp, out = None, Path(into)
        shutil.rmtree(out, ignore_errors=True)
    log = io.StringIO()
    t0, cpu0 = time.monotonic(), time.process_time()
    status, error, summary = None, None, None
    try:
        # A worker runs one point at a time (single-threaded workers), so the process-wide
        # redirect catches exactly this run's output.
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            status, summary = body(out)
    except Exception as exc:        # a bug in a model: recorded as this point's error
        error = one_line(f"{type(exc).__name__}: {exc}")
        log.write(traceback.format_exc())
    except BaseException:           # Ctrl-C or SIGTERM here: no half-written scratch is left behind
        shutil.rmtree(tmp or out, ignore_errors=True)
        raise
    elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_LOG).write_text(log.getvalue())
        if summary is None:
            summary = _read_summary(out)
        if error is None and status != 0:
            error = one_line(_first_error(summary, log.getvalue(), status))
        return {"exit": status, "error": error, "summary": summary,
                "files": pack(out) if tmp is not None else None, "path": None if tmp is not None else str(out),
                "elapsed_s": round(elapsed, 3), "cpu_s": round(cpu, 3), "worker": f"{socket.gethostname()}:{os.getpid()}"}
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def one_line(text, limit=300):
    """An error for a table cell: whitespace (newlines too) folded, at most `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_summary(out):
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def _first_error(summary, log, status):
    if summary:
        for key in ("faults", "errors"):
            if summary.get(key):
                return str(summary[key][0])
        if summary.get("status") not in (None, "ok"):
            return f"status {summary['status']}"
    lines = [line for line in log.splitlines() if line.startswith("rocelab run:")]
    return lines[-1] if lines else f"exit status {status}"


def pack(directory):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(Path(directory).rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buf.getvalue()


def unpack(data, directory):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(directory, filter="data")    # no absolute paths or links out of it
