"""What a worker does with one point: `rocelab run --clock virtual` of its options into a
private temporary directory, and the whole run directory sent back packed (a tar), so the
client alone writes DIR/points/<id>/ — workers on other machines need no shared disk, and a
point that ran twice (its first worker died after finishing) is still written once.
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


def execute(argv):
    """Run the point; never raises for a point's own failure (it is in the returned dict):
    {"exit": status or None, "error": one line or None, "summary": dict or None,
     "files": tar bytes of the run directory, "elapsed_s", "cpu_s" (this process's CPU time
     meanwhile), "worker"}."""
    from testbed.net.cli import run_point

    return run_captured(lambda out: (run_point(list(argv), out), None))


def run_captured(body):
    """What every kind of point shares: `body(out)` -> (exit status, summary or None; None reads
    OUT/summary.json) runs into a private temporary directory with its output captured into
    OUT/run.log; returns execute()'s dict. An exception in `body` is the point's error."""
    tmp = Path(tempfile.mkdtemp(prefix="rocelab-point-"))
    out = tmp / "run"
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
    elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_LOG).write_text(log.getvalue())
        if summary is None:
            summary = _read_summary(out)
        if error is None and status != 0:
            error = one_line(_first_error(summary, log.getvalue(), status))
        return {"exit": status, "error": error, "summary": summary, "files": pack(out),
                "elapsed_s": round(elapsed, 3), "cpu_s": round(cpu, 3), "worker": f"{socket.gethostname()}:{os.getpid()}"}
    finally:
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
