"""Labs in virtual time: production units, several seeds, the paper's figure beside ours.

A :class:`VirtualLab` is a :class:`~testbed.labs.base.Lab` whose phases run on the simulated
clock (testbed/sim/) at 400G with the paper's thresholds, once per seed. It declares its
:class:`Finding` s: what the paper measured (its figure, in its words and numbers) and how
to read the same figure from one seed's phases. :func:`run_virtual` runs the seeds, checks
each finding's direction per seed, and writes OUT/lab.json (schema "rocelab-lab/2"),
OUT/index.html (testbed/labs/report.py) and the plots.

lab.json (rocelab-lab/2):

    {"schema", "lab", "title", "finding", "clock": "virtual", "quick", "seeds": [1, 2, 3],
     "command": "rocelab lab ecmp ...", "topology": {...}, "scale": {...},
     "findings": [{"key", "title", "paper", "paper_value", "unit", "direction",
                   "values": [per seed], "mean", "min", "max", "holds": [bool per seed],
                   "holds_count", "text"}],
     "seeds_detail": [{"seed", "dir", "figures": {...}, "phases": [rows], "notes", "errors"}],
     "plots": [{"file", "title", "caption"}], "pcaps": ["seed1/pcap/...", ...],
     "tables": [{"title", "command", "columns": [{"key", "header", "fmt"}], "rows": [...]}],  # the lab's own
     "elapsed_s", "errors": [...]}
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from testbed.labs.base import Lab, run_lab, write
from testbed.labs.seeds import default_seeds

SCHEMA = "rocelab-lab/2"
MAX_PCAP_LINKS = 16


@dataclass
class Finding:
    key: str                      # the figure's key in a seed's figures
    title: str                    # what is measured, with its setup
    paper: str                    # the paper's figure, in words and with its source
    holds: Callable               # value -> bool: the paper's direction
    direction: str                # that direction, in words
    paper_value: Optional[float] = None   # the paper's number, where it gives one
    unit: str = ""
    fmt: str = "{:.2f}"

    def show(self, value):
        if value is None:
            return "-"
        try:
            return self.fmt.format(value) + (self.unit if self.unit and self.unit != "%" else "")
        except (TypeError, ValueError):
            return str(value)


class VirtualLab(Lab):
    clock = "virtual"
    findings = []           # Finding(...)
    guide = ""              # topologies/labs/<name>.md

    def figures(self, seed_lab):
        """{finding key: value} from one seed's lab dict (run_lab's result)."""
        raise NotImplementedError

    seed = 1          # the seed being run: it also places the ranks (and numbers the QPs)

    def run_seed(self, out, seed, quick, pcap=True, log=print):
        """One seed: boot, run the phases, return the lab dict (base.run_lab's). The seed moves
        every switch's hash seed (fabric.p4 mixes it in after the CRC, so another seed groups
        the flows differently) and also the rank placement and QP numbers."""
        self.seed = seed
        return run_lab(self, out, quick=quick, clock="virtual", seed=seed, pcap=pcap, log=log)

    def plots(self, result, out):
        """[{"file", "title", "caption"}]: plots over every seed, written into `out`."""
        return []

    def cross_seed(self, result):
        """Findings that only a set of seeds shows (a spread), as aggregate()'s dicts."""
        return []

    def tables(self, result, out):
        """[{"title", "command", "columns": [Column], "rows": [dicts]}]: tables of the lab's own
        beside the phases (the flowlet lab's capture figures), from lab.json's dict; "command"
        prints the same table (or None); `out`: the lab's OUT."""
        return []


def aggregate(lab, seeds, figures):
    """The findings over the seeds: values, mean/min/max, how many seeds hold the paper's direction."""
    out = []
    for f in lab.findings:
        values = [fig.get(f.key) for fig in figures]
        held = [v is not None and bool(f.holds(v)) for v in values]
        known = [v for v in values if v is not None]
        mean = sum(known) / len(known) if known else None
        out.append({"key": f.key, "title": f.title, "paper": f.paper, "paper_value": f.paper_value,
                    "unit": f.unit, "direction": f.direction, "seeds": list(seeds),
                    "values": values, "shown": [f.show(v) for v in values],
                    "mean": mean, "mean_shown": f.show(mean),
                    "min": min(known) if known else None, "max": max(known) if known else None,
                    "holds": held, "holds_count": sum(held),
                    "text": (f"{f.title}: {', '.join(f.show(v) for v in values)} over seeds "
                             f"{', '.join(str(s) for s in seeds)} (mean {f.show(mean)}); the paper: {f.paper}; "
                             f"{f.direction}: {sum(held)}/{len(values)} seeds")})
    return out


