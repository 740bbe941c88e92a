"""What a lab is, and how one runs: boot a Clos once, run its phases back to back, write
OUT/lab.json and OUT/lab.png, print the comparison table.

A lab subclasses :class:`Lab` declaratively (name, shape, columns) and says which phases
to run and which figures to keep from each phase's summary::

    class Incast(Lab):
        name = "incast"
        columns = [Column("cts", "CTS"), Column("peak_queue_pkts", "peak queue (pkts)")]
        def phases(self, clos, quick): ...
        def row(self, phase, summary, facts): ...

lab.json (schema "rocelab-lab/1"):

    {"schema", "lab", "title", "finding",       # the paper's finding, in words
     "quick": bool, "target", "topology": {spines, leaves, hosts_per_leaf, link_rate_mbps,
     uplink_rate_mbps, oversubscription}, "scale": {...},   # as in summary.json
     "notes": {...},                            # lab-specific facts (e.g. the RTT)
     "phases": [{"phase", "dir", "status", "attempts", <the lab's columns>}],
     "conclusion": "...", "plot": "lab.png" | null, "errors": [...]}
"""
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

SCHEMA = "rocelab-lab/1"
# A phase whose collective failed runs once more (a loaded machine can starve a rank past
# its timeout); the row records the attempts and lab.json keeps every attempt's errors.
RETRIES = 1


class LabError(ValueError):
    """A bad lab request; the message names the option at fault."""


@dataclass
class Phase:
    """One experiment of a lab: its knobs, its job, and an optional step before traffic
    (e.g. installing TE overrides) whose returned facts go into the phase's row."""
    name: str
    settings: object            # testbed.net.experiment.FabricSettings
    job: dict                   # traffic/job.py format
    before: Optional[Callable] = None   # before(experiment) -> dict
    label: dict = field(default_factory=dict)  # what distinguishes this phase, for the row
    faults: tuple = ()          # virtual time: testbed.sim.faults.Fault events during the phase
    after: Optional[Callable] = None    # after(experiment) -> dict, once the traffic is over


@dataclass
class Column:
    key: str
    header: str
    fmt: str = "{}"

    def cell(self, row):
        value = row.get(self.key)
        if value is None:
            return "-"
        try:
            return self.fmt.format(value)
        except (ValueError, TypeError):
            return str(value)


