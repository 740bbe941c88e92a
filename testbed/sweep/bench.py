"""`rocelab bench sweep`: what Dask buys and costs for a grid of virtual-time points.

1. An 8-point grid (hash x QPs per connection x 2 seeds on a 2x2x2 Clos) run serially in this
   process (each point through the same run_point as `rocelab run`), then as `rocelab sweep`
   does on a LocalCluster of one worker per core: wall times and the speedup (goal >= 1.8x on
   2 cores). Both start warm (modules loaded, P4 front end built: the workers do it while the
   cluster starts); the cluster's start-up is printed apart and counted in the second figure.
2. The per-point overhead of going through Dask: the sweep's wall x workers minus the points'
   own time on their workers, per point (scheduling, shipping the run directory back, idle
   workers at the end), and the round trip of an empty task.
"""
import os
import tempfile
import time
from pathlib import Path

SPEEDUP_GOAL = 1.8
SHAPE = ["--spines", "2", "--leaves", "2", "--hosts-per-leaf", "2", "--oversubscription", "2"]


def _grid(quick):
    from testbed.sweep import grid
    size = "64K" if quick else "256K"
    return grid.check(grid.build(SHAPE + ["--size", size], [("hash", ["5tuple", "qpn"]),
                                                           ("qps-per-conn", ["1", "4"])], [0, 1]))


def _serial(points, tmp):
    from testbed.sweep.point import execute
    from testbed.sweep.worker_setup import warm_up
    warm_up()       # what each cluster worker does while the cluster starts: both sides start warm
    t0, cpu0 = time.monotonic(), time.process_time()
    own = [execute(list(p.argv))["elapsed_s"] for p in points]
    return time.monotonic() - t0, own, time.process_time() - cpu0


def _on_cluster(points, tmp, workers):
    from testbed.sweep.cluster import client_for
    from testbed.sweep.runner import run_points

    t0 = time.monotonic()
    with client_for(None, workers) as client:       # exactly the cluster `rocelab sweep` starts
        client.wait_for_workers(workers)
        started = time.monotonic() - t0
        t1 = time.monotonic()
        results = run_points(points, tmp, client)
        wall = time.monotonic() - t1
        trips = []
        for _ in range(20):
            t = time.perf_counter()
            client.submit(_nothing, pure=False).result()
            trips.append(time.perf_counter() - t)
    return started, wall, results, sorted(trips)[len(trips) // 2]


def _nothing():
    return None


def main(quick=False):
    workers = os.cpu_count() or 1
    load = os.getloadavg()[0]
    points = _grid(quick)
    print(f"   {len(points)} points (hash x qps-per-conn x 2 seeds, 2x2x2 Clos, {'64K' if quick else '256K'} ring "
          f"AllReduce); {workers} cores, load average {load:.1f} at the start")
    with tempfile.TemporaryDirectory(prefix="rocelab-bench-sweep-") as tmp:
        serial_wall, serial_own, serial_cpu = _serial(points, Path(tmp) / "serial")
        started, wall, results, trip = _on_cluster(points, Path(tmp) / "sweep", workers)
    bad = [r.point.id for r in results if r.status != "ok"]
    own = [r.elapsed_s or 0.0 for r in results]
    speedup = serial_wall / wall if wall else 0.0
    overhead = (wall * workers - sum(own)) / len(points)
    print(f"   serial, in this process:     {serial_wall:7.1f} s  ({serial_wall / len(points):.2f} s a point)")
    print(f"   LocalCluster, {workers} workers:     {wall:7.1f} s  (+ {started:.1f} s to start the cluster)")
    print(f"   speedup: {speedup:.2f}x (goal >= {SPEEDUP_GOAL}x on 2 cores); with the cluster's start-up "
          f"{serial_wall / (wall + started):.2f}x")
    print(f"   per-point overhead of Dask: {overhead:.2f} s a point (sweep wall x workers - the points' own "
          f"time on their workers: {sum(own):.1f} s there vs {sum(serial_own):.1f} s serially); an empty "
          f"task's round trip {trip * 1000:.1f} ms (median of 20)")
    by_worker = {}
    for r in results:
        by_worker[r.worker] = by_worker.get(r.worker, 0.0) + (r.cpu_s or 0.0)
    busiest = max(by_worker.values(), default=0.0)
    print(f"   CPU: {serial_cpu:.1f} s serially, {sum(by_worker.values()):.1f} s on the workers (busiest "
          f"{busiest:.1f} s): on otherwise idle cores the sweep would take about {busiest:.1f} s, "
          f"{serial_cpu / busiest if busiest else 0:.2f}x")
    print(f"   load average now {os.getloadavg()[0]:.1f} (other work on the machine makes the wall figures "
          "lower bounds)")
    if bad:
        print(f"   points that did not finish ok: {', '.join(bad)}")
        return 1
    return 0
