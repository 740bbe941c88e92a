"""`rocelab p4`: check, describe and packet-test P4_16 v1model programs with the embedded engine.

    rocelab p4 check prog.p4 [-I DIR] [-D NAME[=VALUE]] [--target bmv2]   diagnostics only
    rocelab p4 info prog.p4 [-o prog.p4info.txt] [--format text|binary|json]
    rocelab p4 test prog.p4 prog.stf [-v]                    p4c's STF packet tests
    rocelab p4 conformance [P4C_DIR] [--check stf|bmv2|p4info|errors] [--only TEXT]
                                  the engine against a p4c checkout's record of BMv2

Errors in the program are printed as `file:line:col: error: ...` with the source line and a
caret, errors in an STF file as `file:line: error: ...`; the exit status is 1 for either and
for a failing test, 2 for a usage error (a file that is not there, a bad -D, an -o that cannot
be written), 0 otherwise. `check --target bmv2` also reports, as `[bmv2 <limit>]` errors,
what p4c-bm2-ss refuses although P4_16 allows it (shift amounts over 8 bits, ...). An `internal error` (exit 3) is a bug in the engine.
`check` also warns (`file:line:col: warning: ...`, exit status unchanged) about parser states
that can loop without consuming input: the engine ends such a parse after its step budget with
error.ParserTimeout, BMv2 would spin on the packet.
"""
import argparse
import os
import sys

INTERNAL_ERROR = 3
FORMAT_BY_SUFFIX = {".bin": "binary", ".pb": "binary", ".json": "json"}


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="p4_command", metavar="COMMAND")

    check = commands.add_parser("check", help="compile a program and report its errors (nothing else)")
    _program_args(check)
    check.add_argument("--target", choices=("engine", "bmv2"), default="engine",
                       help="also hold the program to this target's limits (bmv2: what p4c-bm2-ss refuses)")
    check.set_defaults(func=_guarded(run_check))

    info = commands.add_parser("info", help="write the program's P4Info (P4Runtime's view of it)")
    _program_args(info)
    info.add_argument("-o", "--output", metavar="FILE",
                      help="write here instead of stdout (.bin/.pb -> binary, .json -> JSON by default)")
    info.add_argument("--format", choices=("text", "binary", "json"), default=None,
                      help="text protobuf (default), binary protobuf or JSON, as p4c's --p4runtime-files")
    info.set_defaults(func=_guarded(run_info))

    test = commands.add_parser("test", help="run an STF packet test (p4c's format) against the program")
    _program_args(test)
    test.add_argument("stf", metavar="TEST.stf", help="the STF file")
    test.add_argument("-v", "--verbose", action="store_true",
                      help="print a per-packet trace of what the pipeline does")
    test.set_defaults(func=_guarded(run_test))

    conformance = commands.add_parser(
        "conformance", help="hold the engine to a p4c checkout's STF tests, BMv2 suite and P4Info outputs")
    conformance.add_argument("p4c", nargs="?", metavar="P4C_DIR",
                             help="a p4c source checkout (default: build-bmv2.sh's clone, ~/p4lang-src/p4c)")
    conformance.add_argument("--check", action="append", choices=("stf", "bmv2", "p4info", "errors"), default=None,
                             help="run only this check (repeatable; default all four)")
    conformance.add_argument("--only", metavar="TEXT", help="only the programs whose path contains TEXT")
    conformance.add_argument("-v", "--verbose", action="store_true",
                             help="also list the programs outside the engine's subset")
    conformance.set_defaults(func=_guarded(run_conformance))

    p.set_defaults(func=lambda args: _usage(p))


