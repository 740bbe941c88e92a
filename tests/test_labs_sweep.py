"""Labs' seeds as points of the Dask sweep layer (testbed/sweep/labpoint.py, issue #15): the same
lab.json findings and seed directories in this process and on a 2-worker LocalCluster; a seed
that raises is recorded with its error while the others go on; Ctrl-C keeps the finished seeds
and says "interrupted"; the lab command's cluster options refuse bad input in one line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.labs.base import Column
from testbed.labs.virtual import Finding, VirtualLab, run_virtual

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
WALL = ("elapsed_s", "wall_clock")     # the only figures that may differ between two runs


def _small_ecmp(**overrides):
    """The ECMP lab on 2 leaves x 4 hosts (16 spines), a 128 KB ring: a few seconds a seed."""
    import dataclasses
    from testbed.labs.ecmp import VIRTUAL
    base = type(VIRTUAL)

    class Small(base):
        def shape(self, quick):
            return dict(base.shape(self, quick), hosts_per_leaf=4)

        def phases(self, clos, quick):
            return [dataclasses.replace(p, job={**p.job, "sizes": [128 << 10]}) for p in base.phases(self, clos, quick)]
    for name, value in overrides.items():
        setattr(Small, name, value)
    return Small()


def _without_wall(value):
    if isinstance(value, dict):
        return {k: _without_wall(v) for k, v in value.items() if k not in WALL}
    if isinstance(value, list):
        return [_without_wall(v) for v in value]
    return value


def _seed_files(out, seed):
    """{relative path: parsed JSON} of a seed's summaries and rank reports."""
    found = {}
    for path in sorted((out / f"seed{seed}").rglob("*.json")):
        if path.name != "point.json":
            found[str(path.relative_to(out))] = _without_wall(json.loads(path.read_text()))
    return found


def test_seeds_on_a_local_cluster_give_what_they_give_in_this_process(tmp_path):
    lab = _small_ecmp()
    lines = []
    here = run_virtual(lab, tmp_path / "here", quick=True, seeds=[1, 2], pcap=False, log=lines.append, workers=1)
    there = run_virtual(lab, tmp_path / "there", quick=True, seeds=[1, 2], pcap=False, log=lines.append, workers=2)
    assert [d["status"] for d in here["seeds_detail"]] == ["ok", "ok"] and here["status"] == "complete"
    assert _without_wall(there) == _without_wall(here)
    assert json.loads((tmp_path / "there" / "lab.json").read_text())["findings"] == \
        json.loads((tmp_path / "here" / "lab.json").read_text())["findings"]
    for seed in (1, 2):
        assert _seed_files(tmp_path / "there", seed) == _seed_files(tmp_path / "here", seed)
    workers = {json.loads((tmp_path / "there" / f"seed{s}" / "point.json").read_text())["worker"] for s in (1, 2)}
    assert all(not w.endswith(f":{os.getpid()}") for w in workers), "the cluster's seeds ran on its workers"
    here_pid = json.loads((tmp_path / "here" / "seed1" / "point.json").read_text())["worker"]
    assert here_pid.endswith(f":{os.getpid()}")
    assert "booting" in (tmp_path / "there" / "seed2" / "run.log").read_text()     # the seed's own log
    assert not [p for p in (tmp_path / "there").iterdir() if p.name.startswith(".")]
    assert sum("seed 1: ok" in line for line in lines) == 2


class _Counted(VirtualLab):
    """A lab without a fabric: seed S measures S x 10; seed 2 raises what `fail_with` says."""
    name = "counted"
    title = "a fabric-free lab"
    columns = [Column("value", "value")]
    findings = [Finding("value", "value", "the paper: > 0", holds=lambda v: v > 0, direction="> 0")]
    fail_with = None

    def run_seed(self, out, seed, quick, pcap=True, log=print):
        if seed == 2 and self.fail_with is not None:
            raise self.fail_with
        Path(out).mkdir(parents=True)
        (Path(out) / "measured.json").write_text(json.dumps({"value": seed * 10}))
        log(f"seed {seed} measured")
        topology = {"spines": 1, "leaves": 1, "hosts_per_leaf": 2, "link_rate_mbps": 400e3,
                    "uplink_rate_mbps": 400e3, "oversubscription": 1.0}
        return {"lab": self.name, "topology": topology, "scale": {}, "notes": {}, "errors": [], "elapsed_s": 0.0,
                "phases": [{"phase": "only", "dir": "only", "value": seed * 10, "status": "ok"}]}

    def figures(self, seed_lab):
        return {"value": seed_lab["phases"][0]["value"]}


