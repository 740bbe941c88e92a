"""AST -> checked, compiled program.

One pass does name resolution, type checking and code generation: every expression is typed as
it is translated into Python source over the packet state list `S` (see p4types). The result is
a Python module's source (parsers, controls, actions, tables as functions) plus the runtime
objects it refers to (tables, externs) and the metadata the pipeline, P4Info and STF need.
"""
from collections import OrderedDict

from . import p4types as T
from .codegen import Emitter, Namer, slot_add
from .errors import Loc, P4Error
from .resource_limits import MAX_BIT_WIDTH, MAX_CONST_SHIFT, MAX_EXTERN_SIZE, MAX_STACK_SIZE
from .syntax import Node

# Hidden per-packet slots at the start of S (see pipeline.py)
H_PKT, H_POFF, H_NOW, H_CLONE, H_CLONE_FL, H_RESUB, H_RECIRC, H_TRUNC, H_DIGEST, H_OUT = range(10)
NUM_HIDDEN = 10

CORE_ERRORS = ["NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds", "HeaderTooShort",
               "ParserTimeout", "ParserInvalidArgument"]

SUPPORTED_MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional", "selector")


class Val:
    """A typed expression result.

    kind: 'rv' scalar value (code), 'lv' scalar storage (slot), 'agg' aggregate storage (slot =
    base), 'list' list expression (items), 'ref' a non-value (info: symbol), 'method' a bound
    method (obj, name), 'apply' a table apply result (code evaluates to (hit, action_name)).
    const holds the Python value of compile-time constants.
    """
    __slots__ = ("kind", "code", "type", "slot", "const", "items", "info", "obj", "name", "loc", "valid",
                 "siblings")

    def __init__(self, kind, type=None, code=None, slot=None, const=None, items=None, info=None,
                 obj=None, name=None, loc=None):
        self.kind, self.type, self.code, self.slot, self.const = kind, type, code, slot, const
        self.items, self.info, self.obj, self.name, self.loc = items, info, obj, name, loc
        self.valid = None      # for a header field: its header's validity slot
        self.siblings = None   # for a header_union member: the other members' validity slots

    @property
    def is_const(self):
        return self.const is not None


def lit(value, typ):
    if isinstance(value, bool):
        return Val("rv", typ, repr(value), const=value)
    return Val("rv", typ, str(value), const=value)


def lv(slot, typ):
    return Val("lv", typ, f"S[{slot}]", slot=slot)


def agg(slot, typ):
    return Val("agg", typ, None, slot=slot)


class Sym:
    """A named thing in a scope: kind in var/const/action/table/extern/control/function/packet/type."""

    def __init__(self, kind, val=None, info=None):
        self.kind, self.val, self.info = kind, val, info


class Scope:
    def __init__(self, parent=None):
        self.parent = parent
        self.names = {}

    def lookup(self, name):
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def declare(self, name, sym):
        self.names[name] = sym


# --------------------------------------------------------------------------------- program info
class ActionInfo:
    def __init__(self, name, decl, params, fn, annos):
        self.name, self.decl, self.params, self.fn, self.annos = name, decl, params, fn, annos
        # params: list of (name, direction, type); P4Info params are the directionless ones
        self.inout_slots = {}

    @property
    def runtime_params(self):
        return [(n, T.width_of(t) or 0) for n, d, t in self.params if d is None]


class TableInfo:
    def __init__(self, name, decl):
        self.name, self.decl = name, decl
        self.keys = []            # (name, match_kind, width, Val)
        self.selector_keys = []   # (name, width, Val)
        self.actions = []         # (ActionInfo, annos)
        self.size = 1024
        self.default_action = None     # (ActionInfo, args dict)
        self.const_default = False
        self.const_entries = None      # list of (keys, ActionCall, priority)
        self.implementation = None     # ExternInfo
        self.direct_counter = None
        self.direct_meter = None
        self.annos = decl.annos
        self.obj = None
        self.fn = None
        self.idle_timeout = False
        self.action_fns = {}      # action name -> wrapper binding the actions list's arguments


class ExternInfo:
    def __init__(self, name, type_name, args, annos, loc):
        self.name, self.type_name, self.args, self.annos, self.loc = name, type_name, args, annos, loc
        self.obj = None
        self.pyname = None
        self.width = None        # register element width / direct_meter result width
        self.index_width = 32
        self.size = 0
        self.kind_arg = None     # counter/meter type, selector algorithm


class DigestInfo:
    def __init__(self, name, type_, fields):
        self.name, self.type, self.fields = name, type_, fields   # fields: [(name, width)]


def anno(annos, name):
    for a in annos or []:
        if a.name == name:
            return a
    return None


def anno_string(annos, name):
    a = anno(annos, name)
    if a is None or not a.args:
        return None
    x = a.args[0]
    if isinstance(x, Node) and x.kind == "string":
        return x.value
    if isinstance(x, Node) and x.kind == "int":
        return x.value
    return None


def expr_text(node, member_name=None):
    """Render an expression the way p4c names keys in P4Info (hdr.ipv4.dstAddr, ...).

    member_name(node) may give a member's text in place of `base.field` (a struct field's @name)."""
    def text(n):
        return expr_text(n, member_name)

    k = node.kind
    if k == "name":
        return node.name
    if k == "member":
        renamed = member_name(node) if member_name else None
        return renamed if renamed is not None else f"{text(node.expr)}.{node.name}"
    if k == "index":
        return f"{text(node.expr)}[{text(node.index)}]"
    if k == "slice":
        return f"{text(node.expr)}[{text(node.hi)}:{text(node.lo)}]"
    if k == "int":      # as p4c's Constant::toString: [width w|s] base prefix, digits
        base = getattr(node, "base", 10)
        digits = {16: "x", 8: "o", 2: "b"}
        value = abs(node.value)
        number = format(value, digits[base]) if base in digits else str(value)
        prefix = f"0{digits[base]}" if base in digits else ""
        width = f"{node.width}{'s' if node.signed else 'w'}" if node.width else ""
        return f"{'-' if node.value < 0 else ''}{width}{prefix}{number}"
    if k == "call" and node.func.kind == "member" and node.func.name == "isValid":
        return f"{text(node.func.expr)}.$valid$"
    if k == "call":
        return f"{text(node.func)}()"
    if k == "binop":
        return f"{text(node.left)} {node.op} {text(node.right)}"
    if k == "cast":
        return text(node.expr)
    if k == "type_member":
        return f"{node.type_name}.{node.name}"
    return k


