"""Declarations: types, constants, headers and structs, the V1Switch package and its blocks,
local declarations, extern instances, sub-block instances and actions (a Compiler mixin)."""
import re

from . import p4types as T
from .codegen import Emitter
from .compile_values import agg, const_text, Ctx, lit, lv, Scope, Sym, Val, wrap
from .program_info import ActionInfo, anno, anno_string, ExternInfo
from .resource_limits import MAX_BIT_WIDTH, MAX_EXTERN_SIZE, MAX_STACK_SIZE
from .syntax import Node


V1MODEL_VERSION_CONST = "__v1model_version"
V1MODEL_VERSIONS = (20180101, 20200408)     # the first and the latest v1model p4c knows
_LATE_SM = "__late_sm_"
# standard_metadata fields the engine's simple_switch writes or reads (pipeline.py, externs)
BMV2_WRITTEN_SM_FIELDS = (("ingress_port", 9), ("egress_spec", 9), ("egress_port", 9), ("instance_type", 32),
                          ("packet_length", 32), ("mcast_grp", 16), ("egress_rid", 16), ("priority", 3),
                          ("parser_error", 32), ("checksum_error", 1), ("ingress_global_timestamp", 48),
                          ("egress_global_timestamp", 48), ("enq_timestamp", 32), ("enq_qdepth", 19),
                          ("deq_timedelta", 32), ("deq_qdepth", 19), ("qid", 5))


class _LateSmSlots(dict):
    """standard_metadata slots before the package places it: a placeholder per field."""

    def __missing__(self, field):
        return f"{_LATE_SM}{field}__"

    def __contains__(self, field):
        # placement gives each field simple_switch writes a slot (declared or not)
        return any(field == name for name, _ in BMV2_WRITTEN_SM_FIELDS)


def _parameters(node):
    """Every parameter declared in a declaration, however deeply (actions, methods, blocks)."""
    if isinstance(node, list):
        for item in node:
            yield from _parameters(item)
        return
    if not isinstance(node, Node):
        return
    if node.kind == "param":
        yield node
        return
    for value in node.__dict__.values():
        if isinstance(value, (list, Node)):
            yield from _parameters(value)


def _signature(params):
    """`inout H hdr, inout M meta` of a parameter list (for messages)."""
    def type_text(t):
        if t.kind == "t_spec":
            return f"{t.name}<{', '.join(type_text(a) for a in t.args)}>"
        return getattr(t, "name", t.kind[2:])
    return ", ".join(f"{p.direction + ' ' if p.direction else ''}{type_text(p.type)} {p.name}" for p in params)


class DeclarationsMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    # ------------------------------------------------------------------------- slots
    def alloc(self, typ, name, init=None):
        """Allocate storage for a value of `typ`; returns the base slot."""
        base = len(self.slots)
        n = typ.slots()
        self.slots.extend([0] * n)
        self.slot_names.extend([name] * n)
        self._init_slots(typ, base)
        return base

    def sm_slots(self):
        """standard_metadata's slots by field name. A top-level action is compiled where it is
        declared, before V1Switch places standard_metadata; what it uses implicitly there
        (mark_to_drop()'s egress_spec and mcast_grp) gets a placeholder that
        place_late_sm_slots turns into the slot."""
        return self.out.sm or _LateSmSlots()

    def place_late_sm_slots(self):
        lines = self.em.lines
        for i, line in enumerate(lines):
            if _LATE_SM in line:
                lines[i] = re.sub(rf"{_LATE_SM}(\w+)__", lambda m: str(self.out.sm[m.group(1)]), line)

    def _init_slots(self, typ, base):
        if isinstance(typ, T.BoolT):
            self.slots[base] = False
        elif isinstance(typ, T.StructT):
            for n, ft in typ.fields:
                self._init_slots(ft, base + typ.offsets()[n])
        elif isinstance(typ, T.HeaderT):
            if getattr(typ, "misaligned_at", None) is not None:
                self.err(f"header {typ.name} is {typ.bit_width} bits long; BMv2 needs a multiple of 8",
                         typ.misaligned_at)
            self.slots[base] = 0
            for n, ft in typ.fields:
                if isinstance(ft, T.BoolT):
                    self.slots[base + typ.offsets()[n]] = False
                elif isinstance(ft, T.VarbitT):
                    self.slots[base + typ.offsets()[n]] = (0, 0)
        elif isinstance(typ, T.StackT):
            esz = typ.elem.slots()
            for i in range(typ.size):
                self._init_slots(typ.elem, base + 1 + i * esz)

    # ------------------------------------------------------------------------- types
    def resolve_type(self, node, tvars=None):
        k = node.kind
        if k == "t_bool":
            return T.BOOL
        if k in ("t_bit", "t_int"):
            w = self.const_int(node.width, "width")
            if k == "t_int" and w == 0:     # bit<0> is a type (its one value is 0), int<0> is not
                self.err("int<0>: invalid type size (a signed integer needs at least 1 bit)", node.loc)
            if not 0 <= w <= MAX_BIT_WIDTH:
                self.err(f"bit width must be from 0 to {MAX_BIT_WIDTH}, got {w}", node.loc)
            return T.BitT(w, k == "t_int")
        if k == "t_infint":
            return T.INTLIT
        if k == "t_void":
            return T.VOID
        if k == "t_error":
            return T.ERROR
        if k == "t_match_kind":
            return T.MATCH_KIND
        if k == "t_string":
            return T.STRING
        if k == "t_varbit":
            w = self.const_int(node.width, "varbit width")
            if w <= 0 or w % 8 or w > MAX_BIT_WIDTH:
                self.err(f"varbit<{w}>: this engine (as BMv2) needs a positive multiple of 8 bits", node.loc)
            return T.VarbitT(w)
        if k == "t_tuple":
            return T.ListT([self.resolve_type(t, tvars) for t in node.types])
        if k == "t_named":
            if tvars and node.name in tvars:
                return tvars[node.name]
            t = self.types.get(node.name)
            if t is None:
                self.err(f"unknown type '{node.name}'", node.loc)
            if isinstance(t, T.GenericT):
                self.err(f"{t.decl.kind} {t.name} is generic: give its type arguments "
                         f"({t.name}<{', '.join(t.decl.tparams)}>)", node.loc)
            return t
        if k == "t_spec":
            base = self.types.get(node.name)
            if base is None:
                self.err(f"unknown type '{node.name}'", node.loc)
            if isinstance(base, T.GenericT):
                return self.specialize(base, [self.resolve_type(a, tvars) for a in node.args], node.loc)
            if isinstance(base, T.ExternT):
                return T.ExternT(base.name, base.decl, [self.resolve_type(a, tvars) for a in node.args])
            return base
        if k == "t_stack":
            elem = self.resolve_type(node.elem, tvars)
            size = self.const_int(node.size, "header stack size")
            if not 0 < size <= MAX_STACK_SIZE:
                self.err(f"header stack size must be from 1 to {MAX_STACK_SIZE}, got {size}", node.loc)
            if not isinstance(elem, (T.HeaderT, T.UnionT)):
                # p4c's front end takes arrays of any type (P4_16 1.2.5); its BMv2 back end only
                # converts arrays of headers and header unions (common/header.cpp)
                self.err(f"{elem}[{size}]: header stacks must hold headers or header unions, not {elem} "
                         f"(p4c-bm2-ss produces no BMv2 JSON for arrays of other types: it stops with a "
                         f"compiler bug, 'unexpected type in stack')", node.loc)
            return T.StackT(elem, size)
        if k == "t_dontcare":
            self.err("'_' as a type argument (a type left to inference) is not supported here by this "
                     "engine: write the type", node.loc)
        self.err(f"unsupported type syntax '{k}'", node.loc)

    def check_enum_value(self, decl, name, value, base, loc):
        """p4c refuses a serializable enum's value its underlying type cannot hold."""
        low = -(1 << (base.width - 1)) if base.signed else 0
        high = (1 << (base.width - 1 if base.signed else base.width)) - 1
        if low <= value <= high:
            return
        if value < 0 and not base.signed:
            why = f"the value {value} is negative, but the underlying type {base} is unsigned"
        else:
            bits = value.bit_length() + 1 if base.signed else value.bit_length()
            why = (f"the value {value} requires {bits} bits but the underlying "
                   f"{'signed' if base.signed else 'unsigned'} type {base} only contains {base.width} bits")
        self.err(f"{decl.name}.{name}: Serialized enum constant value {value} is out of bounds of the "
                 f"underlying type {base}; {why}", loc)

    def const_int(self, node, what, scope=None):
        v = self.const_eval(node, scope)
        if not isinstance(v, int) or isinstance(v, bool):
            self.err(f"{what} must be a compile-time integer", node.loc)
        return v

    def const_eval(self, node, scope=None, expected=None):
        ctx = Ctx(scope or self.globals, Emitter(), "const", "")
        v = self.expr(node, ctx, expected)
        if not v.is_const:
            self.err("expected a compile-time constant", node.loc)
        return v.const

    def p4runtime_translation(self, d):
        """`@p4runtime_translation("uri", bit<W>)` (or the older `("uri", W)`, or `string`) on a
        `type` declaration: (uri, W), W None for string; None without the annotation."""
        a = anno(d.annos, "p4runtime_translation")
        if a is None:
            return None
        args = a.args or []
        if len(args) != 2 or getattr(args[0], "kind", None) != "string":
            self.err(f"type {d.name}: @p4runtime_translation takes a URI string and the controller's "
                     f"type (bit<W> or string)", a.loc)
        uri, sdn = args[0].value, args[1]
        if sdn.kind == "t_string":
            return (uri, None)
        if sdn.kind == "int" and sdn.width is None and sdn.value > 0:
            return (uri, sdn.value)
        if sdn.kind in ("t_bit", "t_named"):
            st = self.resolve_type(sdn)
            if type(st) is T.BitT and not st.signed:
                return (uri, st.width)
        self.err(f"type {d.name}: @p4runtime_translation's controller type must be bit<W> or string", sdn.loc)

    def declare_global(self, d):
        k = d.kind
        self.check_int_parameters(d)
        if k == "typedef":
            t = self.resolve_type(d.type)
            if d.newtype and isinstance(t, T.BitT):
                t = T.NewBitT(t.width, t.signed, d.name)
                t.translation = self.p4runtime_translation(d)
                t.annos = d.annos           # P4Info's type_info.new_types shows them
            self.types[d.name] = t
        elif k in ("header", "struct", "header_union"):
            if d.tparams:       # generic: specialized where it is used with type arguments
                self.types[d.name] = T.GenericT(d)
                return
            t = self.fields_type(d, d.name)
            self.types[d.name] = t
            controller = anno_string(d.annos, "controller_header")
            if k == "header" and controller is not None:
                self.out.controller_headers.append((controller, t, d.annos))
        elif k == "enum":
            self.types[d.name] = t = T.EnumT(d.name, d.members)
            # p4c-bm2-ss gives the program's own plain enums 32 bits (v1model's stay enums)
            t.arch = d.loc.file.endswith(("v1model.p4", "core.p4"))
        elif k == "ser_enum":
            base = self.resolve_type(d.type)
            if not isinstance(base, T.BitT):
                self.err("serializable enums need a bit<W> or int<W> underlying type", d.loc)
            values = {}
            earlier = Scope(self.globals)   # a member's value may name the members before it
            for name, e in d.members:
                v = 0 if e.kind == "dots" else self.const_int(e, "enum value", earlier)    # `A = ...` is 0
                self.check_enum_value(d, name, v, base, e.loc)
                values[name] = v & base.mask
                earlier.declare(name, Sym("const", self.coerce_const(v, base, e.loc)))
            self.types[d.name] = T.EnumT(d.name, [n for n, _ in d.members], base, values)
        elif k == "error_decl":
            for m in d.members:
                if m not in self.errors:
                    self.errors.append(m)
        elif k == "match_kind_decl":
            base = len(self.match_kinds)
            self.match_kinds.update((m, base + i) for i, m in enumerate(d.members))
        elif k == "const":
            t = self.resolve_type(d.type)
            if isinstance(t, (T.StructT, T.ListT)):
                ctx = Ctx(self.globals, Emitter(), "const", "")
                self.globals.declare(d.name, Sym("const", self.const_aggregate(self.expr(d.value, ctx, t), t, d.value.loc)))
                return
            v = self.const_eval(d.value, expected=t)
            if d.name == V1MODEL_VERSION_CONST and d.loc.file.endswith("v1model.p4"):
                self.check_v1model_version(v, d.value.loc)
            self.globals.declare(d.name, Sym("const", self.coerce_const(v, t, d.value.loc)))
        elif k == "extern_obj":
            self.types[d.name] = T.ExternT(d.name, d)
            self.extern_decls[d.name] = d
        elif k == "extern_func":
            self.extern_funcs.setdefault(d.name, []).append(d)
            self.globals.declare(d.name, Sym("extern_func", info=d.name))
        elif k == "action":
            info = self.compile_action(d, self.globals, "")
            self.global_actions[d.name] = info
            self.globals.declare(d.name, Sym("action", info=info))
        elif k == "function":
            self.functions[d.name] = d
            self.globals.declare(d.name, Sym("function", info=(d, self.globals, "")))
            self.declared_functions.append((d, self.globals, ""))
        elif k in ("parser", "control"):
            self.blocks[d.name] = d
            self.types[d.name] = T.BlockT(k, d.name, d)
        elif k in ("parser_type", "control_type", "package_decl"):
            self.types[d.name] = T.BlockT(k, d.name, d)
        elif k == "instance":
            self.declare_global_instance(d)
        else:
            self.err(f"unsupported declaration '{k}'", d.loc)

    def specialize(self, generic, args, loc):
        """`S<bit<8>>` of a generic struct, header or header_union S (one type per argument list)."""
        d = generic.decl
        if len(args) != len(d.tparams):
            self.err(f"{d.kind} {d.name} takes {len(d.tparams)} type argument(s), got {len(args)}", loc)
        name = f"{d.name}<{', '.join(str(a) for a in args)}>"
        t = generic.instances.get(name)
        if t is None:
            t = generic.instances[name] = self.fields_type(d, name, dict(zip(d.tparams, args)))
        return t

    def fields_type(self, d, name, tvars=None):
        """The type a header, struct or header_union declaration `d` declares (named `name`;
        `tvars`: a generic one's type arguments by parameter name)."""
        k = d.kind
        fields, annos, views = [], {}, {}
        seen = set()
        for f in d.fields:
            if f.name in seen:
                self.err(f"duplicate field '{f.name}' in {k} {name}", f.loc)
            seen.add(f.name)
            ft = self.resolve_type(f.type, tvars)
            if k == "header_union" and not isinstance(ft, T.HeaderT):
                self.err(f"header_union member '{f.name}' must be a header, not {ft}", f.loc)
            if k == "header" and isinstance(ft, T.VarbitT):
                if any(isinstance(t, T.VarbitT) for _, t in fields):
                    self.err(f"header {name} has more than one varbit field", f.loc)
            elif k == "header" and isinstance(ft, T.StructT):
                # a struct of bit fields inside a header: stored as its leaves, in order, so
                # the struct's own layout (consecutive scalar slots) is a view on them
                leaves = self.header_struct_leaves(ft, f.name, f.loc)
                views[f.name] = (ft, leaves[0][0] if leaves else None)     # an empty struct: no leaves
                fields.extend(leaves)
                annos.update((n, f.annos) for n, _ in leaves)
                continue
            elif k == "header":
                if not isinstance(ft, (T.BitT, T.BoolT)) and not (isinstance(ft, T.EnumT) and ft.base):
                    self.err(f"header field '{f.name}' must be bit<W> or int<W>, not {ft}", f.loc)
            fields.append((f.name, ft))
            annos[f.name] = f.annos
        cls = {"header": T.HeaderT, "struct": T.StructT, "header_union": T.UnionT}[k]
        t = cls(name, fields, annos)
        t.annos = d.annos
        t.struct_views = views
        if views:       # the fields as declared (struct fields whole), for list assignments
            t.declared_fields = [(f.name, views[f.name][0] if f.name in views else dict(fields)[f.name])
                                 for f in d.fields]
        if k == "header" and t.bit_width % 8:
            # refused once an instance of it exists (below): p4c-bm2-ss checks only the header
            # types its JSON describes, so one only named (a controller header) is fine
            t.misaligned_at = d.loc
        return t

    def check_int_parameters(self, decl):
        """A parameter of type `int` (unsized) must be directionless (p4c's type checker): there
        is no storage of unbounded width to copy in or out. (An action taking one at all is
        refused where actions are compiled.)"""
        for p in _parameters(decl):
            if p.default is not None and p.direction in ("out", "inout"):
                self.err(f"{p.name}: out parameters cannot have default values", self.name_loc(p))
            if p.type.kind != "t_infint":
                continue
            if p.direction is not None:
                self.err(f"{p.name}: parameters with type int must be directionless", self.name_loc(p))

    def check_v1model_version(self, value, loc):
        """v1model.p4's __v1model_version (set with #define V1MODEL_VERSION) must name a version
        p4c knows; its value selects parts of the architecture."""
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.err(f"{const_text(value) if isinstance(value, int) else value}: expected v1model version "
                     "to be a non-negative number", loc)
        if not V1MODEL_VERSIONS[0] <= value <= V1MODEL_VERSIONS[1]:
            self.err(f"{const_text(value)}: unknown v1model version; initial supported version is {V1MODEL_VERSIONS[0]}, "
                     f"latest is {V1MODEL_VERSIONS[1]}", loc)

    def header_struct_leaves(self, st, name, loc):
        """[(dotted name, scalar type)] of a struct used as a header field (nested structs too)."""
        out = []
        for fname, ft in st.fields:
            if isinstance(ft, T.StructT):
                out.extend(self.header_struct_leaves(ft, f"{name}.{fname}", loc))
            elif isinstance(ft, (T.BitT, T.BoolT)) or (isinstance(ft, T.EnumT) and ft.base):
                out.append((f"{name}.{fname}", ft.base if isinstance(ft, T.EnumT) else ft))
            else:
                self.err(f"header field '{name}': struct {st.name} field '{fname}' must be bit<W>, "
                         f"int<W> or bool, not {ft}", loc)
        return out

    def const_aggregate(self, v, t, loc):
        """A struct or tuple constant: its list (or, for a struct, structure) expression,
        checked, converted to the element types and put in order (a read-only list whose `info`
        is the declared type)."""
        if v.kind != "list":
            self.err(f"a constant of type {t} needs a list{' or structure' if isinstance(t, T.StructT) else ''} "
                     f"expression", loc)
        items = v.items
        if isinstance(t, T.StructT):
            if v.name is not None:
                if sorted(v.name) != sorted(f for f, _ in t.fields):
                    self.err(f"the structure expression's fields ({', '.join(v.name)}) are not those of {t}", loc)
                by_name = dict(zip(v.name, items))
                items = [by_name[f] for f, _ in t.fields]
            if len(items) != len(t.fields):
                self.err(f"{t} has {len(t.fields)} fields but the list has {len(items)} values", loc)
            parts = [(f"field '{f}'", ft) for f, ft in t.fields]
        else:
            if v.name is not None:
                self.err(f"a constant of type {t} needs a list expression, not a structure expression", loc)
            if len(items) != len(t.types):
                self.err(f"{t} has {len(t.types)} elements but the initializer has {len(items)}", loc)
            parts = [(f"element {i}", et) for i, et in enumerate(t.types)]
        out = []
        for (part, ft), item in zip(parts, items):
            if isinstance(ft, (T.StructT, T.ListT)):
                out.append(self.const_aggregate(item, ft, loc))
            elif ft.aggregate:
                self.err(f"constant {t}: {part} of type {ft} is not supported in a constant", loc)
            elif not item.is_const:
                self.err("const initializer must be a compile-time constant", loc)
            else:
                out.append(self.convert(self.coerce_const(item.const, item.type, loc), ft, loc)
                           if isinstance(item.type, T.IntLitT) else self.convert(item, ft, loc))
        return Val("list", T.ListT([i.type for i in out]), items=out, info=t)

    def coerce_const(self, v, t, loc):
        if isinstance(t, T.BitT):
            if isinstance(v, bool):
                self.err(f"cannot use a bool as {t}", loc)
            return lit(wrap(v, t), t)
        if isinstance(t, T.BoolT):
            if not isinstance(v, bool):
                self.err("expected a bool constant", loc)
            return lit(v, t)
        return lit(v, t)

    def package_args_in_order(self, bt, d):
        """The instantiation's arguments in the package's parameter order (named ones placed)."""
        if not any(a.kind == "named_arg" for a in d.args):
            return d.args
        names = [p.name for p in bt.decl.params]
        placed = {}
        for a in d.args:
            if a.kind != "named_arg":
                self.err("mix of named and positional package arguments", a.loc)
            if a.name not in names or a.name in placed:
                self.err(f"{bt.name} has no parameter '{a.name}' (or it is given twice); "
                         f"parameters: {', '.join(names)}", a.loc)
            placed[a.name] = a.value
        missing = [n for n in names if n not in placed]
        if missing:
            self.err(f"{bt.name}: argument(s) {', '.join(missing)} missing", d.loc)
        return [placed[n] for n in names]

    def declare_global_instance(self, d):
        t = d.type
        tname = t.name if t.kind in ("t_named", "t_spec") else None
        bt = self.types.get(tname)
        if isinstance(bt, T.BlockT) and bt.kind == "package_decl":
            args = []
            for a in self.package_args_in_order(bt, d):
                if a.kind == "ctor":
                    args.append(a)
                elif a.kind == "name":      # (a parser or control instance cannot be global)
                    self.err(f"'{a.name}' is not a parser or control instantiation like MyIngress()", a.loc)
                elif a.kind == "call" and a.func.kind == "name" and self.globals.lookup(a.func.name) is None \
                        and a.func.name not in self.blocks:
                    # (a name no declaration gives, so the parser read a call, not a constructor)
                    self.err(f"unknown name '{a.func.name}'", a.loc)
                else:
                    self.err("package arguments must be parser/control instantiations like MyIngress()", a.loc)
            if bt.name != "V1Switch":
                self.err(f"only the V1Switch package (v1model) is supported, not {bt.name}", d.loc)
            self.globals.declare(d.name, Sym("package_inst", info=(d, args)))
            return
        if isinstance(bt, T.BlockT) and bt.kind in ("parser", "control"):
            # p4c: only packages and externs are instantiated at the top level
            self.err(f"{d.name}: a {bt.kind} cannot be instantiated at the top level (instantiate it in "
                     f"the {bt.kind} that applies it, or in main's arguments: V1Switch({tname}(), ...))",
                     self.name_loc(d))
        info = self.make_extern_instance(d, self.globals, "")
        self.globals.declare(d.name, Sym("extern", info=info))

    # ------------------------------------------------------------------------- pipeline
    def build_pipeline(self, main):
        d, args = main
        if len(args) != 6:
            self.err(f"V1Switch takes 6 blocks (parser, verifyChecksum, ingress, egress, computeChecksum, "
                     f"deparser); got {len(args)}", d.loc)
        roles = ["parser", "verify", "ingress", "egress", "compute", "deparser"]
        block_decls = []
        for role, a in zip(roles, args):
            tname = a.type.name
            bd = self.blocks.get(tname)
            if bd is None:
                self.err(f"'{tname}' is not a parser or control declared in this program", a.loc)
            want = "parser" if role == "parser" else "control"
            if bd.kind != want:
                self.err(f"V1Switch argument for the {role} must be a {want}", a.loc)
            block_decls.append((role, bd, a))
        self.check_package_signatures(d, block_decls)
        # The shared regions: headers (parser's out param), metadata and standard_metadata
        pdecl = block_decls[0][1]
        if len(pdecl.params) != 4:
            self.err("a v1model parser takes (packet_in, out H, inout M, inout standard_metadata_t)", pdecl.loc)
        htype = self.resolve_type(pdecl.params[1].type)
        mtype = self.resolve_type(pdecl.params[2].type)
        smtype = self.types.get("standard_metadata_t")
        if not isinstance(htype, T.StructT):
            self.err(f"the headers parameter must be a struct, not {htype}", pdecl.params[1].loc)
        if not isinstance(mtype, T.StructT):
            self.err(f"the metadata parameter must be a struct, not {mtype}", pdecl.params[2].loc)
        hbase = self.alloc(htype, "hdr")
        mbase = self.alloc(mtype, "meta")
        smbase = self.alloc(smtype, "standard_metadata")
        self.out.hdr_region = (hbase, htype.slots())
        self.out.meta_region = (mbase, mtype.slots())
        self.out.sm_region = (smbase, smtype.slots())
        self.out.sm = {n: smbase + off for n, off in smtype.offsets().items()}
        for field, width in BMV2_WRITTEN_SM_FIELDS:
            if field not in self.out.sm:
                # an older v1model.p4 shipped with the program lacks it (2018's has no priority):
                # simple_switch skips what the program does not declare; the engine writes it
                # to a slot nothing reads
                self.out.sm[field] = self.alloc(T.BitT(width), f"standard_metadata.{field} (undeclared)")
        self.place_late_sm_slots()
        self.htype, self.mtype = htype, mtype
        self.field_lists_from_meta(mtype, mbase)
        regions = {"H": agg(hbase, htype), "M": agg(mbase, mtype), "SM": agg(smbase, smtype)}
        for role, bd, a in block_decls:
            name = bd.name      # p4c qualifies with the instance's name; an @name on the type is ignored
            fn = self.compile_block_instance(bd, name, role, regions, a)
            self.out.entry_points[role] = fn

    def check_package_signatures(self, main, block_decls):
        """Each block must have the parameters V1Switch's parameter type declares: as many, in
        the same directions, of the same types once H and M are known (p4c unifies them; a
        block that differs is a type error on every target)."""
        package = self.types.get("V1Switch")
        if not isinstance(package, T.BlockT) or len(package.decl.params) != len(block_decls):
            return
        bound = {}                  # the package's type variables (H, M) -> types
        if main.type.kind == "t_spec" and len(main.type.args) == len(package.decl.tparams):
            for var, arg in zip(package.decl.tparams, main.type.args):
                if arg.kind != "t_dontcare":        # `_`: inferred from the blocks, as p4c does
                    bound[var] = self.resolve_type(arg)
        for slot, (role, bd, _) in zip(package.decl.params, block_decls):
            proto = self.types.get(slot.type.name)
            if not isinstance(proto, T.BlockT) or proto.kind not in ("parser_type", "control_type"):
                continue
            # the prototype's own type variables, named through the package's (Parser<H, M>)
            renamed = {}
            if slot.type.kind == "t_spec":
                for var, arg in zip(proto.decl.tparams, slot.type.args):
                    if arg.kind == "t_named":
                        renamed[var] = arg.name
            wanted, given = proto.decl.params, bd.params
            if len(wanted) != len(given):
                self.err(f"{bd.name}: the V1Switch {role} block takes {len(wanted)} parameter(s) "
                         f"({_signature(wanted)}), not {len(given)}", self.name_loc(bd))
            for want, have in zip(wanted, given):
                if (want.direction or "") != (have.direction or ""):
                    self.err(f"{bd.name}: parameter '{have.name}' must be {want.direction or 'directionless'} "
                             f"(not {have.direction or 'directionless'}) for the V1Switch {role} block "
                             f"({_signature(wanted)})", self.name_loc(have))
                have_type = self.resolve_type(have.type)
                var = renamed.get(want.type.name) if want.type.kind == "t_named" else None
                if var is not None:
                    expected = bound.setdefault(var, have_type)
                elif want.type.kind == "t_named" and want.type.name in proto.decl.tparams:
                    continue
                else:
                    expected = self.resolve_type(want.type)
                if have_type != expected:
                    self.err(f"{bd.name}: parameter '{have.name}' has type {have_type}; the V1Switch {role} "
                             f"block needs {expected} there ({_signature(wanted)})", self.name_loc(have))

    def field_lists_from_meta(self, mtype, base, prefix=""):
        for n, ft in mtype.fields:
            off = base + mtype.offsets()[n]
            a = anno(mtype.field_annos.get(n), "field_list")
            if a is not None:
                for x in a.args:
                    idx = self.const_int(x, "field_list index")
                    self.out.field_lists.setdefault(idx, [])
                    self.out.field_lists[idx].extend(self.scalar_slots(ft, off))
            elif isinstance(ft, T.StructT):
                self.field_lists_from_meta(ft, off)

    def scalar_slots(self, t, base):
        if isinstance(t, T.StructT):
            res = []
            for n, ft in t.fields:
                res.extend(self.scalar_slots(ft, base + t.offsets()[n]))
            return res
        if isinstance(t, (T.HeaderT, T.StackT)):
            return list(range(base, base + t.slots()))
        return [base]

    def bind_params(self, decl, scope, role, regions):
        """Bind a top-level block's parameters to the shared regions."""
        for p in decl.params:
            pt = self.resolve_type(p.type)
            if isinstance(pt, T.ExternT) and pt.name in ("packet_in", "packet_out"):
                scope.declare(p.name, Sym("packet", info=pt.name))
            elif pt == self.types.get("standard_metadata_t"):
                scope.declare(p.name, Sym("var", regions["SM"]))
            elif pt == self.htype:
                scope.declare(p.name, Sym("var", regions["H"]))
            elif pt == self.mtype:
                scope.declare(p.name, Sym("var", regions["M"]))
            else:
                self.err(f"parameter '{p.name}' of type {pt} does not match the V1Switch signature "
                         f"(headers {self.htype}, metadata {self.mtype})", p.loc)

    def compile_block_instance(self, decl, inst_name, role, regions, ctor):
        scope = Scope(self.globals)
        self.bind_params(decl, scope, role, regions)
        self.bind_ctor_args(decl, ctor.args, Ctx(self.globals, Emitter(), "control", ""), scope, ctor.loc)
        if decl.kind == "parser":
            return self.compile_parser(decl, inst_name, scope, role)
        return self.compile_control(decl, inst_name, scope, role)

    # ------------------------------------------------------------------------- locals
    def declare_local(self, d, ctx, prefix):
        k = d.kind
        if k == "const":
            t = self.resolve_type(d.type)
            v = self.expr(d.value, ctx, t)
            if isinstance(t, (T.StructT, T.ListT)):
                ctx.scope.declare(d.name, Sym("const", self.const_aggregate(v, t, d.value.loc)))
                return
            if not v.is_const:
                self.err("const initializer must be a compile-time constant", d.value.loc)
            ctx.scope.declare(d.name, Sym("const", self.coerce_const(v.const, t, d.value.loc)))
        elif k == "var":
            self.local_var(d, ctx)
        elif k == "instance":
            t = d.type
            tname = t.name if t.kind in ("t_named", "t_spec") else None
            bt = self.types.get(tname)
            if isinstance(bt, T.BlockT) and bt.kind in ("control", "parser"):
                self.declare_sub_block(d, bt.decl, ctx, prefix)
            else:
                info = self.make_extern_instance(d, ctx.scope, prefix)
                ctx.scope.declare(d.name, Sym("extern", info=info))
        elif k == "action":
            info = self.compile_action(d, ctx.scope, prefix, ctx.block_role)
            ctx.scope.declare(d.name, Sym("action", info=info))
        elif k == "table":
            info = self.compile_table(d, ctx, prefix)
            ctx.scope.declare(d.name, Sym("table", info=info))
        elif k == "function":
            ctx.scope.declare(d.name, Sym("function", info=(d, ctx.scope, prefix)))
            self.declared_functions.append((d, ctx.scope, prefix))
        else:
            self.err(f"unsupported local declaration '{k}'", d.loc)

    def local_var(self, d, ctx):
        t = self.resolve_type(d.type)
        if isinstance(t, (T.ExternT, T.BlockT, T.VoidT)):
            self.err(f"cannot declare a variable of type {t}", d.loc)
        base = self.alloc(t, d.name)
        v = agg(base, t) if t.aggregate else lv(base, t)
        if d.init is not None:
            self.assign(v, self.expr(d.init, ctx, t), ctx, d.init.loc)
        elif isinstance(t, T.HeaderT):
            ctx.em.line(f"S[{base}] = 0")
        elif isinstance(t, T.StackT):
            ctx.em.line(f"S[{base}] = 0")
        ctx.scope.declare(d.name, Sym("var", v))
        return v

    def make_extern_instance(self, d, scope, prefix):
        t = d.type
        tname = t.name if t.kind in ("t_named", "t_spec") else None
        et = self.types.get(tname)
        if not isinstance(et, T.ExternT):
            self.err(f"'{tname}' is not an extern type that can be instantiated", d.loc)
        name = self.qualified(prefix, d.name, d.annos)
        targs = [self.resolve_type(a) for a in t.args] if t.kind == "t_spec" else []
        ctx = Ctx(scope, Emitter(), "const", prefix)
        args = [self.expr(a, ctx) for a in d.args]
        info = self.build_extern(tname, name, targs, args, d.annos, d.loc)
        info.owner = prefix         # P4Info leaves it out with its block if nothing applies that
        return info

    def build_extern(self, tname, name, targs, args, annos, loc):
        from . import externs, tables
        info = ExternInfo(name, tname, args, annos, loc)
        info.targs = list(targs)        # as declared (an extern parameter's type must agree)

        def const_arg(i, what):
            if i >= len(args) or not args[i].is_const:
                self.err(f"{tname} {name}: {what} must be a compile-time constant", loc)
            value = args[i].const
            if what == "size" and not (isinstance(value, int) and 0 <= value <= MAX_EXTERN_SIZE):
                self.err(f"{tname} {name}: size must be from 0 to {MAX_EXTERN_SIZE}, got "
                         f"{const_text(value) if isinstance(value, int) else value}", loc)
            return value

        if tname == "register":
            if targs and isinstance(targs[0], T.EnumT) and targs[0].base is not None:
                info.elem_enum = targs[0]         # a serializable enum: stored as its bits
                targs = [targs[0].base] + list(targs[1:])
            if not targs or not isinstance(targs[0], T.BitT):
                shown = f", not {targs[0]}" if targs else ""
                self.err(f"register {name}: element type must be bit<W> or int<W>{shown} (p4c-bm2-ss "
                         f"refuses registers of any other type: BMv2 cells are bit strings)", loc)
            info.width = targs[0].width
            if not info.width:
                self.err(f"register {name}: its cells are {targs[0]}, which holds nothing (p4c-bm2-ss: "
                         f"unknown width)", loc)
            info.size = const_arg(0, "size")
            if info.size == 0 and self.limits is not None:
                self.limits.direct_register(name, loc)
            if len(targs) > 1 and isinstance(targs[1], T.BitT):
                info.index_width = targs[1].width
            info.obj = externs.Register(name, info.size, info.width, signed=targs[0].signed)
        elif tname in ("counter", "meter"):
            info.size = const_arg(0, "size")
            info.kind_arg = args[1].info if len(args) > 1 else None
            extern_class = externs.Counter if tname == "counter" else externs.Meter
            info.obj = extern_class(name, info.size, info.kind_arg)
            if targs and isinstance(targs[0], T.BitT):
                info.index_width = targs[0].width
        elif tname == "direct_counter":
            info.kind_arg = args[0].info if args else None
            info.obj = externs.DirectCounter(name, info.kind_arg)
        elif tname == "direct_meter":
            info.kind_arg = args[0].info if args else None
            info.obj = externs.DirectMeter(name, info.kind_arg)
            info.width = targs[0].width if targs and isinstance(targs[0], T.BitT) else 32
        elif tname == "action_profile":
            info.size = const_arg(0, "size")
            info.obj = tables.ActionProfile(name, size=info.size)
        elif tname == "action_selector":
            info.kind_arg = args[0].info if args else None
            info.size = const_arg(1, "size")
            info.width = const_arg(2, "output width") if len(args) > 2 else 32
            info.obj = tables.ActionProfile(name, size=info.size, algorithm=info.kind_arg)
        elif tname in ("Checksum16",):
            self.err(f"{tname} is deprecated and not supported; use verify_checksum/update_checksum", loc)
        else:
            self.err(f"extern '{tname}' cannot be instantiated by this engine (outside the subset)", loc)
        info.pyname = self.namer.fresh("X_", name)
        self.ns[info.pyname] = info.obj
        if name in self.out.externs:
            self.err(f"two instances are both named '{name}'", loc, late=True)
        self.out.externs[name] = info
        return info

    def qualified(self, prefix, local, annos):
        n = anno_string(annos, "name")
        if n is not None:
            if n.startswith("."):
                return n[1:]
            local = n
        return f"{prefix}.{local}" if prefix else local

    def declare_sub_block(self, d, bdecl, ctx, prefix):
        """`Sub(args) s;` inside a control or parser: declares s (see instantiate_block)."""
        name = self.qualified(prefix, d.name, d.annos)
        info = self.instantiate_block(bdecl, name, d.args, ctx, d.loc)
        ctx.scope.declare(d.name, Sym("control_inst", info=info))

    def extern_arg(self, p, pt, node, ctx):
        """The extern instance (its Sym) an argument names for extern-typed parameter `p`."""
        sym = ctx.scope.lookup(node.name) if node.kind == "name" else None
        if sym is None or sym.kind != "extern":
            self.err(f"argument for '{p.name}' must name a {pt.name} instance", node.loc)
        info = sym.info
        if info.type_name != pt.name:
            self.err(f"argument for '{p.name}' is a {info.type_name}, not a {pt.name}", node.loc)
        if pt.targs and info.targs and pt.targs[0] != info.targs[0]:
            self.err(f"argument for '{p.name}': {info.name} is a {info.type_name}<{info.targs[0]}>, "
                     f"not a {pt.name}<{pt.targs[0]}>", node.loc)
        return sym

    def bind_ctor_args(self, bdecl, args, ctx, scope, loc):
        """Constructor parameters: compile-time constants, or instances of a control/parser type."""
        ctor = bdecl.ctor_params or []
        if len(args) != len(ctor):
            self.err(f"{bdecl.name} takes {len(ctor)} constructor argument(s), got {len(args)}", loc)
        for p, a in zip(ctor, args):
            pt = self.resolve_type(p.type)
            if isinstance(pt, T.ExternT) and pt.name not in ("packet_in", "packet_out"):
                scope.declare(p.name, self.extern_arg(p, pt, a, ctx))
                continue
            if isinstance(pt, T.BlockT):
                sym = ctx.scope.lookup(a.name) if a.kind == "name" else None
                if sym is None or sym.kind != "control_inst":
                    self.err(f"constructor argument '{p.name}' must name a {pt.kind} instance", a.loc)
                scope.declare(p.name, sym)
                continue
            v = self.expr(a, ctx, pt)
            if not v.is_const:
                self.err(f"constructor argument '{p.name}' must be a compile-time constant", a.loc)
            scope.declare(p.name, Sym("const", self.coerce_const(v.const, pt, a.loc), info="constructor parameter"))

    def instantiate_block(self, bdecl, name, args, ctx, loc):
        """Compile one instance of a control or parser type, its parameters in their own storage
        (the caller copies in and out); returns the instance info call_control applies."""
        scope = Scope(self.globals)
        self.sub_blocks.add(name)
        self.bind_ctor_args(bdecl, args, ctx, scope, loc)
        params, extern_params = [], []
        for p in bdecl.params:
            pt = self.resolve_type(p.type)
            if isinstance(pt, T.ExternT) and pt.name in ("packet_in", "packet_out"):
                scope.declare(p.name, Sym("packet", info=pt.name))
                params.append((p, pt, None))
                continue
            if isinstance(pt, T.ExternT):       # an extern instance the caller passes at apply
                extern_params.append((p, pt))
                params.append((p, pt, None))
                continue
            base = self.alloc(pt, f"{name}.{p.name}")
            v = agg(base, pt) if pt.aggregate else lv(base, pt)
            scope.declare(p.name, Sym("var", v))
            params.append((p, pt, v))
        if bdecl.kind == "parser":
            if ctx.where != "parser":
                self.err(f"a parser ({bdecl.name}) can only be instantiated in a parser", loc, late=True)
        elif ctx.where != "control":
            self.err(f"a control ({bdecl.name}) can only be instantiated in a control", loc, late=True)
        block = SubBlock(bdecl, name, scope, ctx.block_role, extern_params)
        fn = block if extern_params else block.compile(self)
        return (fn, params, name, bdecl.kind)

    # ------------------------------------------------------------------------- actions
    def compile_action(self, d, scope, prefix, role=None):
        name = self.qualified(prefix, d.name, d.annos) if prefix or anno_string(d.annos, "name") else d.name
        fn = self.namer.fresh("a_", name)
        ascope = Scope(scope)
        params = []
        em = Emitter()
        em.line(f"def {fn}(S, A):")
        em.indent()
        info = ActionInfo(name, d, params, fn, d.annos)
        info.scope = scope          # where it is declared: its parameters' default values are read there
        info.owner = prefix         # the control instance that declares it ("" at the top level)
        for i, p in enumerate(d.params):
            pt = self.resolve_type(p.type)
            params.append((p.name, p.direction, pt))
            if p.direction is None:
                if self.limits is not None:
                    self.limits.action_param(p, pt)
                if not (isinstance(pt, (T.BitT, T.BoolT)) or (isinstance(pt, T.EnumT) and pt.base)):
                    self.err(f"action parameter '{p.name}' must be bit<W>, int<W> or bool (not {pt})", p.loc)
                local = f"p{i}"
                control_name = anno_string(p.annos, "name") or p.name
                info.control_names[p.name] = control_name
                em.line(f"{local} = A[{control_name!r}]")
                ascope.declare(p.name, Sym("var", Val("rv", pt, local)))
            else:
                base = self.alloc(pt, f"{name}.{p.name}")
                v = agg(base, pt) if pt.aggregate else lv(base, pt)
                info.inout_slots[p.name] = v
                ascope.declare(p.name, Sym("var", v))
        ctx = Ctx(ascope, em, "action", prefix, action=info, block_role=role)
        mark = em.mark()
        self.stmts(d.body.stmts, ctx)
        em.ensure_body(mark)
        em.dedent()
        self.em.lines.extend(em.lines)
        other = self.out.actions.get(name)
        if other is not None and other.decl is not d:
            # p4c checks control-plane names after removing unused declarations: decided at the end
            clash = self.action_name_clashes.setdefault(name, [other])
            clash[:] = [a for a in clash if a.decl is not d] + [info]
        self.out.actions[name] = info
        return info


