"""Parser and control emission: parser states and transitions as Python functions, control
bodies (a Compiler mixin)."""
from . import p4types as T
from .codegen import Emitter
from .compile_values import const_text, Ctx, int_code, Scope, Sym, Val
from .parser_loops import reaches_an_end
from .program_info import anno, ValueSetInfo
from .value_sets import ValueSet

# p4c (p4RuntimeSerializer.cpp) takes a value set's element type only as P4Runtime can program it
_VALUE_SET_TYPES = "a bit<W>, a struct of bit<W> fields, or a serializable enum"
MAX_VALUE_SET_SIZE = (1 << 31) - 1      # p4c: the size must fit in an int


class BlocksMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    # ------------------------------------------------------------------------- parsers
    def compile_parser(self, decl, name, scope, role, sub=False):
        """The parser as a function fn(S, P) -> offset; a sub-parser (`sub`) is fn(S, P, o) -> offset,
        run from the caller's state, its errors and its reject ending the caller's parse too."""
        subs_before = self.sub_parsers
        self.compiled_blocks.add(id(decl))
        # locals: evaluated once per packet before the start state
        init_em = Emitter()
        lctx = Ctx(scope, init_em, "parser", name, parser={}, block_role=role)
        init_em.indent()
        self.parser_depth += 1          # the depth value sets declared here are listed at
        for l in decl.locals:
            if l.kind == "value_set":
                self.declare_value_set(l, lctx, name)
            else:
                self.declare_local(l, lctx, name)
        self.parser_depth -= 1
        states = {}
        for st in decl.states:
            if st.name in states or st.name in ("accept", "reject"):
                self.err(f"parser state '{st.name}' declared twice or reserved", st.loc)
            states[st.name] = self.namer.fresh("ps_", f"{name}.{st.name}")
        if "start" not in states:
            self.err(f"parser {decl.name} has no 'start' state", decl.loc, late=True)
        if not reaches_an_end(decl):
            self.err(f"parser {decl.name}: parser never reaches accept or reject state "
                     f"(every path from start loops)", self.name_loc(decl), late=True)
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
            base = v.type.base if isinstance(v.type, T.EnumT) else v.type
            if getattr(base, "signed", False):
                # BMv2 matches the key's bytes against the case values (two's complement, as the
                # labels are masked below): an int<W> key is compared as its bit<W> pattern
                v = Val("rv", v.type, f"({v.code} & {base.mask:#x})")
            if v.is_const:
                keys.append((v.code, v.type))
                continue
            t = ctx.temp()
            em.line(f"{t} = {v.code}")
            keys.append((t, v.type))
        for case in tr.cases:
            ks = case.keyset
            vset = self.value_set_named(ks, ctx)
            if vset is not None:
                em.line(f"if {self.value_set_cond(vset, keys, ks)}:")
                em.line(f"    return {target(case.target, case.target_loc)}, o")
                continue
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
        # no case matched: p4c-bm2-ss adds no NoMatch state (its midend lacks HandleNoMatch) and
        # BMv2's ParseState::find_next_state falls to a null default, ending the parse as accept
        em.line(f"return {reject}, o")

    def keyset_cond(self, kc, kt, item, ctx):
        w = T.width_of(kt)
        m = (1 << w) - 1 if w else None

        def cv(n):
            v = self.expr(n, ctx, kt)
            if not v.is_const:
                self.err("select case values must be compile-time constants", n.loc)
            if isinstance(v.type, T.BitT) and isinstance(kt, T.BitT) and v.type != kt:
                self.err(f"'match' case label has type '{v.type}' which does not match the expected "
                         f"type '{kt}'", n.loc)     # p4c: no implicit cast between widths
            c = v.const
            return (int(c) & m) if m is not None else c

        if item.kind == "ks_default":
            return None
        parts = [item] + [getattr(item, f) for f in ("value", "mask", "low", "high")
                          if item.kind in ("ks_mask", "ks_range") and hasattr(item, f)]
        for part in parts:
            if self.value_set_named(part, ctx) is not None:
                self.err(f"value set '{part.name}' can only be a select case's whole label", part.loc)
        if item.kind == "ks_mask":
            return f"{kc} & {int_code(cv(item.mask))} == {int_code(cv(item.value) & cv(item.mask))}"
        if item.kind == "ks_range":
            return f"{int_code(cv(item.low))} <= {kc} <= {int_code(cv(item.high))}"
        return f"{kc} == {int_code(cv(item))}"

    # ------------------------------------------------------------------------- value sets
    def declare_value_set(self, d, ctx, prefix):
        """`value_set<T>(size) name;` among a parser's locals: checked as p4c's front end
        checks it; what P4Runtime needs of T is checked where a select uses it."""
        elem = self.resolve_type(d.elem)
        if isinstance(elem, (T.HeaderT, T.UnionT)) or not isinstance(
                elem, (T.BitT, T.StructT, T.EnumT, T.BoolT, T.ListT)):
            self.err(f"{elem}: illegal type for value_set element type", d.elem.loc)
        size = self.expr(d.size, Ctx(ctx.scope, Emitter(), "const", prefix))
        if not size.is_const or not isinstance(size.const, int) or isinstance(size.const, bool):
            self.err("value_set size must be a compile-time constant integer", d.size.loc)
        if not 0 <= size.const <= MAX_VALUE_SET_SIZE:
            self.err(f"value_set size must be from 0 to {MAX_VALUE_SET_SIZE}, got {const_text(size.const)}",
                     d.size.loc)
        name = self.qualified(prefix, d.name, d.annos)
        if name in self.out.value_sets:
            self.err(f"two value sets are both named '{name}'", d.name_loc, late=True)
        info = ValueSetInfo(name, elem, size.const, d.annos, d.loc, self.parser_depth)
        info.elem_loc = d.elem.loc
        self.out.value_sets[name] = info
        ctx.scope.declare(d.name, Sym("value_set", info=info))

    def value_set_named(self, node, ctx):
        """The ValueSetInfo a select case label names, or None."""
        if getattr(node, "kind", None) != "name":
            return None
        sym = ctx.scope.lookup(node.name)
        return sym.info if sym is not None and sym.kind == "value_set" else None

    def value_set_fields(self, info):
        """[(name, match kind, width)] of a value set's element, as p4c describes it in P4Info."""
        elem, loc = info.elem, info.elem_loc
        if isinstance(elem, T.BitT) and not isinstance(elem, T.NewBitT):
            info.field_annos = [[]]
            return [(None, "exact", elem.width)]
        if isinstance(elem, T.EnumT) and elem.base is not None:
            self.err(f"value_set<{elem}>: a value set of a serializable enum is not supported by this "
                     f"engine (use its underlying type {elem.base})", loc)
        if isinstance(elem, T.ListT):
            self.err(f"value_set<{elem}>: unsupported type argument for a value set; this version of "
                     f"P4Runtime requires {_VALUE_SET_TYPES}", loc)
        if not isinstance(elem, T.StructT) or isinstance(elem, T.UnionT):
            self.err(f"value_set<{elem}>: invalid type parameter for a value set; the control plane "
                     f"(P4Runtime) takes {_VALUE_SET_TYPES}", loc)
        fields = []
        for fname, ftype in elem.fields:
            if not isinstance(ftype, T.BitT) or isinstance(ftype, T.NewBitT):
                self.err(f"value_set<{elem}>: unsupported type argument for a value set; this version of "
                         f"P4Runtime requires that all the fields of a struct be of type bit<W>, but "
                         f"field '{fname}' is {ftype}", loc)
            annos = elem.field_annos.get(fname) or []
            kind = "exact"
            match = anno(annos, "match")
            if match is not None:
                arg = match.args[0] if match.args else None
                kind = getattr(arg, "name", None)
                if getattr(arg, "kind", None) != "name" or kind not in self.match_kinds:
                    self.err(f"@match on field '{fname}' of {elem} must name a match kind", match.loc)
                if kind not in ("exact", "ternary", "lpm", "range", "optional"):
                    self.err(f"value_set<{elem}>: match kind '{kind}' of field '{fname}' is not supported in "
                             f"a value set by this engine", match.loc)
                if kind != "exact":     # p4c-bm2-ss says so too: BMv2's sets are exact
                    self.warn(f"value set {info.name}: BMv2 matches field '{fname}' exactly "
                              f"(p4c-bm2-ss ignores @match({kind})); the engine and "
                              f"P4Runtime members match it as {kind}", match.loc)
            info.field_annos.append([a for a in annos if a.name != "match"])
            fields.append((fname, kind, ftype.width))
        return fields

    def value_set_cond(self, info, keys, ks):
        """Python condition: the select keys' values are in value set `info` (which becomes used)."""
        if info.fields is None:
            info.fields = self.value_set_fields(info)
            info.obj = ValueSet(info.name, info.fields, info.size)
            info.pyname = self.namer.fresh("VS_", info.name)
            self.ns[info.pyname] = info.obj
        info.used = True
        fields = info.fields
        if len(keys) != len(fields):
            self.err(f"select has {len(keys)} key(s) but value set '{info.name}' has {len(fields)} "
                     f"field(s) (element type {info.elem})", ks.loc)
        codes = []
        for (code, kt), (fname, _, width) in zip(keys, fields):
            bits = kt.base if isinstance(kt, T.EnumT) else kt
            if isinstance(bits, T.IntLitT):
                codes.append(f"({code} & {int_code((1 << width) - 1)})")
                continue
            if not isinstance(bits, T.BitT) or bits.width != width:
                self.err(f"select key of type {kt} does not match value set '{info.name}' "
                         f"({'field ' + repr(fname) + ' is ' if fname else 'its element type is '}bit<{width}>)",
                         ks.loc)
            codes.append(f"({code} & {int_code(bits.mask)})" if bits.signed else code)
        return f"{info.pyname}.contains(({', '.join(codes)},))"

    def finish_value_sets(self):
        """Keep the value sets a select uses, a parser's before its sub-parsers' (p4c's order)."""
        used = sorted((i for i in self.out.value_sets.values() if i.used), key=lambda i: i.depth)
        self.out.value_sets.clear()
        self.out.value_sets.update((i.name, i) for i in used)

    # ------------------------------------------------------------------------- controls
    def compile_control(self, decl, name, scope, role):
        self.compiled_blocks.add(id(decl))
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
        self.stmts(decl.body.stmts, ctx.child())   # the apply block is a scope of its own
        em.ensure_body(mark)
        self.em.line(f"def {fn}(S):")
        self.em.lines.extend(em.lines)
        return fn
