"""What the compiler works with while it translates: typed values (Val), names in scopes
(Sym, Scope), where code is being generated (Ctx), the hidden per-packet slots at the start of
the state list `S`, and the integer arithmetic of compile-time constants."""

# Hidden per-packet slots at the start of S (see pipeline.py)
# H_INLEN: the length the packet was received with (BMv2's ingress_length), what byte counters
# and meters count whatever the program writes into standard_metadata.packet_length
# H_PLEN: BMv2's packet-length register (simple_switch's PACKET_LENGTH_REG_IDX): the received
# length, plus the bytes of each header setValid() makes valid, minus those setInvalid() makes
# invalid (its add_header/remove_header primitives); egress reads it as packet_length
# H_RXPORT: the port the packet was received on (BMv2's Packet::get_ingress_port(), which every
# copy keeps): the standard_metadata.ingress_port an I2E clone is parsed again with
H_PKT, H_POFF, H_NOW, H_CLONE, H_CLONE_FL, H_RESUB, H_RECIRC, H_TRUNC, H_DIGEST, H_OUT, H_INLEN, H_PLEN, \
    H_RXPORT = range(13)
NUM_HIDDEN = 13
CORE_ERRORS = ["NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds", "HeaderTooShort",
               "ParserTimeout", "ParserInvalidArgument"]
SUPPORTED_MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional", "selector")
# p4c reads and writes `hs.next` anywhere in a parser; the engine only extracts into it
NEXT_OUTSIDE_EXTRACT = "this engine supports a header stack's .next only as an extract target"


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
    return Val("rv", typ, int_code(value), const=value)


def int_code(value):
    """Python source for an int: in hex once it is long, since str() refuses more than 4300
    decimal digits (a folded constant such as 1 << 20000 has 6021)."""
    return hex(value) if isinstance(value, int) and value.bit_length() >= 4096 else str(value)


def const_text(value):
    """A constant for a message: its digits, or its size when they would fill the screen."""
    return str(value) if value.bit_length() <= 128 else f"(a {value.bit_length()}-bit number)"


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
        if name[:1] == ".":         # `.x` (p4c's prefixedNonTypeName): the top level's x
            while s.parent is not None:
                s = s.parent
            name = name[1:]
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def declare(self, name, sym):
        self.names[name] = sym


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
        self.function = None          # the function declaration whose body this is
        self.unreachable = False      # in a branch p4c's constant folding removes (see note_use)

    def child(self):
        c = Ctx(Scope(self.scope), self.em, self.where, self.prefix, self.action, self.parser, self.block_role)
        c.tmp_owner = self
        c.returns, c.ret_store, c.in_loop = self.returns, self.ret_store, self.in_loop
        c.function, c.unreachable = self.function, self.unreachable
        return c

    def temp(self):
        owner = self
        while hasattr(owner, "tmp_owner"):
            owner = owner.tmp_owner
        owner.tmp += 1
        return f"_t{owner.tmp}"


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
