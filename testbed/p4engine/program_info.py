"""What the compiler produces and the tools read: the Compiled program and the metadata of its
tables, actions, externs and digests (P4Info, the pipeline, STF and P4Runtime read these)."""
from collections import OrderedDict

from . import p4types as T
from .syntax import Node


# --------------------------------------------------------------------------------- program info
class ActionInfo:
    def __init__(self, name, decl, params, fn, annos):
        self.name, self.decl, self.params, self.fn, self.annos = name, decl, params, fn, annos
        # params: list of (name, direction, type); P4Info params are the directionless ones
        self.inout_slots = {}
        # a directionless parameter's control-plane name (its @name, else its own): what table
        # entries, P4Info and STF call it, and the key the action reads its value under
        self.control_names = {}

    @property
    def runtime_params(self):
        return [(self.control_names.get(n, n), T.width_of(t) or 0) for n, d, t in self.params if d is None]

    def control_args(self, args):
        """`args` by parameter name -> by control-plane name."""
        return {self.control_names.get(k, k): v for k, v in args.items()}


class TableInfo:
    def __init__(self, name, decl):
        self.name, self.decl = name, decl
        self.keys = []            # (name, match_kind, width, Val)
        self.selector_keys = []   # (name, width, Val, validity slot of its header or None)
        self.key_lines = []       # statements the key expressions need (run before each lookup)
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
        self.elem_enum = None    # a register's serializable enum element type
        self.index_width = 32
        self.size = 0
        self.kind_arg = None     # counter/meter type, selector algorithm
        self.targs = []          # type arguments as declared
        self.read_slots = set()  # a direct_meter's: (slot, mask) its table writes the colour to on a hit


class ValueSetInfo:
    """A parser's `value_set<elem>(size) name;`: `fields` [(name, match_kind, width)] once a
    select uses it (p4c leaves unused ones out of P4Info and BMv2's JSON); `depth` is how deep
    its parser is instantiated (p4c lists a parser's sets before its sub-parsers')."""

    def __init__(self, name, elem, size, annos, loc, depth):
        self.name, self.elem, self.size, self.annos, self.loc = name, elem, size, annos, loc
        self.depth = depth
        self.fields = None
        self.field_annos = []    # per field: its annotations but @match (P4Info shows them)
        self.used = False
        self.obj = None          # the runtime ValueSet (testbed/p4engine/value_sets.py)
        self.pyname = None


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
    if k == "plus_slice":
        return f"{text(node.expr)}[{text(node.lo)}+:{text(node.width)}]"
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


def unnamed_key_part(node):
    """The part of a table key expression p4c cannot name (its KeyNameGenerator), or None.

    Names come from names, fields, indices, slices, integer literals, `&` of two named parts and
    `isValid()`; anything else (arithmetic, casts, other calls, ...) needs the key to carry
    @name. Children are looked at first, as p4c does: the innermost offender is the one named.
    An expression of integer literals only is folded to a constant first, so it is named."""
    k = node.kind
    if k in ("name", "int"):
        return None
    if k == "member":
        return unnamed_key_part(node.expr)
    if k == "index":
        return unnamed_key_part(node.expr) or unnamed_key_part(node.index)
    if k == "slice":
        return unnamed_key_part(node.expr) or unnamed_key_part(node.hi) or unnamed_key_part(node.lo)
    if _literal_only(node):
        return None
    if k == "binop" and node.op == "&":
        return unnamed_key_part(node.left) or unnamed_key_part(node.right)
    if k == "call":
        func = node.func
        inner = unnamed_key_part(func.expr) if func.kind == "member" else None
        for arg in node.args:
            inner = inner or unnamed_key_part(getattr(arg, "value", arg))
        if inner is not None:
            return inner
        if func.kind == "member" and func.name == "isValid" and not node.args:
            return None
        return node
    for child in ("expr", "left", "right"):        # operands are looked at before the operation
        sub = getattr(node, child, None)
        if hasattr(sub, "kind"):
            inner = unnamed_key_part(sub)
            if inner is not None:
                return inner
    return node


def _literal_only(node):
    """True for an expression built only of integer literals (p4c folds it to a constant)."""
    k = node.kind
    if k == "int":
        return True
    if k == "binop":
        return _literal_only(node.left) and _literal_only(node.right)
    if k == "unop":
        return _literal_only(node.expr)
    return False


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
    value_sets  {name: ValueSetInfo}: .name .fields [(name, match_kind, width)] .size .annos .obj
    controller_headers  [(annotation string, HeaderT, annotations)]
    called_actions / applied_tables  sets of names (P4Info leaves out the unused, like p4c)
    errors      error names by value; field_lists {index: [slot]}
    warnings    [(file, line, col, message)]: the compiler's, then parser loop warnings
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
        self.value_sets = OrderedDict()  # name -> ValueSetInfo (those a select uses)
        self.controller_headers = []     # (name, HeaderT, annos)
        self.errors = []
        self.field_lists = {}            # index -> list of slots (@field_list, clone3/resubmit data)
        self.entry_points = {}           # V1Switch role -> generated function name
        self.called_actions = set()      # actions called directly from a control body (not an action)
        self.action_callers = {}         # those actions -> the control instances that call them
        self.applied_tables = set()      # tables whose apply() appears somewhere
        self.unapplied_blocks = set()    # sub-block instances nothing live applies (p4c removes them)
        self.package_annos = []          # annotations of `V1Switch(...) main;`
        self.calls_extern_functions = False  # a live control calls mark_to_drop, hash, ... (P4Info's type_info)
        self.warnings = []               # [(file, line, col, message)] the compiler found
