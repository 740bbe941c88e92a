"""Calls: methods of headers, stacks, packets, tables and externs, v1model's extern functions,
direct action calls, P4 functions and sub-control applies -- typed and translated to Python.

These are methods of compiler.Compiler (bound in its class body); they emit statements into
ctx.em and return a Val for calls that have a value (None otherwise).
"""
from . import codegen
from . import p4types as T
from .codegen import slot_add
from .compiler import (H_CLONE, H_CLONE_FL, H_DIGEST, H_NOW, H_OUT, H_PKT, H_POFF, H_RECIRC, H_RESUB,
                       H_TRUNC, DigestInfo, Sym, Val, agg, anno_string, expr_text, lit, lv)
from .syntax import Node

CHECKSUM_FUNCS = ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                  "update_checksum_with_payload")


# ------------------------------------------------------------------------------ dispatch
def call(self, n, ctx, statement=False):
    fv = self.expr(n.func, ctx)
    if any(a.kind == "named_arg" for a in n.args) and fv.kind in ("method", "ref"):
        n = _extern_args_in_order(self, fv, n)
    if fv.kind == "method":
        v = self.call_method(fv, n, ctx)
    elif fv.kind == "ref" and fv.info.kind == "action":
        v = self.call_action(fv.info.info, n, ctx)
    elif fv.kind == "ref" and fv.info.kind == "function":
        v = self.call_function(fv.info.info, n, ctx)
    elif fv.kind == "ref" and fv.info.kind == "extern_func":
        v = self.call_extern_func(fv.name, n, ctx)
    else:
        self.err(f"'{expr_text(n.func)}' cannot be called", n.loc)
    if statement and v is not None and v.kind == "apply":
        ctx.em.line(v.code)
    return v


def _extern_args_in_order(self, fv, n):
    """A call to an extern method/function with `name = value` arguments, rewritten with the
    arguments in the declared parameter order (from core.p4/v1model.p4 or the program)."""
    if fv.kind == "ref" and fv.info.kind == "extern_func":
        protos = [d.proto for d in self.extern_funcs.get(fv.name, [])]
    elif fv.kind == "method" and fv.obj.kind == "ref" and fv.obj.info.kind in ("packet", "extern"):
        sym = fv.obj.info
        type_name = sym.info if sym.kind == "packet" else sym.info.type_name
        decl = self.extern_decls.get(type_name)
        protos = [m.proto for m in (decl.methods if decl else []) if m.proto.name == fv.name]
    else:
        return n          # actions, functions and control applies bind names themselves
    named = {a.name for a in n.args if a.kind == "named_arg"}
    for proto in protos:
        names = [p.name for p in proto.params]
        if not named <= set(names) or len(n.args) > len(names):
            continue
        given = _positional(self, n, names)
        if set(given) != set(names[:len(given)]):
            continue      # an omitted parameter in the middle: not this overload
        return Node("call", n.loc, func=n.func, targs=n.targs, args=[given[x] for x in names[:len(given)]])
    self.err(f"no declaration of '{fv.name}' has parameters named {', '.join(sorted(named))}", n.loc)


def _positional(self, n, names):
    """Arguments of call `n` by parameter name (positional or `name = value`)."""
    out = {}
    for i, a in enumerate(n.args):
        if a.kind == "named_arg":
            if a.name not in names:
                self.err(f"no parameter named '{a.name}' (parameters: {', '.join(names)})", a.loc)
            out[a.name] = a.value
        else:
            if i >= len(names):
                self.err(f"too many arguments (expected at most {len(names)})", a.loc)
            out[names[i]] = a
    return out


def _need_args(self, n, count, what):
    if len(n.args) != count:
        self.err(f"{what} takes {count} argument(s), got {len(n.args)}", n.loc)


def _value(self, node, ctx, expected=None):
    v = self.scalar(self.expr(node, ctx, expected), node.loc)
    if expected is not None and v.type != expected:
        if isinstance(expected, T.BitT) and isinstance(v.type, T.IntLitT):
            return self.convert(v, expected, node.loc)
    return v


def _uint(v):
    """Python code for the unsigned value of scalar `v` (signed ints and bools converted)."""
    t = v.type
    if isinstance(t, T.BoolT):
        return f"(1 if {v.code} else 0)"
    if isinstance(t, T.BitT) and t.signed:
        return f"({v.code} & {t.mask})"
    return v.code


