"""Expressions: every expression kind typed and translated to Python over the state list `S`,
with constant folding and width-correct arithmetic (a Compiler mixin)."""
import operator

from . import p4types as T
from .codegen import slot_add
from .compile_values import agg, const_arith, const_text, lit, lv, NEXT_OUTSIDE_EXTRACT, py_op, Sym, Val, wrap
from .program_info import expr_text
from .resource_limits import MAX_CONST_SHIFT

ORDER = {"<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}


class ExpressionsMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    def convert(self, v, t, loc):
        """Implicit conversion of scalar `v` to type `t` (only where P4_16 allows it)."""
        vt = v.type
        if vt == t:
            return v
        if isinstance(t, T.BitT) and isinstance(vt, T.IntLitT):
            if v.is_const:
                self.warn_if_truncated(v.const, t, v.loc or loc)
                return lit(wrap(v.const, t), t)
            return Val("rv", t, self.wrap_code(v.code, t))
        if isinstance(t, T.IntLitT) and isinstance(vt, T.BitT):
            return v
        if isinstance(t, T.EnumT) and isinstance(vt, T.EnumT) and t.name == vt.name:
            return v
        if isinstance(vt, T.EnumT) and vt.base is not None and vt.base == t:
            # a serializable enum where its underlying type is expected (e.g. a header field of
            # enum type, which is stored as the underlying bits)
            return Val("rv", t, v.code, const=v.const)
        self.err(f"cannot use a value of type {vt} where {t} is expected (use an explicit cast)", loc)

    def warn_if_truncated(self, value, t, loc):
        """An integer where bit<W>/int<W> is expected: p4c's implicit cast keeps its low W bits
        and warns (ir/expression.cpp, Constant::handleOverflow); so does the engine."""
        kept = wrap(value, t)
        if kept == value or self.folded_away:     # p4c folds dead branches away before it casts
            return
        if not t.signed and value < 0:
            reason = "negative value with unsigned type"
        else:
            reason = f"{'signed ' if t.signed else ''}value does not fit in {t.width} bits"
        self.warn(f"{const_text(value)}: {reason}; {t} keeps {const_text(kept)}, as p4c truncates it", loc)

    def warn(self, message, loc):
        """A located warning, once however often the code around it is compiled."""
        warning = (loc.file, loc.line, loc.col, message)
        if warning not in self.out.warnings:
            self.out.warnings.append(warning)

    def wrap_code(self, code, t):
        """Python code for `code` wrapped to type t's width (parenthesized: used inside larger code)."""
        if t.signed:
            h = 1 << (t.width - 1)
            return f"(((({code}) + {h:#x}) & {t.mask:#x}) - {h:#x})"
        return f"(({code}) & {t.mask:#x})"

    def scalar(self, v, loc):
        if v.kind in ("rv", "lv"):
            return v
        if v.kind == "slice_lv":
            base, hi, lo = v.info
            return Val("rv", T.BitT(hi - lo + 1), f"(({base.code} >> {lo}) & {(1 << (hi - lo + 1)) - 1:#x})")
        if v.kind == "vslice_lv":
            return _variable_slice(*v.info)
        if v.kind == "apply":
            self.err("a table apply result must be used with .hit, .miss or .action_run", loc)
        if v.kind in ("agg", "list"):
            self.err(f"expected a scalar value, got {v.type}", loc)
        self.err("this is not a value", loc)

    # ------------------------------------------------------------------------- expressions
    def expr(self, node, ctx, expected=None):
        m = getattr(self, "x_" + node.kind, None)
        if m is None:
            self.err(f"unsupported expression '{node.kind}'", node.loc)
        return m(node, ctx, expected)

    def x_int(self, n, ctx, expected):
        if n.width is not None:
            t = T.BitT(n.width, n.signed)
            kept = wrap(n.value, t)
            if kept != n.value:     # p4c keeps the low bits and warns (Constant::handleOverflow)
                digits = {16: f"{n.value:#x}", 2: f"{n.value:#b}", 8: f"{n.value:#o}"}.get(
                    getattr(n, "base", 10), str(n.value)) if n.value.bit_length() <= 128 else const_text(n.value)
                self.warn(f"{n.width}{'s' if n.signed else 'w'}{digits}: {'signed ' if n.signed else ''}"
                          f"value does not fit in {n.width} bits; {t} keeps {kept}, as p4c truncates it",
                          n.loc)
            return lit(kept, t)
        v = lit(n.value, T.INTLIT)
        v.loc = n.loc           # where a warning about its implicit cast points, as p4c's does
        return v

    def x_evaluated(self, n, ctx, expected):
        return n.val

    def x_bool(self, n, ctx, expected):
        return lit(n.value, T.BOOL)

    def x_string(self, n, ctx, expected):
        return Val("rv", T.STRING, repr(n.value), const=n.value)

    def x_name(self, n, ctx, expected):
        s = ctx.scope.lookup(n.name)
        if s is None:
            if n.name in ("accept", "reject"):
                self.err(f"'{n.name}' is a parser state, not a value", n.loc)
            if n.name in self.match_kinds:      # a match_kind member is a value too (tuple<match_kind>)
                number = self.match_kinds[n.name]
                return Val("rv", T.MATCH_KIND, str(number), const=number)
            self.err(f"unknown name '{n.name}'", n.loc)
        if s.kind in ("var", "const"):
            return s.val
        return Val("ref", None, info=s, name=n.name, loc=n.loc)

    def x_error_member(self, n, ctx, expected):
        if n.name not in self.errors:
            self.err(f"unknown error '{n.name}'", n.loc)
        return Val("rv", T.ERROR, str(self.errors.index(n.name)), const=self.errors.index(n.name))

    def x_type_member(self, n, ctx, expected):
        t = self.types.get(n.type_name)
        if isinstance(t, T.EnumT):
            if n.name not in t.values:
                self.err(f"enum {t.name} has no member '{n.name}'", n.loc)
            v = t.values[n.name]
            return Val("rv", t, str(v), const=v, info=n.name)
        if isinstance(t, T.BlockT) and t.kind in ("control", "parser") and n.name == "apply" \
                and hasattr(t.decl, "body" if t.kind == "control" else "states"):
            # direct invocation `Ctl.apply(...)`: an anonymous instance of its own at each call
            name = f"{ctx.prefix}.{t.name}" if ctx.prefix else t.name
            self.direct_invocations[name] = count = self.direct_invocations.get(name, 0) + 1
            if count > 1:
                name = f"{name}_{count - 1}"
            info = self.instantiate_block(t.decl, name, [], ctx, n.loc)
            return Val("method", obj=Val("ref", None, info=Sym("control_inst", info=info), name=t.name),
                       name="apply")
        self.err(f"'{n.type_name}.{n.name}' is not supported here", n.loc)

    def x_member(self, n, ctx, expected):
        base = self.expr(n.expr, ctx)
        name = n.name
        if base.kind == "list" and isinstance(base.info, T.StructT):     # a field of a struct constant
            names = [f for f, _ in base.info.fields]
            if name not in names:
                self.err(f"struct {base.info.name} has no field '{name}'", n.loc)
            return base.items[names.index(name)]
        if base.kind == "agg":
            t = base.type
            if isinstance(t, (T.HeaderT, T.StructT)):
                ft = t.field_type(name)
                if ft is not None:
                    slot = slot_add(base.slot, t.offsets()[name])
                    if isinstance(t, T.UnionT):       # making it valid invalidates the others
                        v = agg(slot, ft)
                        v.siblings = [s for s in t.validity_slots(base.slot) if s != slot]
                        return v
                    if ft.aggregate:
                        return agg(slot, ft)
                    v = lv(slot, ft)
                    if isinstance(t, T.HeaderT):
                        v.valid = base.slot
                    return v
                view = getattr(t, "struct_views", {}).get(name) if isinstance(t, T.HeaderT) else None
                if view is not None:            # a struct field of a header: a view on its leaves
                    if view[1] is None:         # an empty struct: no slots to point at
                        return agg(base.slot, view[0])
                    return agg(slot_add(base.slot, t.offsets()[view[1]]), view[0])
                if isinstance(t, T.HeaderT) and name in ("isValid", "setValid", "setInvalid", "minSizeInBits",
                                                          "minSizeInBytes"):
                    return Val("method", obj=base, name=name)
                if isinstance(t, T.UnionT) and name == "isValid":
                    return Val("method", obj=base, name=name)
                self.err(f"{'header' if isinstance(t, T.HeaderT) else 'struct'} {t.name} has no field '{name}'", n.loc)
            if isinstance(t, T.StackT):
                esz = t.elem.slots()
                if name == "size":
                    return lit(t.size, T.INTLIT)
                if isinstance(t.elem, T.UnionT) and name in ("last", "push_front", "pop_front"):
                    self.err(f"'.{name}' on a stack of header unions is not supported by this engine", n.loc)
                if name in ("next", "last"):
                    if ctx.where != "parser":
                        self.err(f"header stack .{name} can only be used in a parser", n.loc)
                    if name == "next":
                        return Val("stack_next", t.elem, slot=base.slot, info=t, loc=n.loc)
                    idx = f"(S[{base.slot}] - 1)"
                    return Val("agg", t.elem, slot=self.stack_elem_slot(base, idx, ctx, n.loc))
                if name == "lastIndex":
                    return Val("rv", T.BitT(32), f"((S[{base.slot}] - 1) & 0xffffffff)")
                if name == "nextIndex":
                    return Val("rv", T.BitT(32), f"S[{base.slot}]")
                if name in ("push_front", "pop_front"):
                    return Val("method", obj=base, name=name)
                self.err(f"header stacks have no member '{name}'", n.loc)
        if base.kind == "stack_next" and isinstance(base.type, T.UnionT) and base.name is None \
                and isinstance(base.type.field_type(name), T.HeaderT):
            # extract(u.next.h): the member h of the next union element
            return Val("stack_next", base.type.field_type(name), slot=base.slot, info=base.info,
                       name=name, loc=n.loc)
        if base.kind == "stack_next":
            self.err(NEXT_OUTSIDE_EXTRACT, n.loc)
        if base.kind == "apply":
            if name == "hit":
                return Val("rv", T.BOOL, f"{base.code}[0]")
            if name == "miss":
                return Val("rv", T.BOOL, f"(not {base.code}[0])")
            if name == "action_run":
                return Val("apply_action_run", None, base.code, info=base.info)
            self.err(f"a table apply result has no member '{name}'", n.loc)
        if base.kind == "ref":
            return Val("method", obj=base, name=name, loc=n.loc)
        if base.kind in ("rv", "lv"):
            self.err(f"a value of type {base.type} has no member '{name}'", n.loc)
        self.err(f"cannot take member '{name}' here", n.loc)

    def x_index(self, n, ctx, expected):
        base = self.expr(n.expr, ctx)
        if base.kind == "agg" and isinstance(base.type, T.ListT):       # tuple element
            i = self.const_int_val(n.index, ctx)
            if not 0 <= i < len(base.type.types):
                self.err(f"index {i} is out of bounds for {base.type}", n.index.loc)
            et = base.type.types[i]
            slot = slot_add(base.slot, base.type.offsets()[i])
            return agg(slot, et) if et.aggregate else lv(slot, et)
        if base.kind == "list" and not isinstance(base.info, T.StructT):     # a tuple constant or literal
            i = self.const_int_val(n.index, ctx)
            if not 0 <= i < len(base.items):
                self.err(f"index {i} is out of bounds for {base.type}", n.index.loc)
            return base.items[i]
        if base.kind != "agg" or not isinstance(base.type, T.StackT):
            self.err("only header stacks and tuples can be indexed", n.index.loc)
        idx = self.scalar(self.expr(n.index, ctx), n.index.loc)
        t = base.type
        if idx.is_const:
            i = int(idx.const)
            if not 0 <= i < t.size:
                self.err(f"index {i} is out of bounds for a stack of size {t.size}", n.index.loc)
            return agg(base.slot + 1 + i * t.elem.slots(), t.elem)
        return agg(self.stack_elem_slot(base, idx.code, ctx, n.loc), t.elem)

    def x_plus_slice(self, n, ctx, expected):
        """x[lo +: w]: x[lo + w - 1 : lo] when lo is constant, as p4c's StrengthReduction rewrites
        it; otherwise bits lo.. of x, w of them, those past x's width reading as 0 and dropped
        on writes (the P4_16 1.2.5 spec's shift semantics)."""
        width = self.expr(n.width, ctx)
        if not width.is_const:
            self.err("slice bit index values must be constants (the width of a +: slice)", n.width.loc)
        w = int(width.const)
        if w <= 0:
            self.err(f"a +: slice needs a positive width, not {w}", n.width.loc)
        lo = self.expr(n.lo, ctx)
        if lo.is_const:
            return self.slice_of(n, ctx, int(lo.const) + w - 1, int(lo.const))
        lo = self.scalar(lo, n.lo.loc)
        if not isinstance(lo.type, T.BitT) or lo.type.signed:
            self.err(f"the low index of a +: slice must be bit<W> when it is not a compile-time "
                     f"constant, not {lo.type}", n.lo.loc)
        if self.limits is not None:
            self.limits.variable_slice(n)
        base = self.expr(n.expr, ctx)
        b = self.scalar(base, n.loc)
        if not isinstance(b.type, T.BitT):
            self.err(f"cannot slice a value of type {b.type}", n.loc)
        if base.kind == "lv":           # an lvalue: its index is read once, where it is written
            return Val("vslice_lv", T.BitT(w), info=(base, self.snapshot(lo, ctx).code, w))
        return _variable_slice(b, lo.code, w)

    def x_slice(self, n, ctx, expected):
        return self.slice_of(n, ctx, self.const_int_val(n.hi, ctx), self.const_int_val(n.lo, ctx))

    def slice_of(self, n, ctx, hi, lo):
        base = self.expr(n.expr, ctx)
        b = self.scalar(base, n.loc)
        if not isinstance(b.type, T.BitT):
            if isinstance(b.type, T.IntLitT) and b.is_const:
                w = hi - lo + 1
                return lit((b.const >> lo) & ((1 << w) - 1), T.BitT(w))
            self.err(f"cannot slice a value of type {b.type}", n.loc)
        if not (0 <= lo <= hi < b.type.width):
            self.err(f"slice [{hi}:{lo}] is out of range for {b.type}", n.loc)
        if base.kind == "lv":
            return Val("slice_lv", T.BitT(hi - lo + 1), info=(base, hi, lo))
        if base.kind == "slice_lv":       # x[7:4][1:0] is x[5:4]
            inner, _, inner_lo = base.info
            return Val("slice_lv", T.BitT(hi - lo + 1), info=(inner, inner_lo + hi, inner_lo + lo))
        w = hi - lo + 1
        if b.is_const:
            return lit((b.const >> lo) & ((1 << w) - 1), T.BitT(w))
        return Val("rv", T.BitT(w), f"(({b.code} >> {lo}) & {(1 << w) - 1:#x})")

    def x_list(self, n, ctx, expected):
        nodes, names, dots = n.items, getattr(n, "names", None), getattr(n, "dots", None)
        if names is None and nodes and nodes[-1].kind == "dots":
            nodes, dots = nodes[:-1], nodes[-1].loc
        wanted = self.item_types(nodes, names, expected)
        items = []
        for node, want in zip(nodes, wanted):
            v, lines = self.captured(ctx, lambda: self.expr(node, ctx, want))
            if lines:       # a call with side effects: the items before it are read first
                items = [self.snapshot_all(i, ctx) for i in items]
                ctx.em.lines.extend(lines)
            items.append(v)
        if dots is not None:
            items, names = self.fill_defaults(items, names, dots, expected, n.loc)
        return Val("list", T.ListT([i.type for i in items if i.type is not None]), items=items, name=names)

    def x_struct_expr(self, n, ctx, expected):
        # {f1 = e1, f2 = e2}: a list whose items carry field names (matched by name on use)
        return self.x_list(n, ctx, expected)

    def item_types(self, nodes, names, expected):
        """The type each item of a list or structure expression of type `expected` must have,
        for the items that need one to have a value (`...`, `{#}`); None for the others."""
        types = self.element_types(expected) if expected is not None else None
        if types is not None and names is not None:
            fields = dict(expected.fields_as_declared()) if isinstance(expected, T.FieldsT) else {}
            types = [fields.get(name) for name in names]
        types = list(types or []) + [None] * len(nodes)
        return [t if _needs_type(node) else None for node, t in zip(nodes, types)]

    def x_cond(self, n, ctx, expected):
        cv = self.cond_val(n.cond, ctx)
        c = cv.code
        a, alines = self.captured(ctx, lambda: self.scalar(self.expr(n.a, ctx, expected), n.a.loc),
                                  unreachable=cv.const is False)
        b, blines = self.captured(ctx, lambda: self.scalar(self.expr(n.b, ctx, expected), n.b.loc),
                                  unreachable=cv.const is True)
        a, b, t = self.unify(a, b, n.loc, "?:")
        if cv.is_const:         # folded, as p4c folds it: only the chosen side is evaluated
            chosen, lines = (a, alines) if cv.const else (b, blines)
            ctx.em.lines.extend(lines)
            return chosen
        if not alines and not blines:
            return Val("rv", t, f"({a.code} if {c} else {b.code})")
        cv, r = ctx.temp(), ctx.temp()
        ctx.em.line(f"{cv} = {c}")
        self.guarded(ctx, cv, alines, r, a.code)
        self.guarded(ctx, f"not {cv}", blines, r, b.code)
        return Val("rv", t, r)

    def x_cast(self, n, ctx, expected):
        t = self.resolve_type(n.type)
        v = self.expr(n.expr, ctx, t)
        if (v.kind == "list" and isinstance(t, (T.StructT, T.HeaderT, T.StackT))) or v.kind == "invalid":
            return v
        v = self.scalar(v, n.expr.loc)
        if isinstance(t, T.EnumT) and t.base is not None:
            inner = self.cast_scalar(v, t.base, n.loc)
            return Val("rv", t, inner.code, const=inner.const)
        return self.cast_scalar(_underlying(v), t, n.loc)

    def x_unop(self, n, ctx, expected):
        v = _underlying(self.scalar(self.expr(n.expr, ctx, expected), n.expr.loc))
        t = v.type
        if n.op == "!":
            if not isinstance(t, T.BoolT):
                self.err(f"'!' needs a bool, not {t}", n.loc)
            if v.is_const:
                return lit(not v.const, T.BOOL)
            return Val("rv", T.BOOL, f"(not {v.code})")
        if not isinstance(t, (T.BitT, T.IntLitT)):
            self.err(f"'{n.op}' needs a number, not {t}", n.loc)
        if n.op == "-":
            if v.is_const:
                negated = lit(wrap(-v.const, t) if isinstance(t, T.BitT) else -v.const, t)
                negated.loc = n.loc
                return negated
            if isinstance(t, T.BitT):
                return Val("rv", t, self.wrap_code(f"-{v.code}", t))
            return Val("rv", t, f"(-{v.code})")
        # ~
        if isinstance(t, T.IntLitT):
            self.err("'~' needs a value with a width (cast the literal first)", n.loc)
        if v.is_const:
            return lit(wrap(~v.const, t), t)
        if t.signed:
            return Val("rv", t, f"(~{v.code})")
        return Val("rv", t, f"({v.code} ^ {t.mask:#x})")

    def binop_operands(self, n, ctx):
        """The operands of binary (not short-circuit) `n`, read left to right. In == and != {#}
        takes the other operand's type (p4c's convertUntypedInvalid), and so does a structure
        expression with `...` (or a list with one, against a tuple); a {#} operand is returned
        second. A bare `...` takes none (p4c cannot compare it)."""
        op = n.op
        swap = op in ("==", "!=") and n.left.kind == "invalid"
        left, right = (n.right, n.left) if swap else (n.left, n.right)
        a = self.expr(left, ctx)
        want = None
        if op in ("==", "!=") and (right.kind in ("invalid", "struct_expr") or
                                   right.kind == "list" and isinstance(a.type, T.ListT)):
            want = a.type if _needs_type(right) else None
        b, blines = self.captured(ctx, lambda: self.expr(right, ctx, want))
        if blines:          # left to right: the left operand is read before the right's effects
            a = self.snapshot(a, ctx)
            ctx.em.lines.extend(blines)
        return a, b

    def x_binop(self, n, ctx, expected):
        op = n.op
        if op in ("&&", "||"):
            a = self.scalar(self.expr(n.left, ctx), n.left.loc)
            decided = a.is_const and a.const == (op == "||")     # false && x, true || x
            b, blines = self.captured(ctx, lambda: self.scalar(self.expr(n.right, ctx), n.right.loc),
                                      unreachable=decided)
            for v, nd in ((a, n.left), (b, n.right)):
                if not isinstance(v.type, T.BoolT):
                    self.err(f"'{op}' needs bool operands, not {v.type}", nd.loc)
            # p4c folds a constant left side (and a constant right side when the left one has
            # no side effects); what it folds away never runs, so the right side is dropped
            if decided:
                return a
            if a.is_const:
                ctx.em.lines.extend(blines)
                return b
            if b.is_const and not blines and not _has_side_effects(n.left):
                return b if b.const == (op == "||") else a
            if blines:      # the right side has statements: run them only if it is evaluated
                r = ctx.temp()
                ctx.em.line(f"{r} = {a.code}")
                self.guarded(ctx, r if op == "&&" else f"not {r}", blines, r, b.code)
                return Val("rv", T.BOOL, r)
            if a.is_const and b.is_const:
                return lit((a.const and b.const) if op == "&&" else (a.const or b.const), T.BOOL)
            return Val("rv", T.BOOL, f"({a.code} {'and' if op == '&&' else 'or'} {b.code})")
        a, b = self.binop_operands(n, ctx)
        if op in ("==", "!=") and a.kind == "agg" and b.kind == "invalid":
            # equal to the invalid header (union) exactly when not valid (no member valid)
            code = " or ".join(f"S[{slot}]" for slot in a.type.validity_slots(a.slot))
            return Val("rv", T.BOOL, f"(not ({code}))" if op == "==" else f"bool({code})")
        if op in ("==", "!=") and a.kind == b.kind == "list":
            # two list values: constants compare now; else a declared constant becomes storage
            if a.info is not None and b.info is not None and a.info != b.info:
                self.err(f"cannot compare {a.info} with {b.info}", n.loc)
            ca, cb = _constant_items(a), _constant_items(b)
            if ca is not None and cb is not None:
                if len(ca) != len(cb):
                    self.err(f"cannot compare {a.type} with {b.type}", n.loc)
                return lit((ca == cb) == (op == "=="), T.BOOL)
            typed, other = (a, b) if isinstance(a.info, (T.StructT, T.ListT)) else (b, a)
            if not isinstance(typed.info, (T.StructT, T.ListT)):
                self.err("cannot compare two list expressions of unknown types (cast one of them)", n.loc)
            base = self.alloc(typed.info, "compare")
            self.assign_list(agg(base, typed.info), typed, ctx, n.loc)
            a, b = agg(base, typed.info), other
        if op in ("==", "!=") and {a.kind, b.kind} == {"agg", "list"}:
            # a struct or header against a list or structure expression: compare as its type
            a, b = (a, b) if a.kind == "agg" else (b, a)
            base = self.alloc(a.type, "compare")
            self.assign_list(agg(base, a.type), b, ctx, n.loc)
            b = agg(base, a.type)
        if op in ("==", "!=") and a.kind == "agg" and b.kind == "agg":
            if a.type != b.type:
                self.err(f"cannot compare {a.type} with {b.type}", n.loc)
            code = self.agg_equal(a.type, a.slot, b.slot)
            return Val("rv", T.BOOL, code if op == "==" else f"(not {code})")
        a = _underlying(self.scalar(a, n.left.loc))
        b = _underlying(self.scalar(b, n.right.loc))
        if isinstance(a.type, T.VarbitT) or isinstance(b.type, T.VarbitT):
            if op not in ("==", "!=") or a.type != b.type:
                self.err(f"varbit values can only be compared (== or !=) with the same varbit type", n.loc)
            return Val("rv", T.BOOL, f"({a.code} {op} {b.code})")     # same length and value
        if op == "++":
            for v, nd in ((a, n.left), (b, n.right)):
                if not isinstance(v.type, T.BitT):
                    self.err(f"'++' needs operands with a width, not {v.type}", nd.loc)
            w = a.type.width + b.type.width
            t = T.BitT(w, a.type.signed)
            if a.is_const and b.is_const:
                return lit(wrap(((a.const & a.type.mask) << b.type.width) | (b.const & b.type.mask), t), t)
            bcode = b.code if not b.type.signed else f"({b.code} & {b.type.mask:#x})"
            acode = a.code if not a.type.signed else f"({a.code} & {a.type.mask:#x})"
            code = f"(({acode} << {b.type.width}) | {bcode})"
            return Val("rv", t, self.wrap_code(code, t) if t.signed else code)
        if op in ("<<", ">>"):
            if not isinstance(a.type, (T.BitT, T.IntLitT)):
                self.err(f"'{op}' needs a number on the left, not {a.type}", n.left.loc)
            if not isinstance(b.type, (T.BitT, T.IntLitT)) or (isinstance(b.type, T.BitT) and b.type.signed):
                self.err(f"shift amount must be unsigned, not {b.type}", n.right.loc)
            if isinstance(b.type, T.NewBitT):
                self.err(f"{expr_text(n.right)}: the right operand of a shift must be bit<S> or a compile-time "
                         f"known non-negative integer, not {b.type.name} (declared with 'type'; cast it to "
                         f"{T.BitT(b.type.width)})", n.right.loc)
            t = a.type
            if self.limits is not None and not (a.is_const and b.is_const):
                self.limits.shift(n, a, b)
            if a.is_const and b.is_const:
                if b.const < 0:
                    self.err(f"negative shift amount {const_text(b.const)}", n.right.loc)
                if op == "<<" and b.const > MAX_CONST_SHIFT:    # never build the huge number
                    if not isinstance(t, T.BitT):
                        self.err(f"shift amount {const_text(b.const)} is too large for an unsized constant",
                                 n.right.loc)
                    return lit(0, t)
                r = a.const << b.const if op == "<<" else a.const >> b.const
                return lit(wrap(r, t) if isinstance(t, T.BitT) else r, t)
            if isinstance(t, T.IntLitT):
                if expected is not None and isinstance(expected, T.BitT):
                    t = expected
                    a = self.convert(a, t, n.loc)
                else:
                    self.err("shifting an unsized integer needs a width (cast the literal first)", n.left.loc)
            if op == ">>":
                return Val("rv", t, f"({a.code} >> {b.code})")
            if b.is_const:
                if b.const >= t.width:
                    return lit(0, t)
                return Val("rv", t, self.wrap_code(f"{a.code} << {b.code}", t))
            return Val("rv", t, f"shl({a.code}, {b.code}, {t.width}, {int(t.signed)})")
        a, b, t = self.unify(a, b, n.loc, op)
        if op in ("==", "!="):
            if a.is_const and b.is_const:
                return lit((a.const == b.const) == (op == "=="), T.BOOL)
            return Val("rv", T.BOOL, f"({a.code} {op} {b.code})")
        if op in ("<", ">", "<=", ">="):
            if not isinstance(t, (T.BitT, T.IntLitT)):
                self.err(f"'{op}' needs numbers, not {t}", n.loc)
            if a.is_const and b.is_const:
                return lit(ORDER[op](a.const, b.const), T.BOOL)
            return Val("rv", T.BOOL, f"({a.code} {op} {b.code})")
        if not isinstance(t, (T.BitT, T.IntLitT)):
            self.err(f"'{op}' needs numbers, not {t}", n.loc)
        if isinstance(t, T.IntLitT):
            if a.is_const and b.is_const:
                return lit(const_arith(op, a.const, b.const, n.loc, self), t)
            return Val("rv", t, f"({a.code} {py_op(op)} {b.code})")
        if a.is_const and b.is_const:
            return lit(wrap(const_arith(op, a.const, b.const, n.loc, self, t), t), t)
        if op in ("&", "|", "^"):
            return Val("rv", t, f"({a.code} {op} {b.code})")
        if op == "|+|":
            if t.signed:
                h = 1 << (t.width - 1)
                return Val("rv", t, f"max(-{h}, min({h - 1}, {a.code} + {b.code}))")
            return Val("rv", t, f"min({t.mask:#x}, {a.code} + {b.code})")
        if op == "|-|":
            if t.signed:
                h = 1 << (t.width - 1)
                return Val("rv", t, f"max(-{h}, min({h - 1}, {a.code} - {b.code}))")
            return Val("rv", t, f"max(0, {a.code} - {b.code})")
        if op in ("/", "%"):
            if t.signed:
                self.err(f"'{op}' on signed values is not supported", n.loc)
            return Val("rv", t, f"div({a.code}, {b.code})" if op == "/" else f"mod({a.code}, {b.code})")
        return Val("rv", t, self.wrap_code(f"{a.code} {op} {b.code}", t))

    def x_ctor(self, n, ctx, expected):
        self.err("constructor calls are only allowed in instantiations and table properties", n.loc)

    def x_named_arg(self, n, ctx, expected):
        self.err("named arguments are not supported here", n.loc)

    def x_dontcare(self, n, ctx, expected):
        # a write-only sink of the expected type (an out argument whose value nobody reads)
        if expected is None or isinstance(expected, T.IntLitT) or not (expected.scalar or expected.aggregate):
            self.err("'_' needs a known type here (only out arguments can be '_')", n.loc)
        base = self.alloc(expected, "_")
        return lv(base, expected) if expected.scalar else agg(base, expected)

    def x_call(self, n, ctx, expected):
        v = self.call(n, ctx, statement=False)
        if v is None:
            self.err("this call returns no value", n.loc)
        return v

    def stack_elem_slot(self, base, idx_code, ctx, loc):
        t = base.type
        esz = t.elem.slots()
        if isinstance(idx_code, int):
            return base.slot + 1 + idx_code * esz
        # An index out of range reaches an element of its own, not the stack's neighbours: a
        # write there has no effect and a read gives an unspecified value (the P4_16 spec; p4c's
        # HSIndexSimplifier compiles it so, and p4c's gauntlet_index_5 STF expects it)
        scratch = self.alloc(t.elem, f"{t} index out of range")
        return f"stack_slot({slot_add(base.slot, 1)}, {idx_code}, {t.size}, {esz}, {scratch})"

    def snapshot_all(self, v, ctx):
        """snapshot() for lists and aggregates too (copied into fresh storage)."""
        if v.kind == "list":
            return Val("list", v.type, items=[self.snapshot_all(i, ctx) for i in v.items], name=v.name)
        if v.kind == "agg" and isinstance(v.slot, int):
            n = v.type.slots()
            base = self.alloc(v.type, "snapshot")
            ctx.em.line(f"S[{base}:{base + n}] = S[{v.slot}:{v.slot + n}]")
            return agg(base, v.type)
        return self.snapshot(v, ctx)

    def struct_temp(self, v, t, ctx, loc):
        """List or structure expression `v` as a value of struct type `t`, in fresh storage."""
        base = self.alloc(t, "struct")
        self.assign_list(agg(base, t), v, ctx, loc)
        return agg(base, t)

    def captured(self, ctx, fn, unreachable=False):
        """Run fn() (which translates an expression) and take back the statements it emitted
        (calls with copy-out are hoisted into statements): returns (Val, lines). `unreachable`:
        the expression is in a branch p4c's constant folding removes (see note_use)."""
        mark = ctx.em.mark()
        outer = ctx.unreachable
        ctx.unreachable = outer or unreachable
        self.folded_away += unreachable
        try:
            v = fn()
        finally:
            ctx.unreachable = outer
            self.folded_away -= unreachable
        lines = ctx.em.lines[mark:]
        del ctx.em.lines[mark:]
        return v, lines

    def snapshot(self, v, ctx):
        """Evaluate `v` now into a temporary (it must not see later side effects)."""
        if v.is_const or v.kind not in ("rv", "lv"):
            return v
        t = ctx.temp()
        ctx.em.line(f"{t} = {v.code}")
        return Val("rv", v.type, t)

    def guarded(self, ctx, cond_code, lines, target, value_code):
        """Emit `if cond: <lines>; target = value` (the hoisted statements run only when needed)."""
        ctx.em.line(f"if {cond_code}:")
        for line in lines:
            ctx.em.lines.append("    " + line)
        ctx.em.line(f"    {target} = {value_code}")

    def cast_scalar(self, v, t, loc):
        vt = v.type
        if vt == t:
            if type(vt) is not type(t):     # a new type and its base: same value, the cast's type
                return Val("rv", t, v.code, const=v.const)
            return v
        if isinstance(t, T.BitT):
            if isinstance(vt, T.BoolT):
                if v.is_const:
                    return lit(int(v.const), t)
                return Val("rv", t, f"(1 if {v.code} else 0)")
            if isinstance(vt, (T.BitT, T.IntLitT)):
                if v.is_const:
                    return lit(wrap(v.const, t), t)
                if isinstance(vt, T.BitT) and not vt.signed and not t.signed and vt.width <= t.width:
                    return Val("rv", t, v.code)
                return Val("rv", t, self.wrap_code(v.code, t))
        if isinstance(t, T.BoolT) and isinstance(vt, (T.BitT, T.IntLitT)):
            if isinstance(vt, T.BitT) and vt.width != 1:
                self.err(f"only bit<1> can be cast to bool, not {vt}", loc)
            if v.is_const:
                return lit(bool(v.const), T.BOOL)
            return Val("rv", T.BOOL, f"({v.code} != 0)")
        if isinstance(t, T.IntLitT):
            return Val("rv", t, v.code, const=v.const)
        self.err(f"cannot cast {vt} to {t}", loc)

    def unify(self, a, b, loc, op):
        ta, tb = a.type, b.type
        if ta == tb:
            return a, b, ta
        if isinstance(ta, T.IntLitT) and isinstance(tb, (T.BitT,)):
            return self.convert(a, tb, loc), b, tb
        if isinstance(tb, T.IntLitT) and isinstance(ta, (T.BitT,)):
            return a, self.convert(b, ta, loc), ta
        if isinstance(ta, T.EnumT) and isinstance(tb, T.EnumT) and ta.name == tb.name:
            return a, b, ta
        if isinstance(ta, T.EnumT) and ta.base is not None and ta.base == tb:
            return self.convert(a, tb, loc), b, tb
        if isinstance(tb, T.EnumT) and tb.base is not None and tb.base == ta:
            return a, self.convert(b, ta, loc), ta
        if isinstance(ta, T.BitT) and isinstance(tb, T.BitT):
            self.err(f"operands of '{op}' have different types: {ta} and {tb} (add a cast)", loc)
        self.err(f"operands of '{op}' have incompatible types: {ta} and {tb}", loc)

    def agg_equal(self, t, x, y):
        """Code comparing two aggregates of type `t` at slots x, y as P4 defines equality: headers
        equal when both invalid or both valid with equal fields; a stack's next index is ignored."""
        if isinstance(t, T.HeaderT):
            n = t.slots()
            return (f"(S[{x}] == S[{y}] and (not S[{x}] or "
                    f"S[{slot_add(x, 1)}:{slot_add(x, n)}] == S[{slot_add(y, 1)}:{slot_add(y, n)}]))")
        if isinstance(t, T.StackT):
            esz = t.elem.slots()
            parts = [self.agg_equal(t.elem, slot_add(x, 1 + i * esz), slot_add(y, 1 + i * esz))
                     for i in range(t.size)]
        elif isinstance(t, (T.StructT, T.ListT)):
            offs = t.offsets()
            types = t.fields if isinstance(t, T.StructT) else list(enumerate(t.types))
            parts = [self.agg_equal(ft, slot_add(x, offs[f]), slot_add(y, offs[f])) if ft.aggregate
                     else f"S[{slot_add(x, offs[f])}] == S[{slot_add(y, offs[f])}]" for f, ft in types]
        else:
            return f"(S[{x}:{slot_add(x, t.slots())}] == S[{y}:{slot_add(y, t.slots())}])"
        return "(" + " and ".join(parts) + ")" if parts else "True"


def _underlying(v):
    """A serializable enum's value as its underlying type, as p4c's type checker reads one in
    every operator: relations, arithmetic, concatenation, shifts, - and ~ (typeCheckExpr.cpp)."""
    t = v.type
    if isinstance(t, T.EnumT) and t.base is not None:
        return Val("rv", t.base, v.code, const=v.const)
    return v


def _constant_items(v):
    """The nested Python values of a list whose items are all constants, else None."""
    if v.kind == "list":
        items = [_constant_items(i) for i in v.items]
        return None if any(i is None for i in items) else tuple(items)
    return v.const


def _has_side_effects(node):
    """Whether an expression calls anything but isValid() (p4c's SideEffects, conservatively)."""
    if isinstance(node, list):
        return any(_has_side_effects(item) for item in node)
    if not hasattr(node, "kind") or not hasattr(node, "__dict__"):
        return False
    if node.kind == "call":
        f = node.func
        if not (f.kind == "member" and f.name == "isValid"):
            return True
    return any(_has_side_effects(value) for value in node.__dict__.values()
               if isinstance(value, list) or hasattr(value, "kind"))


def _variable_slice(base, lo, w):
    """Bits lo.. of scalar `base`, w of them (`lo`: code); a signed base is read as its bits."""
    bits = f"({base.code} & {base.type.mask:#x})" if base.type.signed else base.code
    return Val("rv", T.BitT(w), f"(({bits} >> {lo}) & {(1 << w) - 1:#x})")


def _needs_type(node):
    """Does this expression take its value from the type its context gives it (`...`, `{#}`, a
    list holding one)? Only those are typed from the context, as they always are in p4c."""
    if node.kind in ("dots", "invalid"):
        return True
    if node.kind in ("list", "struct_expr"):
        return getattr(node, "dots", None) is not None or any(_needs_type(i) for i in node.items)
    return False
