"""The grid of a sweep: the cross product of knob values and seeds, each point the option list
of one `rocelab run --clock virtual`, validated with that command's own parser before
anything starts.

A knob is any `rocelab run` option that takes a value (`hash`, `qps-per-conn`, `ecn`,
`oversubscription`, `size`, ...), named without its dashes. Values are separated by commas,
or by semicolons when a value itself has commas (`ecn=5,20,0.2;off`).
"""
import difflib
import functools
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MAX_POINTS = 1000   # larger grids need --max-points (a typo in --seeds should not start 10^5 runs)
MAX_SEEDS = 100_000
# Options a point cannot vary or be given: the sweep owns them.
RESERVED = {
    "out": "the sweep writes each point to DIR/points/<id>/",
    "clock": "a sweep runs virtual time only",
    "seed": "give the number of seeds with --seeds",
}
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")
ID_TEXT_MAX = 80


class GridError(ValueError):
    """A sweep request that cannot run; the message is one line naming what is at fault."""


@dataclass(frozen=True)
class Point:
    """One run of the grid: its varied knobs (in --vary order), its seed and its full option
    list for `rocelab run --clock virtual` (without --out, which the runner adds)."""

    knobs: tuple            # ((knob, value), ...)
    seed: int
    argv: tuple = field(repr=False)

    @property
    def id(self):
        """Readable and stable: the knobs and seed, plus a digest of the whole option list so
        that a different base option never resumes from another sweep's results."""
        text = "-".join([f"{k}={v}" for k, v in self.knobs] + [f"seed{self.seed}"])
        text = _ID_UNSAFE.sub("_", text)[:ID_TEXT_MAX]
        digest = hashlib.sha1(json.dumps(list(self.argv)).encode()).hexdigest()[:8]
        return f"{text}-{digest}"

    def as_dict(self):
        return {"id": self.id, "knobs": dict(self.knobs), "seed": self.seed, "argv": list(self.argv)}

    # --- what the runner asks of every kind of point (testbed/sweep/runner.py) ---
    resumable = True        # a complete DIR/points/<id>/ with the same options is kept

    def task(self, into=None):
        """(function, arguments) a worker calls: testbed.sweep.point.execute(argv, into)."""
        from testbed.sweep.point import execute
        return execute, (list(self.argv), into)

    def directory(self, out):
        return Path(out) / "points" / self.id


@functools.lru_cache(maxsize=None)
def valued_options():
    """{knob name: argparse action} for every `rocelab run` option that takes a value."""
    from testbed.net.cli import point_parser
    found = {}
    for action in point_parser()._actions:
        if action.nargs == 0:
            continue
        for opt in action.option_strings:
            if opt.startswith("--"):
                found[opt[2:]] = action
    return found


def knob_name(text):
    """'--qps_per_conn' -> 'qps-per-conn'; refuses names that are not value options of a run."""
    name = text.strip().lstrip("-").replace("_", "-")
    if name in RESERVED:
        raise GridError(f"--vary {name}: {RESERVED[name]}")
    options = valued_options()
    if name not in options:
        flags = {o[2:] for a in _flag_actions() for o in a.option_strings if o.startswith("--")}
        if name in flags:
            raise GridError(f"--vary {name}: an on/off flag of rocelab run, not a knob with values")
        close = difflib.get_close_matches(name, [k for k in options if k not in RESERVED], n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see rocelab run --help)"
        raise GridError(f"--vary {name}: not an option of rocelab run{hint}")
    return name


@functools.lru_cache(maxsize=None)
def _flag_actions():
    from testbed.net.cli import point_parser
    return [a for a in point_parser()._actions if a.nargs == 0]


def parse_vary(text):
    """'hash=5tuple,qpn' -> ('hash', ['5tuple', 'qpn'])."""
    if "=" not in text:
        raise GridError(f"--vary {text!r}: expected KNOB=V1,V2,... (e.g. hash=5tuple,qpn)")
    name, values = text.split("=", 1)
    sep = ";" if ";" in values else ","
    return knob_name(name), _values(name, [v.strip() for v in values.split(sep)])


