"""Calls of externs: methods of extern instances (registers, counters, meters, hashes, ...) and
v1model's extern functions (clone, resubmit, checksums, digest, ...), as Compiler methods."""
from . import hashes, p4types as T
from .call_args import CHECKSUM_FUNCS, arg_value, as_uint, need_args
from .codegen import slot_add
from .compile_values import (H_CLONE, H_CLONE_FL, H_DIGEST, H_INLEN, H_NOW, H_PKT, H_POFF, H_RECIRC, H_RESUB,
                             H_TRUNC, agg, lit)
from .program_info import anno_string, DigestInfo


# ------------------------------------------------------------------------------ externs
def call_extern_method(self, info, name, n, ctx):
    """A method call on an extern instance: `x.name(args)` where x is `info`."""
    if ctx.where == "parser":
        self.err(f"{info.type_name}.{name} cannot be used in a parser by BMv2 (and this engine)", n.loc)
    compile_call = _EXTERN_METHODS.get((info.type_name, name))
    if compile_call is None:
        self.err(f"{info.type_name} has no method '{name}' in this engine", n.loc)
    return compile_call(self, info, n, ctx)


def _register_read(self, info, n, ctx):
    need_args(self, n, 2, "register.read")
    target = self.out_target(n.args[0], ctx, "register.read's result")
    idx = arg_value(self, n.args[1], ctx)
    cur = self.scalar(target, n.loc)
    self.store(target, f"{info.pyname}.packet_read({as_uint(idx)}, {as_uint(cur)})", ctx, n.loc)


def _register_write(self, info, n, ctx):
    need_args(self, n, 2, "register.write")
    idx = arg_value(self, n.args[0], ctx)
    val = arg_value(self, n.args[1], ctx, T.BitT(info.width))
    ctx.em.line(f"{info.pyname}.packet_write({as_uint(idx)}, {as_uint(val)})")


def _counter_count(self, info, n, ctx):
    need_args(self, n, 1, "counter.count")
    idx = arg_value(self, n.args[0], ctx)
    ctx.em.line(f"{info.pyname}.count({as_uint(idx)}, S[{H_INLEN}])")


def _meter_execute(self, info, n, ctx):
    need_args(self, n, 2, "meter.execute_meter")
    idx = arg_value(self, n.args[0], ctx)
    target = self.out_target(n.args[1], ctx, "execute_meter's result")
    tmp = ctx.temp()
    em = ctx.em
    em.line(f"{tmp} = {info.pyname}.execute({as_uint(idx)}, S[{H_NOW}], S[{H_INLEN}])")
    em.line(f"if {tmp} is not None:")
    em.indent()
    self.store(target, tmp, ctx, n.loc)
    em.dedent()


def _direct_counter_count(self, info, n, ctx):
    need_args(self, n, 0, "direct_counter.count")
    # nothing to run: BMv2 counts when the table hits


def _direct_meter_read(self, info, n, ctx):
    need_args(self, n, 1, "direct_meter.read")
    target = self.out_target(n.args[0], ctx, "direct_meter.read's result")
    if self.limits is not None:
        self.limits.direct_meter_read(info, ctx.action.name if ctx.action else None, n.args[0])
    if target.kind == "lv" and isinstance(target.slot, int) and getattr(target.type, "width", None):
        # p4c-bm2-ss makes the destination the meter's result_target and drops the call:
        # BMv2 writes the colour there when the table hits, before the action runs
        # (MatchTableAbstract::apply_action in src/bm_sim/match_tables.cpp); the table does
        info.read_slots.add((target.slot, (1 << target.type.width) - 1))
        return
    cur = self.scalar(target, n.loc)
    self.store(target, f"{info.pyname}.read({as_uint(cur)})", ctx, n.loc)


