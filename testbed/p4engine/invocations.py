"""Invocations: direct action calls, P4 functions and sub-control applies, with copy-in/copy-out
of their parameters, as Compiler methods."""
from . import p4types as T
from .call_args import arg_value, positional_args
from .compile_values import agg, Ctx, lv, Scope, Sym, Val
from .program_info import expr_text
from .syntax import Node


# ------------------------------------------------------------------------------ actions, functions
def _bind_args(self, params, n, ctx, what, decls=(), decl_scope=None):
    """Copy-in code for (name, direction, type, storage Val) params; returns (by-name values, copy-outs).
    `decls`: the declared parameter nodes, whose default values stand in for missing arguments;
    a default's names are those seen where the parameter is declared (`decl_scope`), as in p4c."""
    names = [p[0] for p in params]
    given = positional_args(self, n, names)
    defaults = {p.name: p.default for p in decls if p.default is not None}
    values, copy_out = {}, []
    caller_ctx = ctx
    for pname, direction, pt, store in params:
        node = given.get(pname, defaults.get(pname))
        if node is None:
            self.err(f"{what}: argument '{pname}' is missing", n.loc)
        ctx = caller_ctx
        if pname not in given and decl_scope is not None:
            ctx = caller_ctx.child()
            ctx.scope = Scope(decl_scope)
        if direction == "packet":
            continue
        if node.kind == "dontcare":
            if direction != "out":
                self.err(f"{what}: '_' can only be passed for an out parameter", node.loc)
            continue
        if direction in ("out", "inout"):
            target = self.expr(node, ctx)
            if target.kind not in ("lv", "slice_lv", "vslice_lv", "agg"):
                self.err(f"{what}: argument for {direction} parameter '{pname}' must be writable", node.loc)
            if direction == "inout":
                self.assign(store, target, ctx, node.loc)
            copy_out.append((target, store, node.loc))
        elif store is None:
            v = arg_value(self, node, ctx, pt)
            values[pname] = self.convert(v, pt, node.loc) if v.type != pt else v
        else:
            self.assign(store, self.expr(node, ctx, pt), ctx, node.loc)
    return values, copy_out


def _call_with_copy_out(self, line, copy_out, ctx):
    """Emit the call `line`; out/inout arguments are copied back even when it exits (spec 6.8)."""
    em = ctx.em
    if not copy_out:
        em.line(line)
        return
    em.line("try:")
    em.indent()
    em.line(line)
    em.dedent()
    em.line("finally:")
    em.indent()
    for target, store, loc in copy_out:
        self.assign(target, store, ctx, loc)
    em.dedent()


def call_action(self, ai, n, ctx):
    if ctx.where == "parser":
        self.err("actions cannot be called in a parser", n.loc)
    if ctx.where != "action":
        self.note_use("actions", ai.name, ctx)
        if not ctx.unreachable:
            self.called_action_infos.setdefault(None, set()).add(id(ai))
    elif ctx.action is not None and not ctx.unreachable:
        self.actions_called_by.setdefault(ctx.action.name, set()).add(ai.name)
        self.called_action_infos.setdefault(id(ctx.action), set()).add(id(ai))
    params = [(name, d, t, ai.inout_slots.get(name)) for name, d, t in ai.params]
    values, copy_out = _bind_args(self, params, n, ctx, f"action {ai.name}", ai.decl.params, ai.scope)
    args = ", ".join(f"{k!r}: {v.code}" for k, v in ai.control_args(values).items())
    _call_with_copy_out(self, f"{ai.fn}(S, {{{args}}})", copy_out, ctx)
    return None


def bound_action(self, ai, ref, ctx):
    """`actions = { a(hdr.x); }`: a wrapper the table runs, binding a's directional parameters."""
    from .codegen import Emitter
    for arg in ref.args:
        applied = _table_apply_in(arg, ctx.scope)
        if applied is not None:
            self.err(f"{expr_text(applied)}: table invocation in action argument (p4c does not "
                     f"support applying a table inside an actions list)", applied.loc)
    bound = ai.params[:len(ref.args)]
    if any(d is None for _, d, _ in bound):
        self.err(f"action {ai.name}: only parameters with a direction can be bound in an actions list",
                 ref.loc)
    em = Emitter()
    fn = self.namer.fresh("w_", ai.name)
    em.line(f"def {fn}(S, A):")
    em.indent()
    sub = Ctx(ctx.scope, em, "control", ctx.prefix, block_role=ctx.block_role)
    call_node = Node("call", ref.loc, func=None, args=ref.args, targs=[])
    params = [(name, d, t, ai.inout_slots.get(name)) for name, d, t in bound]
    _, copy_out = _bind_args(self, params, call_node, sub, f"action {ai.name}")
    _call_with_copy_out(self, f"{ai.fn}(S, A)", copy_out, sub)
    self.em.lines.extend(em.lines)
    return fn


