"""The embedded P4_16 engine: runs v1model programs the way BMv2's simple_switch does.

    compile_file(path, include_dirs=(), defines=None) -> Program
    compile_source(text, filename="<string>", include_dirs=()) -> Program
    Program.new_pipeline(cpu_port=None, drop_port=511, log=None) -> Pipeline

See CONTRACT.md for the Pipeline interface. Program.compiled carries the metadata P4Info and the
tools read (program_info.Compiled: tables, actions, externs, digests, controller headers).
"""
from .errors import P4Error, P4RuntimeFault

__all__ = ["P4Error", "P4RuntimeFault", "compile_file", "compile_source", "Program", "Pipeline"]


def _compile(decls, smap, source, filename, target=None):
    from .bmv2_limits import limits_for
    from .compiler import Compiler
    from .pipeline import Program
    try:
        compiled = Compiler(decls, smap, filename, limits=limits_for(target)).compile()
    except P4Error as e:
        raise e.with_source_map(smap) from None
    except RecursionError:
        from .errors import TOO_DEEP, Loc, deepest_point
        raise P4Error(TOO_DEEP, Loc(filename, *deepest_point(source)), smap) from None
    from .parser_loops import nonconsuming_loops
    compiled.warnings = compiled.warnings + nonconsuming_loops(decls)     # [(file, line, col, message)]
    return Program(compiled, source, filename)


def compile_file(path, include_dirs=(), defines=None, target=None):
    """Preprocess, parse, check and compile the P4 program at `path`; raises P4Error.
    target="bmv2" also refuses what p4c-bm2-ss refuses (see bmv2_limits)."""
    from .syntax import parse_program
    path = str(path)
    decls, smap = parse_program(path=path, include_dirs=include_dirs, defines=defines)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
    except OSError:
        source = ""
    return _compile(decls, smap, source, path, target)


def compile_source(text, filename="<string>", include_dirs=(), defines=None, target=None, sandboxed=False):
    """Like compile_file for program text (e.g. a P4Runtime device config: `sandboxed`, so that
    #include reaches only the bundled core.p4/v1model.p4, never the machine's files)."""
    from .syntax import parse_program
    decls, smap = parse_program(text=text, filename=filename, include_dirs=include_dirs, defines=defines,
                                sandboxed=sandboxed)
    return _compile(decls, smap, text, filename, target)


def __getattr__(name):
    if name in ("Program", "Pipeline"):
        from . import pipeline
        return getattr(pipeline, name)
    raise AttributeError(name)