_EXTERN_METHODS = {
    ("register", "read"): _register_read,
    ("register", "write"): _register_write,
    ("counter", "count"): _counter_count,
    ("meter", "execute_meter"): _meter_execute,
    ("direct_counter", "count"): _direct_counter_count,
    ("direct_meter", "read"): _direct_meter_read,
}


def _enum_member(self, node, ctx, enum, what):
    v = self.expr(node, ctx)
    if not (isinstance(v.type, T.EnumT) and v.type.name == enum and v.info):
        self.err(f"{what} must be a {enum} member like {enum}.{'crc16' if enum == 'HashAlgorithm' else 'I2E'}",
                 node.loc)
    return v.info


def _hash_fn(self, algo, loc):
    try:
        hashes.algorithm(algo)
    except hashes.HashError as e:
        self.err(f"hash algorithm {algo}: {e}", loc)
    name = f"HA_{algo}"
    if name not in self.ns:
        self.ns[name] = ("hash", algo)       # bound to hashes.algorithm(algo) per pipeline
    return name


def _sm_arg(self, node, ctx, what):
    """A standard_metadata_t argument: {field: slot} of that struct (the pipeline's or a copy)."""
    v = self.expr(node, ctx)
    smt = self.types.get("standard_metadata_t")
    if v.kind != "agg" or v.type != smt:
        self.err(f"{what} takes standard_metadata", node.loc)
    return {f: slot_add(v.slot, off) for f, off in smt.offsets().items()}


def call_extern_func(self, fname, n, ctx):
    """A call of one of v1model's extern functions (clone, hash, digest, checksums, ...)."""
    if ctx.where == "parser" and fname not in _ALLOWED_IN_PARSER:
        self.err(f"{fname} cannot be called in a parser (BMv2 allows only extract, lookahead, "
                 f"advance, verify, log_msg and assignments there)", n.loc)
    compile_call = _EXTERN_FUNCS.get(fname)
    if compile_call is None:
        self.err(f"extern function '{fname}' is not supported by this engine", n.loc)
    return compile_call(self, fname, n, ctx)


def _static_assert(self, fname, n, ctx):
    c = self.expr(n.args[0], ctx) if n.args else None
    if c is None or not c.is_const:
        self.err("static_assert needs a compile-time condition", n.loc)
    if not c.const:
        msg = self.expr(n.args[1], ctx).const if len(n.args) > 1 else "static_assert failed"
        self.err(str(msg), n.loc)
    return lit(True, T.BOOL)


def _verify(self, fname, n, ctx):
    if ctx.where != "parser":
        self.err("verify can only be used in a parser", n.loc)
    need_args(self, n, 2, "verify")
    c = self.cond_expr(n.args[0], ctx)
    e = self.expr(n.args[1], ctx)
    if not isinstance(e.type, T.ErrorT):
        self.err("verify's second argument must be an error (error.X)", n.args[1].loc)
    ctx.em.line(f"if not {c}: raise ParserError({e.code}, o)")


def _mark_to_drop(self, fname, n, ctx):
    target = self.sm_slots()
    if len(n.args) == 1:
        target = _sm_arg(self, n.args[0], ctx, "mark_to_drop")
    elif n.args:
        self.err("mark_to_drop takes standard_metadata", n.loc)
    elif self.limits is not None:
        self.limits.deprecated_extern(n, fname)
    ctx.em.line(f"S[{target['egress_spec']}] = 511")
    if "mcast_grp" in target:       # simple_switch clears it where the program declares it
        ctx.em.line(f"S[{target['mcast_grp']}] = 0")