# ------------------------------------------------------------------------------ methods
def call_method(self, m, n, ctx):
    obj, name = m.obj, m.name
    if obj.kind == "agg":
        t = obj.type
        if isinstance(t, T.HeaderT):
            _need_args(self, n, 0, f"{name}()")
            if name == "isValid":
                return Val("rv", T.BOOL, f"(S[{obj.slot}] == 1)")
            if name == "setValid":
                ctx.em.line(f"S[{obj.slot}] = 1")
                _invalidate_siblings(obj, ctx)
                return None
            if name == "setInvalid":
                ctx.em.line(f"S[{obj.slot}] = 0")
                return None
            if name == "minSizeInBits":
                return lit(t.bit_width, T.INTLIT)
            if name == "minSizeInBytes":
                return lit(t.bit_width // 8, T.INTLIT)
        if isinstance(t, T.UnionT) and name == "isValid":
            _need_args(self, n, 0, "isValid()")
            slots = t.validity_slots(obj.slot)
            return Val("rv", T.BOOL, "(" + " or ".join(f"S[{s}] == 1" for s in slots) + ")" if slots else "False")
        if isinstance(t, T.StackT) and name in ("push_front", "pop_front"):
            _need_args(self, n, 1, name)
            count = self.const_int_val(n.args[0], ctx)
            self.stack_shift(obj, count if name == "push_front" else -count, ctx)
            return None
        self.err(f"{t} has no method '{name}'", n.loc)
    if obj.kind != "ref":
        self.err(f"cannot call '{name}' here", n.loc)
    sym = obj.info
    if sym.kind == "table":
        if name != "apply":
            self.err(f"tables have only the method apply(), not '{name}'", n.loc)
        _need_args(self, n, 0, "apply()")
        if ctx.where == "action":
            self.err("tables cannot be applied inside actions", n.loc)
        self.out.applied_tables.add(sym.info.name)
        return Val("apply", None, f"{sym.info.fn}(S)", info=sym.info)
    if sym.kind == "packet":
        return self.call_packet(sym.info, name, n, ctx)
    if sym.kind == "extern":
        return self.call_extern_method(sym.info, name, n, ctx)
    if sym.kind == "control_inst":
        if name != "apply":
            self.err(f"a control instance has only apply(), not '{name}'", n.loc)
        return self.call_control(sym.info, n, ctx)
    self.err(f"'{obj.name}' has no method '{name}'", n.loc)


def stack_shift(self, st, count, ctx):
    """push_front(count) (count > 0) or pop_front(-count) on stack `st`, as the spec defines."""
    t = st.type
    esz = t.elem.slots()
    size = t.size
    em = ctx.em
    first = slot_add(st.slot, 1)

    def elem(i):
        return slot_add(first, i * esz)

    k = abs(count)
    if count > 0:
        for i in range(size - 1, k - 1, -1):
            em.line(f"S[{elem(i)}:{slot_add(elem(i), esz)}] = S[{elem(i - k)}:{slot_add(elem(i - k), esz)}]")
        for i in range(min(k, size)):
            em.line(f"S[{elem(i)}] = 0")
        em.line(f"S[{st.slot}] = min(S[{st.slot}] + {k}, {size})")
    else:
        for i in range(0, size - k):
            em.line(f"S[{elem(i)}:{slot_add(elem(i), esz)}] = S[{elem(i + k)}:{slot_add(elem(i + k), esz)}]")
        for i in range(max(size - k, 0), size):
            em.line(f"S[{elem(i)}] = 0")
        em.line(f"S[{st.slot}] = max(S[{st.slot}] - {k}, 0)")


def _invalidate_siblings(header, ctx):
    """A header_union member just became valid: the other members become invalid."""
    for s in header.siblings or ():
        ctx.em.line(f"S[{s}] = 0")


# ------------------------------------------------------------------------------ packets
def call_packet(self, kind, name, n, ctx):
    em = ctx.em
    if kind == "packet_in":
        if ctx.where != "parser":
            self.err(f"packet_in.{name} can only be used in a parser", n.loc)
        if name == "extract":
            if len(n.args) not in (1, 2):
                self.err("extract takes a header (and for a header with a varbit field, its length in bits)",
                         n.loc)
            length = _value(self, n.args[1], ctx, T.BitT(32)) if len(n.args) == 2 else None
            if n.args[0].kind == "dontcare":        # extract<H>(_): parse and drop the header
                if len(n.targs) != 1:
                    self.err("extract(_) needs the header type: extract<H>(_)", n.args[0].loc)
                t = self.resolve_type(n.targs[0])
                target = agg(self.alloc(t, "_"), t) if isinstance(t, T.HeaderT) else None
            else:
                target = self.expr(n.args[0], ctx)
            if target is None:
                self.err("extract needs a header type", n.loc)
            elif target.kind == "stack_next" and isinstance(target.type, T.HeaderT):
                self.extract_code(target, ctx, n.loc, stack=True, length=length)
            elif target.kind == "agg" and isinstance(target.type, T.HeaderT):
                self.extract_code(target, ctx, n.loc, length=length)
                _invalidate_siblings(target, ctx)
            else:
                self.err("extract needs a header (or a header stack's .next)", n.args[0].loc)
            return None
        if name == "lookahead":
            if len(n.targs) != 1 or n.args:
                self.err("lookahead takes one type argument and no arguments: lookahead<T>()", n.loc)
            t = self.resolve_type(n.targs[0])
            if isinstance(t, T.BitT):
                width = t.width
            elif isinstance(t, T.HeaderT) and not any(isinstance(ft, T.VarbitT) for _, ft in t.fields):
                width = t.bit_width
            elif isinstance(t, T.StructT) and all(isinstance(ft, (T.BitT, T.BoolT)) for _, ft in t.fields):
                width = sum(T.width_of(ft) for _, ft in t.fields)
            else:
                self.err(f"lookahead<{t}> is not supported (use bit<W>, a header type or a struct "
                         f"of bit<W> fields)", n.loc)
            nbytes = (width + 7) // 8
            tmp = ctx.temp()
            em.line(f"if o + {nbytes} > len(P): raise ParserError({self.errors.index('PacketTooShort')}, o)")
            em.line(f"{tmp} = int.from_bytes(P[o:o + {nbytes}], 'big') >> {nbytes * 8 - width}")
            if isinstance(t, T.BitT):
                code = self.wrap_code(tmp, t) if t.signed else tmp
                return Val("rv", t, code)
            base = self.alloc(t, "lookahead")
            em.line(f"S[{base}:{base + t.slots()}] = {self.unpack_tuple(t, tmp, isinstance(t, T.HeaderT))}")
            return agg(base, t)
        if name == "advance":
            _need_args(self, n, 1, "advance")
            v = _value(self, n.args[0], ctx, T.BitT(32))
            tmp = ctx.temp()
            em.line(f"{tmp} = o + ({v.code} >> 3)")
            em.line(f"if {tmp} > len(P): raise ParserError({self.errors.index('PacketTooShort')}, o)")
            em.line(f"o = {tmp}")
            return None
        if name == "length":
            self.err("packet_in.length() is not supported by BMv2 (and this engine)", n.loc)
        self.err(f"packet_in has no method '{name}'", n.loc)
    if name != "emit":
        self.err(f"packet_out has no method '{name}'", n.loc)
    _need_args(self, n, 1, "emit")
    self.emit_code(self.expr(n.args[0], ctx), ctx, n.args[0].loc)
    return None


def unpack_tuple(self, t, var, header=True):
    """A tuple expression unpacking `t`'s fields from the int in `var`: (valid, field...) for
    a header, (field...) for a struct of bit<W>/bool fields."""
    parts = ["1"] if header else []
    widths = [T.width_of(ft) for _, ft in t.fields]
    shift = total = sum(widths)
    for (_, ft), w in zip(t.fields, widths):
        shift -= w
        code = f"{var} >> {shift}" if shift else var
        if shift + w < total:
            code = f"({code}) & {(1 << w) - 1}"
        if isinstance(ft, T.BoolT):
            code = f"({code}) == 1"
        elif ft.signed:
            code = self.wrap_code(code, ft)
        parts.append(f"({code})")
    return "(" + ", ".join(parts) + ",)"


def _struct_name(self, fields):
    """The generated code's struct.Struct for a run of fixed-width header fields (bound per pipeline)."""
    fmt = codegen.struct_format(codegen.header_chunks([ft.width for _, ft in fields]))
    name = "ST_" + fmt[1:]
    self.ns[name] = ("struct", fmt)
    return name


def _split_varbit(self, t, loc):
    """A header's fields as (fixed before, varbit field or None, fixed after)."""
    at = [i for i, (_, ft) in enumerate(t.fields) if isinstance(ft, T.VarbitT)]
    if not at:
        return t.fields, None, []
    i = at[0]
    before, after = t.fields[:i], t.fields[i + 1:]
    if sum(ft.width for _, ft in before) % 8 or sum(ft.width for _, ft in after) % 8:
        self.err(f"header {t.name}: the fields around its varbit must fill whole bytes", loc)
    return before, t.fields[i], after


def _struct_unpack(self, fields, ctx, var, at="o"):
    """Unpack fixed-width `fields` from P[at:] (bounds already checked); returns their value codes.

    `var` is a fresh temporary whose name prefixes the struct items' variables."""
    em = ctx.em
    chunks = codegen.header_chunks([ft.width for _, ft in fields])
    item_vars, values = [], []
    for c, (nbytes, _) in enumerate(chunks):
        parts, rest = [], nbytes
        for k, (code, size) in enumerate(codegen.chunk_items(nbytes)):
            item = f"{var}_{c}_{k}"
            item_vars.append(item)
            rest -= size
            item = f"int.from_bytes({item}, 'big')" if code.endswith("s") else item
            parts.append(f"{item} << {rest * 8}" if rest else item)
        values.append(" | ".join(parts) or "0")
    if item_vars:
        em.line(f"{', '.join(item_vars)}, = {_struct_name(self, fields)}.unpack_from(P, {at})")
    out = []
    for (nbytes, members), value in zip(chunks, values):
        if len(members) > 1 and " " in value:       # a glued chunk read by several fields
            em.line(f"{var} = {value}")
            value = var
        shift = nbytes * 8
        for i in members:
            ft = fields[i][1]
            shift -= ft.width
            code = f"({value}) >> {shift}" if shift else value
            if shift + ft.width < nbytes * 8:
                code = f"({code}) & {ft.mask}"
            if ft.width == 0:
                code = "0"
            elif isinstance(ft, T.BoolT):
                code = f"({code}) == 1"
            elif ft.signed:
                code = self.wrap_code(code, ft)
            out.append(f"({code})" if " " in code else code)
    return out


def _struct_pack(self, fields, slots):
    """Code for the bytes of fixed-width `fields` whose values are in S[slots[i]] (None: no bytes)."""
    items = []
    for nbytes, members in codegen.header_chunks([ft.width for _, ft in fields]):
        parts, shift = [], nbytes * 8
        for i in members:
            ft = fields[i][1]
            shift -= ft.width
            if ft.width == 0:
                continue
            f = f"S[{slots[i]}]"
            if ft.signed:
                f = f"({f} & {ft.mask})"
            parts.append(f"{f} << {shift}" if shift else f)
        value = " | ".join(parts)
        rest = nbytes
        for code, size in codegen.chunk_items(nbytes):
            rest -= size
            if code.endswith("s"):
                items.append(f"({value}).to_bytes({nbytes}, 'big')")
                continue
            piece = f"({value}) >> {rest * 8}" if rest else f"({value})" if " " in value else value
            if rest + size < nbytes:
                piece = f"({piece}) & {(1 << size * 8) - 1}"
            items.append(piece)
    return f"{_struct_name(self, fields)}.pack({', '.join(items)})" if items else None


def extract_code(self, target, ctx, loc, stack=False, length=None):
    """extract(hdr) or extract(hdr, length_in_bits) for a header with a varbit field (BMv2's
    checks in its order: length not a multiple of 8, packet too short, longer than the maximum)."""
    em = ctx.em
    t = target.type
    before, varbit, after = _split_varbit(self, t, loc)
    if (varbit is None) != (length is None):
        self.err(f"header {t.name} {'has' if varbit else 'has no'} varbit field: use "
                 f"{'extract(hdr, length_in_bits)' if varbit else 'extract(hdr)'}", loc)
    fixed = t.bit_width // 8
    too_short = self.errors.index("PacketTooShort")
    if stack:
        st = target.info
        idx = ctx.temp()
        em.line(f"{idx} = S[{target.slot}]")
        em.line(f"if {idx} >= {st.size}: raise ParserError({self.errors.index('StackOutOfBounds')}, o)")
        base = ctx.temp()
        em.line(f"{base} = {target.slot} + 1 + {idx} * {st.elem.slots()}")
        if target.name is not None:          # a member of a header_union element: `u.next.h`
            offs = st.elem.offsets()
            for member, off in offs.items():
                if member != target.name:
                    em.line(f"S[{base} + {off}] = 0")
            em.line(f"{base} += {offs[target.name]}")
    else:
        base = target.slot
    end = ctx.temp()
    val = ctx.temp()
    if varbit is None:
        em.line(f"{end} = o + {fixed}")
        em.line(f"if {end} > len(P): raise ParserError({too_short}, o)")
        codes = _struct_unpack(self, before, ctx, val)
    else:
        nbits, nbytes = ctx.temp(), ctx.temp()
        em.line(f"{nbits} = {_uint(length)}")
        em.line(f"if {nbits} & 7: raise ParserError({self.errors.index('ParserInvalidArgument')}, o)")
        em.line(f"{nbytes} = {nbits} >> 3")
        em.line(f"{end} = o + {fixed} + {nbytes}")
        em.line(f"if {end} > len(P): raise ParserError({too_short}, o)")
        em.line(f"if {nbits} > {varbit[1].max_width}: "
                f"raise ParserError({self.errors.index('HeaderTooShort')}, o)")
        lo = f"o + {sum(ft.width for _, ft in before) // 8}"
        codes = _struct_unpack(self, before, ctx, val)
        codes.append(f"({nbits}, int.from_bytes(P[{lo}:{lo} + {nbytes}], 'big'))")
        codes += _struct_unpack(self, after, ctx, val + "_a", f"{lo} + {nbytes}")
    em.line(f"S[{base}:{slot_add(base, t.slots())}] = ({', '.join(['1'] + codes)},)")
    em.line(f"o = {end}")
    if stack:
        em.line(f"S[{target.slot}] = {idx} + 1")


def emit_code(self, v, ctx, loc):
    """packet_out.emit: a header (if valid), a stack's elements, a struct's members in order."""
    em = ctx.em
    t = v.type
    if v.kind != "agg":
        self.err(f"emit needs a header, header stack or struct, not {t}", loc)
    if isinstance(t, T.HeaderT):
        offs = t.offsets()
        before, varbit, after = _split_varbit(self, t, loc)
        parts = [_struct_pack(self, before, [slot_add(v.slot, offs[f]) for f, _ in before])]
        if varbit is not None:
            vb = f"S[{slot_add(v.slot, offs[varbit[0]])}]"
            parts.append(f"{vb}[1].to_bytes({vb}[0] >> 3, 'big')")
            parts.append(_struct_pack(self, after, [slot_add(v.slot, offs[f]) for f, _ in after]))
        parts = [p for p in parts if p]
        if parts:
            em.line(f"if S[{v.slot}]: S[{H_OUT}].append({' + '.join(parts)})")
    elif isinstance(t, T.StackT):
        esz = t.elem.slots()
        for i in range(t.size):
            self.emit_code(agg(slot_add(v.slot, 1 + i * esz), t.elem), ctx, loc)
    elif isinstance(t, T.StructT):
        offs = t.offsets()
        for fname, ft in t.fields:
            if not ft.aggregate:
                self.err(f"emit of struct {t.name}: field '{fname}' is not a header", loc)
            self.emit_code(agg(slot_add(v.slot, offs[fname]), ft), ctx, loc)
    else:
        self.err(f"emit needs a header, header stack or struct, not {t}", loc)


# ------------------------------------------------------------------------------ out arguments
def out_target(self, node, ctx, what):
    """Evaluate an out/inout argument: something assignable (a scalar lvalue or a slice)."""
    v = self.expr(node, ctx)
    if v.kind not in ("lv", "slice_lv"):
        self.err(f"{what} must be a writable field or variable", node.loc)
    return v


def store(self, target, code, ctx, loc):
    """Assign the unsigned int `code` to scalar lvalue `target` (wrapping to its type)."""
    t = target.type
    if isinstance(t, T.BitT) and t.signed:
        code = self.wrap_code(code, t)
    elif isinstance(t, T.BoolT):
        code = f"({code} != 0)"
    self.assign(target, Val("rv", t, code), ctx, loc)


# ------------------------------------------------------------------------------ field lists
def flatten(self, v, loc):
    """Scalars of a data argument: [(code, width, valid_slot or None)], in order."""
    if v.kind == "list":
        res = []
        for item in v.items:
            res.extend(self.flatten(item, loc))
        return res
    if v.kind == "agg":
        t = v.type
        if isinstance(t, T.HeaderT):
            offs = t.offsets()
            out = []
            for fname, ft in t.fields:
                code = f"S[{slot_add(v.slot, offs[fname])}]"
                if isinstance(ft, T.VarbitT):
                    out.append((code, None, v.slot))
                    continue
                if ft.signed:
                    code = f"({code} & {ft.mask})"
                out.append((code, ft.width, v.slot))
            return out
        if isinstance(t, T.StructT):
            res = []
            for fname, ft in t.fields:
                slot = slot_add(v.slot, t.offsets()[fname])
                res.extend(self.flatten(agg(slot, ft) if ft.aggregate else lv(slot, ft), loc))
            return res
        if isinstance(t, T.StackT):
            res = []
            for i in range(t.size):
                res.extend(self.flatten(agg(slot_add(v.slot, 1 + i * t.elem.slots()), t.elem), loc))
            return res
    valid = v.valid if v.kind == "lv" else None     # BMv2 leaves out fields of invalid headers
    if isinstance(v.type, T.VarbitT) and v.kind == "lv":
        return [(v.code, None, valid)]             # (width, value) at run time
    v = self.scalar(v, loc)
    w = T.width_of(v.type)
    if w is None:
        self.err(f"a value of type {v.type} has no bit width here (cast it to bit<W>)", loc)
    return [(_uint(v), w, valid)]


def pack_code(self, fields, ctx):
    """Emit code packing `fields` as BMv2's BufBuilder does; returns Python code for the bytes.

    Fields of invalid headers are left out, as BMv2 leaves them out."""
    em = ctx.em
    if not any(vs is not None for _, _, vs in fields) and None not in (w for _, w, _ in fields):
        total = sum(w for _, w, _ in fields)
        if total == 0:
            return "b''"
        pad = -total % 8
        parts, shift = [], total + pad
        for code, w, _ in fields:
            shift -= w
            parts.append(f"({code}) << {shift}" if shift else f"({code})")
        return f"({' | '.join(parts)}).to_bytes({(total + pad) // 8}, 'big')"
    acc, nbits = ctx.temp(), ctx.temp()
    em.line(f"{acc} = 0")
    em.line(f"{nbits} = 0")
    # consecutive fields of one header are added together under one validity test
    groups = []
    for code, w, vs in fields:
        if groups and groups[-1][0] == vs and vs is not None:
            groups[-1][1].append((code, w))
        else:
            groups.append((vs, [(code, w)]))
    for vs, items in groups:
        steps, run = [], []
        for code, w in items + [(None, None)]:
            if w is not None:
                run.append((code, w))
                continue
            if run:                 # fixed-width fields: one shift-or
                width = sum(w for _, w in run)
                parts, shift = [], width
                for c, w in run:
                    shift -= w
                    parts.append(f"({c}) << {shift}" if shift else f"({c})")
                steps.append(f"{acc} = ({acc} << {width}) | {' | '.join(parts)}; {nbits} += {width}")
                run = []
            if code is not None:    # a varbit: (width, value) known at run time
                steps.append(f"{acc} = ({acc} << {code}[0]) | {code}[1]; {nbits} += {code}[0]")
        line = "; ".join(steps)
        em.line(f"if S[{vs}]: {line}" if vs is not None else line)
    return f"packbits({acc}, {nbits})"


def field_list_slots(self, v, loc):
    """Slots named by a deprecated clone3/resubmit/recirculate data argument."""
    if v.kind == "list":
        res = []
        for item in v.items:
            res.extend(self.field_list_slots(item, loc))
        return res
    if v.kind == "lv" and isinstance(v.slot, int):
        return [v.slot]
    if v.kind == "agg" and isinstance(v.slot, int):
        return self.scalar_slots(v.type, v.slot)
    self.err("the field list must name fields or variables (not computed values)", loc)


def anonymous_field_list(self, slots):
    key = -(len(self.out.field_lists) + 1)
    while key in self.out.field_lists:
        key -= 1
    self.out.field_lists[key] = list(slots)
    return key


# ------------------------------------------------------------------------------ externs
def call_extern_method(self, info, name, n, ctx):
    em = ctx.em
    kind = info.type_name
    x = info.pyname
    sm = self.out.sm
    if ctx.where == "parser":
        self.err(f"{kind}.{name} cannot be used in a parser by BMv2 (and this engine)", n.loc)
    if kind == "register" and name == "read":
        _need_args(self, n, 2, "register.read")
        target = self.out_target(n.args[0], ctx, "register.read's result")
        idx = _value(self, n.args[1], ctx)
        cur = self.scalar(target, n.loc)
        self.store(target, f"{x}.packet_read({_uint(idx)}, {_uint(cur)})", ctx, n.loc)
        return None
    if kind == "register" and name == "write":
        _need_args(self, n, 2, "register.write")
        idx = _value(self, n.args[0], ctx)
        val = _value(self, n.args[1], ctx, T.BitT(info.width))
        em.line(f"{x}.packet_write({_uint(idx)}, {_uint(val)})")
        return None
    if kind == "counter" and name == "count":
        _need_args(self, n, 1, "counter.count")
        idx = _value(self, n.args[0], ctx)
        em.line(f"{x}.count({_uint(idx)}, S[{sm['packet_length']}])")
        return None
    if kind == "meter" and name == "execute_meter":
        _need_args(self, n, 2, "meter.execute_meter")
        idx = _value(self, n.args[0], ctx)
        target = self.out_target(n.args[1], ctx, "execute_meter's result")
        tmp = ctx.temp()
        em.line(f"{tmp} = {x}.execute({_uint(idx)}, S[{H_NOW}], S[{sm['packet_length']}])")
        em.line(f"if {tmp} is not None:")
        em.indent()
        self.store(target, tmp, ctx, n.loc)
        em.dedent()
        return None
    if kind == "direct_counter" and name == "count":
        _need_args(self, n, 0, "direct_counter.count")
        return None          # BMv2 counts when the table hits
    if kind == "direct_meter" and name == "read":
        _need_args(self, n, 1, "direct_meter.read")
        target = self.out_target(n.args[0], ctx, "direct_meter.read's result")
        cur = self.scalar(target, n.loc)
        self.store(target, f"{x}.read({_uint(cur)})", ctx, n.loc)
        return None
    self.err(f"{kind} has no method '{name}' in this engine", n.loc)


def _enum_member(self, node, ctx, enum, what):
    v = self.expr(node, ctx)
    if not (isinstance(v.type, T.EnumT) and v.type.name == enum and v.info):
        self.err(f"{what} must be a {enum} member like {enum}.{'crc16' if enum == 'HashAlgorithm' else 'I2E'}",
                 node.loc)
    return v.info


def _hash_fn(self, algo, loc):
    from . import hashes
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
    em = ctx.em
    sm = self.out.sm
    role = ctx.block_role
    if fname == "static_assert":
        c = self.expr(n.args[0], ctx) if n.args else None
        if c is None or not c.is_const:
            self.err("static_assert needs a compile-time condition", n.loc)
        if not c.const:
            msg = self.expr(n.args[1], ctx).const if len(n.args) > 1 else "static_assert failed"
            self.err(str(msg), n.loc)
        return lit(True, T.BOOL)
    if fname == "verify":
        if ctx.where != "parser":
            self.err("verify can only be used in a parser", n.loc)
        _need_args(self, n, 2, "verify")
        c = self.cond_expr(n.args[0], ctx)
        e = self.expr(n.args[1], ctx)
        if not isinstance(e.type, T.ErrorT):
            self.err("verify's second argument must be an error (error.X)", n.args[1].loc)
        em.line(f"if not {c}: raise ParserError({e.code}, o)")
        return None
    if ctx.where == "parser" and fname not in ("log_msg", "assert", "assume"):
        self.err(f"{fname} cannot be called in a parser (BMv2 allows only extract, lookahead, "
                 f"advance, verify, log_msg and assignments there)", n.loc)
    if fname == "mark_to_drop":
        target = sm
        if len(n.args) == 1:
            target = _sm_arg(self, n.args[0], ctx, "mark_to_drop")
        elif n.args:
            self.err("mark_to_drop takes standard_metadata", n.loc)
        em.line(f"S[{target['egress_spec']}] = 511")
        em.line(f"S[{target['mcast_grp']}] = 0")
        return None
    if fname == "hash":
        _need_args(self, n, 5, "hash")
        target = self.out_target(n.args[0], ctx, "hash's result")
        algo = _enum_member(self, n.args[1], ctx, "HashAlgorithm", "hash's algorithm")
        fn = _hash_fn(self, algo, n.args[1].loc)
        base = _value(self, n.args[2], ctx)
        data = self.expr(n.args[3], ctx)
        mx = _value(self, n.args[4], ctx)
        packed = self.pack_code(self.flatten(data, n.args[3].loc), ctx)
        tw = T.width_of(target.type)
        if mx.is_const:
            m = int(mx.const) or 1
            code = f"({_uint(base)} + {fn}({packed}) % {m}) & {(1 << tw) - 1}"
        else:
            code = f"({_uint(base)} + {fn}({packed}) % ({_uint(mx)} or 1)) & {(1 << tw) - 1}"
        self.store(target, code, ctx, n.loc)
        return None
    if fname == "random":
        _need_args(self, n, 3, "random")
        target = self.out_target(n.args[0], ctx, "random's result")
        lo = _value(self, n.args[1], ctx, target.type)
        hi = _value(self, n.args[2], ctx, target.type)
        a, b = ctx.temp(), ctx.temp()
        em.line(f"{a} = {_uint(lo)}; {b} = {_uint(hi)}")
        em.line(f"if {a} <= {b}:")
        em.indent()
        self.store(target, f"RANDINT({a}, {b})", ctx, n.loc)
        em.dedent()
        return None
    if fname == "digest":
        _need_args(self, n, 2, "digest")
        if role not in ("ingress", None):
            self.err("digest can only be called in the ingress control (BMv2 learns at the end of ingress)",
                     n.loc)
        data = self.expr(n.args[1], ctx)
        declared = self.resolve_type(n.targs[0]) if n.targs else None
        info = self.digest_info(data, n, declared)
        fields = self.flatten(data, n.args[1].loc)
        vals = ", ".join(code for code, _, _ in fields)
        em.line(f"S[{H_DIGEST}] = ({info.name!r}, ({vals},))")
        return None
    if fname in ("clone", "clone3", "clone_preserving_field_list"):
        if role not in ("ingress", "egress", None):
            self.err(f"{fname} can only be called in ingress or egress", n.loc)
        want = {"clone": 2, "clone3": 3, "clone_preserving_field_list": 3}[fname]
        _need_args(self, n, want, fname)
        kind = _enum_member(self, n.args[0], ctx, "CloneType", f"{fname}'s type")
        if role is not None and (kind == "I2E") != (role == "ingress"):
            self.err(f"clone type {kind} cannot be used in the {role} control "
                     f"(I2E belongs in ingress, E2E in egress)", n.args[0].loc)
        session = _value(self, n.args[1], ctx, T.BitT(32))
        fl = "None"
        if fname == "clone3":
            fl = repr(self.anonymous_field_list(self.field_list_slots(self.expr(n.args[2], ctx), n.args[2].loc)))
        elif fname == "clone_preserving_field_list":
            fl = repr(self.const_int_val(n.args[2], ctx))
        em.line(f"S[{H_CLONE}] = {_uint(session)}")
        em.line(f"S[{H_CLONE_FL}] = {fl}")
        return None
    if fname in ("resubmit", "resubmit_preserving_field_list", "recirculate",
                 "recirculate_preserving_field_list"):
        resub = fname.startswith("resubmit")
        if role is not None and role != ("ingress" if resub else "egress"):
            self.err(f"{fname} can only be called in the {'ingress' if resub else 'egress'} control", n.loc)
        _need_args(self, n, 1, fname)
        if fname.endswith("field_list"):
            fl = self.const_int_val(n.args[0], ctx)
        else:
            fl = self.anonymous_field_list(self.field_list_slots(self.expr(n.args[0], ctx), n.args[0].loc))
        em.line(f"S[{H_RESUB if resub else H_RECIRC}] = {fl!r}")
        return None
    if fname == "truncate":
        _need_args(self, n, 1, "truncate")
        v = _value(self, n.args[0], ctx, T.BitT(32))
        tmp = ctx.temp()
        em.line(f"{tmp} = {_uint(v)}")
        em.line(f"if S[{H_TRUNC}] is None or {tmp} < S[{H_TRUNC}]: S[{H_TRUNC}] = {tmp}")
        return None
    if fname in CHECKSUM_FUNCS:
        if fname.startswith("verify") and role not in ("verify", None):
            self.err(f"{fname} belongs in the verifyChecksum control", n.loc)
        if fname.startswith("update") and role not in ("compute", None):
            self.err(f"{fname} belongs in the computeChecksum control", n.loc)
        _need_args(self, n, 4, fname)
        cond = self.cond_expr(n.args[0], ctx)
        data = self.expr(n.args[1], ctx)
        algo = _enum_member(self, n.args[3], ctx, "HashAlgorithm", f"{fname}'s algorithm")
        fn = _hash_fn(self, algo, n.args[3].loc)
        csum = self.expr(n.args[2], ctx)
        if fname.startswith("update"):
            csum = self.out_target(n.args[2], ctx, "the checksum field")
        csum_s = self.scalar(csum, n.args[2].loc)
        w = T.width_of(csum_s.type)
        if w is None:
            self.err("the checksum must be a bit<W> field", n.args[2].loc)
        em.line(f"if {cond}:")
        em.indent()
        packed = self.pack_code(self.flatten(data, n.args[1].loc), ctx)
        if fname.endswith("with_payload"):
            packed = f"{packed} + S[{H_PKT}][S[{H_POFF}]:]"
        value = f"{fn}({packed}) & {(1 << w) - 1}"
        if fname.startswith("verify"):
            em.line(f"if {value} != {_uint(csum_s)}: S[{sm['checksum_error']}] = 1")
        else:
            self.store(csum, value, ctx, n.loc)
        em.dedent()
        return None
    if fname == "log_msg":
        if not n.args or n.args[0].kind != "string":
            self.err("log_msg needs a string literal first", n.loc)
        fmt = n.args[0].value
        vals = []
        if len(n.args) > 1:
            data = self.expr(n.args[1], ctx)
            vals = [code for code, _, _ in self.flatten(data, n.args[1].loc)]
        em.line(f"if LOG is not None: LOG(logfmt({fmt!r}, ({', '.join(vals)}{',' if vals else ''})))")
        return None
    if fname in ("assert", "assume"):
        _need_args(self, n, 1, fname)
        c = self.cond_expr(n.args[0], ctx)
        where = f"{n.loc.file}:{n.loc.line}"
        em.line(f"if not {c}: raise P4RuntimeFault({f'{fname} failed at {where}'!r})")
        return None
    self.err(f"extern function '{fname}' is not supported by this engine", n.loc)


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
            fields.append((fname, T.width_of(ft)))
    elif data.kind == "list":
        name = f"digest_{self.digest_counter}"       # p4c counts anonymous digests from 0
        self.digest_counter += 1
        fields = [(f"field_{i}", w) for i, (_, w, _) in enumerate(self.flatten(data, n.loc))]
        if any(w is None for _, w in fields):
            self.err("a varbit field cannot be sent in a digest", n.loc)
        t = None
    else:
        self.err("digest data must be a struct (or a list of fields)", n.args[1].loc)
    old = self.out.digests.get(name)
    if old is not None and old.fields != fields:
        self.err(f"two digests are named '{name}' with different fields", n.loc)
    info = old or DigestInfo(name, t, fields)
    self.out.digests[name] = info
    return info


# ------------------------------------------------------------------------------ actions, functions
def _bind_args(self, params, n, ctx, what):
    """Copy-in code for (name, direction, type, storage Val) params; returns (by-name values, copy-outs)."""
    names = [p[0] for p in params]
    given = _positional(self, n, names)
    values, copy_out = {}, []
    for pname, direction, pt, store in params:
        node = given.get(pname)
        if node is None:
            self.err(f"{what}: argument '{pname}' is missing", n.loc)
        if direction == "packet":
            continue
        if node.kind == "dontcare":
            if direction != "out":
                self.err(f"{what}: '_' can only be passed for an out parameter", node.loc)
            continue
        if direction in ("out", "inout"):
            target = self.expr(node, ctx)
            if target.kind not in ("lv", "slice_lv", "agg"):
                self.err(f"{what}: argument for {direction} parameter '{pname}' must be writable", node.loc)
            if direction == "inout":
                self.assign(store, target, ctx, node.loc)
            copy_out.append((target, store, node.loc))
        elif store is None:
            v = _value(self, node, ctx, pt)
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
        self.out.called_actions.add(ai.name)
    params = [(name, d, t, ai.inout_slots.get(name)) for name, d, t in ai.params]
    values, copy_out = _bind_args(self, params, n, ctx, f"action {ai.name}")
    args = ", ".join(f"{k!r}: {v.code}" for k, v in values.items())
    _call_with_copy_out(self, f"{ai.fn}(S, {{{args}}})", copy_out, ctx)
    return None


def bound_action(self, ai, ref, ctx):
    """`actions = { a(hdr.x); }`: a wrapper the table runs, binding a's directional parameters."""
    from .codegen import Emitter
    from .compiler import Ctx
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
    fn = self.compile_function(decl, scope, prefix)
    values, copy_out = _bind_args(self, fn.params, n, ctx, f"function {decl.name}")
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


class FunctionInfo:
    def __init__(self, pyname, params, ret, ret_store=None):
        self.pyname, self.params, self.ret, self.ret_store = pyname, params, ret, ret_store


def compile_function(self, decl, scope, prefix):
    """A P4 function becomes one Python function over S; its parameters get slots (copy-in/out)."""
    cache = self.__dict__.setdefault("_functions", {})
    if id(decl) in cache:
        return cache[id(decl)]
    from .codegen import Emitter
    from .compiler import Ctx, Scope
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
    mark = em.mark()
    self.stmts(decl.body.stmts, fctx)
    em.ensure_body(mark)
    self.em.lines.extend(em.lines)
    return info


def call_control(self, inst, n, ctx):
    fn, params, name, kind = inst
    plist = [(p.name, "packet" if v is None else (p.direction or "in"), pt, v) for p, pt, v in params]
    _, copy_out = _bind_args(self, plist, n, ctx, f"{name}.apply")
    _call_with_copy_out(self, f"o = {fn}(S, P, o)" if kind == "parser" else f"{fn}(S)", copy_out, ctx)
    return None