def test_a_seed_that_raises_is_recorded_and_the_others_go_on(tmp_path):
    from testbed.labs.cli import _status

    lab = _Counted()
    lab.fail_with = RuntimeError("a model bug in seed 2")
    result = run_virtual(lab, tmp_path / "lab", seeds=[1, 2, 3], pcap=False, log=lambda m: None)
    assert [d["status"] for d in result["seeds_detail"]] == ["ok", "error", "ok"]
    second = result["seeds_detail"][1]
    assert second["phases"] == [] and "RuntimeError: a model bug in seed 2" in second["errors"][0]
    assert any("seed 2: error: RuntimeError: a model bug in seed 2" in e for e in result["errors"])
    assert result["findings"][0]["values"] == [10, None, 30] and result["findings"][0]["holds_count"] == 2
    assert "Traceback" in (tmp_path / "lab" / "errors" / "counted-seed2.log").read_text()
    assert not (tmp_path / "lab" / "seed2").exists()
    assert json.loads((tmp_path / "lab" / "seed3" / "measured.json").read_text()) == {"value": 30}
    assert "seed 3 measured" in (tmp_path / "lab" / "seed3" / "run.log").read_text()
    assert _status(result) == 1
    assert "No result for this seed (error)" in (tmp_path / "lab" / "index.html").read_text()


