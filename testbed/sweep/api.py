"""The sweep as a Python API (what `rocelab sweep` and the labs call).

    from testbed.sweep import grid, run_sweep, summaries
    points = grid.check(grid.build(["--spines", "2", "--size", "64K"], [("hash", ["5tuple", "qpn"])], [0, 1]))
    doc = run_sweep(points, "sweeps/hash", workers=2)       # -> the sweep.json document
    # or, for a list of option lists (each exactly `rocelab run --clock virtual OPTIONS`):
    [s["collective"]["busbw_gbps"] for s in summaries([["--seed", "0"], ["--seed", "1"]], "runs/seeds")]
    # any kind of point (a lab's seeds: testbed.sweep.labpoint.LabPoint), results in order:
    run_here_or_on_cluster(points, out, workers=2)          # -> [PointResult]
"""
import time
from pathlib import Path

from testbed.sweep import grid, report
from testbed.sweep.cluster import client_for
from testbed.sweep.runner import Interrupted, all_complete, not_run, remove_stale_temporaries, run_points


def run_sweep(points, out, scheduler=None, workers=None, knobs=None, seeds=None, base_options=(), progress=None):
    """Run checked `points` on a LocalCluster (`workers` processes, default one per core) or on
    the Dask scheduler at `scheduler`; writes OUT/points/, sweep.json, sweep.csv, index.html and
    returns the sweep.json document (its "status" is "interrupted" after Ctrl-C, which is then
    re-raised as KeyboardInterrupt once everything finished is written)."""
    knobs = list(knobs if knobs is not None else dict.fromkeys(k for p in points for k, _ in p.knobs))
    seeds = list(seeds if seeds is not None else dict.fromkeys(p.seed for p in points))
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.monotonic()
    where = scheduler or f"local cluster of {workers or 'one worker per core'}"
    interrupted = False
    try:
        if all_complete(points, out):     # a rerun of a finished sweep: no cluster to start
            results = run_points(points, out, None, progress=progress)
        else:
            with client_for(scheduler, workers) as client:
                # A LocalCluster's workers write each point beside its directory: one killed
                # mid-point (closing gives a busy worker 4 s) left its files in /tmp for good.
                results = run_points(points, out, client, progress=progress, shared_disk=scheduler is None)
    except Interrupted as exc:
        results, interrupted = exc.results, True
    except KeyboardInterrupt:       # while the cluster started: no point ran
        results, interrupted = not_run(points, out), True
    if interrupted and scheduler is None:   # the cluster is closed: what its workers left half-written goes
        remove_stale_temporaries(Path(out) / "points")
    wall = {"started": started, "elapsed_s": round(time.monotonic() - t0, 3), "scheduler": where}
    from testbed.net.lifecycle import ctrl_c_held
    doc = None
    try:
        with ctrl_c_held():         # the report is written whole; a Ctrl-C meanwhile acts once it is
            doc = report.write_all(out, results, knobs, seeds, base_options, interrupted, wall)
    except KeyboardInterrupt:
        if doc is None:             # a second Ctrl-C, which acts at once
            raise
        interrupted = True
    if interrupted:
        raise SweepInterrupted(doc)
    return doc


def run_here_or_on_cluster(points, out, scheduler=None, workers=None, on_result=None, progress=None):
    """Run `points` (any kind, testbed/sweep/runner.py) on the Dask scheduler at `scheduler`, or
    on a LocalCluster of `workers` (default one per core, at most one per point), or in this
    process when that is 1: the same tasks and the same writing either way. Returns a PointResult per point, in
    order; Ctrl-C raises testbed.sweep.runner.Interrupted with the results gathered so far."""
    if scheduler is None:
        import os
        workers = min(workers or os.cpu_count() or 1, max(len(points), 1))   # no idle workers to start
    if (scheduler is None and workers == 1) or all_complete(points, out):
        return run_points(points, out, None, on_result=on_result, progress=progress)
    try:
        with client_for(scheduler, workers) as client:
            # A LocalCluster's workers share this disk: no point is packed and shipped back.
            return run_points(points, out, client, on_result=on_result, progress=progress,
                              shared_disk=scheduler is None)
    except Interrupted:
        if scheduler is None:       # the cluster is closed: what its workers left half-written goes
            for parent in dict.fromkeys(p.directory(out).parent for p in points):
                remove_stale_temporaries(parent)
        raise


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during run_sweep, after the finished points and sweep.json were written."""

    def __init__(self, doc):
        super().__init__("interrupted")
        self.doc = doc


def summaries(option_lists, out, scheduler=None, workers=None, names=None):
    """Each option list run as `rocelab run --clock virtual OPTIONS` (validated first, GridError
    on a refusal) on the cluster; returns their summary.json dicts in order (None for a point
    that produced none). `names` (optional, one per list) label the points' directories."""
    points = []
    for i, options in enumerate(option_lists):
        options = [str(o) for o in options]
        seed = _seed_of(options)
        knobs = (("name", names[i]),) if names else ()
        points.append(grid.Point(knobs, seed, tuple(options)))
    grid.check(points, max_points=len(points))
    doc = run_sweep(points, out, scheduler=scheduler, workers=workers, knobs=["name"] if names else [])
    import json
    found = []
    for row in doc["points"]:
        path = Path(out) / "points" / row["id"] / "summary.json"
        found.append(json.loads(path.read_text()) if path.exists() and row["status"] in ("ok", "failed") else None)
    return found


def _seed_of(options):
    from testbed.net.cli import RunRefused, parse_point
    try:
        args, _ = parse_point(options)
    except RunRefused as exc:
        raise grid.GridError(f"options {' '.join(options)}: rocelab run would refuse them: {exc}") from None
    return args.seed
