"""Run a list of points on a Dask client (or here, one after another) and keep their directories.

A point is anything with an ``id``, a ``task()`` -> (function, arguments) that a worker calls
and that returns testbed.sweep.point.execute()'s dict, a ``directory(out)`` where its files
go, ``as_dict()`` for its point.json, and ``resumable``: a `rocelab run` option list
(testbed.sweep.grid.Point, in DIR/points/<id>/) or one seed of a lab
(testbed.sweep.labpoint.LabPoint, in OUT/seedN/).

Each point's directory is written by this process alone, whole or not at all: unpacked into
a hidden .<name>.tmp-<pid> beside it, then renamed into place. A resumable point whose
directory is complete is not run again. Dask reruns a point whose worker died on another
worker (up to its allowed-failures); the client takes each point's first result only.
Without a client each point's task runs in this process: the same function, the same writing.
"""
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from testbed.sweep.point import execute, one_line, unpack

POINT_FILE = "point.json"     # in each point directory: its id, knobs, seed, options, status
STATUSES = ("ok", "failed", "error", "cancelled")


@dataclass
class PointResult:
    """What became of one point. status: ok (exit 0), failed (the run ended and wrote its
    summary but did not succeed: deterministic, kept), error (no result: refused, crashed, its
    workers kept dying; retried by a rerun), cancelled (not run: the sweep was interrupted)."""

    point: object
    status: str
    summary: dict = None
    error: str = None
    directory: Path = None
    elapsed_s: float = None
    worker: str = None
    resumed: bool = False       # complete from an earlier sweep, not run this time
    exit: int = None
    cpu_s: float = None         # CPU seconds of the worker process while it ran the point


class Interrupted(Exception):
    """Ctrl-C during run_points; carries the results gathered so far."""

    def __init__(self, results):
        super().__init__("interrupted")
        self.results = results


def run_points(points, out, client, on_result=None, progress=None, shared_disk=None):
    """Run `points` on `client` (None: in this process, in order), their directories under OUT;
    returns a PointResult per point in the given order. `on_result(result)` is called as each
    ends (resumed ones first). Ctrl-C cancels what has not finished and raises Interrupted.
    `shared_disk` (default: only without a client): the workers write each point straight into
    a scratch directory beside its destination instead of shipping it back packed."""
    out = Path(out)
    if shared_disk is None:
        shared_disk = client is None
    for parent in dict.fromkeys(p.directory(out).parent for p in points):
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(parent)
    results = {}
    todo = []
    for point in points:
        done = load_point(point.directory(out), point) if point.resumable else None
        if done is not None:
            results[point.id] = done
            _notify(on_result, done)
        else:
            todo.append(point)
    if progress:
        progress.start(total=len(points), resumed=len(results))

    def finished(point, result):
        results[point.id] = result
        _notify(on_result, result)
        return result

    try:
        if client is None:
            for point in todo:
                function, arguments = point.task(scratch(point, out) if shared_disk else None)
                result = finished(point, _settle(point, out, function(*arguments)))
                if progress:
                    progress.finished(result, running=0)
        else:
            _on_client(todo, out, client, finished, progress, shared_disk)
    except KeyboardInterrupt:
        raise Interrupted(_ordered(points, results)) from None
    finally:
        if progress:
            progress.close()
    return _ordered(points, results)


def scratch(point, out):
    """Where a worker on this disk runs `point`: hidden beside its destination, on the same file
    system (so the final rename is atomic), removed by the next run if it was left behind."""
    final = point.directory(out)
    return str(final.parent / f".{final.name}.tmp-{os.getpid()}")


def _on_client(todo, out, client, finished, progress, shared_disk):
    from distributed import as_completed
    from testbed.net.lifecycle import ctrl_c_held

    tag = uuid.uuid4().hex[:8]     # fresh keys: a long-lived scheduler may remember old ones
    futures = {}
    pending = set()
    try:
        # Ctrl-C stops this loop at its next turn (a second one at once). Raised wherever the
        # main thread was, it landed inside Dask's client: in a future's __del__ it printed
        # "Exception ignored in: <function Future.__del__ ...> KeyboardInterrupt" and was lost,
        # and the sweep ran on to the end.
        with ctrl_c_held() as stop:
            for i, p in enumerate(todo):
                function, arguments = p.task(scratch(p, out) if shared_disk else None)
                # Dask does not keep the order of separate submissions: points start in the given
                # order because the earlier ones have the higher priority (lab all gives its longest first).
                future = client.submit(function, *arguments, key=f"rocelab-point-{p.id}-{tag}", pure=False,
                                       priority=len(todo) - i)
                futures[future] = p
                pending.add(future)
            stream = as_completed(list(futures), loop=client.loop)
            while pending and not stop:
                batch = stream.next_batch(block=False)
                if not batch:
                    if progress:
                        progress.tick(running=_running(client, pending))
                    time.sleep(0.2)
                    continue
                for future in batch:
                    point = futures[future]
                    pending.discard(future)
                    result = finished(point, _collect(future, point, out))
                    if progress:
                        progress.finished(result, running=_running(client, pending))
    except BaseException:       # Ctrl-C, SIGTERM, a failed write: the points not finished are not wanted
        for future in pending:
            future.cancel()
        raise


