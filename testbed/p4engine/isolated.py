"""Compile in a short-lived child process, for long-running hosts such as the engine switch.

    compile_source_isolated(text, filename="<string>", include_dirs=(), defines=None, target=None) -> Program
    compile_file_isolated(path, include_dirs=(), defines=None, target=None) -> Program

Why: parsing and checking a program like p4/fabric.p4 grows the process by ~18 MB that the
allocator never returns (the lark tables and the AST are freed, but their arenas stay
fragmented). A child `python -m testbed.p4engine.isolated` does that work and exits; it sends
back the pickled program_info.Compiled (generated source, slot layout, table/action/extern
metadata) with the syntax-tree links the runtime never reads cut off, so the host only builds
the Program from it. A child, not a fork: the switch runs gRPC threads.

Diagnostics are unchanged: a P4Error comes back as its diagnostics and source map and is
rebuilt, so str(e) is the same file:line:col text as an in-process compile.

The child is bounded (COMPILE_SECONDS, COMPILE_MEMORY): a program that would take the compiler
longer or more memory than that (hostile, or a pathological case the engine's own bounds miss)
ends as a P4Error naming the limit, never as a switch stuck on one SetForwardingPipelineConfig.
"""
import os
import pickle
import subprocess
import sys

from .errors import P4Error

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_SECONDS = 120          # fabric.p4 takes ~1 s on an idle core, a few on a loaded machine
COMPILE_MEMORY = 2 << 30       # address space of the compiler process (it uses ~0.3 GB)


def compile_source_isolated(text, filename="<string>", include_dirs=(), defines=None, sandboxed=False,
                            target=None):
    """Like compile_source, run in a child process; raises P4Error."""
    return _run_child({"text": text, "filename": filename, "include_dirs": tuple(include_dirs),
                       "defines": defines, "sandboxed": sandboxed, "target": target})


def compile_file_isolated(path, include_dirs=(), defines=None, target=None):
    """Like compile_file, run in a child process; raises P4Error."""
    return _run_child({"path": str(path), "include_dirs": tuple(include_dirs), "defines": defines,
                       "target": target})


def _limit_error(request, message):
    name = request.get("path") or request.get("filename") or "<program>"
    return P4Error(None, diagnostics=[(name, 0, 0, message)])


def _run_child(request):
    from .pipeline import Program
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", __name__], input=pickle.dumps(request),
                              capture_output=True, env=env, check=False, timeout=COMPILE_SECONDS)
    except subprocess.TimeoutExpired:
        raise _limit_error(request, f"compiling the program took longer than {COMPILE_SECONDS} s "
                                    "(the engine's limit); it was stopped") from None
    try:
        kind, *rest = pickle.loads(done.stdout)
    except Exception:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the P4 compiler process failed (exit status {done.returncode}): "
                           f"{detail[0]}") from None
    if kind == "error":
        diagnostics, source_map = rest
        raise P4Error(None, source_map=source_map, diagnostics=diagnostics)
    compiled, source, filename = rest
    return Program(compiled, source, filename)


def _detach_syntax(compiled):
    """Drop the links from the metadata to declarations: only the compiler reads them, and
    pickling the whole syntax tree would cost time, memory and recursion depth."""
    for info in list(compiled.tables.values()) + list(compiled.actions.values()):
        info.decl = None


def _serve(request):
    from . import compile_file, compile_source
    try:
        if "path" in request:
            program = compile_file(request["path"], request["include_dirs"], request["defines"],
                                   target=request.get("target"))
        else:
            program = compile_source(request["text"], request["filename"], request["include_dirs"],
                                     request["defines"], sandboxed=request.get("sandboxed", False),
                                     target=request.get("target"))
    except P4Error as e:
        return ("error", e.diagnostics, e.source_map)
    except MemoryError:
        name = request.get("path") or request.get("filename") or "<program>"
        return ("error", [(name, 0, 0, f"compiling the program needs more than {COMPILE_MEMORY >> 30} GB "
                                       "of memory (the engine's limit)")], None)
    _detach_syntax(program.compiled)
    return ("ok", program.compiled, program.source, program.filename)


def main():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (COMPILE_MEMORY, COMPILE_MEMORY))
    request = pickle.load(sys.stdin.buffer)
    sys.stdout.buffer.write(pickle.dumps(_serve(request), protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    main()