class Ctx:
    """Where code is being generated: scope, emitter, and what statements are allowed."""

    def __init__(self, scope, em, where, prefix, action=None, parser=None, block_role=None):
        self.scope, self.em, self.where, self.prefix = scope, em, where, prefix
        self.action = action          # ActionInfo when compiling an action body
        self.parser = parser          # dict with packet var names when in a parser
        self.block_role = block_role  # 'parser','verify','ingress','egress','compute','deparser'
        self.tmp = 0
        self.returns = None           # return type for functions
        self.ret_store = None         # where a function returning a header/struct/tuple puts it
        self.in_loop = False          # break/continue allowed

    def child(self):
        c = Ctx(Scope(self.scope), self.em, self.where, self.prefix, self.action, self.parser, self.block_role)
        c.tmp_owner = self
        c.returns, c.ret_store, c.in_loop = self.returns, self.ret_store, self.in_loop
        return c

    def temp(self):
        owner = self
        while hasattr(owner, "tmp_owner"):
            owner = owner.tmp_owner
        owner.tmp += 1
        return f"_t{owner.tmp}"


class Compiled:
    """What the compiler produces (read by pipeline.py, p4info.py and the tools). Stable fields:

    tables      {P4Info name: TableInfo}: .name .keys [(name, match_kind, width, Val)]
                .selector_keys .actions [(ActionInfo, annotations)] .default_action
                (ActionInfo, {param: int}) | None .const_default .const_entries .size
                .implementation/.direct_counter/.direct_meter (ExternInfo | None) .annos .decl
    actions     {name: ActionInfo}: .name .params [(name, direction, type)] .runtime_params
                [(name, width)] .annos .decl
    externs     {name: ExternInfo}: .name .type_name .size .width .kind_arg .annos .loc .obj
    digests     {struct type name: DigestInfo}: .name .type .fields [(name, width)]
    controller_headers  [(annotation string, HeaderT, annotations)]
    called_actions / applied_tables  sets of names (P4Info leaves out the unused, like p4c)
    errors      error names by value; field_lists {index: [slot]}
    source, namespace, template, sm, *_region, entry_points: the generated code and its layout
    """

    def __init__(self):
        self.source = ""
        self.namespace = {}
        self.template = []
        self.sm = {}             # standard_metadata field -> slot
        self.hdr_region = (0, 0)
        self.meta_region = (0, 0)
        self.sm_region = (0, 0)
        self.tables = OrderedDict()      # name -> TableInfo
        self.actions = OrderedDict()     # name -> ActionInfo
        self.externs = OrderedDict()     # name -> ExternInfo
        self.digests = OrderedDict()     # name -> DigestInfo
        self.controller_headers = []     # (name, HeaderT, annos)
        self.errors = []
        self.field_lists = {}            # index -> list of slots (@field_list, clone3/resubmit data)
        self.entry_points = {}           # V1Switch role -> generated function name
        self.called_actions = set()      # actions called directly from a control body (not an action)
        self.applied_tables = set()      # tables whose apply() appears somewhere


