"""P4 types as the checker and compiler see them, and their storage layout.

Every value a packet carries lives in one flat Python list (the packet's state, `S`): a scalar
takes one slot, a header takes a validity slot followed by its fields, a struct concatenates its
fields, a header stack keeps its next-index slot followed by its elements. Generated code
addresses slots by constant index, which is what makes it fast.
"""


class P4Type:
    scalar = False
    aggregate = False

    def slots(self):
        return 1

    def __eq__(self, other):
        return _same_as(type(self)) is _same_as(type(other)) and self.key() == other.key()

    def __hash__(self):
        return hash((_same_as(type(self)).__name__, self.key()))

    def key(self):
        return ()


class BitT(P4Type):
    scalar = True

    def __init__(self, width, signed=False):
        self.width, self.signed = width, signed

    def key(self):
        return (self.width, self.signed)

    def __str__(self):
        return f"{'int' if self.signed else 'bit'}<{self.width}>"

    @property
    def mask(self):
        return (1 << self.width) - 1


class NewBitT(BitT):
    """A `type bit<W> Name;` declaration. The engine gives it bit<W>'s values and rules (it is
    equal to bit<W>), except where p4c refuses a new type that bit<W> would pass (a shift
    amount); `name` says which type it was."""
    same_as = BitT

    def __init__(self, width, signed, name):
        super().__init__(width, signed)
        self.name = name
        self.translation = None     # (uri, controller width or None for string): @p4runtime_translation
        self.annos = None           # the declaration's annotations


def _same_as(cls):
    """The class a type compares as (a type declared with `type` compares as its base)."""
    return getattr(cls, "same_as", cls)


class VarbitT(P4Type):
    """varbit<N>: a header field whose length is set by extract; its slot holds (bits, value).
    It counts 0 towards its header's fixed width (as p4c's minSizeInBits)."""
    scalar = True
    width, signed, mask = 0, False, 0

    def __init__(self, max_width):
        self.max_width = max_width

    def key(self):
        return (self.max_width,)

    def __str__(self):
        return f"varbit<{self.max_width}>"


class IntLitT(P4Type):
    """An integer of unbounded width (a literal or a compile-time constant)."""
    scalar = True

    def __str__(self):
        return "int"


class BoolT(P4Type):
    scalar = True
    width, signed, mask = 1, False, 1      # as a header field BMv2 stores it as one bit

    def __str__(self):
        return "bool"


class StringT(P4Type):
    scalar = True

    def __str__(self):
        return "string"


class VoidT(P4Type):
    def __str__(self):
        return "void"


class ErrorT(P4Type):
    scalar = True

    def __str__(self):
        return "error"


class MatchKindT(P4Type):
    scalar = True

    def __str__(self):
        return "match_kind"


class EnumT(P4Type):
    """A plain enum (values are member indices) or a serializable enum (values of `base`)."""
    scalar = True
    arch = False        # declared by core.p4 / v1model.p4 (set by the compiler)

    def __init__(self, name, members, base=None, values=None):
        self.name, self.members, self.base = name, list(members), base
        self.values = values or {m: i for i, m in enumerate(self.members)}

    def key(self):
        return (self.name,)

    def __str__(self):
        return self.name

    # a serializable enum is laid out as its underlying bits (header fields, keys, digests)
    @property
    def width(self):
        return self.base.width if self.base is not None else None

    @property
    def mask(self):
        return self.base.mask

    @property
    def signed(self):
        return self.base.signed


class FieldsT(P4Type):
    aggregate = True

    def __init__(self, name, fields, annos=None):
        self.name = name
        self.fields = fields              # list of (name, P4Type)
        self.field_annos = annos or {}    # name -> [annotation Node]
        self._offsets = None

    def key(self):
        return (self.name,)

    def __str__(self):
        return self.name

    def fields_as_declared(self):
        """The fields as the program declares them: `fields` holds a header's struct field as its
        leaves (compile_decls.fields_type), `declared_fields` as the struct."""
        return getattr(self, "declared_fields", None) or self.fields

    def field_type(self, name):
        for n, t in self.fields:
            if n == name:
                return t
        return None


class StructT(FieldsT):
    def offsets(self):
        if self._offsets is None:
            off, res = 0, {}
            for n, t in self.fields:
                res[n] = off
                off += t.slots()
            self._offsets = res
            self._size = off
        return self._offsets

    def slots(self):
        self.offsets()
        return self._size


class UnionT(StructT):
    """A header_union: laid out like a struct of its member headers; at most one is valid."""

    def validity_slots(self, base):
        """Slots (ints or code) of the members' validity bits for a union stored at `base`."""
        from .codegen import slot_add
        return [slot_add(base, off) for off in self.offsets().values()]


class HeaderT(FieldsT):
    def validity_slots(self, base):
        """The slot of the validity bit of a header stored at `base` (as UnionT's)."""
        return [base]

    def offsets(self):
        if self._offsets is None:
            self._offsets = {n: 1 + i for i, (n, _) in enumerate(self.fields)}
        return self._offsets

    def slots(self):
        return 1 + len(self.fields)

    @property
    def bit_width(self):
        return sum(t.width for _, t in self.fields)


class StackT(P4Type):
    aggregate = True

    def __init__(self, elem, size):
        self.elem, self.size = elem, size

    def key(self):
        return (self.elem.key(), self.size)

    def __str__(self):
        return f"{self.elem}[{self.size}]"

    def slots(self):
        return 1 + self.size * self.elem.slots()


class ListT(P4Type):
    """The type of `{a, b, c}` and of tuples."""
    aggregate = True

    def __init__(self, types):
        self.types = list(types)

    def key(self):
        return tuple(t.key() for t in self.types)

    def __str__(self):
        return "tuple<" + ", ".join(str(t) for t in self.types) + ">"

    def slots(self):
        return sum(t.slots() for t in self.types)

    def offsets(self):
        """Element index -> slot offset (a tuple is laid out like a struct)."""
        res, off = {}, 0
        for i, t in enumerate(self.types):
            res[i] = off
            off += t.slots()
        return res


class ExternT(P4Type):
    def __init__(self, name, decl, targs=()):
        self.name, self.decl, self.targs = name, decl, list(targs)

    def key(self):
        return (self.name,)

    def __str__(self):
        return self.name


class GenericT(P4Type):
    """A generic header, struct or header_union declaration; each use with type arguments is
    a type of its own (`instances`, by its name `S<bit<8>>`)."""

    def __init__(self, decl):
        self.decl, self.name, self.instances = decl, decl.name, {}

    def key(self):
        return (self.name,)

    def __str__(self):
        return self.name


class TypeVarT(P4Type):
    def __init__(self, name):
        self.name = name

    def key(self):
        return (self.name,)

    def __str__(self):
        return self.name


class BlockT(P4Type):
    """A parser, control or package type (the declaration is kept)."""

    def __init__(self, kind, name, decl):
        self.kind, self.name, self.decl = kind, name, decl

    def key(self):
        return (self.kind, self.name)

    def __str__(self):
        return self.name


BOOL = BoolT()
INTLIT = IntLitT()
VOID = VoidT()
ERROR = ErrorT()
STRING = StringT()
MATCH_KIND = MatchKindT()


def is_numeric(t):
    return isinstance(t, (BitT, IntLitT))


def width_of(t):
    """Bit width of a scalar type used in packing, keys or casts (None if it has none)."""
    if isinstance(t, BitT):
        return t.width
    if isinstance(t, BoolT):
        return 1
    if isinstance(t, EnumT) and t.base is not None:
        return t.base.width
    if isinstance(t, ErrorT):
        return 32
    return None
