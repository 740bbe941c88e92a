"""`rocelab p4 conformance P4C_DIR`: the engine held to p4c's own record of what BMv2 does.

A p4c source checkout (testbed/install/build-bmv2.sh clones one) keeps, for the v1model programs
its BMv2 suite runs:

- stf     STF packet tests (testdata/p4_16_samples/*-bmv2.stf, parser-inline/*.stf): run here;
- bmv2    programs p4c-bm2-ss compiles (the suite's *-bmv2.p4 not marked XFAIL in
          backends/bmv2/CMakeLists.txt, DASH, fabric, UP4, PINS): `check --target bmv2` must take
          them; testdata/p4_16_bmv_errors: it must refuse them;
- p4info  the P4Info p4c wrote for each sample (testdata/p4_16_samples_outputs/*.p4info.txtpb):
          the engine's must hold the same entities (matched by id, compared whole); the order
          they are listed in is reported, not judged (P4Runtime finds them by id);
- errors  the programs p4c's front end refuses (testdata/p4_16_errors, with the lines its
          errors name in p4_16_errors_outputs): the engine must refuse them; where its first
          error is on none of those lines is reported, not judged.

Everything runs in this process, nothing from the checkout is copied. A program the engine
refuses as outside its subset (user-defined externs) is counted apart, not as a disagreement;
so, for the p4info check, is any program it refuses (`check` says why: p4c's front end takes
programs p4c-bm2-ss cannot compile).
"""
import contextlib
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

CHECKS = ("stf", "bmv2", "p4info", "errors")
SECONDS_PER_PROGRAM = 120
_OUTSIDE_SUBSET = re.compile(r"by this engine")


@dataclass
class CheckResult:
    """One check's cases: those that agree with p4c, those that do not (name, first line of why),
    and those outside the engine's subset."""

    check: str
    agreed: list = field(default_factory=list)
    disagreed: list = field(default_factory=list)
    outside: list = field(default_factory=list)
    noted: list = field(default_factory=list)     # agreed, with a difference not judged (NOTE_LABEL)

    @property
    def total(self):
        return len(self.agreed) + len(self.disagreed) + len(self.outside)


class NotACheckout(ValueError):
    """P4C_DIR is not a p4c source tree."""


def samples_dir(root):
    samples = Path(root) / "testdata" / "p4_16_samples"
    if not samples.is_dir() or not (Path(root) / "p4include" / "v1model.p4").is_file():
        raise NotACheckout(f"{root}: not a p4c source checkout (no testdata/p4_16_samples and "
                           "p4include/v1model.p4 in it)")
    return samples


def is_v1model(path):
    try:
        return "v1model.p4" in path.read_text(errors="replace")
    except OSError:          # a dangling link in the checkout
        return False


def stf_cases(root):
    samples = samples_dir(root)
    stfs = sorted(samples.glob("*-bmv2.stf")) + sorted(samples.glob("parser-inline/*.stf"))
    return [(stf.with_suffix(".p4"), stf) for stf in stfs if is_v1model(stf.with_suffix(".p4"))]


def bmv2_programs(root):
    """(programs p4c-bm2-ss compiles, programs it refuses), as its BMv2 suite lists them."""
    samples = samples_dir(root)
    cmake = Path(root) / "backends" / "bmv2" / "CMakeLists.txt"
    xfail = set(re.findall(r"testdata/p4_16_samples/(\S+\.p4)", cmake.read_text())) if cmake.is_file() else set()
    taken = [p for p in sorted(samples.glob("*-bmv2.p4")) if p.name not in xfail]
    for pattern in ("dash/*-bmv2.p4", "fabric_*/fabric.p4", "omec/*.p4", "pins/*.p4"):
        taken += sorted(samples.glob(pattern))
    refused = sorted((Path(root) / "testdata" / "p4_16_bmv_errors").glob("*.p4"))
    return [p for p in taken if is_v1model(p)], [p for p in refused if is_v1model(p)]