class Compiler:
    def __init__(self, decls, source_map, filename="<program>", limits=None):
        self.filename = filename
        self.limits = limits     # a target's extra limits (bmv2_limits), or None: the engine's own
        self.decls = decls
        self.smap = source_map
        self.types = {}
        self.globals = Scope()
        self.errors = list(CORE_ERRORS)
        self.match_kinds = set()
        self.slots = [None] * NUM_HIDDEN   # initial value per slot
        self.slot_names = ["<hidden>"] * NUM_HIDDEN
        self.em = Emitter()
        self.namer = Namer()
        self.ns = {}
        self.direct_invocations = {}     # instance name -> how many `Type.apply()` made it
        self.out = Compiled()
        self.extern_decls = {}
        self.extern_funcs = {}
        self.blocks = {}        # parser/control declarations by name
        self.packages = {}
        self.functions = {}
        self.global_actions = {}
        self.control_names_used = set()
        self.digest_counter = 0
        self.sub_parsers = 0             # sub-parsers compiled so far (they share a step budget)

    # ------------------------------------------------------------------------- diagnostics
    def err(self, msg, loc):
        raise P4Error(msg, loc, self.smap)

    # ------------------------------------------------------------------------- slots
    def alloc(self, typ, name, init=None):
        """Allocate storage for a value of `typ`; returns the base slot."""
        base = len(self.slots)
        n = typ.slots()
        self.slots.extend([0] * n)
        self.slot_names.extend([name] * n)
        self._init_slots(typ, base)
        return base

    def _init_slots(self, typ, base):
        if isinstance(typ, T.BoolT):
            self.slots[base] = False
        elif isinstance(typ, T.StructT):
            for n, ft in typ.fields:
                self._init_slots(ft, base + typ.offsets()[n])
        elif isinstance(typ, T.HeaderT):
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
            if not 0 < w <= MAX_BIT_WIDTH:
                self.err(f"bit width must be from 1 to {MAX_BIT_WIDTH}, got {w}", node.loc)
            return T.BitT(w, k == "t_int")
        if k == "t_infint":
            return T.INTLIT
        if k == "t_void":
            return T.VOID
        if k == "t_error":
            return T.ERROR
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
            return t
        if k == "t_spec":
            base = self.types.get(node.name)
            if base is None:
                self.err(f"unknown type '{node.name}'", node.loc)
            if isinstance(base, T.ExternT):
                return T.ExternT(base.name, base.decl, [self.resolve_type(a, tvars) for a in node.args])
            return base
        if k == "t_stack":
            elem = self.resolve_type(node.elem, tvars)
            size = self.const_int(node.size, "header stack size")
            if not 0 < size <= MAX_STACK_SIZE:
                self.err(f"header stack size must be from 1 to {MAX_STACK_SIZE}, got {size}", node.loc)
            if not isinstance(elem, (T.HeaderT, T.UnionT)):
                self.err(f"header stacks must hold headers or header unions, not {elem}", node.loc)
            return T.StackT(elem, size)
        self.err(f"unsupported type syntax '{k}'", node.loc)

    def const_int(self, node, what):
        v = self.const_eval(node)
        if not isinstance(v, int) or isinstance(v, bool):
            self.err(f"{what} must be a compile-time integer", node.loc)
        return v

    def const_eval(self, node, scope=None):
        ctx = Ctx(scope or self.globals, Emitter(), "const", "")
        v = self.expr(node, ctx)
        if not v.is_const:
            self.err("expected a compile-time constant", node.loc)
        return v.const

    # ------------------------------------------------------------------------- declarations
    def compile(self):
        for d in self.decls:
            self.declare_global(d)
        main = self.globals.lookup("main")
        if main is None or main.kind != "package_inst":
            loc = self.decls[-1].loc if self.decls else Loc(self.filename, 1, 1)
            self.err("the program declares no package instance 'main' (expected V1Switch(...) main;)", loc)
        self.build_pipeline(main.info)
        if self.limits is not None:
            self.limits.raise_if_breached(self.smap)
        out = self.out
        out.source = self.em.text()
        out.namespace = self.ns
        out.template = self.slots
        out.errors = self.errors
        out.slot_names = self.slot_names
        return out

    def declare_global(self, d):
        k = d.kind
        if k == "typedef":
            self.types[d.name] = self.resolve_type(d.type)
        elif k in ("header", "struct", "header_union"):
            fields, annos, views = [], {}, {}
            seen = set()
            for f in d.fields:
                if f.name in seen:
                    self.err(f"duplicate field '{f.name}' in {k} {d.name}", f.loc)
                seen.add(f.name)
                ft = self.resolve_type(f.type)
                if k == "header_union" and not isinstance(ft, T.HeaderT):
                    self.err(f"header_union member '{f.name}' must be a header, not {ft}", f.loc)
                if k == "header" and isinstance(ft, T.VarbitT):
                    if any(isinstance(t, T.VarbitT) for _, t in fields):
                        self.err(f"header {d.name} has more than one varbit field", f.loc)
                elif k == "header" and isinstance(ft, T.StructT):
                    # a struct of bit fields inside a header: stored as its leaves, in order, so
                    # the struct's own layout (consecutive scalar slots) is a view on them
                    leaves = self.header_struct_leaves(ft, f.name, f.loc)
                    views[f.name] = (ft, leaves[0][0])
                    fields.extend(leaves)
                    annos.update((n, f.annos) for n, _ in leaves)
                    continue
                elif k == "header":
                    if not isinstance(ft, (T.BitT, T.BoolT)) and not (isinstance(ft, T.EnumT) and ft.base):
                        self.err(f"header field '{f.name}' must be bit<W> or int<W>, not {ft}", f.loc)
                    if isinstance(ft, T.EnumT):
                        ft = ft.base
                fields.append((f.name, ft))
                annos[f.name] = f.annos
            cls = {"header": T.HeaderT, "struct": T.StructT, "header_union": T.UnionT}[k]
            t = cls(d.name, fields, annos)
            t.annos = d.annos
            t.struct_views = views
            if k == "header" and t.bit_width % 8:
                self.err(f"header {d.name} is {t.bit_width} bits long; BMv2 needs a multiple of 8", d.loc)
            self.types[d.name] = t
            controller = anno_string(d.annos, "controller_header")
            if k == "header" and controller is not None:
                self.out.controller_headers.append((controller, t, d.annos))
        elif k == "enum":
            self.types[d.name] = T.EnumT(d.name, d.members)
        elif k == "ser_enum":
            base = self.resolve_type(d.type)
            if not isinstance(base, T.BitT):
                self.err("serializable enums need a bit<W> or int<W> underlying type", d.loc)
            values = {}
            for name, e in d.members:
                values[name] = self.const_int(e, "enum value") & base.mask
            self.types[d.name] = T.EnumT(d.name, [n for n, _ in d.members], base, values)
        elif k == "error_decl":
            for m in d.members:
                if m not in self.errors:
                    self.errors.append(m)
        elif k == "match_kind_decl":
            self.match_kinds.update(d.members)
        elif k == "const":
            t = self.resolve_type(d.type)
            v = self.const_eval(d.value)
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
        elif k in ("parser", "control"):
            self.blocks[d.name] = d
            self.types[d.name] = T.BlockT(k, d.name, d)
        elif k in ("parser_type", "control_type", "package_decl"):
            self.types[d.name] = T.BlockT(k, d.name, d)
        elif k == "instance":
            self.declare_global_instance(d)
        else:
            self.err(f"unsupported declaration '{k}'", d.loc)

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
        if not out:
            self.err(f"header field '{name}': struct {st.name} has no fields", loc)
        return out

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
                elif a.kind == "name":
                    s = self.globals.lookup(a.name)
                    if s is None or s.kind != "block_inst":
                        self.err(f"'{a.name}' is not a parser or control instance", a.loc)
                    args.append(s.info)
                else:
                    self.err("package arguments must be parser/control instantiations like MyIngress()", a.loc)
            if bt.name != "V1Switch":
                self.err(f"only the V1Switch package (v1model) is supported, not {bt.name}", d.loc)
            self.globals.declare(d.name, Sym("package_inst", info=(d, args)))
            return
        if isinstance(bt, T.BlockT) and bt.kind in ("parser", "control"):
            self.globals.declare(d.name, Sym("block_inst",
                                             info=Node("ctor", d.loc, type=d.type, args=d.args, inst_name=d.name)))
            return
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
        self.htype, self.mtype = htype, mtype
        self.field_lists_from_meta(mtype, mbase)
        regions = {"H": agg(hbase, htype), "M": agg(mbase, mtype), "SM": agg(smbase, smtype)}
        for role, bd, a in block_decls:
            name = bd.name      # p4c qualifies with the instance's name; an @name on the type is ignored
            fn = self.compile_block_instance(bd, name, role, regions, a)
            self.out.entry_points[role] = fn

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
            v = self.expr(d.value, ctx)
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
        return self.build_extern(tname, name, targs, args, d.annos, d.loc)

    def build_extern(self, tname, name, targs, args, annos, loc):
        from . import externs, tables
        info = ExternInfo(name, tname, args, annos, loc)

        def const_arg(i, what):
            if i >= len(args) or not args[i].is_const:
                self.err(f"{tname} {name}: {what} must be a compile-time constant", loc)
            value = args[i].const
            if what == "size" and not (isinstance(value, int) and 0 <= value <= MAX_EXTERN_SIZE):
                self.err(f"{tname} {name}: size must be from 0 to {MAX_EXTERN_SIZE}, got {value}", loc)
            return value

        if tname == "register":
            if not targs or not isinstance(targs[0], T.BitT):
                self.err(f"register {name}: element type must be bit<W> or int<W>", loc)
            info.width = targs[0].width
            info.size = const_arg(0, "size")
            if len(targs) > 1 and isinstance(targs[1], T.BitT):
                info.index_width = targs[1].width
            info.obj = externs.Register(name, info.size, info.width, signed=targs[0].signed)
        elif tname == "counter":
            info.size = const_arg(0, "size")
            info.kind_arg = args[1].info if len(args) > 1 else None
            info.obj = externs.Counter(name, info.size, info.kind_arg)
            if targs and isinstance(targs[0], T.BitT):
                info.index_width = targs[0].width
        elif tname == "meter":
            info.size = const_arg(0, "size")
            info.kind_arg = args[1].info if len(args) > 1 else None
            info.obj = externs.Meter(name, info.size, info.kind_arg)
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
            self.err(f"two instances are both named '{name}'", loc)
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

    def bind_ctor_args(self, bdecl, args, ctx, scope, loc):
        """Constructor parameters: compile-time constants, or instances of a control/parser type."""
        ctor = bdecl.ctor_params or []
        if len(args) != len(ctor):
            self.err(f"{bdecl.name} takes {len(ctor)} constructor argument(s), got {len(args)}", loc)
        for p, a in zip(ctor, args):
            pt = self.resolve_type(p.type)
            if isinstance(pt, T.BlockT):
                sym = ctx.scope.lookup(a.name) if a.kind == "name" else None
                if sym is None or sym.kind != "control_inst":
                    self.err(f"constructor argument '{p.name}' must name a {pt.kind} instance", a.loc)
                scope.declare(p.name, sym)
                continue
            v = self.expr(a, ctx, pt)
            if not v.is_const:
                self.err(f"constructor argument '{p.name}' must be a compile-time constant", a.loc)
            scope.declare(p.name, Sym("const", self.coerce_const(v.const, pt, a.loc)))

    def instantiate_block(self, bdecl, name, args, ctx, loc):
        """Compile one instance of a control or parser type, its parameters in their own storage
        (the caller copies in and out); returns the instance info call_control applies."""
        scope = Scope(self.globals)
        self.bind_ctor_args(bdecl, args, ctx, scope, loc)
        params = []
        for p in bdecl.params:
            pt = self.resolve_type(p.type)
            if isinstance(pt, T.ExternT) and pt.name in ("packet_in", "packet_out"):
                scope.declare(p.name, Sym("packet", info=pt.name))
                params.append((p, pt, None))
                continue
            base = self.alloc(pt, f"{name}.{p.name}")
            v = agg(base, pt) if pt.aggregate else lv(base, pt)
            scope.declare(p.name, Sym("var", v))
            params.append((p, pt, v))
        if bdecl.kind == "parser":
            if ctx.where != "parser":
                self.err(f"a parser ({bdecl.name}) can only be instantiated in a parser", loc)
            fn = self.compile_parser(bdecl, name, scope, ctx.block_role, sub=True)
        else:
            if ctx.where != "control":
                self.err(f"a control ({bdecl.name}) can only be instantiated in a control", loc)
            fn = self.compile_control(bdecl, name, scope, ctx.block_role)
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
        for i, p in enumerate(d.params):
            pt = self.resolve_type(p.type)
            params.append((p.name, p.direction, pt))
            if p.direction is None:
                if self.limits is not None:
                    self.limits.action_param(p, pt)
                if not (isinstance(pt, (T.BitT, T.BoolT)) or (isinstance(pt, T.EnumT) and pt.base)):
                    self.err(f"action parameter '{p.name}' must be bit<W>, int<W> or bool (not {pt})", p.loc)
                local = f"p{i}"
                em.line(f"{local} = A[{p.name!r}]")
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
        if name in self.out.actions and self.out.actions[name].decl is not d:
            self.err(f"two actions are both named '{name}'", d.loc)
        self.out.actions[name] = info
        return info

    # ------------------------------------------------------------------------- tables
    def compile_table(self, d, ctx, prefix):
        from . import tables as tb
        name = self.qualified(prefix, d.name, d.annos)
        info = TableInfo(name, d)
        if self.limits is not None:
            self.limits.table(d)
        seen_props = set()
        action_names = []
        for p in d.props:
            pname = {"tp_key": "key", "tp_actions": "actions", "tp_entries": "entries"}.get(p.kind, getattr(p, "name", None))
            if pname in seen_props:
                self.err(f"table {d.name}: property '{pname}' given twice", p.loc)
            seen_props.add(pname)
            if p.kind == "tp_key":
                for ke in p.keys:
                    mk = ke.match_kind
                    if mk not in self.match_kinds:
                        self.err(f"unknown match kind '{mk}'", ke.loc)
                    if mk not in SUPPORTED_MATCH_KINDS:
                        self.err(f"match kind '{mk}' is not supported", ke.loc)
                    v = self.expr(ke.expr, ctx)
                    v = self.scalar(v, ke.expr.loc)
                    if isinstance(v.type, T.BoolT):
                        v = Val("rv", T.BitT(1), f"(1 if {v.code} else 0)")
                    w = T.width_of(v.type)
                    if w is None:
                        self.err(f"table key must be a bit<W> value, not {v.type}", ke.expr.loc)
                    kname = (anno_string(ke.annos, "name")
                             or expr_text(ke.expr, lambda m: self.field_key_name(m, ctx)))
                    if mk == "selector":
                        valid = self.valid_slot_of(ke.expr, ctx)
                        info.selector_keys.append((kname, w, v, valid))
                    else:
                        info.keys.append((kname, mk, w, v))
            elif p.kind == "tp_actions":
                for ar in p.actions:
                    s = ctx.scope.lookup(ar.name)
                    if s is None or s.kind != "action":
                        self.err(f"table {d.name}: '{ar.name}' is not an action", ar.loc)
                    if ar.args:
                        info.action_fns[s.info.name] = self.bound_action(s.info, ar, ctx)
                    info.actions.append((s.info, ar.annos))
                    action_names.append(s.info.name)
            elif p.kind == "tp_entries":
                info._entries_node = p
            elif p.kind == "tp_value":
                if p.name == "default_action":
                    info.default_action = self.action_call_const(p.value, ctx, f"table {d.name} default_action")
                    info.const_default = p.const
                    info._default_loc = p.value.loc
                elif p.name == "size":
                    info.size = self.const_int(p.value, "table size")
                    if not 0 <= info.size <= MAX_EXTERN_SIZE:   # (also P4Info's int64)
                        self.err(f"table {d.name}: size must be from 0 to {MAX_EXTERN_SIZE}, got {info.size}",
                                 p.value.loc)
                elif p.name == "implementation":
                    info.implementation = self.table_extern(p.value, ctx, prefix, name, ("action_profile", "action_selector"),
                                                          p.annos)
                elif p.name == "counters":
                    info.direct_counter = self.table_extern(p.value, ctx, prefix, name, ("direct_counter",),
                                                          p.annos)
                elif p.name == "meters":
                    info.direct_meter = self.table_extern(p.value, ctx, prefix, name, ("direct_meter",),
                                                          p.annos)
                elif p.name == "support_timeout":
                    info.idle_timeout = True
                elif p.name in ("max_group_size", "selector_size_semantics", "selector_max_group_size"):
                    pass
                else:
                    self.err(f"table {d.name}: unknown table property '{p.name}'", p.loc)
        if not info.actions:     # p4c gives such a table NoAction (as its default only)
            noaction = ctx.scope.lookup("NoAction")
            if noaction is None or noaction.kind != "action":
                self.err(f"table {d.name} has no actions", d.loc)
            info.actions.append((noaction.info, [Node("annotation", d.loc, name="defaultonly", args=[])]))
            action_names.append(noaction.info.name)
        if info.selector_keys and (info.implementation is None or info.implementation.type_name != "action_selector"):
            self.err(f"table {d.name}: selector keys need implementation = action_selector(...)", d.loc)
        if info.default_action is None:
            noaction = ctx.scope.lookup("NoAction")
            na = noaction.info if noaction and noaction.kind == "action" else None
            info.default_action = (na, {}) if na else None
        else:
            ai = info.default_action[0]
            if ai.name not in action_names:
                self.err(f"table {d.name}: default action {ai.name} is not in its actions list",
                         getattr(info, "_default_loc", d.loc))
        # runtime object
        keys = [tb.KeySpec(n, mk, w) for n, mk, w, _ in info.keys]
        sel_keys = [tb.KeySpec(n, "selector", w) for n, w, _, _ in info.selector_keys]
        default = tb.ActionCall(info.default_action[0].name, info.default_action[1]) if info.default_action and info.default_action[0] else None
        const_entries = None
        if hasattr(info, "_entries_node"):
            const_entries = self.const_entries(info, info._entries_node, ctx)
            info.const_entries = const_entries
        action_params = {ai.name: ai.runtime_params for ai, _ in info.actions}
        table_only = {ai.name for ai, an in info.actions if anno(an, "tableonly")}
        default_only = {ai.name for ai, an in info.actions if anno(an, "defaultonly")}
        try:
            obj = tb.Table(name, keys, action_names, size=info.size, default_action=default,
                           const_default_action=info.const_default, const_entries=const_entries,
                           implementation=info.implementation.obj if info.implementation else None,
                           selector_keys=sel_keys,
                           direct_counter=info.direct_counter.obj if info.direct_counter else None,
                           direct_meter=info.direct_meter.obj if info.direct_meter else None,
                           action_params=action_params, table_only=table_only, default_only=default_only)
        except (tb.TableError, ValueError) as e:
            self.err(f"table {d.name}: {getattr(e, 'message', e)}", d.loc)
        if info.implementation is not None and info.implementation.obj.actions is None:
            info.implementation.obj.actions = list(action_names)
            info.implementation.obj.action_params = action_params
        info.obj = obj
        if name in self.out.tables:
            self.err(f"two tables are both named '{name}'", d.loc)
        self.out.tables[name] = info
        self.emit_table_apply(info)
        return info

    def field_key_name(self, member, ctx):
        """A key's text for `base.field` when the struct field has @name (p4c's KeyNameGenerator
        uses the field's external name; a leading '.' drops everything to its left)."""
        try:
            base, _ = self.captured(ctx, lambda: self.expr(member.expr, ctx))
        except P4Error:
            return None
        if base.kind != "agg" or not isinstance(base.type, T.StructT):
            return None
        name = anno_string(base.type.field_annos.get(member.name), "name")
        if name is None:
            return None
        if name.startswith("."):
            return name[1:]
        return f"{expr_text(member.expr, lambda m: self.field_key_name(m, ctx))}.{name}"

    def valid_slot_of(self, expr, ctx):
        """The validity slot of the header a key field belongs to (None if not a header field)."""
        if expr.kind == "member":
            try:
                base = self.expr(expr.expr, ctx)
            except P4Error:
                return None
            if base.kind == "agg" and isinstance(base.type, T.HeaderT):
                return base.slot
        return None

    def table_extern(self, value, ctx, prefix, table_name, kinds, annos=None):
        if value.kind == "name":
            s = ctx.scope.lookup(value.name)
            if s is None or s.kind != "extern" or s.info.type_name not in kinds:
                self.err(f"'{value.name}' is not a {' or '.join(kinds)} instance", value.loc)
            return s.info
        if value.kind == "ctor":
            tname = value.type.name
            if tname not in kinds:
                self.err(f"expected a {' or '.join(kinds)} here, not {tname}", value.loc)
            args = [self.expr(a, ctx) for a in value.args]
            targs = [self.resolve_type(a) for a in value.type.args] if value.type.kind == "t_spec" else []
            # an anonymous implementation/counter/meter is named after its table, or exactly
            # as the property's @name says (p4c adds no control prefix there)
            name = anno_string(annos, "name")
            name = name.lstrip(".") if name is not None else table_name
            return self.build_extern(tname, name, targs, args, annos or [], value.loc)
        self.err(f"expected a {' or '.join(kinds)} instance", value.loc)

    def action_call_const(self, node, ctx, what):
        if node.kind == "name":
            node = Node("call", node.loc, func=node, args=[], targs=[])
        if node.kind != "call" or node.func.kind != "name":
            self.err(f"{what}: expected an action call like a(1, 2)", node.loc)
        s = ctx.scope.lookup(node.func.name)
        if s is None or s.kind != "action":
            self.err(f"{what}: '{node.func.name}' is not an action", node.func.loc)
        ai = s.info
        rparams = [(n, t) for n, d, t in ai.params if d is None]
        args_nodes = node.args
        if len(args_nodes) == len(ai.params) and len(rparams) < len(ai.params):
            # a(dir_args..., data...): the directional arguments are bound by the actions list
            args_nodes = args_nodes[len(ai.params) - len(rparams):]
            node = Node("call", node.loc, func=node.func, args=args_nodes, targs=[])
        if len(node.args) != len(rparams):
            self.err(f"{what}: action {ai.name} takes {len(rparams)} argument(s), got {len(node.args)}", node.loc)
        args = {}
        for (pn, pt), a in zip(rparams, node.args):
            if a.kind == "named_arg":
                pn, a = a.name, a.value
            v = self.expr(a, ctx, pt)
            if not v.is_const:
                self.err(f"{what}: argument for '{pn}' must be a constant", a.loc)
            cv = v.const
            if isinstance(pt, T.BitT):
                cv = wrap(cv, pt) & pt.mask
            args[pn] = int(cv)
        return (ai, args)

    def const_entries(self, info, node, ctx):
        from . import tables as tb
        entries = []
        nkeys = len(info.keys)
        for e in node.entries:
            ks = e.keyset.items if e.keyset.kind == "ks_tuple" else [e.keyset]
            if len(ks) != nkeys:
                self.err(f"entry has {len(ks)} key value(s); table {info.decl.name} has {nkeys} key(s)", e.loc)
            keys = []
            for (kn, mk, w, _), k in zip(info.keys, ks):
                keys.append(self.entry_key(k, mk, w, ctx))
            ai, args = self.action_call_const(e.action, ctx, "entry action")
            if ai.name not in [a.name for a, _ in info.actions]:
                self.err(f"entry action {ai.name} is not in table {info.decl.name}'s actions", e.action.loc)
            prio = None
            pa = anno(e.annos, "priority") or anno(e.annos2, "priority")
            if pa is not None and pa.args:
                prio = self.const_int(pa.args[0], "priority")
            entries.append((keys, tb.ActionCall(ai.name, args), prio))
        if any(prio is not None for _, _, prio in entries):
            # @priority is BMv2's (lower wins); an entry without one follows the previous + 1,
            # as p4c numbers them. The runtime tables take P4Runtime priorities (higher wins).
            bmv2, cur = [], 0
            for _, _, prio in entries:
                cur = prio if prio is not None else cur + 1
                bmv2.append(cur)
            top = max(bmv2) + 1
            entries = [(k, a, top - p) for (k, a, _), p in zip(entries, bmv2)]
        return entries

    def entry_key(self, k, mk, w, ctx):
        from . import tables as tb
        m = (1 << w) - 1
        if k.kind == "ks_default":
            if mk == "exact":
                self.err("an exact key cannot be a wildcard", k.loc)
            return None
        if k.kind == "ks_mask":
            v = self.const_int_val(k.value, ctx) & m
            mask = self.const_int_val(k.mask, ctx) & m
            if mk == "ternary":
                return tb.Ternary(v & mask, mask)
            if mk == "lpm":
                plen = bin(mask).count("1")
                if mask != (m ^ ((1 << (w - plen)) - 1)):
                    self.err("an lpm mask must be a prefix", k.loc)
                return tb.Lpm(v & mask, plen)
            self.err(f"a mask cannot be used for a {mk} key", k.loc)
        if k.kind == "ks_range":
            if mk != "range":
                self.err(f"a range cannot be used for a {mk} key", k.loc)
            return tb.Range(self.const_int_val(k.low, ctx) & m, self.const_int_val(k.high, ctx) & m)
        v = self.const_int_val(k, ctx) & m
        return {"exact": lambda: tb.Exact(v), "ternary": lambda: tb.Ternary(v, m), "lpm": lambda: tb.Lpm(v, w),
                "range": lambda: tb.Range(v, v), "optional": lambda: tb.Optional(v)}[mk]()

    def const_int_val(self, node, ctx):
        v = self.expr(node, ctx)
        if not v.is_const:
            self.err("expected a compile-time constant", node.loc)
        c = v.const
        if isinstance(c, bool):
            return int(c)
        return c

    def emit_table_apply(self, info):
        fn = self.namer.fresh("t_", info.name)
        tname = self.namer.fresh("T_", info.name)
        dname = self.namer.fresh("D_", info.name)
        self.ns[tname] = info.obj
        info.pyname = tname
        acts = {ai.name: info.action_fns.get(ai.name, ai.fn) for ai, _ in info.actions}
        self.ns[dname] = None   # filled after exec (functions exist then)
        info.fn = fn
        info.dispatch = (dname, acts)
        em = self.em
        sm = self.out.sm
        em.line(f"def {fn}(S):")
        em.indent()
        keys = ", ".join(v.code for _, _, _, v in info.keys)
        if info.keys:
            keys += ","
        extra = f", S[{sm['packet_length']}], S[{H_NOW}]" if (info.direct_counter or info.direct_meter) else ""
        if info.selector_keys:
            sel = ", ".join(v.code if vs is None else f"({v.code} if S[{vs}] else None)"
                            for _, _, v, vs in info.selector_keys) + ","
            extra = f", S[{sm['packet_length']}], S[{H_NOW}], ({sel})"
        em.line(f"a, hit, e = {tname}.lookup(({keys}){extra})")
        em.line("n = a.action")
        em.line(f"{dname}[n](S, a.args)")
        em.line("return hit, n")
        em.dedent()

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
            return f"{kc} & {cv(item.mask)} == {cv(item.value) & cv(item.mask)}"
        if item.kind == "ks_range":
            return f"{cv(item.low)} <= {kc} <= {cv(item.high)}"
        return f"{kc} == {cv(item)}"

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
            self.call(s.expr, ctx, statement=True)
        elif k == "if":
            c = self.cond_expr(s.cond, ctx)
            em.line(f"if {c}:")
            em.indent()
            mark = em.mark()
            self.stmt_block(s.then, ctx)
            em.ensure_body(mark)
            em.dedent()
            if s.els is not None:
                em.line("else:")
                em.indent()
                mark = em.mark()
                self.stmt_block(s.els, ctx)
                em.ensure_body(mark)
                em.dedent()
        elif k == "block":
            self.stmt_block(s, ctx)
        elif k == "for":
            self.for_loop(s, ctx)
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
            self.limits.loop(s)
        for item in s.init:
            self.stmt(item, c)
        first = c.temp()
        em.line(f"{first} = True")
        em.line("while True:")
        em.indent()
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

    def stmt_block(self, s, ctx):
        c = ctx.child()
        if s.kind == "block":
            self.stmts(s.stmts, c)
        else:
            self.stmt(s, c)

    def switch(self, s, ctx):
        em = ctx.em
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
                if case.label not in names:
                    self.err(f"'{case.label}' is not an action of table {table.decl.name}", case.loc)
                return f"{t} == {names[case.label].name!r}"
        else:
            v = self.scalar(v, s.expr.loc)
            em.line(f"{t} = {v.code}")

            def condition(case):
                lab = case.label
                node = lab if isinstance(lab, Node) else Node("name", case.loc, name=lab)
                cvv = self.expr(node, ctx, v.type)
                if not cvv.is_const:
                    self.err("switch labels must be constants", case.loc)
                return f"{t} == {cvv.code}"
        self.switch_cases(s.cases, condition, ctx)

    def switch_cases(self, cases, condition, ctx):
        """if/elif/else chain of a switch; labels without a body fall through to the next body."""
        em = ctx.em
        first = True
        pending = []
        for case in cases:
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
            self.stmt_block(case.body, ctx)
            em.ensure_body(mark)
            em.dedent()

    def cond_expr(self, node, ctx):
        v = self.scalar(self.expr(node, ctx), node.loc)
        if not isinstance(v.type, T.BoolT):
            self.err(f"condition must be bool, not {v.type}", node.loc)
        return v.code

    # ------------------------------------------------------------------------- assignment
    def assign(self, lhs, rhs, ctx, loc):
        em = ctx.em
        if lhs.kind == "slice_lv":
            base, hi, lo = lhs.info
            rv = self.convert(self.scalar(rhs, loc), T.BitT(hi - lo + 1), loc)
            m = ((1 << (hi - lo + 1)) - 1) << lo
            em.line(f"{base.code} = ({base.code} & {base.type.mask ^ m}) | (({rv.code} << {lo}) & {m})")
            return
        if lhs.kind == "agg":
            if rhs.kind == "agg":
                if lhs.type != rhs.type:
                    self.err(f"cannot assign {rhs.type} to {lhs.type}", loc)
                n = lhs.type.slots()
                em.line(f"S[{lhs.slot}:{slot_add(lhs.slot, n)}] = S[{rhs.slot}:{slot_add(rhs.slot, n)}]")
                return
            if rhs.kind == "list":
                self.assign_list(lhs, rhs, ctx, loc)
                return
            self.err(f"cannot assign {rhs.type} to {lhs.type}", loc)
        if lhs.kind != "lv":
            self.err("the left side of this assignment cannot be assigned to", loc)
        rv = self.convert(self.scalar(rhs, loc), lhs.type, loc)
        em.line(f"{lhs.code} = {rv.code}")

    def assign_list(self, lhs, rhs, ctx, loc):
        t = lhs.type
        if isinstance(t, T.HeaderT):
            fields = t.fields
            offs = t.offsets()
            ctx.em.line(f"S[{lhs.slot}] = 1")
        elif isinstance(t, T.StructT):
            fields = t.fields
            offs = t.offsets()
        elif isinstance(t, T.ListT):
            fields = [(i, et) for i, et in enumerate(t.types)]
            offs = t.offsets()
        else:
            self.err(f"cannot assign a list to {t}", loc)
        if len(fields) != len(rhs.items):
            self.err(f"{t} has {len(fields)} fields but the list has {len(rhs.items)} values", loc)
        for (fn, ft), item in zip(fields, rhs.items):
            slot = slot_add(lhs.slot, offs[fn])
            target = agg(slot, ft) if ft.aggregate else lv(slot, ft)
            self.assign(target, item, ctx, loc)

    def convert(self, v, t, loc):
        """Implicit conversion of scalar `v` to type `t` (only where P4_16 allows it)."""
        vt = v.type
        if vt == t:
            return v
        if isinstance(t, T.BitT) and isinstance(vt, T.IntLitT):
            if v.is_const:
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

    def wrap_code(self, code, t):
        """Python code for `code` wrapped to type t's width (parenthesized: used inside larger code)."""
        if t.signed:
            h = 1 << (t.width - 1)
            return f"(((({code}) + {h}) & {t.mask}) - {h})"
        return f"(({code}) & {t.mask})"

    def scalar(self, v, loc):
        if v.kind in ("rv", "lv"):
            return v
        if v.kind == "slice_lv":
            base, hi, lo = v.info
            return Val("rv", T.BitT(hi - lo + 1), f"(({base.code} >> {lo}) & {(1 << (hi - lo + 1)) - 1})")
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
            if not n.signed and n.value >> n.width:
                self.err(f"value {n.value} does not fit in {t}", n.loc)
            return lit(wrap(n.value, t), t)
        return lit(n.value, T.INTLIT)

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
            self.err("use .next only as an extract target", n.loc)
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

    def stack_elem_slot(self, base, idx_code, ctx, loc):
        t = base.type
        esz = t.elem.slots()
        return f"({base.slot} + 1 + ({idx_code}) * {esz})" if not isinstance(idx_code, int) else base.slot + 1 + idx_code * esz

    def x_index(self, n, ctx, expected):
        base = self.expr(n.expr, ctx)
        if base.kind == "agg" and isinstance(base.type, T.ListT):       # tuple element
            i = self.const_int_val(n.index, ctx)
            if not 0 <= i < len(base.type.types):
                self.err(f"index {i} is out of bounds for {base.type}", n.index.loc)
            et = base.type.types[i]
            slot = slot_add(base.slot, base.type.offsets()[i])
            return agg(slot, et) if et.aggregate else lv(slot, et)
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

    def x_slice(self, n, ctx, expected):
        base = self.expr(n.expr, ctx)
        hi = self.const_int_val(n.hi, ctx)
        lo = self.const_int_val(n.lo, ctx)
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
        return Val("rv", T.BitT(w), f"(({b.code} >> {lo}) & {(1 << w) - 1})")

    def x_list(self, n, ctx, expected):
        items = []
        for node in n.items:
            v, lines = self.captured(ctx, lambda: self.expr(node, ctx))
            if lines:       # a call with side effects: the items before it are read first
                items = [self.snapshot_all(i, ctx) for i in items]
                ctx.em.lines.extend(lines)
            items.append(v)
        return Val("list", T.ListT([i.type for i in items if i.type is not None]), items=items)

    def snapshot_all(self, v, ctx):
        """snapshot() for lists and aggregates too (copied into fresh storage)."""
        if v.kind == "list":
            return Val("list", v.type, items=[self.snapshot_all(i, ctx) for i in v.items])
        if v.kind == "agg" and isinstance(v.slot, int):
            n = v.type.slots()
            base = self.alloc(v.type, "snapshot")
            ctx.em.line(f"S[{base}:{base + n}] = S[{v.slot}:{v.slot + n}]")
            return agg(base, v.type)
        return self.snapshot(v, ctx)

    def captured(self, ctx, fn):
        """Run fn() (which translates an expression) and take back the statements it emitted
        (calls with copy-out are hoisted into statements): returns (Val, lines)."""
        mark = ctx.em.mark()
        v = fn()
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

    def x_cond(self, n, ctx, expected):
        c = self.cond_expr(n.cond, ctx)
        a, alines = self.captured(ctx, lambda: self.scalar(self.expr(n.a, ctx, expected), n.a.loc))
        b, blines = self.captured(ctx, lambda: self.scalar(self.expr(n.b, ctx, expected), n.b.loc))
        a, b, t = self.unify(a, b, n.loc, "?:")
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
        if v.kind == "list" and isinstance(t, (T.StructT, T.HeaderT)):
            return v
        v = self.scalar(v, n.expr.loc)
        vt = v.type
        if isinstance(t, T.EnumT) and t.base is not None:
            inner = self.cast_scalar(v, t.base, n.loc)
            return Val("rv", t, inner.code, const=inner.const)
        if isinstance(vt, T.EnumT) and vt.base is not None:
            v = Val("rv", vt.base, v.code, const=v.const)
        return self.cast_scalar(v, t, n.loc)

    def cast_scalar(self, v, t, loc):
        vt = v.type
        if vt == t:
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

    def x_unop(self, n, ctx, expected):
        v = self.scalar(self.expr(n.expr, ctx, expected), n.expr.loc)
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
                return lit(wrap(-v.const, t) if isinstance(t, T.BitT) else -v.const, t)
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
        return Val("rv", t, f"({v.code} ^ {t.mask})")

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

    def x_binop(self, n, ctx, expected):
        op = n.op
        if op in ("&&", "||"):
            a = self.scalar(self.expr(n.left, ctx), n.left.loc)
            b, blines = self.captured(ctx, lambda: self.scalar(self.expr(n.right, ctx), n.right.loc))
            for v, nd in ((a, n.left), (b, n.right)):
                if not isinstance(v.type, T.BoolT):
                    self.err(f"'{op}' needs bool operands, not {v.type}", nd.loc)
            if blines:      # the right side has statements: run them only if it is evaluated
                r = ctx.temp()
                ctx.em.line(f"{r} = {a.code}")
                self.guarded(ctx, r if op == "&&" else f"not {r}", blines, r, b.code)
                return Val("rv", T.BOOL, r)
            if a.is_const and b.is_const:
                return lit((a.const and b.const) if op == "&&" else (a.const or b.const), T.BOOL)
            return Val("rv", T.BOOL, f"({a.code} {'and' if op == '&&' else 'or'} {b.code})")
        a = self.expr(n.left, ctx)
        b, blines = self.captured(ctx, lambda: self.expr(n.right, ctx))
        if blines:          # left to right: the left operand is read before the right's effects
            a = self.snapshot(a, ctx)
            ctx.em.lines.extend(blines)
        if op in ("==", "!=") and a.kind == "agg" and b.kind == "agg":
            if a.type != b.type:
                self.err(f"cannot compare {a.type} with {b.type}", n.loc)
            code = self.agg_equal(a.type, a.slot, b.slot)
            return Val("rv", T.BOOL, code if op == "==" else f"(not {code})")
        a = self.scalar(a, n.left.loc)
        b = self.scalar(b, n.right.loc)
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
            bcode = b.code if not b.type.signed else f"({b.code} & {b.type.mask})"
            acode = a.code if not a.type.signed else f"({a.code} & {a.type.mask})"
            code = f"(({acode} << {b.type.width}) | {bcode})"
            return Val("rv", t, self.wrap_code(code, t) if t.signed else code)
        if op in ("<<", ">>"):
            if not isinstance(a.type, (T.BitT, T.IntLitT)):
                self.err(f"'{op}' needs a number on the left, not {a.type}", n.left.loc)
            if not isinstance(b.type, (T.BitT, T.IntLitT)) or (isinstance(b.type, T.BitT) and b.type.signed):
                self.err(f"shift amount must be unsigned, not {b.type}", n.right.loc)
            t = a.type
            if self.limits is not None and not (a.is_const and b.is_const):
                self.limits.shift(n, b)
            if a.is_const and b.is_const:
                if b.const < 0:
                    self.err(f"negative shift amount {b.const}", n.right.loc)
                if op == "<<" and b.const > MAX_CONST_SHIFT:    # never build the huge number
                    if not isinstance(t, T.BitT):
                        self.err(f"shift amount {b.const} is too large for an unsized constant", n.right.loc)
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
                return lit(eval(f"{a.const} {op} {b.const}"), T.BOOL)
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
            return Val("rv", t, f"min({t.mask}, {a.code} + {b.code})")
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

    # ------------------------------------------------------------------------- calls
    from .calls import (call, call_method, stack_shift, call_packet, unpack_tuple, extract_code,  # noqa: E402
                        emit_code, out_target, store, flatten, pack_code, field_list_slots,
                        anonymous_field_list, call_extern_method, call_extern_func, digest_info,
                        call_action, bound_action, call_function, compile_function, call_control)


def wrap(v, t):
    if isinstance(v, bool):
        v = int(v)
    v &= t.mask
    if t.signed and v >> (t.width - 1):
        v -= 1 << t.width
    return v


def py_op(op):
    return {"/": "//"}.get(op, op)


def const_arith(op, a, b, loc, comp, t=None):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("/", "%"):
        if b == 0:
            comp.err("division by zero", loc)
        if a < 0 or b < 0:
            comp.err(f"'{op}' on negative values is not supported", loc)
        return a // b if op == "/" else a % b
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    if op == "|+|":
        return min(a + b, t.mask) if t is not None and not t.signed else a + b
    if op == "|-|":
        return max(a - b, 0) if t is not None and not t.signed else a - b
    comp.err(f"unsupported operator '{op}'", loc)
