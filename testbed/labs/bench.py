"""`rocelab bench labs`: the wall time of `rocelab lab all --quick` (issue #15's benchmark figure,
goal <= 10 minutes on 2 cores), its seeds in one process (`--workers 1`) beside the same
command on a LocalCluster of one worker per core (the default), and whether both gave the same
findings (they must: virtual time is deterministic).

Each run is the command itself in a fresh process, timed from the outside, into a temporary
directory (kept, and named, when ROCELAB_BENCH_KEEP=DIR is set: DIR/serial and DIR/parallel).
`--quick` runs one seed per lab instead of three (a rough figure, not the benchmark's).
Figures only, never pass/fail: the machine's load average is printed beside them.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 600


def _run(out, extra):
    cmd = [sys.executable, "-m", "testbed.cli", "lab", "all", "--quick", "--out", str(out), *extra]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    (Path(out) / "bench.log").write_text(done.stdout)
    return wall, done.returncode, load, os.getloadavg()[0]


def _labs(out):
    """{lab: (findings' values, per-seed wall seconds, per-seed CPU seconds)} from OUT/<lab>/."""
    found = {}
    for path in sorted(Path(out).glob("*/lab.json")):
        lab = json.loads(path.read_text())
        cpu = []
        for d in lab["seeds_detail"]:
            record = path.parent / d["dir"] / "point.json"
            cpu.append(json.loads(record.read_text()).get("cpu_s") if record.exists() else None)
        found[lab["lab"]] = ([f["values"] for f in lab["findings"]],
                             [d.get("elapsed_s") for d in lab["seeds_detail"]], cpu)
    return found


def idle_estimate(labs, workers):
    """What the seeds' own CPU seconds give on otherwise idle cores: (their sum, the longest
    seed, the parallel wall they bound: max(sum / workers, longest))."""
    cpu = [c or 0.0 for _, _, seeds in labs.values() for c in seeds]
    total, longest = sum(cpu), max(cpu, default=0.0)
    return total, longest, max(total / max(workers, 1), longest)


def main(quick=False):
    keep = os.environ.get("ROCELAB_BENCH_KEEP")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="rocelab-bench-labs-"))
    seeds = ["--seeds", "1"] if quick else []
    cores = os.cpu_count() or 1
    print(f"   rocelab lab all --quick{' --seeds 1' if quick else ''}: every lab, {cores} cores")
    try:
        runs = {}
        for name, extra in (("serial", ["--workers", "1"]), ("parallel", [])):
            out = root / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            runs[name] = (_run(out, extra + seeds), _labs(out))
        (s_wall, s_status, s_load0, s_load1), serial = runs["serial"]
        (p_wall, p_status, p_load0, p_load1), parallel = runs["parallel"]
        print(f"   {'':34} {'wall':>9}  exit  load average (start, end)")
        print(f"   seeds in one process (--workers 1) {s_wall / 60:6.1f} min  {s_status:4}  {s_load0:.1f}, {s_load1:.1f}")
        print(f"   LocalCluster, {cores} workers (default) {p_wall / 60:6.1f} min  {p_status:4}  {p_load0:.1f}, "
              f"{p_load1:.1f}")
        print(f"   speedup {s_wall / p_wall:.2f}x; goal <= {GOAL_S / 60:.0f} min for the quick set: the default took "
              f"{p_wall / 60:.1f} min")
        print("   per lab, wall seconds per seed (serial | parallel, each seed on its worker):")
        for lab in serial:
            s_seeds = " ".join(f"{v or 0:.0f}" for v in serial[lab][1])
            p_seeds = " ".join(f"{v or 0:.0f}" for v in parallel.get(lab, ([], [], []))[1])
            print(f"     {lab:13} {s_seeds:>18} | {p_seeds}")
        total, longest, bound = idle_estimate(parallel, cores)
        print(f"   the seeds' own CPU: {total / 60:.1f} min in all, the longest seed {longest:.0f} s: on {cores} otherwise "
              f"idle cores the parallel run would take about {bound / 60:.1f} min plus the cluster's start-up")
        same = serial.keys() == parallel.keys() and all(serial[k][0] == parallel[k][0] for k in serial)
        print(f"   findings identical serial vs parallel: {'yes' if same else 'NO'} ({len(serial)} labs)")
        print(f"   outputs: {root}" if keep else "   (set ROCELAB_BENCH_KEEP=DIR to keep both outputs)")
        return 0 if same and s_status == p_status == 0 else 1
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
