"""What p4c's BMv2 backend (p4c-bm2-ss, simple_switch) refuses although P4_16 allows it.

    limits = limits_for("bmv2")     # None for the engine: it runs all of these
    Compiler(decls, smap, filename, limits=limits)

The compiler calls the hooks below while it compiles; each breach is recorded with its
location and reported together at the end as `file:line:col: error: [bmv2 <limit>] ...`,
so one run lists every place that has to change. The limits, as read from p4c's
backends/bmv2 (1.2.5):

  shift-amount      a shift's amount is at most bit<8> wide, a constant amount at most 256
                    (common/lower.cpp, LowerExpressions::shift, ERR_OVERLIMIT)
  lpm-keys          at most one lpm key per table (common/control.h)
  action-params     action data is bit<W> or int<W> only: no bool (common/action.cpp)
  loops             for (init; cond; update) loops only inside action bodies, which the back end
                    turns into _jump/_jump_if_zero primitives (common/action.cpp, from 1.2.5.12
                    on, so in the 1.2.5.16 testbed/install/build-bmv2.sh builds); none in an
                    apply block, nor in a function an apply block calls (p4c inlines it there);
                    no for-in loops anywhere (common/check_unsupported.h)
  checksum-control  verifyChecksum/computeChecksum contain only verify_checksum* /
                    update_checksum* calls whose field lists do no computation, and applies of
                    controls that do the same, given fields or headers (p4c inlines them)
                    (simple_switch/simpleSwitch.cpp, convertChecksum/EnsureExpressionIsSimple)
  deparser          the deparser contains only emit and extern calls: no if, assignment or
                    variable (common/deparser.cpp)
  table-reapplied   no path applies a table twice: BMv2's control flow is a graph in which
                    a table is one node (common/controlFlowGraph.cpp)
  direct-meter      a direct meter is read (direct_meter.read) in some action the program
                    uses, and attached to exactly one applied table with `meters =`; every
                    read writes the same destination (BMv2 keeps one result field per meter;
                    backends/common/metermap.cpp, simple_switch/simpleSwitch.cpp)
  shared-selector   tables sharing an action_selector give it the same selector keys, in the
                    same order (BMv2 hashes them in the selector; common/sharedActionSelectorCheck.h)
  variable-slice    a +: slice's low index is a compile-time constant: p4c's StrengthReduction turns
                    only those into plain slices, and the BMv2 back end has no conversion for the
                    rest (common/expression.cpp stops with "Unhandled case")
  field-list        the data hash() and the checksum functions compute over is a list, a struct
                    or a header: p4c-bm2-ss makes a field list of it and refuses anything else
                    ("expected a struct"; common/helpers.cpp, convertToList)
  direct-register   a register has at least one cell: size 0 is what p4c-bm2-ss takes for a
                    direct register, which BMv2 does not have (simple_switch/simpleSwitch.cpp)
  deprecated-externs  v1model's deprecated mark_to_drop(), clone3, resubmit(data) and
                    recirculate(data), which the engine runs as older BMv2 did: p4c-bm2-ss has no
                    conversion for them (simple_switch/simpleSwitch.cpp converts only the
                    standard_metadata / _preserving_field_list forms)

The engine enforces some BMv2 limits on every target, because it follows BMv2's packet
layout: headers a whole number of bytes, one varbit per header, clone I2E only in ingress
and E2E only in egress, resubmit in ingress, recirculate in egress, no 'random' hash.
"""
from .errors import P4Error
from .program_info import expr_text

MAX_SHIFT_BITS = 8
MAX_SHIFT_CONSTANT = 1 << MAX_SHIFT_BITS
CHECKSUM_CALLS = {"verify": ("verify_checksum", "verify_checksum_with_payload"),
                  "compute": ("update_checksum", "update_checksum_with_payload")}
CHECKSUM_CONTROL = {"verify": "verifyChecksum", "compute": "computeChecksum"}
# expression kinds a checksum's field list may hold: names, fields, constants, lists
SIMPLE_EXPRESSIONS = ("name", "member", "int", "list", "index", "bool", "type_member")
LVALUE_EXPRESSIONS = ("name", "member", "index")


def _applies_block(call):
    """`c.apply(...)` of a control instance, or `C.apply(...)` of a control type (a table is never
    local to a checksum control, so any .apply there is a sub-control's)."""
    f = call.func
    return f.name == "apply" and (f.kind == "type_member" or (f.kind == "member" and f.expr.kind == "name"))