_threads_seen = {"at": -1e9, "n": 0}


def _running(client, pending):
    """Points under way: those not finished, at most one per worker thread (the scheduler is
    asked about its workers once a second at most: the display needs no more)."""
    from testbed.sweep.cluster import worker_threads
    now = time.monotonic()
    if now - _threads_seen["at"] >= 1.0:
        _threads_seen.update(at=now, n=worker_threads(client))
    return min(len(pending), _threads_seen["n"])


def _ordered(points, results):
    return [results.get(p.id) or PointResult(p, "cancelled") for p in points]


def _notify(callback, result):
    if callback:
        callback(result)


def _collect(future, point, out):
    """The point's result from its future, its directory written atomically when it has one."""
    try:
        reply = future.result()
    except Exception as exc:        # KilledWorker (its workers kept dying), a lost scheduler ...
        return PointResult(point, "error", error=one_line(f"{type(exc).__name__}: {exc}"))
    return _settle(point, out, reply)


def _settle(point, out, reply):
    """The point's result from its task's reply (testbed.sweep.point.execute's dict)."""
    status = "ok" if reply["exit"] == 0 else ("failed" if reply["summary"] is not None else "error")
    result = PointResult(point, status, summary=reply["summary"], error=reply["error"],
                         elapsed_s=reply["elapsed_s"], worker=reply["worker"], exit=reply["exit"],
                         cpu_s=reply.get("cpu_s"))
    if status == "error":
        # No result to keep; the run's log goes beside the points for a look, and a rerun retries.
        errors = Path(out) / "errors"
        errors.mkdir(parents=True, exist_ok=True)
        tmp = _unpacked(reply, errors / f".{point.id}.tmp-{os.getpid()}")
        log = tmp / "run.log"
        (errors / f"{point.id}.log").write_text(log.read_text() if log.exists() else (reply["error"] or ""))
        shutil.rmtree(tmp, ignore_errors=True)
        return result
    result.directory = write_point(point.directory(out), point, reply, status)
    return result


def write_point(final, point, reply, status):
    """Unpack the reply into `final` (replacing an older copy), whole or not at all."""
    tmp = _unpacked(reply, final.parent / f".{final.name}.tmp-{os.getpid()}")
    record = {**point.as_dict(), "status": status, "error": reply["error"], "exit": reply["exit"],
              "elapsed_s": reply["elapsed_s"], "cpu_s": reply.get("cpu_s"), "worker": reply["worker"]}
    (tmp / POINT_FILE).write_text(json.dumps(record, indent=1) + "\n")
    old = None
    if final.exists():     # a rerun of a point that is not resumed (a lab's seed): the new one wins
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)           # atomic: a reader sees no point or the whole point
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _unpacked(reply, where):
    """The point's files in a directory of their own: where its worker wrote them (a shared
    disk), or unpacked from the reply into `where`."""
    if reply.get("path"):
        return Path(reply["path"])
    shutil.rmtree(where, ignore_errors=True)
    unpack(reply["files"], where)
    return where


def not_run(points, out):
    """Each point's result when none ran (Ctrl-C while the cluster started): complete from an
    earlier run, or cancelled."""
    out = Path(out)
    return [(p.resumable and load_point(p.directory(out), p)) or PointResult(p, "cancelled") for p in points]


def all_complete(points, out):
    """Whether every point already has its complete result under `out` (a rerun with nothing
    left to run needs no cluster)."""
    out = Path(out)
    return all(p.resumable and load_point(p.directory(out), p) is not None for p in points)


def load_point(directory, point):
    """A completed point's result from its directory (resume), or None."""
    try:
        record = json.loads((directory / POINT_FILE).read_text())
        summary = json.loads((directory / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if record.get("argv") != list(point.argv) or record.get("status") not in ("ok", "failed"):
        return None
    return PointResult(point, record["status"], summary=summary, error=record.get("error"), directory=directory,
                       elapsed_s=record.get("elapsed_s"), cpu_s=record.get("cpu_s"), worker=record.get("worker"), resumed=True,
                       exit=record.get("exit"))


def remove_stale_temporaries(points_dir):
    # Left by a client that died while writing a point: never a complete point.
    for path in list(points_dir.glob(".*.tmp-*")) + list(points_dir.glob(".*.old-*")):
        shutil.rmtree(path, ignore_errors=True)