def run_virtual(lab, out, quick=False, seeds=None, pcap=True, log=print, command=None, scheduler=None, workers=1,
                name=None):
    """Run `lab` once per seed in virtual time; write OUT/lab.json, plots and OUT/index.html.
    Each seed is a sweep point (testbed/sweep/labpoint.py): in this process when `workers` is 1
    (the default here), else on a loopback LocalCluster of `workers` (None: one per core) or the
    Dask scheduler at `scheduler`. Virtual time is deterministic: the same findings either way.
    `name`: the lab's registry name (testbed.labs.cli.LABS), which workers import; without it
    the lab object itself is sent to them."""
    from testbed.net.lifecycle import ctrl_c_held
    from testbed.sweep.api import run_here_or_on_cluster
    from testbed.sweep.runner import Interrupted

    points = seed_points(lab, out, quick, seeds, pcap, name=name)
    t0 = time.monotonic()
    try:
        results = run_here_or_on_cluster(points, out, scheduler=scheduler, workers=workers,
                                         on_result=lambda r: log(seed_line(r)))
    except Interrupted as exc:
        # The finished seeds' pages are written whole: one more Ctrl-C meanwhile is dropped (the
        # lab is stopping already), a third acts at once.
        with ctrl_c_held(act_after=False):
            result = finish(lab, out, quick, exc.results, command, t0, interrupted=True)
        raise LabInterrupted(result) from None
    except KeyboardInterrupt:       # while the cluster started: no seed ran
        raise LabInterrupted(None) from None
    with ctrl_c_held():             # written whole; a Ctrl-C meanwhile acts once they are
        return finish(lab, out, quick, results, command, t0)


class LabInterrupted(KeyboardInterrupt):
    """Ctrl-C during run_virtual, after lab.json of the finished seeds was written; `result` is
    its dict (None when no seed had finished)."""

    def __init__(self, result):
        super().__init__("interrupted")
        self.result = result


def seed_points(lab, out, quick, seeds, pcap, name=None):
    """One LabPoint per seed into OUT/seedN/; captures of the first seed only (the others would
    repeat them at the same size). `name`: the lab's registry name, which a worker imports
    (default: the lab object itself goes to the worker)."""
    from testbed.sweep.labpoint import LabPoint

    seeds = list(seeds or default_seeds(3))
    return [LabPoint(name or lab, seed, bool(quick), bool(pcap and seed == seeds[0]), Path(out))
            for seed in seeds]


def seed_line(result):
    """One line as a seed ends (the seed's own log is in OUT/seedN/run.log)."""
    point = result.point
    where = f" on {result.worker}" if result.worker else ""
    said = f": {result.error}" if result.error else ""
    return (f"*** lab {point.lab_name} seed {point.seed}: {result.status} in {result.elapsed_s or 0:.0f} s"
            f"{where}{said}")


