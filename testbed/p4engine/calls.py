"""Calls: dispatch, methods of headers, stacks and packets, out arguments and field lists --
typed and translated to Python (extern calls: extern_calls; actions, functions, controls:
invocations).

The functions take the Compiler as `self` (CallsMixin binds them as its methods); they emit
statements into ctx.em and return a Val for calls that have a value (None otherwise).
"""
from . import codegen
from . import p4types as T
from .call_args import arg_value, as_uint, need_args, positional_args
from .codegen import slot_add
from .compile_values import H_OUT, H_PLEN, agg, lit, lv, Val
from .program_info import anno_string, expr_text
from .syntax import Node


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
        _warn_if_deprecated(self, fv.name, n)
        if ctx.where != "parser" and not ctx.unreachable and not self.folded_away \
                and fv.name != "static_assert":       # (p4c evaluates it and removes the call)
            self.extern_function_calls.add((ctx.prefix, ctx.action.name if ctx.action else None))
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
        given = positional_args(self, n, names)
        if set(given) != set(names[:len(given)]):
            continue      # an omitted parameter in the middle: not this overload
        return Node("call", n.loc, func=n.func, targs=n.targs, args=[given[x] for x in names[:len(given)]])
    self.err(f"no declaration of '{fv.name}' has parameters named {', '.join(sorted(named))}", n.loc)