def _values(name, values):
    values = [str(v).strip() for v in values]
    if not values or any(v == "" for v in values):
        raise GridError(f"--vary {name}: an empty value (values are separated by commas, or semicolons "
                        "when a value has commas)")
    if len(set(values)) != len(values):
        raise GridError(f"--vary {name}: a value is listed twice")
    return values


def parse_seeds(value):
    """--seeds N (seeds 0..N-1) or an explicit list ('0,7,9' or [0, 7, 9])."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, int):
        items = None
        count = value
    else:
        text = str(value).strip()
        if "," in text:
            items = [t.strip() for t in text.split(",")]
        else:
            items = None
            try:
                count = int(text)
            except ValueError:
                raise GridError(f"--seeds {text!r}: a number of seeds (0..N-1) or a list such as 0,7,9") from None
    if items is None:
        if not 1 <= count <= MAX_SEEDS:
            raise GridError(f"--seeds {count}: between 1 and {MAX_SEEDS}")
        return list(range(count))
    try:
        seeds = [int(s) for s in items]
    except (TypeError, ValueError):
        raise GridError(f"--seeds {value!r}: seeds are whole numbers") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise GridError(f"--seeds {value!r}: a non-empty list without repeats")
    return seeds


def build(base_argv, vary, seeds, pcap=False):
    """The grid: every combination of the `vary` values ([(knob, [values])...]) and `seeds`,
    each point's options being `base_argv`, then its knobs, its seed, and --no-pcap unless
    `pcap`. Refuses a knob varied twice or both varied and given in `base_argv`."""
    base_argv = [str(a) for a in base_argv]
    names = [k for k, _ in vary]
    for name in names:
        if names.count(name) > 1:
            raise GridError(f"--vary {name}: given twice (list every value in one --vary)")
    given = _given_options(base_argv)
    for name in set(names) | set(RESERVED):
        if name in given:
            why = RESERVED.get(name) or f"it is also varied (--vary {name})"
            raise GridError(f"--{name} in the run options: {why}")
    points = []
    for combo in itertools.product(*[values for _, values in vary]):
        knobs = tuple(zip(names, combo))
        for seed in seeds:
            argv = list(base_argv)
            for k, v in knobs:
                argv += [f"--{k}", v]
            argv += ["--seed", str(seed)]
            if not pcap:
                argv.append("--no-pcap")
            points.append(Point(knobs, seed, tuple(argv)))
    return points


def _given_options(argv):
    """Knob names the option list sets (long options, abbreviations resolved like argparse)."""
    options = list(valued_options()) + [o[2:] for a in _flag_actions() for o in a.option_strings
                                        if o.startswith("--")]
    given = set()
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        name = token[2:].split("=", 1)[0]
        if name in options:
            given.add(name)
        else:
            matches = [o for o in options if o.startswith(name)]
            if len(matches) == 1:
                given.add(matches[0])
    return given


def check(points, max_points=None):
    """Refuse the grid before anything starts: empty, over the budget, or a point whose options
    `rocelab run` would refuse (each checked with the run's own parser and validation)."""
    from testbed.net.cli import RunRefused, parse_point

    if not points:
        raise GridError("the grid is empty (give --vary KNOB=V1,V2 and/or --seeds N)")
    limit = DEFAULT_MAX_POINTS if max_points is None else max_points
    if len(points) > limit:
        hint = (f"pass --max-points {len(points)} to run it" if max_points is None
                else f"raise --max-points to {len(points)} or shrink the grid")
        raise GridError(f"the grid has {len(points)} points, more than the budget of {limit}: {hint}")
    seen = {}
    for point in points:
        if point.id in seen:
            raise GridError(f"points {seen[point.id]} and {point.id} have the same options")
        seen[point.id] = point.id
        try:
            parse_point(list(point.argv))
        except RunRefused as exc:
            raise GridError(f"point {_describe(point)}: rocelab run would refuse it: {exc}") from None
    return points


def _describe(point):
    return ", ".join([f"{k}={v}" for k, v in point.knobs] + [f"seed {point.seed}"])
