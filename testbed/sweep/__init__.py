"""Sweeps: many virtual-time runs (knobs x seeds) on Dask distributed (`rocelab sweep`).

Modules, one concern each:

* :mod:`testbed.sweep.grid` – the grid: --vary lists x seeds -> points (option lists of
  `rocelab run --clock virtual`), checked with the run's own parser before anything starts.
* :mod:`testbed.sweep.point` – what a worker does with one point (run it, pack its directory).
* :mod:`testbed.sweep.labpoint` – one seed of a virtual-time lab as a point (`rocelab lab`).
* :mod:`testbed.sweep.cluster` – the Dask client: a loopback LocalCluster or a given scheduler.
* :mod:`testbed.sweep.runner` – submit, collect, write points atomically, resume, Ctrl-C.
* :mod:`testbed.sweep.report` – sweep.json, sweep.csv, index.html (templates/index.html.j2).
* :mod:`testbed.sweep.progress` – the progress bar; :mod:`testbed.sweep.cli` – `rocelab sweep`.
* :mod:`testbed.sweep.api` – :func:`run_sweep` and :func:`summaries` for Python callers (labs).
"""


def __getattr__(name):
    # run_sweep, summaries, SweepInterrupted: imported on first use (PEP 562), not with the
    # package, which every `rocelab` command imports for its CLI group (`rocelab --help` too).
    if name in ("SweepInterrupted", "run_sweep", "summaries"):
        from testbed.sweep import api
        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
