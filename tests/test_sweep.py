"""`rocelab sweep`: grids of virtual-time runs on Dask distributed (testbed/sweep/).

A 2-worker LocalCluster sweep; the same points on a separately started `dask scheduler` and two
`dask worker` processes on 127.0.0.1 (the multi-machine path on one machine); a worker killed
mid-sweep; Ctrl-C then resume; each point equal to its single `rocelab run`; bad input.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.cli import main as rocelab
from testbed.net.cli import run_point

REPO = Path(__file__).resolve().parents[1]
ROCELAB = [sys.executable, "-m", "testbed.cli"]
DASK = Path(sys.executable).parent / "dask"
# Tiny points: 3 switches, 2 hosts across the spine, 64 KB ring AllReduce.
BASE = ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1", "--size", "64K"]
VARY = ["--vary", "hash=5tuple,qpn"]
ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def comparable(summary):
    """A summary without what may differ between runs of the same point."""
    return {k: v for k, v in summary.items() if k not in ("wall_clock", "name")}


def points_of(out):
    doc = json.loads((out / "sweep.json").read_text())
    summaries = {row["id"]: json.loads((out / "points" / row["id"] / "summary.json").read_text())
                 for row in doc["points"] if row["status"] in ("ok", "failed")}
    return doc, summaries


def no_leftovers(out):
    return not [p for p in (out / "points").iterdir() if p.name.startswith(".")]


# What Python and Dask printed when a Ctrl-C landed in a worker or inside Dask (each one seen in a
# sweep's output before it was fixed); none of it may reach the user.
NOISE = ("Traceback", "KeyboardInterrupt", "Fatal Python error", "Nanny failed to start", "heartbeat",
         "CommClosedError", "StreamClosedError", "Exception ignored", "Task exception was never retrieved",
         "Task was destroyed", "leaked semaphore", "distributed.", "tornado.")


def session_processes(sid):
    """The live processes of session `sid`: a command started with start_new_session and all it
    started (zombies are dead: not counted)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, _pgrp, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(session) == sid and state != "Z":
            found.append(int(stat.parent.name))
    return found