def _hash(self, fname, n, ctx):
    need_args(self, n, 5, "hash")
    target = self.out_target(n.args[0], ctx, "hash's result")
    algo = _enum_member(self, n.args[1], ctx, "HashAlgorithm", "hash's algorithm")
    fn = _hash_fn(self, algo, n.args[1].loc)
    base = arg_value(self, n.args[2], ctx)
    data = self.expr(n.args[3], ctx)
    if self.limits is not None:
        self.limits.field_list(fname, n.args[3], data)
    mx = arg_value(self, n.args[4], ctx)
    packed = self.pack_code(self.flatten(data, n.args[3].loc), ctx)
    tw = T.width_of(target.type)
    if mx.is_const:
        m = int(mx.const) or 1
        code = f"({as_uint(base)} + {fn}({packed}) % {m:#x}) & {(1 << tw) - 1:#x}"
    else:
        code = f"({as_uint(base)} + {fn}({packed}) % ({as_uint(mx)} or 1)) & {(1 << tw) - 1:#x}"
    self.store(target, code, ctx, n.loc)


def _random(self, fname, n, ctx):
    need_args(self, n, 3, "random")
    target = self.out_target(n.args[0], ctx, "random's result")
    lo = arg_value(self, n.args[1], ctx, target.type)
    hi = arg_value(self, n.args[2], ctx, target.type)
    a, b = ctx.temp(), ctx.temp()
    em = ctx.em
    em.line(f"{a} = {as_uint(lo)}; {b} = {as_uint(hi)}")
    em.line(f"if {a} <= {b}:")
    em.indent()
    self.store(target, f"RANDINT({a}, {b})", ctx, n.loc)
    em.dedent()


def _digest(self, fname, n, ctx):
    need_args(self, n, 2, "digest")
    if ctx.block_role not in ("ingress", None):
        self.err("digest can only be called in the ingress control (BMv2 learns at the end of ingress)",
                 n.loc)
    declared = self.resolve_type(n.targs[0]) if n.targs and n.targs[0].kind != "t_dontcare" else None
    data = self.expr(n.args[1], ctx, declared)
    if isinstance(declared, T.StructT) and data.kind == "list":
        # a list or structure expression (fields named in any order, unsized literals, some
        # left to `...`): the struct it stands for, as p4c casts it
        data = self.struct_temp(data, declared, ctx, n.args[1].loc)
    info = self.digest_info(data, n, declared)
    fields = self.flatten(data, n.args[1].loc)
    vals = ", ".join(code for code, _, _ in fields)
    ctx.em.line(f"S[{H_DIGEST}] = ({info.name!r}, ({vals},))")


def _clone(self, fname, n, ctx):
    """clone, clone3 and clone_preserving_field_list."""
    role = ctx.block_role
    if role not in ("ingress", "egress", None):
        self.err(f"{fname} can only be called in ingress or egress", n.loc)
    want = {"clone": 2, "clone3": 3, "clone_preserving_field_list": 3}[fname]
    need_args(self, n, want, fname)
    if fname == "clone3" and self.limits is not None:
        self.limits.deprecated_extern(n, fname)
    kind = _enum_member(self, n.args[0], ctx, "CloneType", f"{fname}'s type")
    if role is not None and (kind == "I2E") != (role == "ingress"):
        self.err(f"clone type {kind} cannot be used in the {role} control "
                 f"(I2E belongs in ingress, E2E in egress)", n.args[0].loc)
    session = arg_value(self, n.args[1], ctx, T.BitT(32))
    fl = "None"
    if fname == "clone3":
        fl = repr(self.anonymous_field_list(self.field_list_slots(self.expr(n.args[2], ctx), n.args[2].loc)))
    elif fname == "clone_preserving_field_list":
        fl = repr(self.const_int_val(n.args[2], ctx))
    ctx.em.line(f"S[{H_CLONE}] = {as_uint(session)}")
    ctx.em.line(f"S[{H_CLONE_FL}] = {fl}")