def _arg_value(node):
    return node.value if node.kind == "named_arg" else node


def limits_for(target):
    """The limit checker for a target name; None where the engine has nothing to add."""
    if target in (None, "engine"):
        return None
    if target == "bmv2":
        return Bmv2Limits()
    raise ValueError(f"unknown target {target!r} (engine or bmv2)")


class Bmv2Limits:
    target = "bmv2"

    def __init__(self):
        self.breaches = []          # (file, line, col, message)
        self.meter_reads = []       # (direct_meter ExternInfo, action name or None, destination node)

    def _breach(self, limit, loc, message):
        self.breaches.append((loc.file, loc.line, loc.col, f"[bmv2 {limit}] {message}"))

    def raise_if_breached(self, source_map):
        if self.breaches:
            ordered = sorted(set(self.breaches), key=lambda b: (b[0], b[1], b[2]))
            raise P4Error(None, source_map=source_map, diagnostics=ordered)

    # ------------------------------------------------------------------ expressions
    def shift(self, node, value, amount):
        """`node` shifts `value` by `amount` (typed values); both constant means it is folded away."""
        width = getattr(amount.type, "width", None)
        if amount.is_const and amount.const == 0:
            return                  # p4c folds a shift by zero into its left operand
        if value.is_const and value.const == 0:
            return                  # and a shift of zero into zero, once side effects are hoisted
        if width is not None and width > MAX_SHIFT_BITS:
            self._breach("shift-amount", node.loc,
                         f"{expr_text(node)}: shift amount limited to {MAX_SHIFT_BITS} bits on this target "
                         f"(the amount is bit<{width}>; cast it to bit<{MAX_SHIFT_BITS}>)")
        elif width is None and amount.is_const and amount.const > MAX_SHIFT_CONSTANT:
            self._breach("shift-amount", node.loc,
                         f"{expr_text(node)}: shift amount limited to {MAX_SHIFT_CONSTANT} on this target")

    def field_list(self, fname, arg, data):
        """The data argument `arg` of hash() or a checksum function, compiled to `data`."""
        from . import p4types as T
        if not isinstance(data.type, (T.FieldsT, T.ListT)):
            self._breach("field-list", arg.loc, f"{fname}: its data {expr_text(arg)} is a {data.type}; this "
                         f"target computes over a list of fields only (write {{{expr_text(arg)}}})")

    # ------------------------------------------------------------------ declarations
    def action_param(self, param, ptype):
        from . import p4types as T
        if isinstance(ptype, T.BoolT):
            self._breach("action-params", param.loc,
                         f"action parameter '{param.name}': action parameters must be bit<> or int<> "
                         f"on this target, not bool (use bit<1>)")

    def direct_register(self, name, loc):
        self._breach("direct-register", loc, f"register {name}: size 0 (a direct register) is not supported "
                     f"on this target (give it at least one cell)")

    def deprecated_extern(self, call, name):
        """A call of one of v1model's deprecated extern functions."""
        if name == "mark_to_drop":
            self._breach("deprecated-externs", call.loc,
                         "mark_to_drop(): expected 1 argument on this target; "
                         "use mark_to_drop(standard_metadata)")
            return
        fresh = "clone_preserving_field_list" if name == "clone3" else f"{name}_preserving_field_list"
        self._breach("deprecated-externs", call.loc,
                     f"{name}: unknown extern function on this target; use {fresh} "
                     f"with a @field_list index")

    def table(self, decl):
        lpm = [k for p in decl.props if p.kind == "tp_key" for k in p.keys if k.match_kind == "lpm"]
        for extra in lpm[1:]:
            self._breach("lpm-keys", extra.loc,
                         f"table {decl.name}: multiple lpm keys in one table are not supported on this "
                         f"target (make the others ternary)")

    def direct_meter_read(self, meter, action, destination):
        """`meter.read(destination)` in `action` (None: outside any action)."""
        self.meter_reads.append((meter, action, destination))

    def program_end(self, tables, applied, used_actions):
        """Checks that need the whole program: the tables p4c keeps (`applied`) and the actions
        it keeps (`used_actions`)."""
        tables = [t for t in tables if t.name in applied]
        self._direct_meters(tables, used_actions)
        self._shared_selectors(tables)

    def _direct_meters(self, tables, used_actions):
        reads = {}                  # meter name -> [destination nodes], in program order
        meters = {}
        for meter, action, destination in self.meter_reads:
            if action is None or action in used_actions:
                reads.setdefault(meter.name, []).append(destination)
                meters[meter.name] = meter
        attached = {}               # meter name -> [tables]
        for t in tables:
            if t.direct_meter is not None:
                attached.setdefault(t.direct_meter.name, []).append(t)
        for name, users in attached.items():
            if name not in reads:
                self._breach("direct-meter", users[0].decl.loc,
                             f"table {users[0].decl.name}: its direct meter {name} is never read; a table with "
                             f"a direct meter must have at least one action calling {name.split('.')[-1]}.read(...) "
                             f"on this target")
            for extra in users[1:]:
                self._breach("direct-meter", extra.decl.loc,
                             f"table {extra.decl.name}: direct meter {name} is attached to table "
                             f"{users[0].decl.name} already; a direct meter belongs to one table")
        for name, destinations in reads.items():
            if name not in attached:
                meter = meters[name]
                self._breach("direct-meter", meter.loc,
                             f"{name}: direct meter is read but not associated with any table via the 'meters' "
                             f"table property")
            first = expr_text(destinations[0])
            for other in destinations[1:]:
                if expr_text(other) != first:
                    self._breach("direct-meter", other.loc,
                                 f"{expr_text(other)}: every read of direct meter {name} must write the same "
                                 f"destination on this target ({first} elsewhere)")

    def _shared_selectors(self, tables):
        first_user = {}             # selector name -> (table, its selector key expressions)
        for t in tables:
            if t.implementation is None or t.implementation.type_name != "action_selector":
                continue
            inputs = [k.expr for p in t.decl.props if p.kind == "tp_key" for k in p.keys
                      if k.match_kind == "selector"]
            name = t.implementation.name
            if name not in first_user:
                first_user[name] = (t, inputs)
                continue
            other, theirs = first_user[name]
            if len(inputs) != len(theirs) or not all(map(_same_key, inputs, theirs)):
                self._breach("shared-selector", t.decl.loc,
                             f"table {t.decl.name}: action selector {name} is used by multiple tables with "
                             f"different selector inputs ({', '.join(map(expr_text, inputs))} here, "
                             f"{', '.join(map(expr_text, theirs))} in table {other.decl.name})")

    def variable_slice(self, node):
        """x[lo +: w] with a lo that is not a compile-time constant."""
        self._breach("variable-slice", node.loc, f"{expr_text(node)}: the low index of a +: slice must be "
                     "a compile-time constant (p4c-bm2-ss has no conversion for the others: its BMv2 "
                     "back end stops with a compiler bug, 'Unhandled case')")

    # ------------------------------------------------------------------ statements
    def loop(self, stmt, in_action, function=None):
        """A loop; `function`: the function it is in, which an apply block calls."""
        if stmt.kind == "for_in":
            self._breach("loops", stmt.loc, "for-in loops are not supported on this target (p4c-bm2-ss "
                         "refuses them; write a for (init; cond; update) loop inside an action, or unroll it)")
        elif not in_action:
            called = f" (function {function} is called outside an action, and p4c inlines it there)" \
                if function else ""
            self._breach("loops", stmt.loc, "for loops are supported on this target only inside an action's "
                         f"body{called}; move the loop into an action, or unroll it")

    def control(self, decl, role):
        """A control's body, once per control declaration compiled in `role`."""
        if role in CHECKSUM_CALLS:
            self._checksum_body(decl.body.stmts, role)
        elif role == "deparser":
            self._deparser_body(decl.body.stmts)
        tables = {d.name for d in decl.locals if d.kind == "table"}
        if tables:
            self._paths(decl.body.stmts, tables, set())

    def _checksum_body(self, stmts, role):
        allowed = CHECKSUM_CALLS[role]
        for s in stmts:
            if s.kind == "block":
                self._checksum_body(s.stmts, role)
                continue
            call = s.expr if s.kind == "call_stmt" and s.expr.kind == "call" else None
            if call is not None and _applies_block(call):
                # a sub-control: p4c inlines it, passing plain l-values as they are (its own
                # body is checked when it is compiled for this role)
                for arg in call.args:
                    value = _arg_value(arg)
                    if value.kind not in LVALUE_EXPRESSIONS:
                        self._breach("checksum-control", arg.loc,
                                     f"{expr_text(value)}: only fields or headers may be passed to a "
                                     f"control applied in {CHECKSUM_CONTROL[role]} on this target")
                continue
            if call is None or call.func.kind != "name" or call.func.name not in allowed:
                self._breach("checksum-control", s.loc,
                             f"only calls to {' or '.join(allowed)} are allowed in {CHECKSUM_CONTROL[role]} "
                             f"on this target")
                continue
            if len(call.args) > 1:
                self._simple_field_list(call.args[1], allowed[0])

    def _simple_field_list(self, node, function):
        if node.kind == "named_arg":
            node = node.value
        if node.kind not in SIMPLE_EXPRESSIONS:
            self._breach("checksum-control", node.loc,
                         f"{expr_text(node)}: computations are not supported in {function} on this target "
                         f"(compute the value in ingress or egress into a field)")
            return
        for item in getattr(node, "items", None) or ():
            self._simple_field_list(item, function)

    def _deparser_body(self, stmts):
        for s in stmts:
            if s.kind == "block":
                self._deparser_body(s.stmts)
            elif s.kind not in ("call_stmt", "empty"):
                self._breach("deparser", s.loc,
                             f"'{s.kind}' statement: only emit and extern calls are supported within a "
                             f"deparser on this target")

    # -- a table applied twice on one path
    def _paths(self, stmts, tables, seen):
        """Walk a statement list in order; `seen` holds the tables some path to here applied.
        Returns the tables applied on paths that fall through, or None if none does."""
        for s in stmts:
            seen = self._path_stmt(s, tables, seen)
            if seen is None:
                return None
        return seen

    def _path_stmt(self, s, tables, seen):
        k = s.kind
        if k in ("exit", "return"):
            if getattr(s, "value", None) is not None:
                self._applies(s.value, tables, seen)
            return None
        if k == "block":
            return self._paths(s.stmts, tables, seen)
        if k == "if":
            seen = self._applies(s.cond, tables, seen)
            then = self._path_stmt(s.then, tables, set(seen))
            els = self._path_stmt(s.els, tables, set(seen)) if s.els is not None else set(seen)
            return _union(then, els)
        if k == "switch":
            seen = self._applies(s.expr, tables, seen)
            out, has_default = None, False
            for case in s.cases:
                if getattr(case.label, "kind", None) == "sw_default":
                    has_default = True
                if case.body is not None:
                    out = _union(out, self._path_stmt(case.body, tables, set(seen)))
            return _union(out, None if has_default else set(seen))
        if k in ("for", "for_in"):
            return seen         # reported as a loop already
        for child in ("expr", "rhs", "lhs", "init"):
            node = getattr(s, child, None)
            if node is not None and hasattr(node, "kind"):
                seen = self._applies(node, tables, seen)
        return seen

    def _applies(self, node, tables, seen):
        """Add the tables an expression applies (in evaluation order) to `seen`."""
        for call in _calls(node):
            f = call.func
            if f.kind == "member" and f.name == "apply" and f.expr.kind == "name" and f.expr.name in tables:
                name = f.expr.name
                if name in seen:
                    self._breach("table-reapplied", call.loc,
                                 f"table {name} is applied twice on one path; BMv2 cannot implement a "
                                 f"path from a table back to itself")
                seen = seen | {name}
        return seen


def _same_key(a, b):
    """Two selector key expressions p4c sees as one input: the same names, fields, indices and
    literals; anything computed never is."""
    if a.kind != b.kind:
        return False
    if a.kind == "name":
        return a.name == b.name
    if a.kind == "member":
        return a.name == b.name and _same_key(a.expr, b.expr)
    if a.kind == "index":
        return _same_key(a.expr, b.expr) and _same_key(a.index, b.index)
    if a.kind in ("int", "bool"):
        return a.value == b.value and getattr(a, "width", None) == getattr(b, "width", None)
    return False


def _union(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _calls(node):
    """Call nodes inside an expression, innermost first (the order they run)."""
    found = []

    def walk(n):
        if isinstance(n, list):
            for item in n:
                walk(item)
            return
        if not hasattr(n, "kind") or not hasattr(n, "__dict__"):
            return
        for value in n.__dict__.values():
            if isinstance(value, list) or hasattr(value, "kind"):
                walk(value)
        if n.kind == "call":
            found.append(n)

    walk(node)
    return found