def error_cases(root):
    """(program, the lines of it p4c's errors name) for each v1model program p4c refuses."""
    errors = Path(root) / "testdata" / "p4_16_errors"
    outputs = Path(root) / "testdata" / "p4_16_errors_outputs"
    cases = []
    for program in sorted(errors.glob("*.p4")):
        stderr = outputs / f"{program.name}-stderr"
        if is_v1model(program) and stderr.is_file():
            named = re.findall(rf"^{re.escape(program.name)}\((\d+)\):.*\berror\b", stderr.read_text(), re.M)
            cases.append((program, {int(n) for n in named}))
    return cases


def p4info_cases(root):
    samples = samples_dir(root)
    outputs = Path(root) / "testdata" / "p4_16_samples_outputs"
    cases = []
    for expected in sorted(outputs.rglob("*.p4.p4info.txtpb")):
        program = samples / expected.relative_to(outputs).with_suffix("").with_suffix("")
        if is_v1model(program):
            cases.append((program, expected))
    return cases


@contextlib.contextmanager
def _time_limit(seconds):
    """A program that takes longer is a disagreement, not a hung run (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum, _frame):
        raise TimeoutError(f"took longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Conformance:
    """The three checks over one checkout; `only` keeps the programs whose path contains it,
    `on_case(check, name)` hears of each case as it starts (a progress line)."""

    def __init__(self, root, only=None, on_case=None):
        samples_dir(root)           # refuses what is not a checkout, before anything runs
        self.root = Path(root)
        self.include = [str(self.root / "p4include")]
        self.only = only
        self.on_case = on_case or (lambda check, name: None)

    def _name(self, path):
        return str(path.relative_to(self.root / "testdata"))

    def _selected(self, cases):
        return [c for c in cases if not self.only or self.only in str(c[0] if isinstance(c, tuple) else c)]

    def _compile(self, path, target=None):
        from testbed.p4engine import compile_file
        program = compile_file(str(path), include_dirs=self.include, target=target)
        program.p4info      # what the control plane would see is part of compiling it
        return program

    def _judge(self, result, name, attempt, refusal_is_outside=False):
        """Run attempt() -> None (agreed) or the reason it disagreed; sort the case."""
        from testbed.p4engine import P4Error
        self.on_case(result.check, name)
        try:
            with _time_limit(SECONDS_PER_PROGRAM):
                why = attempt()
        except P4Error as exc:
            why = str(exc).splitlines()[0]
            if refusal_is_outside:
                result.outside.append((name, why))
                return
        except Exception as exc:        # noqa: BLE001 - an engine bug is a disagreement to list
            result.disagreed.append((name, f"internal error: {type(exc).__name__}: {exc}"))
            return
        if why is None:
            result.agreed.append(name)
        else:
            (result.outside if _OUTSIDE_SUBSET.search(why) else result.disagreed).append((name, why))

    def stf(self):
        import io
        from testbed.p4engine.stf import run_stf
        result = CheckResult("stf")
        for program, stf in self._selected(stf_cases(self.root)):
            def attempt(program=program, stf=stf):
                out = io.StringIO()
                if run_stf(str(program), str(stf), include_dirs=self.include, out=out) == 0:
                    return None
                told = [line for line in out.getvalue().splitlines() if line.strip() and not line.startswith("note:")]
                return told[0] if told else "failed"
            self._judge(result, self._name(stf), attempt)
        return result

    def bmv2(self):
        from testbed.p4engine import P4Error
        result = CheckResult("bmv2")
        taken, refused = bmv2_programs(self.root)
        def taken_as_p4c_takes_it(program):
            self._compile(program, "bmv2")      # a refusal raises: the disagreement
        for program in self._selected(taken):
            self._judge(result, self._name(program), lambda p=program: taken_as_p4c_takes_it(p))
        for program in self._selected(refused):
            def attempt(p=program):
                try:
                    self._compile(p, "bmv2")
                except P4Error:
                    return None
                return "accepted, but p4c-bm2-ss refuses it"
            self._judge(result, self._name(program), attempt)
        return result

    def p4info(self):
        from google.protobuf import text_format
        from p4.config.v1 import p4info_pb2
        result = CheckResult("p4info")
        for program, expected_file in self._selected(p4info_cases(self.root)):
            def attempt(program=program, expected_file=expected_file):
                expected = p4info_pb2.P4Info()
                text_format.Parse(expected_file.read_text(), expected, allow_unknown_field=True)
                difference, reordered = compare_p4info(expected, self._compile(program).p4info)
                if difference is None and reordered:
                    result.noted.append((self._name(program), f"same entities, {', '.join(reordered)} in another order"))
                return difference
            self._judge(result, self._name(program), attempt, refusal_is_outside=True)
        return result

    def errors(self):
        from testbed.p4engine import P4Error
        result = CheckResult("errors")
        for program, lines in self._selected(error_cases(self.root)):
            def attempt(program=program, lines=lines):
                try:
                    self._compile(program)
                except P4Error as exc:
                    _file, line, _col, message = exc.diagnostics[0]
                    if lines and line not in lines:      # (some p4c errors name no line)
                        result.noted.append((self._name(program), f"refused at line {line}, p4c at "
                                             f"{', '.join(map(str, sorted(lines)))}: {message}"))
                    return None
                return "accepted, but p4c refuses it"
            self._judge(result, self._name(program), attempt)
        return result

    def run(self, checks=CHECKS):
        return [getattr(self, check)() for check in checks]


def compare_p4info(expected, got):
    """(the first entity that differs, named, or None; the kinds of entity listed in another
    order). Entities of a kind are matched by id (preamble) or by their whole text."""
    reordered = []
    for fd in expected.DESCRIPTOR.fields:
        want, have = getattr(expected, fd.name), getattr(got, fd.name)
        if want == have:
            continue
        if not fd.is_repeated:
            return f"{fd.name} differs", reordered
        have_by_key = {_entity_key(e): e for e in have}
        for entity in want:
            key = _entity_key(entity)
            if key not in have_by_key:
                return f"{fd.name} {key}: missing", reordered
            if have_by_key[key] != entity:
                return f"{fd.name} {key}: differs", reordered
        if len(have) != len(want):
            extra = next(k for k in have_by_key if k not in {_entity_key(e) for e in want})
            return f"{fd.name} {extra}: not in p4c's", reordered
        reordered.append(fd.name)
    return None, reordered


def _entity_key(entity):
    preamble = getattr(entity, "preamble", None)
    return f"{preamble.name} (id {preamble.id})" if preamble is not None else str(entity)


def report(results, out, verbose=False):
    """Each check's figures, then what disagreed; True if nothing did."""
    for r in results:
        noted = f" ({len(r.noted)} {NOTE_LABEL[r.check]})" if r.noted else ""
        outside = f", {len(r.outside)} {_OUTSIDE_LABEL[r.check]}" if r.outside else ""
        print(f"{r.check:7} {len(r.agreed)} of {r.total} agree with p4c{noted}{outside}", file=out)
    for r in results:
        for name, why in r.disagreed:
            print(f"{r.check}: {name}: {why}", file=out)
        if verbose:
            for name, note in r.noted:
                print(f"{r.check}: {name}: {note}", file=out)
            for name, why in r.outside:
                print(f"{r.check}: {name}: {_OUTSIDE_LABEL[r.check]}: {why}", file=out)
    return not any(r.disagreed for r in results)


_OUTSIDE_LABEL = {"stf": "outside the engine's subset", "bmv2": "outside the engine's subset",
                  "p4info": "not compared (the engine refuses them)", "errors": "outside the engine's subset"}
NOTE_LABEL = {"p4info": "list entities in another order", "errors": "refused at another line than p4c"}


def default_checkout():
    """Where build-bmv2.sh leaves its p4c clone, if it is there."""
    path = Path(os.environ.get("SRC_DIR", Path.home() / "p4lang-src")) / "p4c"
    return path if (path / "testdata" / "p4_16_samples").is_dir() else None
