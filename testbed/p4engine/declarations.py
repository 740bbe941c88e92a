"""Names declared twice in one scope, refused before anything is compiled, as p4c refuses them
right after parsing (ValidateParsedProgram, and the IndexedVector every declaration list is):
at the top level, where functions and extern functions may be overloaded but actions may not;
among a control's or a parser's locals; among a parser's states; in a parameter list (a block's
type, apply and constructor parameters together); among the variables and constants of one
block; among an enum's, error's or match_kind's members. Left to themselves, two actions `foo`
compiled, the second hiding the first. Overloaded functions, which p4c takes, are refused
as outside the engine's subset (it keeps one function per name).
"""
from .syntax import Node

_OVERLOADABLE = {"function", "extern_func"}      # by p4c; the engine resolves extern functions only
_UNNAMED = {"error_decl", "match_kind_decl"}


def check(decls, name_loc, err):
    """err(message, loc) at the second declaration of a name in a scope (the first found, in
    source order); name_loc(node, name) says where a name is written."""
    _Checker(name_loc, err).program(decls)


class _Checker:
    def __init__(self, name_loc, err):
        self.name_loc = name_loc
        self.err = err

    def program(self, decls):
        seen = {}
        members = {"error": {}, "match_kind": {}}
        for d in decls:
            if d.kind in _UNNAMED:
                self.members(d, d.members, members["error" if d.kind == "error_decl" else "match_kind"])
                continue
            name = getattr(d, "name", None)
            first = seen.get(name) if name else None
            if first is not None and not (d.kind == first.kind and d.kind in _OVERLOADABLE):
                self.twice(d, name, first)
            if first is not None and d.kind == "function":
                self.err(f"function '{name}' is overloaded (first declared at line {first.loc.line}): "
                         "overloaded functions are not supported by this engine", self.name_loc(d, name))
            seen.setdefault(name, d)
        for d in decls:
            self.walk(d)

    def twice(self, node, name, first):
        where = first.loc
        at = f"line {where.line}" if where.file == node.loc.file else f"{where.file}:{where.line}"
        self.err(f"'{name}' is declared twice in one scope (first at {at})", self.name_loc(node, name))

    def distinct(self, nodes):
        seen = {}
        for node in nodes:
            first = seen.get(node.name)
            if first is not None:
                self.twice(node, node.name, first)
            seen[node.name] = node

    def members(self, decl, names, seen):
        """`seen`: member name -> where it was first written (several error { } declarations
        share one)."""
        for i, name in enumerate(names):
            here = self.name_loc(decl, name, nth=names[:i + 1].count(name))
            if name in seen:
                self.err(f"'{name}' is declared twice in one scope (first at line {seen[name].line})", here)
            seen[name] = here

    def walk(self, node):
        kind = node.kind
        if kind in ("control", "parser"):
            self.distinct([*_type_params(node), *node.params, *(node.ctor_params or [])])
            self.distinct(node.locals)
            if kind == "parser":
                self.distinct(node.states)
        elif kind in ("enum", "ser_enum"):
            self.members(node, [m[0] if isinstance(m, tuple) else m for m in node.members], {})
        elif isinstance(getattr(node, "params", None), list):
            self.distinct(node.params)
        stmts = getattr(node, "stmts", None)
        if isinstance(stmts, list):
            self.distinct([s for s in stmts if isinstance(s, Node) and s.kind in ("var", "const")])
        for value in vars(node).values():
            if isinstance(value, Node):
                self.walk(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, Node):
                        self.walk(item)


def _type_params(node):
    """A block's type parameters as nodes that have a name and a location."""
    return [Node("type_param", node.loc, name=str(t)) for t in node.tparams or ()]
