"""The run watchdog on stand-in processes: a switch that exited or was killed, a rank that
died without its report, named in one line each (booted runs: tests/test_net_experiment.py)."""
import signal
import subprocess
from types import SimpleNamespace

import pytest

from testbed.net.experiment import Experiment
from testbed.net.nodes import SwitchStartError
from testbed.net.watchdog import Watchdog


def _switch(name, proc, log_path=None):
    return SimpleNamespace(name=name, processes=lambda: [proc], log_path=log_path)


@pytest.fixture
def procs():
    started = []

    def start(*cmd):
        p = subprocess.Popen(cmd)
        started.append(p)
        return p
    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_dead_switches_and_ranks_are_named_once(tmp_path, procs):
    log = tmp_path / "leaf1.log"
    log.write_text("rocelab switch: ports ...\nrocelab switch: data path failed: RuntimeError: boom; stopping\n")
    exited, killed, alive = procs("sh", "-c", "exit 3"), procs("sleep", "30"), procs("sleep", "30")
    killed.send_signal(signal.SIGKILL)
    exited.wait()
    killed.wait()
    fabric = SimpleNamespace(switches=[_switch("leaf1", exited, log), _switch("spine1", killed),
                                       _switch("spine2", alive)])
    (tmp_path / "rank0.json").write_text("{}")
    ranks = [(0, "h1", lambda: False, tmp_path / "rank0.json"),   # finished: report written
             (1, "h2", lambda: False, tmp_path / "rank1.json"),   # gone without a report
             (2, "h3", lambda: True, tmp_path / "rank2.json")]    # still running
    dog = Watchdog(fabric, ranks)
    faults = dog.check()
    assert faults == [
        f"switch leaf1 (pid {exited.pid}) exited with status 3; its log ends: "
        "rocelab switch: data path failed: RuntimeError: boom; stopping",
        f"switch spine1 (pid {killed.pid}) was killed by SIGKILL",
        "rank 1 (h2) process died without writing its report"]
    assert dog.check(force=True) == [] and dog.faults == faults   # reported once


def test_a_phase_does_not_start_on_a_dead_switch(procs):
    dead = procs("sh", "-c", "exit 1")
    dead.wait()
    exp = Experiment.__new__(Experiment)
    exp.fabric = SimpleNamespace(switches=[_switch("leaf2", dead)])
    with pytest.raises(SwitchStartError, match=r"switch leaf2 \(pid \d+\) exited with status 1"):
        exp._no_dead_switch()
