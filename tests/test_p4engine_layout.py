"""The engine's modules import one another one way only: no module imports, even inside a
function, one that imports it back (the compiler is assembled from its seams, not a tangle)."""
import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "testbed" / "p4engine"


def engine_imports():
    """{module: modules of the engine it imports, at any depth of its code}."""
    graph = {}
    for path in ENGINE.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[path.stem] = deps
    return graph


def cycle_in(graph):
    """One import cycle as a list of modules, or None."""
    done, active = set(), []

    def visit(module):
        active.append(module)
        for dep in sorted(graph.get(module, ())):
            if dep in active:
                return active[active.index(dep):] + [dep]
            if dep in graph and dep not in done:
                found = visit(dep)
                if found:
                    return found
        active.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_engine_modules_import_one_way():
    graph = engine_imports()
    assert {"compiler", "calls", "compile_expressions", "stf"} <= set(graph)
    assert cycle_in(graph) is None
    assert "compiler" not in graph["calls"] and "calls" in graph["compiler"]
