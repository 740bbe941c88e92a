"""Parser states that can loop without consuming input (a warning of `rocelab p4 check`), and
parsers that never end (an error, found by reaches_an_end).

A cycle of parser states none of which is sure to extract or advance can run forever: BMv2 then
spins on the packet; the engine ends the parse after its step budget (codegen.parser_steps)
with error.ParserTimeout. Such a loop is legal P4 (a counter in a parser local can end it), so
this is a warning, found on the syntax tree alone:

- a state consumes input if one of its unconditional statements (or both branches of an `if`)
  is an extract, an advance by a constant of at least 8 bits, an advance by a run-time amount or
  a sub-parser given the packet (the last two may consume; no warning for them);
- a warning names each group of non-consuming states that can reach each other (one per loop),
  located at the first of them in the source, with one cycle spelled out.
"""


def nonconsuming_loops(decls):
    """[(file, line, col, message)] for every parser loop that may consume nothing."""
    warnings = []
    for decl in decls:
        if getattr(decl, "kind", None) == "parser":
            warnings.extend(_parser_warnings(decl))
    return warnings


def _parser_warnings(decl):
    packets = {p.name for p in decl.params
               if getattr(p.type, "kind", None) == "t_named" and p.type.name == "packet_in"}
    states = {st.name: st for st in decl.states}
    idle = {name for name, st in states.items() if not _block_consumes(st.stmts, packets)}
    edges = {name: [t for t in _targets(states[name]) if t in idle] for name in idle}
    found = []
    for group in _cycles(edges):
        first = min(group, key=lambda n: (states[n].loc.line, states[n].loc.col))
        path = _cycle_through(first, edges, group)
        loc = states[first].loc
        found.append((loc.file, loc.line, loc.col,
                      f"parser {decl.name}: state '{first}' can loop without consuming input "
                      f"({' -> '.join(path)}); if it does not stop, the engine ends the parse after "
                      f"its step budget with error.ParserTimeout (BMv2 would spin on the packet)"))
    return sorted(found)


def reaches_an_end(decl):
    """True if some path of states from `start` reaches accept or reject (a state without a
    transition goes to reject, as p4c makes it). A parser none of whose paths ends is refused
    by p4c (its front end removes unreachable states and then finds neither end)."""
    states = {st.name: st for st in decl.states}
    seen, pending = {"start"}, ["start"]
    while pending:
        state = states.get(pending.pop())
        if state is None:
            continue
        if state.transition is None:
            return True
        for target in _targets(state):
            if target in ("accept", "reject") or target not in states:
                return True         # an unknown state is reported where it is compiled
            if target not in seen:
                seen.add(target)
                pending.append(target)
    return False


def _targets(state):
    tr = state.transition
    if tr is None:
        return []
    if tr.kind == "trans_direct":
        return [tr.target]
    return [case.target for case in tr.cases]


def _block_consumes(stmts, packets):
    return any(_consumes(s, packets) for s in stmts)


def _consumes(stmt, packets):
    kind = stmt.kind
    if kind == "block":
        return _block_consumes(stmt.stmts, packets)
    if kind == "if":
        return (stmt.els is not None and _consumes(stmt.then, packets)
                and _consumes(stmt.els, packets))
    if kind != "call_stmt" or getattr(stmt.expr, "kind", None) != "call":
        return False
    call = stmt.expr
    func = call.func
    if func.kind == "member" and _names_packet(func.expr, packets):
        if func.name == "extract":
            return True
        if func.name == "advance" and call.args:
            amount = call.args[0]
            return amount.kind != "int" or amount.value >= 8
        return False
    # a sub-parser (or anything else) handed the packet may consume it
    return any(_names_packet(a, packets) for a in call.args)


def _names_packet(node, packets):
    node = getattr(node, "value", node) if getattr(node, "kind", None) == "named_arg" else node
    return getattr(node, "kind", None) == "name" and node.name in packets


def _cycles(edges):
    """Strongly connected groups of `edges` that contain a cycle (Tarjan, iterative)."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1 or node in edges[node]:
                    groups.append(group)
    return groups


def _cycle_through(start, edges, group):
    """The shortest state path start -> ... -> start inside `group` (breadth first)."""
    previous = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child not in group:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1] + [start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]