def _resubmit_or_recirculate(self, fname, n, ctx):
    """resubmit and recirculate, with a field list (deprecated) or its index (_preserving_field_list)."""
    resub = fname.startswith("resubmit")
    role = ctx.block_role
    if role is not None and role != ("ingress" if resub else "egress"):
        self.err(f"{fname} can only be called in the {'ingress' if resub else 'egress'} control", n.loc)
    need_args(self, n, 1, fname)
    if fname.endswith("field_list"):
        fl = self.const_int_val(n.args[0], ctx)
    else:
        if self.limits is not None:
            self.limits.deprecated_extern(n, fname)
        fl = self.anonymous_field_list(self.field_list_slots(self.expr(n.args[0], ctx), n.args[0].loc))
    ctx.em.line(f"S[{H_RESUB if resub else H_RECIRC}] = {fl!r}")


def _truncate(self, fname, n, ctx):
    need_args(self, n, 1, "truncate")
    v = arg_value(self, n.args[0], ctx, T.BitT(32))
    tmp = ctx.temp()
    ctx.em.line(f"{tmp} = {as_uint(v)}")
    ctx.em.line(f"if S[{H_TRUNC}] is None or {tmp} < S[{H_TRUNC}]: S[{H_TRUNC}] = {tmp}")


def _log_msg(self, fname, n, ctx):
    if not n.args or n.args[0].kind != "string":
        self.err("log_msg needs a string literal first", n.loc)
    fmt = n.args[0].value
    vals = []
    if len(n.args) > 1:
        vals = _log_values(self, self.expr(n.args[1], ctx), n.args[1].loc)
    ctx.em.line(f"if LOG is not None: LOG(logfmt({fmt!r}, ({', '.join(vals)}{',' if vals else ''})))")


def _assert_or_assume(self, fname, n, ctx):
    need_args(self, n, 1, fname)
    c = self.cond_expr(n.args[0], ctx)
    where = f"{n.loc.file}:{n.loc.line}"
    ctx.em.line(f"if not {c}: raise P4RuntimeFault({f'{fname} failed at {where}'!r})")


def _checksum_call(self, fname, n, ctx):
    """verify_checksum* and update_checksum* (and their _with_payload forms), as BMv2 runs them."""
    em = ctx.em
    role = ctx.block_role
    if fname.startswith("verify") and role not in ("verify", None):
        self.err(f"{fname} belongs in the verifyChecksum control", n.loc)
    if fname.startswith("update") and role not in ("compute", None):
        self.err(f"{fname} belongs in the computeChecksum control", n.loc)
    need_args(self, n, 4, fname)
    cond = self.cond_expr(n.args[0], ctx)
    data = self.expr(n.args[1], ctx)
    if self.limits is not None:
        self.limits.field_list(fname, n.args[1], data)
    algo = _enum_member(self, n.args[3], ctx, "HashAlgorithm", f"{fname}'s algorithm")
    fn = _hash_fn(self, algo, n.args[3].loc)
    csum = self.expr(n.args[2], ctx)
    if fname.startswith("update"):
        csum = self.out_target(n.args[2], ctx, "the checksum field")
    csum_s = self.scalar(csum, n.args[2].loc)
    w = T.width_of(csum_s.type)
    if w is None:
        self.err("the checksum must be a bit<W> field", n.args[2].loc)
    valid = getattr(csum, "valid", None) if fname.startswith("verify") else None
    if valid is not None and cond != f"(S[{valid}] == 1)":
        # BMv2's Checksum::verify skips a checksum whose field's header is invalid (checksums.cpp)
        cond = f"S[{valid}] == 1 and ({cond})"
    em.line(f"if {cond}:")
    em.indent()
    packed = self.pack_code(self.flatten(data, n.args[1].loc), ctx)
    if fname.endswith("with_payload"):
        packed = f"{packed} + S[{H_PKT}][S[{H_POFF}]:]"
    value = f"{fn}({packed}) & {(1 << w) - 1:#x}"
    if fname.startswith("verify"):
        if w < hashes.OUTPUT_BITS.get(algo, 0):
            # BMv2 compares the whole checksum with the narrower field (CalcBasedChecksum::verify_)
            value = f"{fn}({packed})"
        em.line(f"if {value} != {as_uint(csum_s)}: S[{self.sm_slots()['checksum_error']}] = 1")
    else:
        self.store(csum, value, ctx, n.loc)
    em.dedent()
    return None


