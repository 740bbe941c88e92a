"""Statements: assignment, if, switch, for loops, blocks, exit/return (a Compiler mixin)."""
from . import p4types as T
from .codegen import slot_add
from .compile_values import agg, lv, NEXT_OUTSIDE_EXTRACT
from .syntax import Node

MAX_LOOP_PASSES = 1 << 20       # passes of one run of a for loop before its packet faults


class StatementsMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    # ------------------------------------------------------------------------- statements
    def stmts(self, stmts, ctx):
        for s in stmts:
            self.stmt(s, ctx)

    def stmt(self, s, ctx):
        k = s.kind
        em = ctx.em
        if k == "assign":
            lhs = self.expr(s.lhs, ctx)
            if getattr(s, "op", None):     # a op= b: the left side is evaluated once
                rhs_node = Node("binop", s.loc, op=s.op, left=Node("evaluated", s.lhs.loc, val=lhs), right=s.rhs)
            else:
                rhs_node = s.rhs
            rhs = self.expr(rhs_node, ctx, lhs.type)
            self.assign(lhs, rhs, ctx, s.loc)
        elif k == "call_stmt":
            if s.expr.kind != "call":
                self.err("expression used as a statement (expected a call or an assignment)", s.loc)
            if s.expr.func.kind == "member" and s.expr.func.name == "lookahead" and len(s.expr.targs) == 1 \
                    and isinstance(self.resolve_type(s.expr.targs[0]), (T.BitT, T.BoolT)):
                # p4c-bm2-ss emits nothing for a lookahead<bit<W>> whose value is unused (its
                # parser converter drops the call; ExpandLookahead turns a struct's or header's
                # into a checked read): no PacketTooShort either; checked, then discarded
                self.captured(ctx, lambda: self.call(s.expr, ctx, statement=True))
            else:
                self.call(s.expr, ctx, statement=True)
        elif k == "if":
            c = self.cond_val(s.cond, ctx)
            em.line(f"if {c.code}:")
            em.indent()
            mark = em.mark()
            self.stmt_block(s.then, ctx, unreachable=c.const is False)
            em.ensure_body(mark)
            em.dedent()
            if s.els is not None:
                em.line("else:")
                em.indent()
                mark = em.mark()
                self.stmt_block(s.els, ctx, unreachable=c.const is True)
                em.ensure_body(mark)
                em.dedent()
        elif k == "block":
            self.stmt_block(s, ctx)
        elif k == "for":
            self.for_loop(s, ctx)
        elif k == "for_in":
            self.for_in_loop(s, ctx)
        elif k in ("break", "continue"):
            if not ctx.in_loop:
                self.err(f"'{k}' outside a for loop", s.loc)
            em.line(k)
        elif k == "empty":
            pass
        elif k == "exit":
            if ctx.where == "parser":
                self.err("exit is not allowed in a parser", s.loc)
            em.line("raise ExitControl()")
        elif k == "return":
            if ctx.where == "parser":
                self.err("return is not allowed in a parser state", s.loc)
            if s.value is not None:
                if ctx.returns is None:
                    self.err("return with a value outside a function", s.loc)
                if ctx.ret_store is not None:
                    self.assign(ctx.ret_store, self.expr(s.value, ctx, ctx.returns), ctx, s.value.loc)
                    em.line("return")
                    return
                v = self.scalar(self.expr(s.value, ctx, ctx.returns), s.value.loc)
                v = self.convert(v, ctx.returns, s.value.loc)
                em.line(f"return {v.code}")
            else:
                em.line("return")
        elif k == "switch":
            self.switch(s, ctx)
        elif k == "var":
            self.local_var(s, ctx)
        elif k == "const":
            self.declare_local(s, ctx, ctx.prefix)
        else:
            self.err(f"unsupported statement '{k}'", s.loc)

    def for_loop(self, s, ctx):
        """for (init; cond; update) body: the update runs at the top of every pass but the first,
        so a P4 `continue` is a Python `continue`."""
        em = ctx.em
        c = ctx.child()
        if ctx.where == "parser":
            self.err("for loops are not allowed in a parser state", s.loc)
        if self.limits is not None:
            if ctx.action is None and ctx.function is not None:
                # p4c inlines the function into its callers: judged once they are all known
                self.loops_in_functions.setdefault(id(ctx.function), (ctx.function.name, s))
            else:
                self.limits.loop(s, in_action=ctx.action is not None)
        for item in s.init:
            self.stmt(item, c)
        first, passes = c.temp(), c.temp()
        em.line(f"{first} = True")
        em.line(f"{passes} = 0")
        em.line("while True:")
        em.indent()
        # a loop whose condition never fails (i <= 255 on bit<8>) would hold the packet for
        # ever, as on BMv2: the packet faults instead, naming the loop
        em.line(f"{passes} += 1")
        em.line(f"if {passes} > {MAX_LOOP_PASSES}: raise P4RuntimeFault("
                f"{f'the for loop at {s.loc.file}:{s.loc.line} ran {MAX_LOOP_PASSES} passes without ending'!r})")
        em.line(f"if not {first}:")
        em.indent()
        mark = em.mark()
        for item in s.update:
            self.stmt(item, c)
        em.ensure_body(mark)
        em.dedent()
        em.line(f"{first} = False")
        if s.cond is not None:
            em.line(f"if not {self.cond_expr(s.cond, c)}: break")
        body = c.child()
        body.in_loop = True
        self.stmt_block(s.body, body)
        em.dedent()

    def for_in_loop(self, s, ctx):
        """for (T v in lo .. hi) / for (T v in (list<T>) {a, b, ..}) body: the range's bounds or
        the list's elements are evaluated once, before the first pass (as p4c does); v takes
        each value in turn, whatever the body assigns to it (lo > hi: no pass)."""
        em = ctx.em
        if ctx.where == "parser":
            self.err("for loops are not allowed in a parser state", s.loc)
        if self.limits is not None:
            self.limits.loop(s, in_action=ctx.action is not None)
        t = self.resolve_type(s.type)
        if not isinstance(t, T.BitT):
            self.err(f"a for-in loop variable must be bit<W> or int<W>, not {t}", s.loc)
        coll = s.collection
        if coll.kind == "for_range":
            low = self.convert(self.scalar(self.expr(coll.low, ctx, t), coll.low.loc), t, coll.low.loc)
            high = self.convert(self.scalar(self.expr(coll.high, ctx, t), coll.high.loc), t, coll.high.loc)
            values = f"range({low.code}, ({high.code}) + 1)"
        else:
            if coll.kind == "cast" and coll.type.kind == "t_list":
                elem = self.resolve_type(coll.type.elem)
                if elem != t:
                    self.err(f"the list holds {elem}, the loop variable is {t}", coll.loc)
                coll = coll.expr
            if coll.kind != "list":
                self.err("a for-in loop runs over a range (lo .. hi) or a list ((list<T>) {a, b, ..})",
                         coll.loc)
            items = [self.convert(self.scalar(self.expr(e, ctx, t), e.loc), t, e.loc) for e in coll.items]
            values = f"({''.join(v.code + ', ' for v in items)})"
        c = ctx.child()
        var = self.local_var(Node("var", s.loc, annos=s.annos, type=s.type, name=s.name, init=None), c)
        each = c.temp()
        em.line(f"for {each} in {values}:")
        em.indent()
        em.line(f"{var.code} = {each}")
        body = c.child()
        body.in_loop = True
        self.stmt_block(s.body, body)
        em.dedent()

    def stmt_block(self, s, ctx, unreachable=False):
        c = ctx.child()
        c.unreachable = c.unreachable or unreachable
        self.folded_away += unreachable
        try:
            if s.kind == "block":
                self.stmts(s.stmts, c)
            else:
                self.stmt(s, c)
        finally:
            self.folded_away -= unreachable

    def switch(self, s, ctx):
        em = ctx.em
        if ctx.where == "action":
            self.switches_in_actions.append((ctx.action.name, s))
        elif ctx.function is not None:
            self.switches_in_functions.setdefault(id(ctx.function), (ctx.function.name, s))
        seen, after_default = set(), False
        for case in s.cases:
            lab = case.label
            if after_default:
                self.err("'default' must be the last label of a switch", case.loc)
            if isinstance(lab, Node) and lab.kind == "sw_default":
                after_default = True
            elif isinstance(lab, str):
                if lab in seen:
                    self.err(f"duplicate switch label '{lab}'", case.loc)
                seen.add(lab)
        v = self.expr(s.expr, ctx)
        t = ctx.temp()
        if v.kind == "apply_action_run":
            em.line(f"{t} = {v.code}[1]")
            table = v.info
            names = {ai.decl.name: ai for ai, _ in table.actions}
            names.update({ai.name: ai for ai, _ in table.actions})

            def condition(case):
                if not isinstance(case.label, str):
                    self.err(f"a switch on {table.decl.name}.apply().action_run takes action names "
                             f"as labels", case.loc)
                if case.label not in names:
                    self.err(f"'{case.label}' is not an action of table {table.decl.name}", case.loc)
                return f"{t} == {names[case.label].name!r}"
        else:
            v = self.scalar(v, s.expr.loc)
            em.line(f"{t} = {v.code}")

            values = set()

            def condition(case):
                lab = case.label
                node = lab if isinstance(lab, Node) else Node("name", case.loc, name=lab)
                cvv = self.expr(node, ctx, v.type)
                if not cvv.is_const:
                    self.err("switch labels must be constants", case.loc)
                if cvv.code in values:
                    self.err("duplicate switch label: another label has the same value", case.loc)
                values.add(cvv.code)
                return f"{t} == {cvv.code}"
        live = None
        if v.kind != "apply_action_run" and v.is_const and not self.names_ctor_param(s.expr, ctx):
            live = self.constant_switch_body(s.cases, v, ctx)
        self.switch_cases(s.cases, condition, ctx, live)

    def names_ctor_param(self, node, ctx):
        """p4c's SimplifySwitch leaves a switch on a bare constructor parameter alone."""
        if node.kind != "name":
            return False
        sym = ctx.scope.lookup(node.name)
        return sym is not None and sym.info == "constructor parameter"

    def constant_switch_body(self, cases, v, ctx):
        """The one case body a switch on constant `v` runs, as p4c's SimplifySwitch keeps it
        (the first label that matches, falling through to the next body); -1 when none does."""
        found = False
        for i, case in enumerate(cases):
            lab = case.label
            if isinstance(lab, Node) and lab.kind == "sw_default":
                found = True
            else:
                node = lab if isinstance(lab, Node) else Node("name", case.loc, name=lab)
                found = found or self.expr(node, ctx, v.type).const == v.const
            if found and case.body is not None:
                return i
        return -1

    def check_switches_in_actions(self):
        """p4c (every back end it ships) turns switch statements into tables, which an action
        cannot apply: a switch in an action the program uses is refused. Actions nothing uses
        are dropped before that, switch and all, so they pass."""
        if not self.switches_in_actions and not self.switches_in_functions:
            return
        used = self.used_actions()
        for action, stmt in self.switches_in_actions:
            if action in used:
                self.err(f"switch statements are not supported in actions (action {action}); "
                         f"p4c refuses them on every target: use if/else", stmt.loc)
        for action in sorted(used):         # p4c inlines the functions an action calls into it
            found = self._switch_in_called_functions(("action", action))
            if found is not None:
                function, stmt = found
                self.err(f"switch statements are not supported in actions (function {function}, "
                         f"called from action {action}); p4c refuses them on every target: use if/else",
                         stmt.loc)

    def check_loops_in_functions(self):
        """A for loop in a function that an apply block calls, directly or through other
        functions, ends up outside any action once p4c inlines it (see bmv2_limits.loop)."""
        if self.limits is None or not self.loops_in_functions:
            return
        reached = self._functions_called_from(("block", None))
        for function, (name, stmt) in self.loops_in_functions.items():
            if function in reached:
                self.limits.loop(stmt, in_action=False, function=name)

    def _functions_called_from(self, caller):
        """Ids of the functions `caller` calls, directly or through other functions."""
        seen, pending = set(), list(self.functions_called_by.get(caller, ()))
        while pending:
            function = pending.pop()
            if function not in seen:
                seen.add(function)
                pending.extend(self.functions_called_by.get(("function", function), ()))
        return seen

    def _switch_in_called_functions(self, caller):
        """(function name, switch) of a function `caller` calls, directly or not, that has one."""
        for function in self._functions_called_from(caller):
            if function in self.switches_in_functions:
                return self.switches_in_functions[function]
        return None

    def switch_cases(self, cases, condition, ctx, live=None):
        """if/elif/else chain of a switch; labels without a body fall through to the next body.
        `live`: on a constant switch, the index of the only body that can run."""
        em = ctx.em
        first = True
        pending = []
        for i, case in enumerate(cases):
            lab = case.label
            cond = None if isinstance(lab, Node) and lab.kind == "sw_default" else condition(case)
            if case.body is None:
                pending.append(cond)
                continue
            allc = pending + [cond]
            pending = []
            if None in allc:
                em.line("else:" if not first else "if True:")
            else:
                em.line(f"{'if' if first else 'elif'} {' or '.join(allc)}:")
            first = False
            em.indent()
            mark = em.mark()
            self.stmt_block(case.body, ctx, unreachable=live is not None and i != live)
            em.ensure_body(mark)
            em.dedent()

    def cond_expr(self, node, ctx):
        return self.cond_val(node, ctx).code

    def cond_val(self, node, ctx):
        v = self.scalar(self.expr(node, ctx), node.loc)
        if not isinstance(v.type, T.BoolT):
            self.err(f"condition must be bool, not {v.type}", node.loc)
        return v

    # ------------------------------------------------------------------------- assignment
    def assign(self, lhs, rhs, ctx, loc):
        em = ctx.em
        if lhs.kind == "slice_lv":
            base, hi, lo = lhs.info
            rv = self.convert(self.scalar(rhs, loc), T.BitT(hi - lo + 1), loc)
            m = ((1 << (hi - lo + 1)) - 1) << lo
            bits = f"({base.code} & {base.type.mask ^ m:#x}) | (({rv.code} << {lo}) & {m:#x})"
            em.line(f"{base.code} = {self.wrap_code(bits, base.type) if base.type.signed else bits}")
            return
        if lhs.kind == "vslice_lv":     # bits past the base's width are dropped
            base, lo, w = lhs.info
            rv = self.convert(self.scalar(rhs, loc), lhs.type, loc)
            m = f"({(1 << w) - 1:#x} << {lo})"
            bits = f"((({base.code} & ~{m}) | (({rv.code} << {lo}) & {m})) & {base.type.mask:#x})"
            em.line(f"{base.code} = {self.wrap_code(bits, base.type) if base.type.signed else bits}")
            return
        if lhs.kind == "agg":
            if rhs.kind == "agg":
                if lhs.type != rhs.type:
                    self.err(f"cannot assign {rhs.type} to {lhs.type}", loc)
                if rhs.name == "lookahead":
                    self.set_valid_within(lhs, ctx)
                n = lhs.type.slots()
                em.line(f"S[{lhs.slot}:{slot_add(lhs.slot, n)}] = S[{rhs.slot}:{slot_add(rhs.slot, n)}]")
                if lhs.siblings:
                    # BMv2's assign_header marks a union member valid through the union, which
                    # invalidates the member valid before (HeaderUnion::make_header_valid)
                    em.line(f"if S[{lhs.slot}]: " + "; ".join(f"S[{s}] = 0" for s in lhs.siblings))
                return
            if rhs.kind == "list":
                self.assign_list(lhs, rhs, ctx, loc)
                return
            if rhs.kind == "invalid" and rhs.type == lhs.type:    # `...` or {#} for a header (union)
                for slot in lhs.type.validity_slots(lhs.slot):
                    em.line(f"S[{slot}] = 0")
                return
            self.err(f"cannot assign {rhs.type} to {lhs.type}", loc)
        if lhs.kind == "stack_next":
            self.err(NEXT_OUTSIDE_EXTRACT, loc)
        if lhs.kind != "lv":
            self.err("the left side of this assignment cannot be assigned to", loc)
        rv = self.convert(self.scalar(rhs, loc), lhs.type, loc)
        em.line(f"{lhs.code} = {rv.code}")

    def assign_list(self, lhs, rhs, ctx, loc):
        t = lhs.type
        if isinstance(t, T.HeaderT):
            fields = t.fields_as_declared()
            offs = t.offsets()
            # p4c's SetHeaders puts a setValid() before a list or structure expression assigned
            # to a header
            self.set_valid(lhs, ctx)
        elif isinstance(t, T.StructT):
            fields = t.fields
            offs = t.offsets()
        elif isinstance(t, T.ListT):
            fields = [(i, et) for i, et in enumerate(t.types)]
            offs = t.offsets()
        elif isinstance(t, T.StackT):       # element by element; nextIndex stays (p4c, BMv2)
            fields = [(i, t.elem) for i in range(t.size)]
            offs = {i: 1 + i * t.elem.slots() for i in range(t.size)}
        else:
            self.err(f"cannot assign a list to {t}", loc)
        items = rhs.items
        if rhs.name is not None:            # a structure expression: fields by name
            if isinstance(t, (T.ListT, T.StackT)) or sorted(rhs.name) != sorted(f for f, _ in fields):
                self.err(f"the structure expression's fields ({', '.join(rhs.name)}) are not "
                         f"those of {t}", loc)
            by_name = dict(zip(rhs.name, items))
            items = [by_name[f] for f, _ in fields]
        if len(fields) != len(items):
            self.err(f"{t} has {len(fields)} fields but the list has {len(items)} values", loc)
        views = getattr(t, "struct_views", {})
        for (fn, ft), item in zip(fields, items):
            if fn in views:             # a header's struct field: a view on its leaves
                leaf = views[fn][1]
                target = agg(lhs.slot if leaf is None else slot_add(lhs.slot, offs[leaf]), ft)
                self.assign(target, item, ctx, loc)
                continue
            slot = slot_add(lhs.slot, offs[fn])
            target = agg(slot, ft) if ft.aggregate else lv(slot, ft)
            self.assign(target, item, ctx, loc)
