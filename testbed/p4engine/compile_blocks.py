"""Parser and control emission: parser states and transitions as Python functions, control
bodies (a Compiler mixin)."""
from . import p4types as T
from .codegen import Emitter
from .compile_values import Ctx, int_code, Scope, Val
from .parser_loops import reaches_an_end


class BlocksMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    # ------------------------------------------------------------------------- parsers
    def compile_parser(self, decl, name, scope, role, sub=False):
        """The parser as a function fn(S, P) -> offset; a sub-parser (`sub`) is fn(S, P, o) -> offset,
        run from the caller's state, its errors and its reject ending the caller's parse too."""
        subs_before = self.sub_parsers
        # locals: evaluated once per packet before the start state
        init_em = Emitter()
        lctx = Ctx(scope, init_em, "parser", name, parser={}, block_role=role)
        init_em.indent()
        for l in decl.locals:
            self.declare_local(l, lctx, name)
        states = {}
        for st in decl.states:
            if st.name in states or st.name in ("accept", "reject"):
                self.err(f"parser state '{st.name}' declared twice or reserved", st.loc)
            states[st.name] = self.namer.fresh("ps_", f"{name}.{st.name}")
        if "start" not in states:
            self.err(f"parser {decl.name} has no 'start' state", decl.loc)
        if not reaches_an_end(decl):
            self.err(f"parser {decl.name}: parser never reaches accept or reject state "
                     f"(every path from start loops)", self.name_loc(decl))
        for st in decl.states:
            em = Emitter()
            em.line(f"def {states[st.name]}(S, P, o):")
            em.indent()
            sctx = Ctx(Scope(scope), em, "parser", name, parser={"states": states}, block_role=role)
            self.stmts(st.stmts, sctx)
            self.transition(st, sctx, states, sub)
            em.dedent()
            self.em.lines.extend(em.lines)
        fn = self.namer.fresh("parser_", name)
        em = self.em
        em.line(f"def {fn}(S, P, o):" if sub else f"def {fn}(S, P):")
        em.indent()
        shared = not sub and self.sub_parsers > subs_before   # it calls sub-parsers: one budget
        if shared:
            em.line("global PARSE_STEPS")
        em.lines.extend(init_em.lines)
        em.line(f"st = {states['start']}")
        # a step budget so a state that loops without consuming input ends the parse with
        # error.ParserTimeout instead of spinning (codegen.PARSER_STEPS, parser_budget)
        timeout = f"raise ParserError({self.errors.index('ParserTimeout')}, o)"
        if sub:        # draws on its caller's budget: nested loops cannot multiply it
            self.sub_parsers += 1
            em.line("for _ in PARSE_STEPS:")
            em.line("    st, o = st(S, P, o)")
            em.line("    if st is None:")
            em.line("        return o")
            em.line(timeout)
            em.dedent()
            return fn
        em.line("o = 0")
        em.line("try:")
        em.indent()
        if shared:     # the budget in a per-pipeline global the sub-parsers draw on
            em.line("PARSE_STEPS = steps = parser_budget(P)")
            em.line("for _ in steps:")
            em.line("    st, o = st(S, P, o)")
            em.line("    if st is None:")
            em.line("        break")
            em.line("else:")
            em.line(f"    {timeout}")
        else:          # the common case: a shared range first, no per-packet object
            em.line("for _ in PARSER_STEPS:")
            em.line("    st, o = st(S, P, o)")
            em.line("    if st is None:")
            em.line("        break")
            em.line("else:")
            em.line("    for _ in parser_extra_steps(P):")
            em.line("        st, o = st(S, P, o)")
            em.line("        if st is None:")
            em.line("            break")
            em.line("    else:")
            em.line(f"        {timeout}")
        em.dedent()
        em.line("except ParserError as pe:")
        em.line(f"    S[{self.out.sm['parser_error']}] = pe.code")
        em.line("    o = pe.offset")
        em.line("return o")
        em.dedent()
        return fn

    def transition(self, st, ctx, states, sub=False):
        em = ctx.em
        tr = st.transition
        # A state without transition goes to reject (spec); BMv2 ends the parse there as at
        # accept. A sub-parser's reject ends its caller's parse as well (p4c inlines sub-parsers).
        reject = "reject_parse" if sub else "None"
        if tr is None:
            em.line(f"return {reject}, o")
            return

        def target(name, loc):
            if name == "accept":
                return "None"
            if name == "reject":
                return reject
            if name not in states:
                self.err(f"unknown parser state '{name}'", loc)
            return states[name]

        if tr.kind == "trans_direct":
            em.line(f"return {target(tr.target, tr.target_loc)}, o")
            return
        keys = []
        for e in tr.exprs:
            v = self.scalar(self.expr(e, ctx), e.loc)
            if isinstance(v.type, T.BoolT):
                v = Val("rv", T.BitT(1), f"(1 if {v.code} else 0)")
            if v.is_const:
                keys.append((v.code, v.type))
                continue
            t = ctx.temp()
            em.line(f"{t} = {v.code}")
            keys.append((t, v.type))
        for case in tr.cases:
            ks = case.keyset
            items = ks.items if ks.kind == "ks_tuple" else [ks]
            if len(items) == 1 and items[0].kind == "ks_default":
                em.line(f"return {target(case.target, case.target_loc)}, o")
                return
            if len(items) != len(keys):
                self.err(f"select has {len(keys)} key(s) but this case has {len(items)} value(s)", ks.loc)
            conds = []
            for (kc, kt), item in zip(keys, items):
                c = self.keyset_cond(kc, kt, item, ctx)
                if c is not None:
                    conds.append(c)
            cond = " and ".join(conds) if conds else "True"
            em.line(f"if {cond}:")
            em.line(f"    return {target(case.target, case.target_loc)}, o")
        em.line(f"raise ParserError({self.errors.index('NoMatch')}, o)")

    def keyset_cond(self, kc, kt, item, ctx):
        w = T.width_of(kt)
        m = (1 << w) - 1 if w else None

        def cv(n):
            v = self.expr(n, ctx, kt)
            if not v.is_const:
                self.err("select case values must be compile-time constants", n.loc)
            c = v.const
            return (int(c) & m) if m is not None else c

        if item.kind == "ks_default":
            return None
        if item.kind == "ks_mask":
            return f"{kc} & {int_code(cv(item.mask))} == {int_code(cv(item.value) & cv(item.mask))}"
        if item.kind == "ks_range":
            return f"{int_code(cv(item.low))} <= {kc} <= {int_code(cv(item.high))}"
        return f"{kc} == {int_code(cv(item))}"

    # ------------------------------------------------------------------------- controls
    def compile_control(self, decl, name, scope, role):
        fn = self.namer.fresh("c_", name)
        em = Emitter()
        em.indent()
        ctx = Ctx(Scope(scope), em, "control", name, block_role=role)
        if self.limits is not None:
            self.limits.control(decl, role)
        # control-level variable initialisers run at each apply, before the body
        for l in decl.locals:
            self.declare_local(l, ctx, name)
        mark = em.mark()
        self.stmts(decl.body.stmts, ctx)
        em.ensure_body(mark)
        self.em.line(f"def {fn}(S):")
        self.em.lines.extend(em.lines)
        return fn