def _program_args(p):
    p.add_argument("program", metavar="PROG.p4", help="P4_16 program for the v1model architecture")
    p.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                   help="directory searched by #include (repeatable)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="preprocessor macro (repeatable; VALUE defaults to 1)")


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _guarded(handler):
    """Run a handler; an unexpected exception is an engine bug: say so briefly, exit 3."""
    def run(args):
        try:
            return handler(args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that turns bugs into a message
            if os.environ.get("ROCELAB_TRACEBACK"):
                raise
            print(f"rocelab p4 {args.p4_command}: internal error: {describe_bug(exc)}\n"
                  "  this is a bug in the engine, not in your program; "
                  "ROCELAB_TRACEBACK=1 shows the traceback", file=sys.stderr)
            return INTERNAL_ERROR
    return run


def describe_bug(exc):
    """'TypeError: msg (at compile_expressions.py:123 in x_call)' from the innermost frame."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = ""
    if tb is not None:
        code = tb.tb_frame.f_code
        where = f" (at {os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name})"
    return f"{type(exc).__name__}: {exc}{where}"


def parse_defines(items):
    """['A', 'B=2'] -> {'A': '1', 'B': '2'}; a bad name is a ValueError naming it."""
    defines = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name.isidentifier():
            raise ValueError(f"-D {item!r}: {name!r} is not a macro name")
        defines[name] = value if sep else "1"
    return defines


def _missing(path, what):
    if not os.path.isfile(path):
        reason = "is a directory" if os.path.isdir(path) else "no such file"
        print(f"{path}: error: cannot read the {what}: {reason}", file=sys.stderr)
        return True
    return False


def _defines(args):
    """-D options as a dict, or None after printing which one is malformed."""
    try:
        return parse_defines(args.define)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def compile_program(args):
    """The compiled Program, or None after printing why not (file missing, P4 error)."""
    defines = None if _missing(args.program, "P4 program") else _defines(args)
    if defines is None:
        return None
    from testbed.p4engine import P4Error, compile_file
    try:
        return compile_file(args.program, include_dirs=args.include, defines=defines,
                            target=getattr(args, "target", None))
    except P4Error as exc:
        print(str(exc), file=sys.stderr)
        return None


def _p4info(program):
    """The program's P4Info, or None after printing why (e.g. two objects with one @id)."""
    from testbed.p4engine import P4Error
    try:
        return program.p4info
    except P4Error as exc:
        print(str(exc), file=sys.stderr)
        return None


# ------------------------------------------------------------------ commands
USAGE_ERROR = 2


def _unusable_input(args):
    """USAGE_ERROR after naming what cannot be used (a missing program, a bad -D), else None."""
    if _missing(args.program, "P4 program") or _defines(args) is None:
        return USAGE_ERROR
    return None


def run_check(args):
    unusable = _unusable_input(args)
    if unusable:
        return unusable
    program = compile_program(args)
    if program is None or _p4info(program) is None:
        return 1
    compiled = program.compiled
    _print_warnings(getattr(compiled, "warnings", ()))
    target = f" for {args.target}" if args.target != "engine" else ""
    print(f"{args.program}: ok{target} ({len(compiled.tables)} tables, {len(compiled.actions)} actions, "
          f"{len(compiled.externs)} extern instances)")
    return 0


def _print_warnings(warnings):
    """Located warnings (file:line:col, source line, caret) on stderr."""
    from testbed.p4engine.errors import SourceMap, render_diagnostics
    if not warnings:
        return
    lines = SourceMap()
    for file in {w[0] for w in warnings}:
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                lines.file_lines[file] = f.read().splitlines()
        except OSError:
            pass
    print(render_diagnostics(warnings, lines, severity="warning"), file=sys.stderr)


def run_info(args):
    unusable = _unusable_input(args)
    if unusable:
        return unusable
    program = compile_program(args)
    p4info = _p4info(program) if program is not None else None
    if p4info is None:
        return 1
    from testbed.p4engine.p4info import serialize
    fmt = args.format or FORMAT_BY_SUFFIX.get(os.path.splitext(args.output or "")[1], "text")
    data = serialize(p4info, fmt)
    if args.output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return 0
    try:
        with open(args.output, "wb") as f:
            f.write(data)
    except OSError as exc:
        print(f"{args.output}: error: cannot write the P4Info: {exc.strerror}", file=sys.stderr)
        return USAGE_ERROR
    print(f"wrote {args.output} ({fmt}: {len(p4info.tables)} tables, {len(p4info.actions)} actions)",
          file=sys.stderr)
    return 0


def run_test(args):
    from testbed.p4engine.stf import run_stf
    if _missing(args.program, "P4 program") or _missing(args.stf, "STF file"):
        return USAGE_ERROR
    defines = _defines(args)
    if defines is None:
        return USAGE_ERROR
    log = (lambda line: print(line, file=sys.stdout)) if args.verbose else None
    return run_stf(args.program, args.stf, include_dirs=args.include, defines=defines, log=log)


def run_conformance(args):
    from testbed.p4engine import conformance as C
    root = args.p4c or C.default_checkout()
    if root is None:
        print("rocelab p4 conformance: error: give a p4c checkout (none at ~/p4lang-src/p4c, where "
              "testbed/install/build-bmv2.sh clones one; `git clone https://github.com/p4lang/p4c` will do)",
              file=sys.stderr)
        return USAGE_ERROR
    ticker = _Ticker(sys.stderr)
    try:
        run = C.Conformance(root, only=args.only, on_case=ticker)
    except C.NotACheckout as exc:
        print(f"rocelab p4 conformance: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        results = run.run(args.check or C.CHECKS)
    finally:
        ticker.clear()
    return 0 if C.report(results, sys.stdout, verbose=args.verbose) else 1


class _Ticker:
    """On a terminal, the case under way on one line (a run takes minutes); nothing otherwise."""

    def __init__(self, stream):
        self.stream = stream
        self.shown = stream.isatty()

    def __call__(self, check, name):
        if self.shown:
            print(f"\r\033[K{check}: {name}"[:160], end="", file=self.stream, flush=True)

    def clear(self):
        if self.shown:
            print("\r\033[K", end="", file=self.stream, flush=True)
