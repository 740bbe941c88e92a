"""A sweep's tables and page: DIR/sweep.json, DIR/sweep.csv (one row per point) and
DIR/index.html (a plot per varied knob, mean and spread over seeds, then the table).

sweep.json:
    {"schema": "rocelab-sweep/1",
     "status": "complete" | "errors" | "interrupted",  # errors: some points have no result
     "knobs": ["hash", ...], "seeds": [0, 1], "base_options": [...],
     "counts": {"total", "ok", "failed", "error", "cancelled", "resumed"},
     "points": [row, ...],                   # the COLUMNS below, knobs as "knob:<name>"
     "wall_clock": {"started", "elapsed_s", "scheduler"}}
Every figure of a row comes from that point's summary.json (testbed/net/summary.py).
"""
import csv
import json
import math
import os
import statistics
from pathlib import Path

SCHEMA = "rocelab-sweep/1"
# (column, what it is) after the knobs and seed
FIGURES = [
    ("status", "ok | failed | error | cancelled"),
    ("busbw_gbps", "bus bandwidth of the collective, Gb/s"),
    ("busbw_of_line_rate", "busbw / host line rate"),
    ("time_us", "the collective's time (slowest rank), simulated us"),
    ("uplink_max_mean", "max/mean bytes over the leaf->spine uplinks (1 = even)"),
    ("uplink_max_util", "busiest uplink's utilization"),
    ("pfc_frames", "PFC frames the switches sent"),
    ("host_pfc_rx", "PFC frames the NICs received"),
    ("paused_us", "time switch queues spent paused, summed"),
    ("ecn_marked", "packets the switches marked CE"),
    ("cnp_tx", "CNPs the NICs sent"),
    ("drops", "tail drops over every switch queue"),
    ("lossless_drops", "tail drops on the lossless priority (a bug: must be 0)"),
    ("oos", "out-of-sequence packets at the NICs"),
    ("elapsed_s", "wall seconds the point took on its worker"),
    ("cpu_s", "CPU seconds of its worker process meanwhile"),
    ("worker", "host:pid of the worker that ran it"),
    ("id", "the point's directory under points/"),
    ("error", "why it failed, one line"),
]
PLOTTED = [("busbw_gbps", "busbw (Gb/s)"), ("uplink_max_mean", "uplink max/mean")]
LOSSLESS_PRIORITY = 3


def row(result):
    """One table row for a PointResult."""
    from testbed.labs import metrics

    point = result.point
    out = {f"knob:{k}": v for k, v in point.knobs}
    out["seed"] = point.seed
    out.update({name: None for name, _ in FIGURES})
    out.update(status=result.status, id=point.id, error=result.error, elapsed_s=result.elapsed_s,
               cpu_s=result.cpu_s, worker=result.worker)
    s = result.summary
    if s:
        c = s["collective"]
        queues = s.get("queues", [])
        ups = metrics.uplinks(s)
        lossless = s["config"]["fabric"].get("pfc", True)
        out.update(
            busbw_gbps=c.get("busbw_gbps"), busbw_of_line_rate=c.get("busbw_of_line_rate"),
            time_us=c.get("time_us"), uplink_max_mean=metrics.round_or_none(metrics.load_ratio(ups), 4),
            uplink_max_util=max((u["utilization"] or 0 for u in ups), default=None),
            pfc_frames=sum(q["pfc_tx"] for q in queues), host_pfc_rx=metrics.host_total(s, "pfc_rx"),
            paused_us=round(sum(q["paused_us"] for q in queues), 3),
            ecn_marked=sum(q["ecn_marked"] for q in queues), cnp_tx=metrics.host_total(s, "cnp_tx"),
            drops=sum(q["drops"] for q in queues),
            lossless_drops=(sum(q["drops"] for q in queues if q["priority"] == LOSSLESS_PRIORITY)
                            if lossless else None),
            oos=metrics.host_total(s, "oos"))
    return out


def counts(results):
    c = {status: 0 for status in ("ok", "failed", "error", "cancelled")}
    for r in results:
        c[r.status] += 1
    c["total"] = len(results)
    c["resumed"] = sum(1 for r in results if r.resumed)
    return c


