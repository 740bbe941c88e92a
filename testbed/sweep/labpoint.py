"""One seed of a virtual-time lab as a sweep point: "lab NAME, seed S, quick Q" -> the per-seed
lab dict that testbed.labs.virtual builds its findings from, and the seed's directory
(OUT/seedN/: every phase's summary.json, plots, ranks/, captures; run.log; point.json).

A lab's phases need their own jobs, TE hooks and faults, which no `rocelab run` option list
carries: the worker calls the lab itself (VirtualLab.run_seed) into a private directory and
ships it back packed, like any point (testbed/sweep/point.py), so the client alone writes it
(or, on a worker that shares the client's disk, into a scratch directory beside OUT/seedN/).
The lab is named by its registry name (testbed.labs.cli.LABS: the worker imports it) or given
as an object (pickled to the worker with its class: a variant defined in a test, say).
"""
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class LabPoint:
    lab: object                 # a name in testbed.labs.cli.LABS, or a VirtualLab object
    seed: int
    quick: bool
    pcap: bool
    out: Path = field(compare=False)     # the lab's OUT on this machine: the seed goes to OUT/seedN

    resumable = False   # a lab rerun measures again: its code may have changed since (no stale seeds)

    @property
    def lab_name(self):
        return self.lab if isinstance(self.lab, str) else self.lab.name

    @property
    def id(self):
        return f"{self.lab_name}-seed{self.seed}"

    def task(self, into=None):
        return execute_lab, (self.lab, self.seed, self.quick, self.pcap, into)

    def directory(self, out):   # noqa: ARG002 (every point of a `lab all` has its own lab directory)
        return Path(self.out) / f"seed{self.seed}"

    def as_dict(self):
        return {"id": self.id, "lab": self.lab_name, "seed": self.seed, "quick": self.quick, "pcap": self.pcap}


def execute_lab(lab, seed, quick, pcap, into=None):
    """On a worker (or here): run one seed of `lab`; execute()'s dict with the seed's lab dict as
    its "summary" and exit 0 when every phase's collective ended as the lab expects (completed,
    unless the phase is meant to fail), else 1."""
    from testbed.sweep.point import run_captured

    def body(out):
        the_lab = _resolve(lab)
        result = the_lab.run_seed(out, seed, quick, pcap=pcap, log=print)
        as_expected = all(r["status"] == r.get("expect_status", "ok") for r in result["phases"])
        return (0 if as_expected else 1), result

    return run_captured(body, into=into)


def _resolve(lab):
    if not isinstance(lab, str):
        return lab
    from testbed.labs.cli import load
    found = load(lab, "virtual")
    if found is None:
        raise ValueError(f"lab {lab} has no virtual-time version")
    return found