def aligned(columns, rows):
    """`rows` as a text table under the columns' headers, numbers right-aligned."""
    cells = [[c.header for c in columns]] + [[c.cell(r) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Lab:
    name = ""
    title = ""
    finding = ""          # the paper's finding this lab shows
    columns = []          # Column(...) of the table, in order
    port_defaults = {}    # PortModel fields for every port (queue_depth, delay_us, ...)

    def shape(self, quick):
        """ClosSpec keyword arguments (spines, leaves, hosts_per_leaf, link_rate_mbps, ...)."""
        raise NotImplementedError

    def phases(self, clos, quick):
        raise NotImplementedError

    def row(self, phase, summary, facts):
        """The figures this lab keeps from one phase (keys of its columns); facts: what the
        phase's `before` returned, and "dir", the phase's output directory."""
        raise NotImplementedError

    def notes(self, clos, rows):
        return {}

    def conclusion(self, rows, notes):
        return ""

    def plot(self, lab, path):
        """Draw lab.png from the lab dict; return the file name or None."""
        return None

    # --- shared by every lab ---
    def table(self, lab):
        topo = lab["topology"]
        head = [f"# lab {lab['lab']}: {lab['title']}{'  (quick)' if lab['quick'] else ''}",
                f"# {topo['spines']} spines x {topo['leaves']} leaves x {topo['hosts_per_leaf']} hosts; host links "
                f"{topo['link_rate_mbps']:g} Mb/s, uplinks {topo['uplink_rate_mbps']:g} Mb/s "
                f"(x{lab['scale']['time_dilation']:g} slower than {lab['scale']['production_link_gbps']:g}G)"]
        head += [f"# {k}: {v}" for k, v in lab["notes"].items() if not isinstance(v, (dict, list))]
        cols = [Column("phase", "phase")] + list(self.columns) + [Column("status", "status")]
        lines = [aligned(cols, lab["phases"])]
        tail = [f"# {lab['conclusion']}"] if lab["conclusion"] else []
        tail += [f"# error: {e}" for e in lab["errors"]]
        tail.append(f"# the paper: {lab['finding']}")
        return "\n".join(head + lines + tail)

    def build(self, clos, rows, quick, target, scale, errors):
        """The lab dict (lab.json) from the phase rows."""
        spec = clos.spec
        notes = self.notes(clos, rows)
        return {"schema": SCHEMA, "lab": self.name, "title": self.title, "finding": self.finding,
                "quick": quick, "target": target,
                "topology": {"spines": spec.spines, "leaves": spec.leaves, "hosts_per_leaf": spec.hosts_per_leaf,
                             "link_rate_mbps": spec.link_rate_mbps, "uplink_rate_mbps": spec.uplink_rate_mbps,
                             "oversubscription": spec.oversubscription},
                "scale": scale, "notes": notes, "phases": rows,
                "conclusion": self.conclusion(rows, notes), "plot": None, "errors": errors}


def build_clos(lab, quick, grpc_base_port=50000, shape=None):
    from testbed.clos import ClosSpec, TopologyError, build
    try:
        return build(ClosSpec(**(shape or lab.shape(quick)), grpc_base_port=grpc_base_port,
                              clock=getattr(lab, "clock", "real")))
    except TopologyError as exc:
        raise LabError(f"lab {lab.name}: {exc}") from None


def run_lab(lab, out, quick=False, target="engine", name_prefix=None, grpc_base_port=50000, state_dir=None,
            shape=None, pcap=True, log=print, clock="real", seed=0):
    """Boot the lab's Clos once, run its phases, write OUT/lab.json (+ lab.png); returns the lab dict.
    Raises LabError / ExperimentError (bad request) or FabricError (machine) before traffic.
    clock "virtual": the same phases on the simulated clock with `seed` (testbed/labs/virtual.py)."""
    from testbed.net.experiment import Experiment

    out = Path(out)
    clos = build_clos(lab, quick, grpc_base_port, shape)
    phases = lab.phases(clos, quick)
    rows, errors, scale = [], [], clos.scale
    errors_fatal = []
    out.mkdir(parents=True, exist_ok=True)
    log(f"*** lab {lab.name}: {lab.title}; {len(phases)} phase(s), output in {out}")
    t0 = time.monotonic()
    options = dict(name_prefix=name_prefix, state_dir=state_dir) if clock == "real" else {}
    with Experiment(clos, target=target, out=out, pcap=pcap, log=log, clock=clock, seed=seed,
                    port_defaults=dict(lab.port_defaults), **options) as exp:
        for phase in phases:
            if errors_fatal:
                break  # a switch or rank process died: later phases would run on a broken fabric
            exp.settle(phase.settings)      # virtual time: the hook's timers count from the phase's start
            facts = phase.before(exp) if phase.before else {}
            retries = RETRIES if clock == "real" else 0   # virtual time: the same seed fails the same way
            for attempt in range(1, retries + 2):
                where = phase.name if attempt == 1 else f"{phase.name}-attempt{attempt}"  # no stale rank reports
                summary = exp.run_phase(phase.name, phase.job, phase.settings, out / where,
                                        **({"faults": phase.faults} if phase.faults else {}))
                errors += [f"{phase.name} (attempt {attempt}): {e}" for e in summary["errors"]]
                if summary["collective"]["status"] == "ok":
                    break
                if summary.get("faults"):
                    errors_fatal.extend(summary["faults"])
                    log(f"*** {phase.name}: {'; '.join(summary['faults'])}: the lab stops here")
                    break
                log(f"*** {phase.name}: the collective failed (attempt {attempt}); see {out / where}/ranks/")
            scale = summary["scale"]
            if phase.after:
                facts = {**facts, **phase.after(exp)}
            figures = lab.row(phase, summary, {**facts, "dir": str(out / where)})  # rows go to JSON
            rows.append({"phase": phase.name, "dir": where, **phase.label, **figures,
                         "attempts": attempt, "status": summary["collective"]["status"]})
    result = lab.build(clos, rows, quick, target, scale, errors)
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    try:
        result["plot"] = lab.plot(result, out / "lab.png")
    except Exception as exc:  # a plot is a convenience: its failure must not lose the measurements
        result["errors"].append(f"plot: {type(exc).__name__}: {exc}")
    write(result, out)
    return result


def write(result, out):
    with open(Path(out) / "lab.json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def bar_plot(lab, path, key, ylabel, title, reference=None, reference_label=None):
    """One bar per phase for `key` (the shared shape of most lab plots)."""
    rows = [r for r in lab["phases"] if r.get(key) is not None]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(rows) + 2), 3.6))
    ax.bar(range(len(rows)), [r[key] for r in rows], color="tab:blue")
    ax.set_xticks(range(len(rows)), [r["phase"] for r in rows], rotation=20, ha="right", fontsize=8)
    if reference is not None:
        ax.axhline(reference, color="tab:red", linestyle="--", label=reference_label)
        ax.legend(fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path).name
