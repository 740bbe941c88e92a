"""Parser value sets (`value_set<T>(size) vs;` used as `select (...) { vs: state; }`).

A member is one key object per field of the set (testbed/p4engine/tables.py: Exact, Ternary,
Lpm, Range, Optional; a plain int is Exact; None is "don't care" where the field's match kind
allows it). A select case label naming the set matches when at least one member matches every
field; an empty set matches nothing (BMv2's ParseVSet).

BMv2 keeps members exact (simple_switch_CLI `pvs_add NAME VALUE`, the value being the fields
concatenated) and p4c-bm2-ss ignores `@match` on the element struct's fields; P4Runtime
members carry a FieldMatch per field of the field's P4Info match kind. The engine takes both:
an Exact member matches as BMv2 does, the other kinds as P4Runtime describes them.

Two ways of changing a set, as the two control planes do:
  add / remove / clear      simple_switch_CLI's pvs_add / pvs_remove / pvs_clear: a duplicate
                            add or a remove of a non-member does nothing, no size limit (BMv2
                            does not check `size`);
  replace(members)          P4Runtime's MODIFY of a ValueSetEntry: the whole set at once,
                            TableError ALREADY_EXISTS for a duplicate member and
                            RESOURCE_EXHAUSTED past `size`; the set is left unchanged then.
"""
from testbed.p4engine.tables import Exact, KeySpec, Lpm, Optional, Range, TableError, Ternary

# which key objects a field of each match kind takes (Exact fits all: it matches every bit)
_ALLOWED = {
    "exact": (Exact,),
    "ternary": (Exact, Ternary),
    "lpm": (Exact, Lpm),
    "range": (Exact, Range),
    "optional": (Exact, Optional),
}


class ValueSet:
    """One value set instance: `name` (P4Info name), `fields` [KeySpec(name, match_kind, width)]
    in element order, `size` (the declared maximum)."""

    def __init__(self, name, fields, size):
        self.name = name
        self.fields = [KeySpec(*f) for f in fields]
        self.size = size
        self.width = sum(f.width for f in self.fields)   # BMv2's compressed bit width
        self._members = []        # normalised members, in the order they were added
        self._exact = set()       # value tuples of the members exact on every field
        self._tests = []          # the other members: per field (value, mask) or (low, high, None)

    # ------------------------------------------------------------------ data plane
    def contains(self, values):
        """True if the tuple of select key values (one per field) matches a member."""
        if values in self._exact:
            return True
        for tests in self._tests:
            for v, (a, b, kind) in zip(values, tests):
                if kind is None:
                    if not a <= v <= b:
                        break
                elif v & b != a:
                    break
            else:
                return True
        return False

    # ------------------------------------------------------------------ control plane
    def members(self):
        """The members, each a tuple of key objects (Exact, Ternary, ... or None)."""
        return list(self._members)

    def add(self, member):
        member = self.normalise(member)
        if member not in self._members:
            self._members.append(member)
            self._index(member)

    def remove(self, member):
        member = self.normalise(member)
        if member in self._members:
            self._members.remove(member)
            self._rebuild()

    def clear(self):
        self._members = []
        self._rebuild()

    def replace(self, members):
        new = []
        for m in members:
            m = self.normalise(m)
            if m in new:
                raise TableError("ALREADY_EXISTS", f"value set {self.name}: member {_show(m)} given twice")
            new.append(m)
        if len(new) > self.size:
            raise TableError("RESOURCE_EXHAUSTED",
                             f"value set {self.name}: {len(new)} members, its size is {self.size}")
        self._members = new
        self._rebuild()

    def split(self, value):
        """A BMv2 CLI value (the fields concatenated, first field in the high bits) -> member."""
        if not 0 <= value < (1 << self.width):
            raise TableError("INVALID_ARGUMENT",
                             f"value set {self.name}: value {value:#x} does not fit in {self.width} bits")
        out = []
        for f in reversed(self.fields):
            out.append(Exact(value & ((1 << f.width) - 1)))
            value >>= f.width
        return tuple(reversed(out))

    def normalise(self, member):
        if isinstance(member, int) and len(self.fields) == 1:
            member = (member,)
        member = tuple(member)
        if len(member) != len(self.fields):
            raise TableError("INVALID_ARGUMENT", f"value set {self.name}: a member has {len(member)} "
                                                 f"field(s), the set has {len(self.fields)}")
        out = []
        for key, f in zip(member, self.fields):
            if isinstance(key, int) and not isinstance(key, bool):
                key = Exact(key)
            what = f"value set {self.name} field {f.name or '1'}"
            if key is None:
                if f.match_kind == "exact":
                    raise TableError("INVALID_ARGUMENT", f"{what}: an exact field needs a value")
            elif not isinstance(key, _ALLOWED.get(f.match_kind, (Exact,))):
                raise TableError("INVALID_ARGUMENT",
                                 f"{what}: a {f.match_kind} field does not take {type(key).__name__}")
            else:
                _check_fits(key, f.width, what)
            out.append(key)
        return tuple(out)

    # ------------------------------------------------------------------ lookup structures
    def _rebuild(self):
        # built aside, then swapped in: a packet being parsed sees the old set or the new one
        exact, tests = set(), []
        for m in self._members:
            self._index(m, exact, tests)
        self._exact, self._tests = exact, tests

    def _index(self, member, exact=None, tests_out=None):
        exact = self._exact if exact is None else exact
        tests_out = self._tests if tests_out is None else tests_out
        if all(type(k) is Exact for k in member):
            exact.add(tuple(k.value for k in member))
            return
        tests = []
        for key, f in zip(member, self.fields):
            full = (1 << f.width) - 1
            if key is None:
                tests.append((0, 0, "mask"))
            elif type(key) is Range:
                tests.append((key.low, key.high, None))
            elif type(key) is Ternary:
                tests.append((key.value & key.mask, key.mask, "mask"))
            elif type(key) is Lpm:
                mask = full ^ ((1 << (f.width - key.prefix_len)) - 1)
                tests.append((key.value & mask, mask, "mask"))
            else:       # Exact, Optional
                tests.append((key.value, full, "mask"))
        tests_out.append(tuple(tests))


def _check_fits(key, width, what):
    limit = 1 << width
    if type(key) is Range:
        values = (key.low, key.high)
        if key.low > key.high:
            raise TableError("INVALID_ARGUMENT", f"{what}: range low {key.low} > high {key.high}")
    elif type(key) is Ternary:
        values = (key.value, key.mask)
    else:
        values = (key.value,)
    if type(key) is Lpm and not 0 <= key.prefix_len <= width:
        raise TableError("INVALID_ARGUMENT", f"{what}: prefix length {key.prefix_len} not in 0..{width}")
    for v in values:
        if not (isinstance(v, int) and 0 <= v < limit):
            raise TableError("INVALID_ARGUMENT", f"{what}: {v!r} does not fit in {width} bits")


def _show(member):
    return "(" + ", ".join("*" if k is None else repr(k) for k in member) + ")"