def call_function(self, info, n, ctx):
    decl, scope, prefix = info
    # p4c inlines functions: a switch in one called from an action is in that action, a loop in
    # one called from an apply block is in that block
    caller = ("action", ctx.action.name) if ctx.action is not None else \
        ("function", id(ctx.function)) if ctx.function is not None else ("block", None)
    self.functions_called_by.setdefault(caller, set()).add(id(decl))
    fn = self.compile_function(decl, scope, prefix)
    values, copy_out = _bind_args(self, fn.params, n, ctx, f"function {decl.name}", decl.proto.params, scope)
    call_code = f"{fn.pyname}(S)"
    if isinstance(fn.ret, T.VoidT):
        _call_with_copy_out(self, call_code, copy_out, ctx)
        return None
    if fn.ret.aggregate:        # the result is copied out of the function's return storage
        _call_with_copy_out(self, call_code, copy_out, ctx)
        size = fn.ret.slots()
        base = self.alloc(fn.ret, f"{decl.name}()")
        ctx.em.line(f"S[{base}:{base + size}] = S[{fn.ret_store.slot}:{fn.ret_store.slot + size}]")
        return agg(base, fn.ret)
    tmp = ctx.temp()
    _call_with_copy_out(self, f"{tmp} = {call_code}", copy_out, ctx)
    return Val("rv", fn.ret, tmp)


def _table_apply_in(node, scope):
    """The first `t.apply()` of a table inside an expression (innermost first), or None."""
    if isinstance(node, list):
        for item in node:
            found = _table_apply_in(item, scope)
            if found is not None:
                return found
        return None
    if not isinstance(node, Node):
        return None
    for value in node.__dict__.values():
        if isinstance(value, (list, Node)):
            found = _table_apply_in(value, scope)
            if found is not None:
                return found
    if node.kind == "call" and node.func is not None and node.func.kind == "member" \
            and node.func.name == "apply" and node.func.expr.kind == "name":
        sym = scope.lookup(node.func.expr.name)
        if sym is not None and sym.kind == "table":
            return node
    return None


class FunctionInfo:
    def __init__(self, pyname, params, ret, ret_store=None):
        self.pyname, self.params, self.ret, self.ret_store = pyname, params, ret, ret_store


def compile_function(self, decl, scope, prefix):
    """A P4 function becomes one Python function over S; its parameters get slots (copy-in/out)."""
    cache = self.__dict__.setdefault("_functions", {})
    if id(decl) in cache:
        return cache[id(decl)]
    outer_folded, self.folded_away = self.folded_away, 0    # its body is live wherever first called
    try:
        return _compile_function(self, decl, scope, prefix, cache)
    finally:
        self.folded_away = outer_folded


def _compile_function(self, decl, scope, prefix, cache):
    from .codegen import Emitter
    proto = decl.proto
    if proto.tparams:
        self.err(f"generic function {decl.name} is not supported", decl.loc)
    ret = self.resolve_type(proto.ret)
    fscope = Scope(scope)
    params = []
    for p in proto.params:
        pt = self.resolve_type(p.type)
        base = self.alloc(pt, f"{decl.name}.{p.name}")
        store = agg(base, pt) if pt.aggregate else lv(base, pt)
        fscope.declare(p.name, Sym("var", store))
        params.append((p.name, p.direction or "in", pt, store))
    ret_store = agg(self.alloc(ret, f"{decl.name}.return"), ret) if ret.aggregate else None
    info = FunctionInfo(self.namer.fresh("f_", decl.name), params, ret, ret_store)
    cache[id(decl)] = info
    em = Emitter()
    em.line(f"def {info.pyname}(S):")
    em.indent()
    fctx = Ctx(fscope, em, "control", prefix)
    fctx.returns = None if isinstance(ret, T.VoidT) else ret
    fctx.ret_store = ret_store
    fctx.function = decl
    mark = em.mark()
    self.stmts(decl.body.stmts, fctx)
    em.ensure_body(mark)
    self.em.lines.extend(em.lines)
    return info


def call_control(self, inst, n, ctx):
    fn, params, name, kind = inst
    self.note_use("blocks", name, ctx)
    if not isinstance(fn, str):         # a SubBlock: extern parameters bound by this apply
        fn = fn.compile_for(self, positional_args(self, n, [p.name for p, _, _ in params]), ctx, n.loc)
    plist = [(p.name, "packet" if v is None else (p.direction or "in"), pt, v) for p, pt, v in params]
    _, copy_out = _bind_args(self, plist, n, ctx, f"{name}.apply", [p for p, _, _ in params], self.globals)
    _call_with_copy_out(self, f"o = {fn}(S, P, o)" if kind == "parser" else f"{fn}(S)", copy_out, ctx)
    return None


class InvocationsMixin:
    """Binds this module's calls as Compiler methods."""
    call_action = call_action
    bound_action = bound_action
    call_function = call_function
    compile_function = compile_function
    call_control = call_control