def finish(lab, out, quick, results, command=None, t0=None, interrupted=False):
    """The lab from its seeds' PointResults: findings, OUT/lab.json, plots, index.html and
    findings.md; returns lab.json's dict (None when no seed has a result to show)."""
    from testbed.labs import report

    out = Path(out)
    seeds = [r.point.seed for r in results]
    kept = [(s, r.summary) for s, r in zip(seeds, results) if r.summary is not None]
    if not kept:
        return None
    figures = [lab.figures(r) if r is not None else {} for r in (r.summary for r in results)]
    findings = aggregate(lab, seeds, figures)
    partial = {"seeds_detail": [{"seed": s, "phases": (r.summary or {}).get("phases", [])}
                                for s, r in zip(seeds, results)]}
    findings += lab.cross_seed(partial)
    errors = []
    for s, r in zip(seeds, results):
        if r.summary is None:
            errors.append(f"seed {s}: {r.status}: {r.error or 'no result'}")
        errors += [f"seed {s}: {e}" for e in (r.summary or {}).get("errors", [])]
    first = seeds[0]
    head = kept[0][1]
    result = {"schema": SCHEMA, "lab": lab.name, "title": lab.title, "finding": lab.finding, "clock": "virtual",
              "status": "interrupted" if interrupted else "complete",
              "quick": quick, "seeds": seeds, "command": command or f"rocelab lab {lab.name}",
              "guide": lab.guide or f"topologies/labs/{lab.name}.md",
              "topology": head.get("topology"), "scale": head.get("scale"), "notes": head.get("notes", {}),
              "findings": findings,
              "seeds_detail": [{"seed": s, "dir": f"seed{s}", "status": r.status, "figures": fig,
                                "phases": (r.summary or {}).get("phases", []),
                                "notes": (r.summary or {}).get("notes", {}),
                                "errors": (r.summary or {}).get("errors", []) if r.summary else [r.error or r.status],
                                # the whole seed's wall time (a lab may run several run_labs a seed)
                                "elapsed_s": r.elapsed_s if r.elapsed_s is not None
                                else (r.summary or {}).get("elapsed_s")}
                               for s, r, fig in zip(seeds, results, figures)],
              "columns": [{"key": c.key, "header": c.header, "fmt": c.fmt} for c in lab.columns],
              "pcaps": _pcaps(out, first), "plots": [], "errors": errors}
    try:
        result["plots"] = lab.plots(result, out)
    except Exception as exc:   # a plot is a convenience: its failure must not lose the measurements
        result["errors"].append(f"plots: {type(exc).__name__}: {exc}")
    result["tables"] = _tables(lab, result, out)
    result["elapsed_s"] = round(time.monotonic() - t0, 1) if t0 is not None else None
    write(result, out)
    report.write_lab_page(result, out)
    (out / "findings.md").write_text(findings_markdown(result))
    return result


def findings_markdown(result):
    """The findings as a Markdown table (what the lab guides paste under "What you should see")."""
    seeds = result["seeds"]
    # each seed's own time: under `lab all` the lab's elapsed_s runs from the start of every lab
    times = [d.get("elapsed_s") for d in result["seeds_detail"]]
    took = (f"; {', '.join(f'{t:.0f}' for t in times)} s of wall time a seed" if times and None not in times
            else "")
    lines = [f"Measured by `{result['command']}` (virtual time, seeds {', '.join(str(s) for s in seeds)}{took}):", "",
             "| finding | the paper | " + " | ".join(f"seed {s}" for s in seeds) + " | holds |",
             "|---|---|" + "---|" * len(seeds) + "---|"]
    for f in result["findings"]:
        shown = list(f["shown"]) + [""] * (len(seeds) - len(f["shown"]))
        lines.append(f"| {f['title']} | {f['paper']} | " + " | ".join(shown[:len(seeds)]) +
                     f" | {f['holds_count']}/{len(f['seeds'])} ({f['direction']}) |")
    return "\n".join(lines + _phase_markdown(result) + _tables_markdown(result)) + "\n"