# the compile function of each extern function: (self, fname, n, ctx) -> a Val or None
_EXTERN_FUNCS = {
    "static_assert": _static_assert,
    "verify": _verify,
    "mark_to_drop": _mark_to_drop,
    "hash": _hash,
    "random": _random,
    "digest": _digest,
    **dict.fromkeys(("clone", "clone3", "clone_preserving_field_list"), _clone),
    **dict.fromkeys(("resubmit", "resubmit_preserving_field_list", "recirculate",
                     "recirculate_preserving_field_list"), _resubmit_or_recirculate),
    "truncate": _truncate,
    **dict.fromkeys(CHECKSUM_FUNCS, _checksum_call),
    "log_msg": _log_msg,
    "assert": _assert_or_assume,
    "assume": _assert_or_assume,
}
# these check where they are called themselves (verify belongs only in a parser)
_ALLOWED_IN_PARSER = ("static_assert", "verify", "log_msg", "assert", "assume")


def _log_values(self, data, loc):
    """log_msg's values: BMv2 prints a signed field as the signed number it holds."""
    if data.kind == "list":
        return [code for item in data.items for code in _log_values(self, item, loc)]
    if data.kind in ("lv", "rv") and getattr(data.type, "signed", False):
        return [f"({self.scalar(data, loc).code})"]
    return [code for code, _, _ in self.flatten(data, loc)]


def digest_info(self, data, n, declared=None):
    """The digest a digest() call sends: named after its struct type, as p4c names it in P4Info
    (the type argument of digest<T> names it when the data is a list)."""
    if isinstance(declared, T.StructT) and data.kind == "list":
        if len(data.items) != len(declared.fields):
            self.err(f"digest<{declared.name}>: {len(declared.fields)} fields expected, "
                     f"the list has {len(data.items)}", n.args[1].loc)
        data = agg(0, declared)
    if data.kind == "agg" and isinstance(data.type, T.StructT):
        t = data.type
        name = anno_string(getattr(t, "annos", None), "name") or t.name
        fields = []
        for fname, ft in t.fields:
            if ft.aggregate:
                self.err(f"digest struct {t.name}: field '{fname}' must be a bit<W> value", n.loc)
            width = T.width_of(ft)
            if width is None and isinstance(ft, T.EnumT) and not ft.arch:
                width = 32              # a plain enum travels as its 32-bit code (p4c-bm2-ss)
            fields.append((fname, width))
    elif data.kind == "list":
        name = f"digest_{self.digest_counter}"       # p4c counts anonymous digests from 0
        self.digest_counter += 1
        fields = [(f"field_{i}", w) for i, (_, w, _) in enumerate(self.flatten(data, n.loc))]
        if any(w is None for _, w in fields):
            self.err("a varbit field cannot be sent in a digest", n.loc)
        t = None
    elif data.kind in ("rv", "lv") and isinstance(data.type, T.BitT):
        # digest(r, sm.ingress_port): p4c names it as it names a list, and warns that it must
        name = f"digest_{self.digest_counter}"
        self.digest_counter += 1
        self.warn(f"digest of a {data.type} has no type name: named '{name}' (as p4c names it)", n.loc)
        fields = [("value", data.type.width)]
        t = data.type
    else:
        self.err("digest data must be a struct, a list of fields or a bit<W> value", n.args[1].loc)
    old = self.out.digests.get(name)
    if old is not None and old.fields != fields:
        self.err(f"two digests are named '{name}' with different fields", n.loc)
    info = old or DigestInfo(name, t, fields)
    self.out.digests[name] = info
    return info


class ExternCallsMixin:
    """Binds this module's calls as Compiler methods."""
    call_extern_method = call_extern_method
    call_extern_func = call_extern_func
    digest_info = digest_info
