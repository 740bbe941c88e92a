"""Default initializers (P4_16 1.2.4): `...` stands for the default value of the type its context
gives it, as p4c's DefaultValues pass replaces it (a Compiler mixin).

    x = ...;  T v = ...;        0, false, error.NoError, an enum's first member, a serializable
                                enum's 0, "" ; an invalid header (every header of a union or a
                                stack invalid); structs and tuples field by field
    { e1, ... } { f = e, ... }  the fields not given take their defaults; a header so written is
                                valid (only a bare `...` makes it invalid)

Where no type is known (an operand, a generic argument) it is refused, as p4c refuses it.
"""
from . import p4types as T
from .compile_values import lit, Val

NO_TYPE = "...: could not find default value"


class DefaultValuesMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    def default_value(self, t, loc):
        """The value `...` stands for where a value of type `t` is expected."""
        if isinstance(t, (T.BitT, T.IntLitT)):
            return lit(0, t)
        if isinstance(t, T.BoolT):
            return lit(False, T.BOOL)
        if isinstance(t, T.ErrorT):
            code = self.errors.index("NoError")
            return Val("rv", T.ERROR, str(code), const=code)
        if isinstance(t, T.EnumT):
            if t.base is not None:          # (E)0, whether or not a member is 0
                return Val("rv", t, "0", const=0)
            first = t.members[0]
            return Val("rv", t, str(t.values[first]), const=t.values[first], info=first)
        if isinstance(t, T.StringT):
            return Val("rv", T.STRING, "''", const="")
        if isinstance(t, T.VarbitT):
            self.err("...: no default value for varbit types (p4c refuses it too)", loc)
        if isinstance(t, (T.HeaderT, T.UnionT)):
            return Val("invalid", t)
        if isinstance(t, (T.StructT, T.ListT, T.StackT)):
            items = [self.default_value(ft, loc) for ft in self.element_types(t)]
            return Val("list", T.ListT([i.type for i in items]), items=items)
        self.err(NO_TYPE if t is None else f"...: no default value for type {t}", loc)

    @staticmethod
    def element_types(t):
        """The types a list expression of type `t` lists, in order (None: not a list's type)."""
        if isinstance(t, (T.HeaderT, T.StructT)):
            return [ft for _, ft in t.fields_as_declared()]
        if isinstance(t, T.ListT):
            return list(t.types)
        if isinstance(t, T.StackT):
            return [t.elem] * t.size
        return None

    def x_dots(self, n, ctx, expected):
        if expected is None or isinstance(expected, (T.TypeVarT, T.GenericT)):
            self.err(NO_TYPE, n.loc)
        return self.default_value(expected, n.loc)

    def x_invalid(self, n, ctx, expected):
        # {#}: the invalid header (or header union) of the type its context gives it
        if not isinstance(expected, (T.HeaderT, T.UnionT)):
            self.err("{#} needs a header or header union type here", n.loc)
        return Val("invalid", expected)

    def fill_defaults(self, items, names, dots, expected, loc):
        """A list (names None) or structure expression ending in `...`: the items it lacks are
        the defaults of `expected`'s remaining elements (fields). Returns (items, names)."""
        types = self.element_types(expected) if expected is not None else None
        if types is None:
            self.err(NO_TYPE, dots)
        if names is None:
            if len(items) > len(types):
                self.err(f"{expected} has {len(types)} fields but the list has {len(items)} values", loc)
            return items + [self.default_value(t, dots) for t in types[len(items):]], None
        if not isinstance(expected, T.FieldsT):
            self.err(f"a structure expression cannot be a {expected}", loc)
        fields = expected.fields_as_declared()
        missing = [(f, ft) for f, ft in fields if f not in names]
        return (items + [self.default_value(ft, dots) for _, ft in missing],
                names + [f for f, _ in missing])