def _phase_markdown(result):
    """The first seed's phases, as the lab's table in index.html shows them."""
    from testbed.labs.base import Column
    detail = (result.get("seeds_detail") or [{}])[0]
    columns = [Column("phase", "phase")] + [Column(**c) for c in result.get("columns", [])] + [Column("status", "status")]
    if not detail.get("phases"):
        return []
    lines = ["", f"Per phase, seed {detail['seed']}:", "",
             "| " + " | ".join(c.header for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in detail["phases"]:
        lines.append("| " + " | ".join(c.cell(row).replace("|", "/") for c in columns) + " |")
    return lines


def _tables_markdown(result):
    """The lab's own tables (result["tables"]) after the phases."""
    from testbed.labs.base import Column
    lines = []
    for t in result.get("tables", []):
        columns = [Column(**c) for c in t["columns"]]
        said = f" (`{t['command']}`)" if t.get("command") else ""
        lines += ["", t["title"] + said + ":", "", "| " + " | ".join(c.header for c in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(c.cell(row).replace("|", "/") for c in columns) + " |" for row in t["rows"]]
    return lines


def rejudge(lab, out):
    """Recompute OUT's findings (directions, means) from the figures its lab.json already holds,
    with the lab's current Finding definitions; rewrites lab.json, findings.md and index.html.
    Nothing is re-measured."""
    from testbed.labs import report
    out = Path(out)
    result = load(out / "lab.json")
    result["findings"] = aggregate(lab, result["seeds"], [d["figures"] for d in result["seeds_detail"]])
    result["findings"] += lab.cross_seed(result)
    result["tables"] = _tables(lab, result, out)
    write(result, out)
    report.write_lab_page(result, out)
    (out / "findings.md").write_text(findings_markdown(result))
    return result


def _tables(lab, result, out):
    return [{"title": t["title"], "command": t.get("command"), "rows": t["rows"],
             "columns": [{"key": c.key, "header": c.header, "fmt": c.fmt} for c in t["columns"]]}
            for t in lab.tables(result, out)]


def _pcaps(out, seed):
    pcap_dir = Path(out) / f"seed{seed}" / "pcap"
    if not pcap_dir.is_dir():
        return []
    return [str(p.relative_to(out)) for p in sorted(pcap_dir.glob("*.pcap"))]


def table(lab, result):
    """The comparison printed after a virtual lab: each seed's phases, the lab's own tables, then
    the findings."""
    from testbed.labs.base import Column, aligned
    lines = []
    for detail in result["seeds_detail"]:
        seed_lab = {"lab": result["lab"], "title": f"{result['title']} (seed {detail['seed']})",
                    "quick": result["quick"], "topology": result["topology"], "scale": result["scale"],
                    "notes": detail["notes"], "phases": detail["phases"], "conclusion": "",
                    "errors": detail["errors"], "finding": result["finding"]}
        lines.append(_phase_table(lab, seed_lab))
        lines.append("")
    for t in result.get("tables", []):
        lines += [f"# {t['title']}" + (f" ({t['command']})" if t.get("command") else ""), aligned([Column(**c) for c in t["columns"]], t["rows"]), ""]
    lines.append(f"# findings over seeds {', '.join(str(s) for s in result['seeds'])} (virtual time, "
                 "production units):")
    for f in result["findings"]:
        lines.append(f"#  {f['text']}")
    return "\n".join(lines)


def _phase_table(lab, seed_lab):
    from testbed.labs.base import Column, aligned
    topo = seed_lab["topology"]
    head = [f"# lab {seed_lab['lab']}: {seed_lab['title']}{'  (quick)' if seed_lab['quick'] else ''}",
            f"# {topo['spines']} spines x {topo['leaves']} leaves x {topo['hosts_per_leaf']} hosts; host links "
            f"{topo['link_rate_mbps'] / 1000:g} Gb/s, uplinks {topo['uplink_rate_mbps'] / 1000:g} Gb/s; virtual time"]
    head += [f"# {k}: {v}" for k, v in seed_lab["notes"].items() if not isinstance(v, (dict, list))]
    cols = [Column("phase", "phase")] + list(lab.columns) + [Column("status", "status")]
    return "\n".join(head + [aligned(cols, seed_lab["phases"])] + [f"# error: {e}" for e in seed_lab["errors"]])



def seeds_plot(result, path, key_of_phase, ylabel, title, reference=None, reference_label=None, log=False,
               xlabel="phase"):
    """One line per seed over the phases (x: phase names), optionally a reference line for the
    paper's figure; returns the file name."""
    from testbed.labs.base import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    names = [r["phase"] for r in result["seeds_detail"][0]["phases"]]
    if len(names) == 1:       # one phase: a bar per seed
        details = result["seeds_detail"]
        values = [key_of_phase(d["phases"][0]) if d["phases"] else None for d in details]
        ax.bar(range(len(details)), [v if v is not None else 0 for v in values], color="tab:blue")
        ax.set_xticks(range(len(details)), [f"seed {d['seed']}" for d in details])
        names = None
    for detail in result["seeds_detail"] if names else ():
        values = [key_of_phase(r) for r in detail["phases"]]
        ax.plot(range(len(values)), [v if v is not None else float("nan") for v in values], "o-",
                label=f"seed {detail['seed']}")
    if reference is not None:
        ax.axhline(reference, color="tab:red", linestyle="--", label=reference_label)
    if names:
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    else:
        xlabel = "seed"
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path).name


def load(path):
    with open(path) as f:
        return json.load(f)