def test_ctrl_c_keeps_the_finished_seeds_and_says_interrupted(tmp_path):
    lab = _Counted()
    lab.fail_with = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        run_virtual(lab, tmp_path / "lab", seeds=[1, 2, 3], pcap=False, log=lambda m: None)
    result = json.loads((tmp_path / "lab" / "lab.json").read_text())
    assert result["status"] == "interrupted"
    assert [d["status"] for d in result["seeds_detail"]] == ["ok", "cancelled", "cancelled"]
    assert result["findings"][0]["values"] == [10, None, None]
    assert sorted(p.name for p in (tmp_path / "lab").glob("seed*")) == ["seed1"]
    assert not [p for p in (tmp_path / "lab").iterdir() if p.name.startswith(".")]
    assert "Interrupted: only the seeds that finished" in (tmp_path / "lab" / "index.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["ecmp", "--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"], "--workers sizes the local cluster"),
    (["all", "--scheduler", "nowhere"], "expected an address such as tcp://"),
    (["ecmp", "--workers", "0"], "--workers"),
    (["ecmp", "--quick", "--scheduler", "tcp://127.0.0.1:1"], "not reachable"),
    (["all", "--scheduler", "tcp://127.0.0.1:1"], "not reachable"),
])
def test_cluster_options_refuse_bad_input_in_one_line(tmp_path, args, message):
    done = subprocess.run([ROCELAB, "lab", *args, "--out", str(tmp_path / "never")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "never").exists()


def test_a_rerun_measures_again_and_replaces_each_seed_whole(tmp_path):
    lab = _Counted()
    first = run_virtual(lab, tmp_path / "lab", seeds=[1, 2], pcap=False, log=lambda m: None)
    (tmp_path / "lab" / "seed1" / "stale.txt").write_text("from an older run")
    again = run_virtual(lab, tmp_path / "lab", seeds=[1, 2], pcap=False, log=lambda m: None)
    assert _without_wall(again) == _without_wall(first)
    assert not (tmp_path / "lab" / "seed1" / "stale.txt").exists()
    assert not [p for p in (tmp_path / "lab").iterdir() if p.name.startswith(".")]


def _registered(monkeypatch, **labs):
    """`rocelab lab all` over these fake labs only (each in a module of its own, as the registry wants)."""
    import types
    from testbed.labs import cli
    registry = {}
    for name, lab in labs.items():
        module = types.ModuleType(f"fake_lab_{name}")
        module.VIRTUAL = lab
        monkeypatch.setitem(sys.modules, module.__name__, module)
        registry[name] = (module.__name__, f"the fake lab {name}")
    monkeypatch.setattr(cli, "LABS", registry)


def test_lab_all_pages_every_lab_and_ctrl_c_keeps_what_finished(tmp_path, monkeypatch, capsys):
    from testbed.cli import main as rocelab

    def lab(name, fail_with=None):
        made = _Counted()
        made.name, made.fail_with = name, fail_with
        return made
    _registered(monkeypatch, one=lab("one"), two=lab("two"))
    assert rocelab(["lab", "all", "--workers", "1", "--seeds", "2", "--out", str(tmp_path / "all")]) == 0
    index = (tmp_path / "all" / "index.html").read_text()
    assert 'href="one/index.html"' in index and 'href="two/index.html"' in index
    assert json.loads((tmp_path / "all" / "two" / "lab.json").read_text())["findings"][0]["values"] == [10, 20]
    capsys.readouterr()

    _registered(monkeypatch, one=lab("one"), two=lab("two", fail_with=KeyboardInterrupt()))
    assert rocelab(["lab", "all", "--workers", "1", "--seeds", "3", "--out", str(tmp_path / "stop")]) == 130
    assert "interrupted" in capsys.readouterr().err
    index = (tmp_path / "stop" / "index.html").read_text()
    assert 'href="one/index.html"' in index and "did not run: interrupted after 1 of 3 seeds" in index
    two = json.loads((tmp_path / "stop" / "two" / "lab.json").read_text())
    assert two["status"] == "interrupted" and [d["status"] for d in two["seeds_detail"]] == ["ok", "cancelled", "cancelled"]


def test_ctrl_c_of_a_lab_says_in_one_line_where_its_finished_seeds_are(tmp_path, monkeypatch, capsys):
    # It said "rocelab lab NAME: interrupted; torn down": nothing is torn down in virtual time,
    # and lab.json of the finished seeds goes to runs/lab-NAME-<time> unless --out is given.
    from testbed.cli import main as rocelab

    class Stopped(_Counted):
        fail_with = KeyboardInterrupt()     # the Ctrl-C, as seed 2 runs

        def shape(self, quick):
            return {"spines": 1, "leaves": 1, "hosts_per_leaf": 2}

        def phases(self, clos, quick):
            return []
    _registered(monkeypatch, counted=Stopped())
    out = tmp_path / "lab"
    assert rocelab(["lab", "counted", "--workers", "1", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.splitlines() == [f"rocelab lab counted: interrupted; 1 of 3 seeds kept in {out} (index.html, lab.json)"]
    assert json.loads((out / "lab.json").read_text())["status"] == "interrupted"


def test_seeds_from_workers_without_a_shared_disk_arrive_packed(tmp_path):
    from testbed.labs.virtual import seed_points
    from testbed.sweep.cluster import client_for
    from testbed.sweep.runner import run_points

    points = seed_points(_Counted(), tmp_path / "lab", False, [1, 2], pcap=False)
    with client_for(None, 1) as client:        # as an external cluster's workers: nothing written there
        results = run_points(points, tmp_path / "lab", client, shared_disk=False)
    assert [r.status for r in results] == ["ok", "ok"]
    for seed in (1, 2):
        assert json.loads((tmp_path / "lab" / f"seed{seed}" / "measured.json").read_text()) == {"value": seed * 10}
        assert f"seed {seed} measured" in (tmp_path / "lab" / f"seed{seed}" / "run.log").read_text()
    assert not [p for p in (tmp_path / "lab").iterdir() if p.name.startswith(".")]


class _Slow(_Counted):
    """Seeds that write half their files, then take a few seconds (long enough to be killed)."""
    name = "slow"

    def run_seed(self, out, seed, quick, pcap=True, log=print):
        import time
        Path(out).mkdir(parents=True)
        (Path(out) / "half-written.txt").write_text("from a worker that may be killed")
        time.sleep(4)
        (Path(out) / "half-written.txt").unlink()
        Path(out).rmdir()
        return _Counted.run_seed(self, out, seed, quick, pcap=pcap, log=log)


def test_a_worker_killed_mid_seed_is_retried_and_leaves_nothing_half_written(tmp_path):
    import signal
    import threading
    import time
    from testbed.labs.virtual import seed_points
    from testbed.sweep.cluster import client_for
    from testbed.sweep.runner import run_points

    points = seed_points(_Slow(), tmp_path / "lab", False, [1, 2], pcap=False)
    results, victim = [], []
    with client_for(None, 2) as client:
        client.wait_for_workers(2)
        pids = client.run(os.getpid)
        runner = threading.Thread(target=lambda: results.extend(
            run_points(points, tmp_path / "lab", client, shared_disk=True)))
        runner.start()
        deadline = time.monotonic() + 60
        while not victim and time.monotonic() < deadline:
            if list((tmp_path / "lab").glob(".seed*/half-written.txt")):     # a seed is under way
                busy = [w for w, tasks in client.processing().items() if tasks]
                if busy:
                    victim.append(pids[busy[0]])
                    os.kill(victim[0], signal.SIGKILL)
            time.sleep(0.05)
        runner.join(timeout=120)
    assert victim, "no seed was ever under way"
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(not r.worker.endswith(f":{victim[0]}") for r in results)
    for seed in (1, 2):
        assert sorted(p.name for p in (tmp_path / "lab" / f"seed{seed}").iterdir()) == \
            ["measured.json", "point.json", "run.log"]
    assert not [p for p in (tmp_path / "lab").iterdir() if p.name.startswith(".")]