# ------------------------------------------------------------------------------ methods
def call_method(self, m, n, ctx):
    obj, name = m.obj, m.name
    if obj.kind == "agg":
        t = obj.type
        if isinstance(t, T.HeaderT):
            need_args(self, n, 0, f"{name}()")
            if name == "isValid":
                return Val("rv", T.BOOL, f"(S[{obj.slot}] == 1)")
            if name == "setValid":
                set_valid(self, obj, ctx)
                return None
            if name == "setInvalid":
                set_invalid(self, obj, ctx)
                return None
            if name == "minSizeInBits":
                return lit(t.bit_width, T.INTLIT)
            if name == "minSizeInBytes":
                return lit(t.bit_width // 8, T.INTLIT)
        if isinstance(t, T.UnionT) and name == "isValid":
            need_args(self, n, 0, "isValid()")
            slots = t.validity_slots(obj.slot)
            return Val("rv", T.BOOL, "(" + " or ".join(f"S[{s}] == 1" for s in slots) + ")" if slots else "False")
        if isinstance(t, T.StackT) and name in ("push_front", "pop_front"):
            need_args(self, n, 1, name)
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
        need_args(self, n, 0, "apply()")
        if ctx.where == "action":
            self.err("tables cannot be applied inside actions", n.loc)
        self.note_use("tables", sym.info.name, ctx)
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


def _header_bytes(header):
    """Code for the bytes a header takes on the wire (BMv2's get_nbytes_packet: with the
    current length of its varbit field)."""
    t = header.type
    parts = [str(t.bit_width // 8)]
    for name, ft in t.fields:
        if isinstance(ft, T.VarbitT):
            parts.append(f"S[{slot_add(header.slot, t.offsets()[name])}][0] // 8")
    return " + ".join(parts)


def set_valid(self, header, ctx):
    """header.setValid() as p4c-bm2-ss compiles it, BMv2's add_header primitive
    (targets/simple_switch/primitives.cpp): a header that was invalid gets every field zeroed
    (a varbit keeps its length) and its bytes added to the packet-length register; a valid one
    is left as it is."""
    t, v = header.type, header.slot
    zeros = []
    for name, ft in t.fields:
        if isinstance(ft, T.BoolT):
            zeros.append("False")
        elif isinstance(ft, T.VarbitT):
            zeros.append(f"(S[{slot_add(v, t.offsets()[name])}][0], 0)")
        else:
            zeros.append("0")
    em = ctx.em
    em.line(f"if not S[{v}]:")
    if zeros:
        em.line(f"    S[{slot_add(v, 1)}:{slot_add(v, 1 + len(zeros))}] = ({', '.join(zeros)},)")
    em.line(f"    S[{v}] = 1")
    em.line(f"    S[{H_PLEN}] += {_header_bytes(header)}")
    _invalidate_siblings(header, ctx)


def set_valid_within(self, target, ctx):
    """setValid() on every header inside aggregate `target`: what p4c's ExpandLookahead writes
    before the fields when `target = pkt.lookahead<T>()`."""
    t = target.type
    if isinstance(t, T.HeaderT):
        set_valid(self, target, ctx)
    elif isinstance(t, T.StackT):
        for i in range(t.size):
            set_valid_within(self, agg(slot_add(target.slot, 1 + i * t.elem.slots()), t.elem), ctx)
    elif isinstance(t, T.StructT):
        for name, ft in t.fields:
            if ft.aggregate:
                set_valid_within(self, agg(slot_add(target.slot, t.offsets()[name]), ft), ctx)


def set_invalid(self, header, ctx):
    """header.setInvalid(): BMv2's remove_header takes a valid header's bytes off the
    packet-length register."""
    em = ctx.em
    em.line(f"if S[{header.slot}]:")
    em.line(f"    S[{header.slot}] = 0")
    em.line(f"    S[{H_PLEN}] -= {_header_bytes(header)}")


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
            length = arg_value(self, n.args[1], ctx, T.BitT(32)) if len(n.args) == 2 else None
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
            width = _lookahead_width(t)
            if not width:
                self.err(f"lookahead<{t}> is not supported (use bit<W>, a header, or a struct of "
                         f"bit<W>, bool, header, header stack or struct fields)", n.loc)
            nbytes = (width + 7) // 8
            tmp = ctx.temp()
            em.line(f"if o + {nbytes} > len(P): raise ParserError({self.errors.index('PacketTooShort')}, o)")
            em.line(f"{tmp} = int.from_bytes(P[o:o + {nbytes}], 'big') >> {nbytes * 8 - width}")
            if isinstance(t, T.BitT):
                code = self.wrap_code(tmp, t) if t.signed else tmp
                return Val("rv", t, code)
            base = self.alloc(t, "lookahead")
            # its slots in layout order (p4c's ExpandLookahead splits nested types the same way)
            parts = _lookahead_parts(self, t, tmp, [width], width)
            em.line(f"S[{base}:{base + t.slots()}] = ({', '.join(parts)},)")
            looked = agg(base, t)
            looked.name = "lookahead"     # assign() makes its destination's headers valid first
            return looked
        if name == "advance":
            need_args(self, n, 1, "advance")
            v = arg_value(self, n.args[0], ctx, T.BitT(32))
            # BMv2's ParserOpAdvance: a bit count that is not whole bytes is ParserInvalidArgument
            invalid = f"raise ParserError({self.errors.index('ParserInvalidArgument')}, o)"
            if v.is_const and int(v.const) % 8:
                em.line(invalid)
                return None
            if not v.is_const:
                bits = ctx.temp()
                em.line(f"{bits} = {v.code}")
                em.line(f"if {bits} & 7: {invalid}")
                v = Val("rv", v.type, bits)
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
    need_args(self, n, 1, "emit")
    self.emit_code(self.expr(n.args[0], ctx), ctx, n.args[0].loc)
    return None


def _lookahead_width(t):
    """Bits lookahead<t>() reads (p4c's ExpandLookahead: bits, bools, headers without varbit,
    structs and header stacks of these), or None for a type it cannot take."""
    if isinstance(t, (T.BitT, T.BoolT)):
        return T.width_of(t)
    if isinstance(t, T.HeaderT):
        widths = [T.width_of(ft) if isinstance(ft, (T.BitT, T.BoolT)) else None for _, ft in t.fields]
        return None if None in widths else sum(widths)
    if isinstance(t, T.StackT):
        w = _lookahead_width(t.elem)
        return None if w is None else w * t.size
    if isinstance(t, T.StructT) and not isinstance(t, T.UnionT):
        widths = [_lookahead_width(ft) for _, ft in t.fields]
        return None if None in widths else sum(widths)
    return None


def _lookahead_parts(self, t, var, left, total):
    """Value codes for `t`'s slots, cut from the `total`-bit int in `var` whose unread low bits
    number left[0]: a header is valid, a header stack's next index 0, fields first to last."""
    if isinstance(t, (T.BitT, T.BoolT)):
        w = T.width_of(t)
        left[0] -= w
        shift = left[0]
        code = f"{var} >> {shift}" if shift else var
        if shift + w < total:
            code = f"({code}) & {(1 << w) - 1:#x}"
        if isinstance(t, T.BoolT):
            code = f"({code}) == 1"
        elif t.signed:
            code = self.wrap_code(code, t)
        return [f"({code})"]
    if isinstance(t, T.StackT):
        parts = ["0"]
        for _ in range(t.size):
            parts += _lookahead_parts(self, t.elem, var, left, total)
        return parts
    parts = ["1"] if isinstance(t, T.HeaderT) else []
    for _, ft in t.fields:
        parts += _lookahead_parts(self, ft, var, left, total)
    return parts


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
                code = f"({code}) & {ft.mask:#x}"
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
                f = f"({f} & {ft.mask:#x})"
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
                piece = f"({piece}) & {(1 << size * 8) - 1:#x}"
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
        em.line(f"{nbits} = {as_uint(length)}")
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
    if v.kind not in ("lv", "slice_lv", "vslice_lv"):
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
                    code = f"({code} & {ft.mask:#x})"
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
    if isinstance(v.type, T.EnumT):
        if v.type.base is not None:         # a serializable enum: its underlying bits
            v = Val("rv", v.type.base, v.code, const=v.const)
        elif not v.type.arch:     # a plain enum: its member index on 32 bits
            v = Val("rv", T.BitT(32), v.code, const=v.const)
    w = T.width_of(v.type)
    if w is None:
        self.err(f"a value of type {v.type} has no bit width here (cast it to bit<W>)", loc)
    return [(as_uint(v), w, valid)]


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


class CallsMixin:
    """Binds this module's calls as Compiler methods."""
    call = call
    call_method = call_method
    stack_shift = stack_shift
    set_valid = set_valid
    set_valid_within = set_valid_within
    set_invalid = set_invalid
    call_packet = call_packet
    extract_code = extract_code
    emit_code = emit_code
    out_target = out_target
    store = store
    flatten = flatten
    pack_code = pack_code
    field_list_slots = field_list_slots
    anonymous_field_list = anonymous_field_list


def _warn_if_deprecated(self, name, call):
    """p4c's [--Wwarn=deprecated] for a call of an extern function declared @deprecated (the
    declaration of that many parameters: v1model's mark_to_drop() but not mark_to_drop(sm))."""
    for decl in self.extern_funcs.get(name, ()):
        params = decl.proto.params
        if len(params) == len(call.args):
            note = anno_string(decl.annos, "deprecated")
            if note is not None:
                self.warn(f"{name}: Using deprecated feature {name}. {note}", call.loc)
            return