def sweep_status(results, interrupted):
    if interrupted:
        return "interrupted"
    return "errors" if any(r.status in ("error", "cancelled") for r in results) else "complete"


def write_all(out, results, knobs, seeds, base_options, interrupted, wall_clock):
    """sweep.json, sweep.csv and index.html, each replaced whole."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)      # a Ctrl-C while the cluster started: nothing made it
    rows = [row(r) for r in results]
    doc = {"schema": SCHEMA, "status": sweep_status(results, interrupted), "knobs": list(knobs),
           "seeds": list(seeds), "base_options": list(base_options), "counts": counts(results),
           "points": rows, "wall_clock": wall_clock}
    _atomic_text(out / "sweep.json", json.dumps(doc, indent=1) + "\n")
    columns = [f"knob:{k}" for k in knobs] + ["seed"] + [name for name, _ in FIGURES]
    tmp = out / "sweep.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, out / "sweep.csv")
    plots = write_plots(out, rows, knobs)
    _atomic_text(out / "index.html", render_page(doc, columns, plots))
    return doc


def spread_by_knob(rows, knob, figure, knobs):
    """{series label: [(value, mean, min, max, n)]}: for each value of `knob`, the figure over
    seeds, one series per combination of the other knobs (only points with the figure)."""
    others = [k for k in knobs if k != knob]
    series = {}
    for r in rows:
        v = r.get(figure)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        label = ", ".join(f"{k}={r[f'knob:{k}']}" for k in others) or "all"
        series.setdefault(label, {}).setdefault(r[f"knob:{knob}"], []).append(v)
    out = {}
    for label, by_value in series.items():
        out[label] = [(value, statistics.fmean(vs), min(vs), max(vs), len(vs)) for value, vs in by_value.items()]
    return out


def write_plots(out, rows, knobs, max_series=8):
    """One PNG per varied knob (busbw and uplink max/mean against its values); names."""
    if not knobs:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for knob in knobs:
        order = list(dict.fromkeys(r[f"knob:{knob}"] for r in rows))
        fig, axes = plt.subplots(1, len(PLOTTED), figsize=(5.2 * len(PLOTTED), 3.6), squeeze=False)
        for ax, (figure, label) in zip(axes[0], PLOTTED):
            data = spread_by_knob(rows, knob, figure, knobs)
            for i, (series, values) in enumerate(sorted(data.items())[:max_series]):
                values.sort(key=lambda t: order.index(t[0]))
                xs = [order.index(t[0]) + (i - (len(data) - 1) / 2) * 0.04 for t in values]
                means = [t[1] for t in values]
                err = [[t[1] - t[2] for t in values], [t[3] - t[1] for t in values]]
                ax.errorbar(xs, means, yerr=err, marker="o", capsize=4, label=series)
            ax.set_xticks(range(len(order)), order)
            _readable_y(ax, [v for vs in data.values() for t in vs for v in t[1:4]])
            ax.set_xlabel(knob)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if not data:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
        handles, labels = axes[0][0].get_legend_handles_labels()
        if len(labels) > 1:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize="small")
            fig.subplots_adjust(bottom=0.3)
        fig.suptitle(f"{knob}: mean over seeds, bars min..max", fontsize="medium")
        fig.tight_layout(rect=(0, 0.12 if len(labels) > 1 else 0, 1, 1))
        name = f"knob-{_safe(knob)}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        names.append({"knob": knob, "file": name})
    return names


def _readable_y(ax, values):
    """Plain tick labels, and a range of at least +-5% around the data: a difference in the
    fourth digit must not fill the plot as if it mattered (nor hide behind an axis offset)."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    if not values:
        return
    lo, hi = min(values), max(values)
    middle, half = (lo + hi) / 2, max((hi - lo) / 2 * 1.15, abs(lo + hi) / 2 * 0.05, 1e-9)
    ax.set_ylim(middle - half, middle + half)


def render_page(doc, columns, plots):
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("testbed.sweep", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
    template = env.get_template("index.html.j2")
    return template.render(doc=doc, columns=columns, plots=plots, figures=dict(FIGURES), fmt=_fmt)


def _fmt(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _safe(text):
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)


def _atomic_text(path, text):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