def interrupt(cmd, ready, timeout=180, env=ENV, presses=1):
    """Run `cmd` in a session of its own and send its process group SIGINT, as a terminal's Ctrl-C
    does (to the command and its workers alike), once ready(proc) holds (`presses` times, 0.1 s
    apart). Returns (exit status, stdout, stderr, processes of the session still alive 10 s
    after it exited)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and not ready(proc) and time.monotonic() < deadline:
        time.sleep(0.05)
    for press in range(presses):
        if proc.poll() is None:
            time.sleep(0.1 if press else 0)
            os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    deadline = time.monotonic() + 10       # multiprocessing's helpers leave as the command exits
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.returncode, stdout, stderr, session_processes(proc.pid)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "local"
    status = rocelab(["sweep", "--out", str(out), "--workers", "2", *VARY, "--", *BASE])
    return status, out


def test_local_cluster_sweep_writes_every_point_and_the_report(local_sweep):
    status, out = local_sweep
    assert status == 0
    doc, summaries = points_of(out)
    assert doc["status"] == "complete" and doc["counts"]["ok"] == 2 and doc["knobs"] == ["hash"]
    assert sorted(row["knob:hash"] for row in doc["points"]) == ["5tuple", "qpn"]
    assert {s["config"]["fabric"]["hash"] for s in summaries.values()} == {"5tuple", "qpn"}
    assert all(s["clock"] == "virtual" and s["pcap_dir"] is None for s in summaries.values())
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("knob:hash,seed,status,busbw_gbps")
    for row in doc["points"]:
        s = summaries[row["id"]]
        assert row["busbw_gbps"] == s["collective"]["busbw_gbps"] > 0
        assert row["uplink_max_mean"] >= 1.0 and row["lossless_drops"] == 0
    page = (out / "index.html").read_text()
    assert "knob-hash.png" in page and (out / "knob-hash.png").stat().st_size > 1000
    assert no_leftovers(out)


def test_rerunning_a_finished_sweep_starts_no_cluster(local_sweep, monkeypatch, capsys):
    # the README's "rerunning the same command skips the points already complete": it still
    # started a local cluster for nothing (14 s of a 14 s rerun on 2 loaded cores)
    status, out = local_sweep
    assert status == 0
    from testbed.sweep import api

    def no_cluster(*_args, **_kwargs):
        raise AssertionError("a cluster was started for a sweep with nothing left to run")
    monkeypatch.setattr(api, "client_for", no_cluster)
    before = (out / "sweep.csv").read_text()
    assert rocelab(["sweep", "--out", str(out), "--workers", "2", *VARY, "--", *BASE]) == 0
    assert "2 kept from before" in capsys.readouterr().out
    assert (out / "sweep.csv").read_text().splitlines()[1:] == before.splitlines()[1:]


def test_each_point_equals_its_single_rocelab_run(local_sweep, tmp_path, capsys):
    _, out = local_sweep
    doc, summaries = points_of(out)
    for row in doc["points"]:
        record = json.loads((out / "points" / row["id"] / "point.json").read_text())
        single = tmp_path / row["id"]
        assert run_point(record["argv"], single) == 0
        alone = json.loads((single / "summary.json").read_text())
        assert comparable(alone) == comparable(summaries[row["id"]]), row["id"]


def test_bad_input_is_refused_before_anything_starts(tmp_path, capsys):
    with socket.socket() as s:      # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    not_dask = socket.create_server(("127.0.0.1", 0))     # a server that answers, but not as Dask

    def answer():
        for _ in range(2):
            conn, _ = not_dask.accept()
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" * 4)
    threading.Thread(target=answer, daemon=True).start()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"vary": {"hash": ["qpn"]}, "sedes": 2}))
    yaml_spec = tmp_path / "sweep.yaml"     # read: its 2 knob values x 2 seeds exceed a budget of 3
    yaml_spec.write_text("vary:\n  hash: [5tuple, qpn]\nseeds: 2\noptions: --spines 1 --leaves 2\n")
    cases = [
        (["--vary", "hsh=qpn"], "not an option of rocelab run (did you mean hash?)"),
        (["--vary", "hash=qpn,bogus"], "point hash=bogus, seed 0: rocelab run would refuse it"),
        (["--vary", "qps-per-conn=4,0"], "qps-per-conn=0"),
        (["--vary", "size=1M,-64K"], "argument --size: '-64K': a size from"),   # not "expected one argument"
        (["--vary", "hash="], "an empty value"),
        (["--seeds", "2000", "--vary", "hash=5tuple,qpn"], "4000 points, more than the budget of 1000"),
        (["--scheduler", f"tcp://127.0.0.1:{closed}"], "not reachable"),
        (["--scheduler", f"tcp://127.0.0.1:{not_dask.getsockname()[1]}"], "no Dask scheduler answered"),
        (["--vary", "hash=qpn", "--", "--clock", "real"], "a sweep runs virtual time only"),
        (["--spec", str(spec)], "unknown key 'sedes'"),
        (["--spec", str(yaml_spec), "--max-points", "3"], "the grid has 4 points, more than the budget of 3"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"], "--workers sizes the local cluster"),
    ]
    for args, words in cases:
        out = tmp_path / "never"
        t0 = time.monotonic()
        status = rocelab(["sweep", "--out", str(out), *args])
        err = capsys.readouterr().err
        assert status == 2, (args, err)
        assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
        assert not out.exists(), args
        assert time.monotonic() - t0 < 60      # a hang would never end; not a speed goal
    not_dask.close()


def test_grid_values_with_commas_and_stable_point_ids():
    from testbed.sweep import grid

    knob, values = grid.parse_vary("ecn=5,20,0.2;off")
    assert (knob, values) == ("ecn", ["5,20,0.2", "off"])
    points = grid.build(BASE, [(knob, values), grid.parse_vary("qps_per_conn=1,4")], [0, 3])
    assert len(points) == 8 and len({p.id for p in points}) == 8
    again = grid.build(BASE, [(knob, values), ("qps-per-conn", ["1", "4"])], [0, 3])
    assert [p.id for p in again] == [p.id for p in points]
    other_base = grid.build(BASE + ["--iterations", "2"], [(knob, values), ("qps-per-conn", ["1", "4"])], [0, 3])
    assert not {p.id for p in other_base} & {p.id for p in points}, "another sweep's results are never resumed"
    assert points[0].argv[-5:] == ("--qps-per-conn", "1", "--seed", "0", "--no-pcap")
    grid.check(points)


# --- the multi-machine path, on one machine ------------------------------------------------

@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1, killed by PID afterwards."""
    from distributed import Client

    tmp = tmp_path_factory.mktemp("dask")
    info = tmp / "scheduler.json"
    procs = []

    def start(args):
        log = open(tmp / f"{len(procs)}.log", "w")
        # Their scratch space dies with the test's, and so does the point directory of the worker
        # killed mid-point (a /tmp/rocelab-point-* left behind by every run of this file).
        env = {**ENV, "DASK_TEMPORARY_DIRECTORY": str(tmp), "TMPDIR": str(tmp)}
        procs.append(subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=tmp, start_new_session=True))
        log.close()
    try:
        # --no-dashboard would still open Dask's HTTP port (health, metrics) on every interface
        loopback_http = ["--dashboard-address", "127.0.0.1:0"]
        start(["scheduler", "--host", "127.0.0.1", "--port", "0", *loopback_http, "--scheduler-file", str(info)])
        deadline = time.monotonic() + 120
        address = None
        while address is None and time.monotonic() < deadline:
            try:
                address = json.loads(info.read_text())["address"]
            except (OSError, ValueError, KeyError):    # not there yet, or half-written (Dask writes it in place)
                time.sleep(0.2)
        for _ in range(2):
            start(["worker", address, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1", *loopback_http])
        with Client(address, timeout="60s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
            pids = client.run(os.getpid)           # {worker address: pid}
        yield address, pids
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_same_points_on_a_separate_scheduler_and_workers(dask_cluster, local_sweep, tmp_path):
    address, pids = dask_cluster
    out = tmp_path / "remote"
    assert rocelab(["sweep", "--out", str(out), "--scheduler", address, *VARY, "--", *BASE]) == 0
    doc, summaries = points_of(out)
    _, local = points_of(local_sweep[1])
    assert doc["status"] == "complete" and summaries.keys() == local.keys()
    for point_id, summary in summaries.items():
        assert comparable(summary) == comparable(local[point_id]), point_id
    ran_on = {row["worker"].rsplit(":", 1)[1] for row in doc["points"]}
    assert ran_on <= {str(pid) for pid in pids.values()}


def test_python_api_returns_the_summaries_of_option_lists(dask_cluster, local_sweep, tmp_path):
    from testbed.sweep import summaries
    from testbed.sweep.grid import GridError

    _, local = points_of(local_sweep[1])
    qpn = next(s for s in local.values() if s["config"]["fabric"]["hash"] == "qpn")
    found = summaries([BASE + ["--hash", "qpn", "--no-pcap"]], tmp_path / "api", scheduler=dask_cluster[0],
                      names=["qpn"])
    assert len(found) == 1 and comparable(found[0]) == comparable(qpn)
    with pytest.raises(GridError, match="--hash"):
        summaries([BASE + ["--hash", "nope"]], tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_failing_point_is_recorded_and_the_others_go_on(dask_cluster, tmp_path):
    address, _ = dask_cluster
    out = tmp_path / "failing"
    # a 1 us timeout ends the collective before it can finish: the run fails, deterministically
    cmd = ["sweep", "--out", str(out), "--scheduler", address, "--vary", "timeout-s=0.000001,30", "--", *BASE]
    assert rocelab(cmd) == 1
    doc, summaries = points_of(out)
    rows = {row["knob:timeout-s"]: row for row in doc["points"]}
    assert doc["status"] == "complete" and doc["counts"]["ok"] == 1 and doc["counts"]["failed"] == 1
    assert rows["30"]["status"] == "ok" and rows["0.000001"]["status"] == "failed"
    assert "timed out" in rows["0.000001"]["error"]
    assert summaries[rows["0.000001"]["id"]]["status"] == "failed"
    assert rocelab(cmd) == 1            # a failed point is a result: a rerun keeps it, runs nothing
    doc, _ = points_of(out)
    assert doc["counts"]["resumed"] == 2


def test_a_worker_killed_mid_point_loses_nothing(dask_cluster, local_sweep, tmp_path):
    from distributed import Client

    address, pids = dask_cluster
    out = tmp_path / "killed"
    proc = subprocess.Popen(ROCELAB + ["sweep", "--out", str(out), "--scheduler", address, *VARY, "--", *BASE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    victim = None
    with Client(address, timeout="60s", set_as_default=False) as client:
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            busy = [w for w, tasks in client.processing().items() if tasks]
            if busy:
                # killed at first sight: a point takes over a second, so it is still under way
                # (a wait here let short points finish first, rightly credited to the victim)
                victim = pids[busy[0]]
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.1)
    _, err = proc.communicate(timeout=300)
    assert victim is not None, "no worker ever ran a point"
    assert proc.returncode == 0, err
    doc, summaries = points_of(out)
    assert doc["status"] == "complete" and len(doc["points"]) == 2 == len(summaries)
    assert len({row["id"] for row in doc["points"]}) == 2
    assert all(not row["worker"].endswith(f":{victim}") for row in doc["points"])
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(summaries)
    _, local = points_of(local_sweep[1])
    for point_id, summary in summaries.items():
        assert comparable(summary) == comparable(local[point_id])


# --- Ctrl-C and resume ------------------------------------------------------------------------

def finished_points(out):
    points = out / "points"
    return [p for p in points.iterdir() if not p.name.startswith(".")] if points.exists() else []


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_ctrl_c_keeps_finished_points_and_a_rerun_finishes_the_rest(tmp_path):
    # Interrupted once a point is in, while the other runs. Before: now and then a worker, busy
    # with its point while the cluster closed, printed "distributed.worker - ERROR - Failed to
    # communicate with scheduler during heartbeat." and a CommClosedError traceback; a Ctrl-C
    # inside Dask's client printed "Exception ignored in: <function Future.__del__ ...>" and
    # was lost (the sweep ran to its end).
    out = tmp_path / "resume"
    cmd = ROCELAB + ["sweep", "--out", str(out), "--workers", "1", "--seeds", "2", "--", *BASE]
    status, stdout, stderr, left = interrupt(cmd, lambda proc: finished_points(out))
    assert status == 130, stderr
    assert stderr.splitlines() == [f"rocelab sweep: interrupted; 1 of 2 points kept in {out}/points "
                                   "(rerun the same command to finish)"], stderr
    assert not [n for n in NOISE if n in stdout + stderr], stdout + stderr
    assert not left, left
    doc, kept = points_of(out)
    assert doc["status"] == "interrupted" and len(kept) == 1
    assert [row["status"] for row in doc["points"]].count("cancelled") == 1
    assert no_leftovers(out)
    stamps = {pid: (out / "points" / pid / "point.json").stat().st_mtime_ns for pid in kept}

    res = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stderr
    doc, summaries = points_of(out)
    assert doc["status"] == "complete" and len(summaries) == 2 and doc["counts"]["resumed"] == 1
    assert {pid: (out / "points" / pid / "point.json").stat().st_mtime_ns for pid in kept} == stamps
    assert sorted(row["seed"] for row in doc["points"]) == [0, 1]


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_ctrl_c_leaves_nothing_of_the_point_a_worker_was_killed_in(tmp_path):
    # Closing the cluster gives a worker busy with a point 4 s, then kills it: the point's
    # scratch directory, in /tmp, was left there for good. One worker: the long point runs
    # when the short one is in.
    out, temp = tmp_path / "killed", tmp_path / "temp"
    temp.mkdir()
    cmd = ROCELAB + ["sweep", "--out", str(out), "--workers", "1", "--vary", "size=64K,64M", "--",
                     "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1"]
    status, stdout, stderr, left = interrupt(cmd, lambda proc: finished_points(out), env={**ENV, "TMPDIR": str(temp)})
    assert status == 130 and "1 of 2 points kept" in stderr, stderr
    assert not [n for n in NOISE if n in stdout + stderr], stdout + stderr
    assert not left and no_leftovers(out)
    assert not list(temp.glob("rocelab-point-*"))


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_ctrl_c_while_the_workers_start_is_one_line(tmp_path):
    # The workers, spawned afresh, took the Ctrl-C while they imported Dask (before the preload
    # that ignores it): each printed a KeyboardInterrupt traceback (or "Fatal Python error:
    # init_import_site"), the cluster's start failed with "Nanny failed to start" and the sweep
    # exited 1. Interrupted as soon as the cluster's processes exist (its workers, or the server
    # they are forked from).
    out = tmp_path / "start"
    status, stdout, stderr, left = interrupt(
        ROCELAB + ["sweep", "--out", str(out), "--workers", "2", "--seeds", "3", "--", *BASE],
        lambda proc: len(session_processes(proc.pid)) >= 4)
    assert status == 130, stderr
    assert stderr.splitlines() == [f"rocelab sweep: interrupted; 0 of 3 points kept in {out}/points "
                                   "(rerun the same command to finish)"], stderr
    assert not [n for n in NOISE if n in stdout + stderr], stdout + stderr
    assert not left
    doc = json.loads((out / "sweep.json").read_text())      # Ctrl-C here wrote none
    assert doc["status"] == "interrupted" and doc["counts"]["cancelled"] == 3


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_a_second_ctrl_c_while_the_workers_start_is_one_line(tmp_path):
    # The second Ctrl-C acts at once, inside Dask's LocalCluster constructor: the cluster left
    # half made failed in Dask's exit hook ("Exception ignored in atexit callback ...
    # AssertionError: Status.init"), and Dask's INFO lines on reaping its workers followed.
    out = tmp_path / "twice"
    status, stdout, stderr, left = interrupt(
        ROCELAB + ["sweep", "--out", str(out), "--workers", "2", "--seeds", "3", "--", *BASE],
        lambda proc: len(session_processes(proc.pid)) >= 4, presses=2)
    assert status == 130, stderr
    assert stderr.splitlines() == [f"rocelab sweep: interrupted; 0 of 3 points kept in {out}/points "
                                   "(rerun the same command to finish)"], stderr
    assert not [n for n in NOISE if n in stdout + stderr], stdout + stderr
    assert not left


def test_the_resource_tracker_cleans_up_a_killed_workers_semaphore_without_warning():
    # Now and then the second Ctrl-C above killed a worker Dask was starting while it held a
    # semaphore, and the tracker's "leaked semaphore" warnings followed the one line. A process
    # that exits without releasing one shows the same; the tracker outlives it and holds its
    # stderr, so run() returns once the tracker has cleaned up.
    def leave_a_semaphore(quiet):
        code = ("import multiprocessing, os\n"
                "from testbed.sweep.cluster import start_quiet_resource_tracker\n"
                f"if {quiet}: start_quiet_resource_tracker()\n"
                "held = multiprocessing.get_context('forkserver').Semaphore()\n"
                "os._exit(0)\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    assert "leaked semaphore" in leave_a_semaphore(quiet=False)
    assert leave_a_semaphore(quiet=True) == ""


def test_a_closing_worker_does_not_log_the_heartbeat_traceback():
    # After a Ctrl-C, now and then a worker busy with a point printed "distributed.worker -
    # ERROR - Failed to communicate with scheduler during heartbeat." and a CommClosedError
    # traceback: Worker.close() shuts its connections while a heartbeat is on one
    # (dask/distributed#7891). Its status then is "closing"; a running worker keeps the message.
    import logging
    from types import SimpleNamespace
    from distributed.core import Status
    from testbed.sweep.worker_setup import QuietHeartbeatOnClose

    def logged(message):
        return quiet.filter(logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, message, None, None))
    worker = SimpleNamespace(status=Status.running)
    quiet = QuietHeartbeatOnClose(worker)
    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert logged(heartbeat)                # the scheduler is really out of reach
    for status in (Status.closing, Status.closed):
        worker.status = status
        assert not logged(heartbeat)
        assert logged("Compute Failed")     # nothing else is dropped


def test_the_local_cluster_takes_any_free_http_port_on_loopback():
    # Dask's default HTTP port is 8787: with another sweep or lab running, every new one printed
    # "UserWarning: Port 8787 is already in use. Perhaps you already have a cluster running?"
    import warnings
    from testbed.sweep.cluster import client_for
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:
        pass                           # someone holds it already: the same situation
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with client_for(workers=1) as client:
                port = client.scheduler_info()["services"]["dashboard"]
                assert port != 8787
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    pass
    finally:
        holder.close()
    assert not [w for w in caught if "already in use" in str(w.message)], [str(w.message) for w in caught]


def test_a_run_whose_output_is_captured_makes_no_multiprocessing_lock():
    # Ctrl-C of a sweep or lab ended with the resource tracker's "There appear to be 2 leaked
    # semaphore objects": each worker's virtual run made a progress bar (not drawn: its output
    # is captured), tqdm's first bar made a multiprocessing lock, and the worker, stopped
    # mid-point, never released it. Checked in a fresh interpreter: tqdm keeps one per process.
    code = ("import io\n"
            "from tqdm.std import TqdmDefaultWriteLock\n"
            "from testbed.sim.progress import RunProgress\n"
            "bar = RunProgress([], stream=io.StringIO())\n"
            "bar(1e-6, 4096)\n"
            "bar.close()\n"
            "print(getattr(TqdmDefaultWriteLock, 'mp_lock', None))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "None"


@pytest.mark.usefixtures("sigint_as_from_a_terminal")
def test_ctrl_c_while_the_local_cluster_starts_closes_it_once_up(monkeypatch):
    # Ctrl-C in the seconds a LocalCluster takes to start left it half made, and Dask's exit
    # hook failed on it: "Exception ignored in atexit callback: close_clusters ... Status.init"
    import distributed
    from testbed.sweep.cluster import client_for
    made = []

    class StartingCluster:
        def __init__(self, **_options):
            os.kill(os.getpid(), signal.SIGINT)       # the user's Ctrl-C, halfway through the start
            self.closed = False
            made.append(self)

        def close(self):
            self.closed = True

    class NoClient:
        def __init__(self, *_args, **_kwargs):
            pass

        def close(self):
            pass

    monkeypatch.setattr(distributed, "LocalCluster", StartingCluster)
    monkeypatch.setattr(distributed, "Client", NoClient)
    with pytest.raises(KeyboardInterrupt):
        with client_for(workers=1):
            raise AssertionError("the interruption comes before the sweep runs")
    assert len(made) == 1 and made[0].closed