class SubBlock:
    """A control or parser instance with extern-typed parameters: compiled at its first apply,
    with the instances that apply passes (p4c inlines each apply; a block of tables can be
    applied once, so one set of instances is all it can ever see)."""

    def __init__(self, decl, name, scope, role, extern_params):
        self.decl, self.name, self.scope, self.role = decl, name, scope, role
        self.extern_params = extern_params
        self.bound = None           # ({param: extern name}, compiled function)

    def compile(self, compiler):
        if self.decl.kind == "parser":
            return compiler.compile_parser(self.decl, self.name, self.scope, self.role, sub=True)
        return compiler.compile_control(self.decl, self.name, self.scope, self.role)

    def compile_for(self, compiler, given, ctx, loc):
        """The compiled block for an apply whose arguments are `given` ({param name: node})."""
        names = {}
        for p, pt in self.extern_params:
            node = given.get(p.name)
            if node is None:
                compiler.err(f"{self.name}.apply: argument '{p.name}' is missing", loc)
            names[p.name] = compiler.extern_arg(p, pt, node, ctx)
        chosen = {k: sym.info.name for k, sym in names.items()}
        if self.bound is None:
            for pname, sym in names.items():
                self.scope.declare(pname, sym)
            self.bound = (chosen, self.compile(compiler))
        elif self.bound[0] != chosen:
            compiler.err(f"{self.name} is applied again with other extern instances "
                         f"({self.bound[0]} before); declare a second instance", loc, late=True)
        return self.bound[1]
