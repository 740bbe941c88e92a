"""P4Info for a compiled program: what P4Runtime clients see of it, as p4c-bm2-ss would write it.

`build_p4info(compiled)` reads the compiler's metadata (testbed/p4engine/program_info.py:
`Compiled.tables/actions/externs/digests/controller_headers`) and returns a
`p4.config.v1.p4info_pb2.P4Info`. Ids follow the P4Runtime spec and p4c:

* an object's id is `prefix << 24 | low 24 bits`, the prefix naming its resource type
  (P4Ids.Prefix: actions 0x01, tables 0x02, counters 0x12, ...);
* `@id(N)` is honoured (the prefix is added if N has none; a wrong prefix is an error);
* otherwise the low bits are the Jenkins one-at-a-time hash of the fully qualified name,
  names taken in sorted order and collisions resolved by probing upwards, as p4c does —
  so the ids are deterministic and equal p4c's for the same names;
* match fields, action parameters and packet-metadata fields are numbered 1, 2, ... in
  declaration order, skipping numbers taken by `@id` on a sibling.

Objects annotated `@hidden` are left out, and so are tables nothing applies and actions
nothing lists or calls (`compiled.applied_tables` / `compiled.called_actions`), as p4c's
unused-declaration pass removes them before it writes the P4Info. The preamble alias is the shortest '.'-suffix of
the name that no other control-plane name shares, as p4c computes it.
"""
from collections import OrderedDict

from p4.config.v1 import p4info_pb2, p4types_pb2

from . import p4types as T
from .errors import P4Error
from .p4info_annotations import add_annotations, add_documentation

# shown in an action profile's own fields, so p4c leaves them out of its preamble
SELECTOR_ANNOTATIONS = ("max_group_size", "selector_size_semantics", "max_member_weight")
# the main package's annotations that become pkg_info fields: (keys, value kind)
PACKAGE_PROPERTIES = {
    "pkginfo": (("name", "version", "organization", "contact", "url", "arch"), "string"),
    "platform_property": (("multicast_group_table_size", "multicast_group_table_total_replicas",
                           "multicast_group_table_max_replicas_per_entry"), "int")}

PREFIX = p4info_pb2.P4Ids
# the P4Info kind of each extern type P4Info lists
_EXTERN_PREFIXES = {"action_profile": PREFIX.ACTION_PROFILE, "action_selector": PREFIX.ACTION_PROFILE,
                    "counter": PREFIX.COUNTER, "meter": PREFIX.METER, "register": PREFIX.REGISTER,
                    "direct_counter": PREFIX.DIRECT_COUNTER, "direct_meter": PREFIX.DIRECT_METER}

MATCH_TYPES = {
    "exact": p4info_pb2.MatchField.EXACT,
    "lpm": p4info_pb2.MatchField.LPM,
    "ternary": p4info_pb2.MatchField.TERNARY,
    "range": p4info_pb2.MatchField.RANGE,
    "optional": p4info_pb2.MatchField.OPTIONAL,
}
COUNTER_UNITS = {
    "packets": p4info_pb2.CounterSpec.PACKETS,
    "bytes": p4info_pb2.CounterSpec.BYTES,
    "packets_and_bytes": p4info_pb2.CounterSpec.BOTH,
}
METER_UNITS = {"packets": p4info_pb2.MeterSpec.PACKETS, "bytes": p4info_pb2.MeterSpec.BYTES}


def jenkins_hash(name):
    """Bob Jenkins' one-at-a-time hash over the name's bytes (what p4c hashes names with)."""
    h = 0
    for byte in name.encode():
        h = (h + byte) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    return h


# ------------------------------------------------------------------ annotations
def _annotation(annos, name):
    for a in annos or ():
        if getattr(a, "name", None) == name:
            return a
    return None


def _annotation_int(annos, name):
    a = _annotation(annos, name)
    if a is None:
        return None
    for arg in a.args or ():
        value = getattr(arg, "value", None)
        if getattr(arg, "kind", None) == "int" and isinstance(value, int):
            return value
    raise P4Error(f"@{name} needs an integer argument", getattr(a, "loc", None))


def _annotation_string(annos, name):
    a = _annotation(annos, name)
    if a is None:
        return None
    for arg in a.args or ():
        if getattr(arg, "kind", None) == "string":
            return arg.value
    raise P4Error(f"@{name} needs a string argument", getattr(a, "loc", None))


def _hidden(annos):
    return _annotation(annos, "hidden") is not None


# ------------------------------------------------------------------ ids
class IdAllocator:
    """Object ids per resource type: @id first (in the order given), then hashed names."""

    def __init__(self):
        self.symbols = OrderedDict()    # (prefix, name) -> id or None (to be hashed)
        self.assigned = set()
        self.where = {}

    def add(self, prefix, name, annos=None, loc=None):
        key = (prefix, name)
        if key in self.symbols:
            return
        explicit = _annotation_int(annos, "id")
        if explicit is not None:
            type_bits = prefix << 24
            if explicit >> 24 and explicit & 0xFF000000 != type_bits:
                raise P4Error(f"{name}: @id 0x{explicit:08x} has the wrong 8-bit prefix "
                              f"(0x{prefix:02x} expected for this kind of object)", loc)
            explicit |= type_bits
            if explicit in self.assigned:
                raise P4Error(f"{name}: @id 0x{explicit:08x} is also given to {self.where[explicit]}", loc)
            self.assigned.add(explicit)
            self.where[explicit] = name
        self.symbols[key] = explicit

    def assign(self):
        pending = sorted(key for key, value in self.symbols.items() if value is None)
        for prefix, name in pending:
            low = jenkins_hash(name)
            for step in range(1 << 24):
                candidate = (prefix << 24) | ((low + step) & 0xFFFFFF)
                if candidate not in self.assigned:
                    break
            else:   # pragma: no cover - 16M objects of one kind
                raise P4Error(f"no P4Runtime id left for {name}")
            self.assigned.add(candidate)
            self.symbols[(prefix, name)] = candidate

    def __getitem__(self, key):
        return self.symbols[key]


def field_ids(annotated):
    """Ids for fields/params: @id where given, else 1, 2, ... skipping ids already used."""
    ids = [None] * len(annotated)
    used = set()
    for i, annos in enumerate(annotated):
        explicit = _annotation_int(annos, "id")
        if explicit is not None:
            if explicit == 0:
                raise P4Error("0 is not a valid @id for a field or parameter")
            if explicit in used:
                raise P4Error(f"@id {explicit} is used twice among the fields of one object")
            ids[i] = explicit
            used.add(explicit)
    index = 1
    for i in range(len(ids)):
        if ids[i] is not None:
            index += 1
            continue
        while index in used:
            index += 1
        ids[i] = index
        used.add(index)
    return ids


def shortest_unique_suffixes(names):
    """name -> its shortest '.'-separated suffix that no other name ends with (p4c's alias)."""
    counts = {}
    unique = set(names)
    for name in unique:
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            suffix = tuple(parts[-k:])
            counts[suffix] = counts.get(suffix, 0) + 1
    aliases = {}
    for name in unique:
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            if counts[tuple(parts[-k:])] < 2:
                break
        aliases[name] = ".".join(parts[-k:])
    return aliases


# ------------------------------------------------------------------ building
class _Builder:
    def __init__(self, compiled):
        self.c = compiled
        self.ids = IdAllocator()
        self.p4info = p4info_pb2.P4Info()
        # p4c drops tables nothing applies (when the compiler says which are applied)
        applied = getattr(compiled, "applied_tables", None)
        self.tables = [t for t in compiled.tables.values()
                       if not _hidden(t.annos) and (applied is None or t.name in applied)]
        self.actions = self._visible_actions()
        # an extern instance goes with the control or parser instance that declares it
        unapplied = getattr(compiled, "unapplied_blocks", None) or set()
        self.externs = [e for e in compiled.externs.values() if getattr(e, "owner", None) not in unapplied]
        self.digests = list(getattr(compiled, "digests", {}).values())
        self.headers = [h for h in getattr(compiled, "controller_headers", []) if not _hidden(h[2])]
        self.value_sets = [v for v in getattr(compiled, "value_sets", {}).values() if not _hidden(v.annos)]
        self.table_of = {}     # extern name -> [table names] using it (implementation / direct)
        for t in self.tables:
            for ext in (t.implementation, t.direct_counter, t.direct_meter):
                if ext is not None:
                    self.table_of.setdefault(ext.name, []).append(t.name)

    def _visible_actions(self):
        """Actions as p4c lists them after its unused-declaration pass: those a table lists
        (or uses as its default), plus those a control's apply block calls directly
        (`compiled.called_actions`, when the compiler records it) — the latter without
        parameters, since the call binds them. Actions only called by other actions are
        inlined by p4c and do not appear."""
        listed = set()
        for t in self.tables:
            listed.update(a.name for a, _ in t.actions)
            if t.default_action is not None and t.default_action[0] is not None:
                listed.add(t.default_action[0].name)
        called = set(getattr(self.c, "called_actions", None) or ())
        self.bound_params = called - listed
        return self._in_p4c_order([a for a in self.c.actions.values()
                                   if (a.name in listed or a.name in called) and not _hidden(a.annos)])

    def _in_p4c_order(self, actions):
        """p4c lists actions control by control (V1Switch's), each with its sub-controls inlined:
        its copies of top-level actions first (its LocalizeAllActions), those its tables name in
        their order, then those its apply blocks call, then the control's own actions and its
        sub-controls' as declared."""
        def top(owner):
            return owner.split(".")[0] if owner else ""
        tables = [t for t in self.tables if getattr(t, "owner", None)]
        callers = getattr(self.c, "action_callers", {})
        placed = {}
        for control in dict.fromkeys([top(t.owner) for t in tables]
                                     + [top(a.owner) for a in actions if getattr(a, "owner", "")]):
            for t in tables:
                if top(t.owner) == control:
                    for a in [a for a, _ in t.actions] + [t.default_action[0] if t.default_action else None]:
                        if a is not None and getattr(a, "owner", None) == "":
                            placed.setdefault(a.name, a)
            for a in actions:
                if getattr(a, "owner", None) == "" and control in {top(o) for o in callers.get(a.name, ())}:
                    placed.setdefault(a.name, a)
            for a in actions:
                if top(getattr(a, "owner", "")) == control:
                    placed.setdefault(a.name, a)
        wanted = {a.name for a in actions}
        return [a for name, a in placed.items() if name in wanted] + [a for a in actions if a.name not in placed]

    # -- symbols
    def collect(self):
        add = self.ids.add
        for a in self.actions:
            add(PREFIX.ACTION, a.name, a.annos, _loc(a))
        for t in self.tables:
            add(PREFIX.TABLE, t.name, t.annos, _loc(t))
        for e in self.externs:
            prefix = self._extern_prefix(e)
            if prefix is not None:
                add(prefix, e.name, e.annos, e.loc)
        for d in self.digests:
            add(PREFIX.DIGEST, d.name, getattr(d, "annos", None))
        for name, htype, annos in self.headers:
            add(PREFIX.CONTROLLER_HEADER, htype.name, annos)
        for v in self.value_sets:
            add(PREFIX.VALUE_SET, v.name, v.annos, v.loc)
        self.ids.assign()
        self.aliases = shortest_unique_suffixes([name for _, name in self.ids.symbols])

    def _extern_prefix(self, e):
        """The P4Info kind of an extern instance; None for one P4Info leaves out."""
        if self._unused_direct(e):
            return None
        return _EXTERN_PREFIXES.get(e.type_name)

    def _unused_direct(self, e):
        """A direct counter or meter that no table uses: p4c leaves it out of P4Info."""
        return e.type_name in ("direct_counter", "direct_meter") and e.name not in self.table_of

    def preamble(self, msg, prefix, name, shown_name=None, alias=None, annos=None, skip=()):
        msg.preamble.id = self.ids[(prefix, name)]
        msg.preamble.name = shown_name or name
        msg.preamble.alias = alias or self.aliases[name]
        add_annotations(msg.preamble, annos, skip)
        add_documentation(msg.preamble, annos)

    # -- objects
    def build(self):
        self.collect()
        p = self.p4info
        self.package_info(p.pkg_info, getattr(self.c, "package_annos", None))
        for t in self.tables:
            self.table(p.tables.add(), t)
        for a in self.actions:
            self.action(p.actions.add(), a)
        for e in self.externs:
            getattr(self, "extern_" + e.type_name, lambda msg, e: None)(p, e)
        for d in self.digests:
            self.digest(p, d)
        for name, htype, annos in self.headers:
            self.controller_header(p.controller_packet_metadata.add(), name, htype, annos)
        for v in self.value_sets:
            self.value_set(p.value_sets.add(), v)
        if self._type_info_touched():
            p.type_info.SetInParent()
        return p

    def _type_info_touched(self):
        """p4c's serializer opens type_info (so P4Info shows it, empty or not) whenever it looks
        at a type: for any table, action parameter, controller header field or extern instance
        it lists, and for any extern function a live control calls."""
        return bool(self.tables or self.externs or getattr(self.c, "calls_extern_functions", False)
                    or any(a.runtime_params and a.name not in self.bound_params for a in self.actions)
                    or any(h[1].fields for h in self.headers))

    def package_info(self, msg, annos):
        """pkg_info as p4c fills it from the annotations of the main package instance: @pkginfo's
        strings, @platform_property's integers, the others as annotations and doc."""
        msg.arch = "v1model"
        for a in annos or ():
            if a.name not in PACKAGE_PROPERTIES:
                continue
            fields, kind = PACKAGE_PROPERTIES[a.name]
            if a.name == "pkginfo":
                target = msg
            else:
                target = msg.platform_properties
                target.SetInParent()        # shown even when it sets no known key (as p4c does)
            for kv in a.args:
                if getattr(kv, "kind", None) != "kv" or kv.key not in fields:
                    continue            # (p4c warns: unknown key)
                if kv.value.kind != kind:
                    raise P4Error(f"@{a.name}: the value for '{kv.key}' must be "
                                  f"{'a string' if kind == 'string' else 'an integer'}", kv.loc)
                setattr(target, kv.key, kv.value.value)
        add_annotations(msg, annos, skip=tuple(PACKAGE_PROPERTIES))
        add_documentation(msg, annos)

    def value_set(self, msg, v):
        """A parser value set as p4c lists it: a bit<W> element is one unnamed exact match
        field; a struct's fields are named, typed by @match (exact by default)."""
        self.preamble(msg, PREFIX.VALUE_SET, v.name, annos=v.annos)
        for (name, kind, width), field_id, annos in zip(v.fields, field_ids(v.field_annos), v.field_annos):
            mf = msg.match.add(id=field_id, bitwidth=width)
            if name is not None:
                mf.name = name
            if kind in MATCH_TYPES:
                mf.match_type = MATCH_TYPES[kind]
            else:
                mf.other_match_type = kind
        msg.size = v.size

    def table(self, msg, t):
        self.preamble(msg, PREFIX.TABLE, t.name, annos=t.annos)
        key_annos = _key_annotations(t)
        for (name, kind, width, *val), mf_id, annos in zip(t.keys, field_ids(key_annos), key_annos):
            mf = msg.match_fields.add(id=mf_id, name=name)
            add_annotations(mf, annos)
            add_documentation(mf, annos)
            self.typed_width(mf, getattr(val[0] if val else None, "type", None), width)
            if kind in MATCH_TYPES:
                mf.match_type = MATCH_TYPES[kind]
            else:
                mf.other_match_type = kind
        for action, annos in t.actions:
            if _hidden(action.annos):
                continue
            ref = msg.action_refs.add(id=self.ids[(PREFIX.ACTION, action.name)])
            table_only = _annotation(annos, "tableonly") is not None
            default_only = _annotation(annos, "defaultonly") is not None
            if table_only and default_only:
                raise P4Error(f"table {t.name}: action {action.name} is both @tableonly and @defaultonly",
                              _loc(t))
            add_annotations(ref, annos)
            if table_only:
                ref.scope = p4info_pb2.ActionRef.TABLE_ONLY
            elif default_only:
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
        default = t.default_action
        if default is not None and default[0] is not None and not _hidden(default[0].annos) \
                and default[0].name not in {a.name for a, _ in t.actions}:
            # P4_16: a table without default_action runs NoAction; p4c lists it @defaultonly.
            ref = msg.action_refs.add(id=self.ids[(PREFIX.ACTION, default[0].name)])
            ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
            ref.annotations.append("@defaultonly")
        if default is not None and default[0] is not None and not _hidden(default[0].annos):
            action, args = default
            action_id = self.ids[(PREFIX.ACTION, action.name)]
            if t.const_default:
                msg.const_default_action_id = action_id
            msg.initial_default_action.action_id = action_id
            params = action.runtime_params
            types = _param_types(action)
            for (param, width), ptype, param_id in zip(params, types, field_ids(_param_annotations(action))):
                if param in args:
                    width = controller_width(ptype, width)
                    msg.initial_default_action.arguments.add(
                        param_id=param_id, value=_encode(args[param], max(width, args[param].bit_length())))
        if t.implementation is not None:
            msg.implementation_id = self.ids[(PREFIX.ACTION_PROFILE, t.implementation.name)]
        if t.direct_counter is not None:
            msg.direct_resource_ids.append(self.ids[(PREFIX.DIRECT_COUNTER, t.direct_counter.name)])
        if t.direct_meter is not None:
            msg.direct_resource_ids.append(self.ids[(PREFIX.DIRECT_METER, t.direct_meter.name)])
        msg.size = t.size
        msg.idle_timeout_behavior = (p4info_pb2.Table.NOTIFY_CONTROL if getattr(t, "idle_timeout", False)
                                     else p4info_pb2.Table.NO_TIMEOUT)
        entries = _entries_property(t)
        if entries is not None:
            msg.is_const_table = bool(entries.const)
            msg.has_initial_entries = bool(entries.entries)
        elif t.const_entries:
            msg.is_const_table = msg.has_initial_entries = True

    def action(self, msg, a):
        self.preamble(msg, PREFIX.ACTION, a.name, annos=a.annos)
        if a.name in self.bound_params:
            return
        param_annos = _param_annotations(a)
        for (param, width), ptype, param_id, annos in zip(a.runtime_params, _param_types(a),
                                                          field_ids(param_annos), param_annos):
            pmsg = msg.params.add(id=param_id, name=param)
            add_annotations(pmsg, annos)
            add_documentation(pmsg, annos)
            self.typed_width(pmsg, ptype, width)

    def typed_width(self, msg, t, width):
        """A match field's, parameter's or metadata field's bitwidth and, for a `type`, its name
        (type_name) and its entry in type_info.new_types, as p4c writes them: a type with
        @p4runtime_translation shows the controller's width (0 for string), not the data plane's."""
        msg.bitwidth = controller_width(t, width)
        if isinstance(t, T.NewBitT):
            msg.type_name.name = t.name
            self.new_type(t)
        elif isinstance(t, T.EnumT) and t.base is not None:     # p4c lists it in type_info
            self.enum_type_spec(self.p4info, p4types_pb2.P4DataTypeSpec(), t)

    def new_type(self, t):
        spec = self.p4info.type_info.new_types[t.name]
        del spec.annotations[:]         # (described again at each use of the type)
        add_annotations(spec, t.annos, skip=("p4runtime_translation",))
        if t.translation is not None:
            uri, sdn_width = t.translation
            spec.translated_type.uri = uri
            if sdn_width is None:
                spec.translated_type.sdn_string.SetInParent()
            else:
                spec.translated_type.sdn_bitwidth = sdn_width
        else:       # p4c follows a chain of types down to the bits
            bits = spec.original_type.bitstring
            (bits.int if t.signed else bits.bit).bitwidth = t.width

    def _profile(self, p, e, with_selector):
        msg = p.action_profiles.add()
        self.preamble(msg, PREFIX.ACTION_PROFILE, e.name, annos=e.annos, skip=SELECTOR_ANNOTATIONS)
        for table in self.table_of.get(e.name, []):
            msg.table_ids.append(self.ids[(PREFIX.TABLE, table)])
        msg.with_selector = with_selector
        msg.size = e.size
        if not with_selector:
            return      # p4c ignores the selector annotations on a plain profile
        max_group = _annotation_int(e.annos, "max_group_size")
        if max_group is not None:
            msg.max_group_size = max_group
        semantics = _annotation_string(e.annos, "selector_size_semantics")
        if semantics is not None:
            if semantics.lower() == "sum_of_weights":
                msg.sum_of_weights.SetInParent()
            elif semantics.lower() == "sum_of_members":
                msg.sum_of_members.SetInParent()
                weight = _annotation_int(e.annos, "max_member_weight")
                if weight is not None:
                    msg.sum_of_members.max_member_weight = weight
            else:
                raise P4Error(f"action selector {e.name}: @selector_size_semantics must be "
                              f"\"sum_of_weights\" or \"sum_of_members\", not {semantics!r}", e.loc)

    def extern_action_profile(self, p, e):
        self._profile(p, e, False)

    def extern_action_selector(self, p, e):
        self._profile(p, e, True)

    def extern_counter(self, p, e):
        self._counter_or_meter(p.counters, PREFIX.COUNTER, COUNTER_UNITS, e)

    def extern_direct_counter(self, p, e):
        self._counter_or_meter(p.direct_counters, PREFIX.DIRECT_COUNTER, COUNTER_UNITS, e)

    def extern_meter(self, p, e):
        self._counter_or_meter(p.meters, PREFIX.METER, METER_UNITS, e)

    def extern_direct_meter(self, p, e):
        self._counter_or_meter(p.direct_meters, PREFIX.DIRECT_METER, METER_UNITS, e)

    def _counter_or_meter(self, entries, prefix, units, e):
        """An indexed counter or meter has a size; a direct one names its table instead."""
        if self._unused_direct(e):
            return
        msg = entries.add()
        self.preamble(msg, prefix, e.name, annos=e.annos)
        msg.spec.unit = _unit(units, e, e.type_name)
        if e.type_name.startswith("direct_"):
            msg.direct_table_id = self.ids[(PREFIX.TABLE, self.table_of[e.name][0])]
        else:
            msg.size = e.size

    def extern_register(self, p, e):
        msg = p.registers.add()
        self.preamble(msg, PREFIX.REGISTER, e.name, annos=e.annos)
        msg.size = e.size
        if self.enum_type_spec(p, msg.type_spec, getattr(e, "elem_enum", None)):
            return
        signed = getattr(e.obj, "signed", False)
        bits = msg.type_spec.bitstring.int if signed else msg.type_spec.bitstring.bit
        bits.bitwidth = e.width

    def digest(self, p, d):
        msg = p.digests.add()
        self.preamble(msg, PREFIX.DIGEST, d.name)
        if getattr(d, "type", None) is None:
            # digest(r, {a, b}) of no named type: p4c describes the data as a tuple
            for _, width in d.fields:
                msg.type_spec.tuple.members.add().bitstring.bit.bitwidth = width
            return
        if isinstance(d.type, T.BitT):          # digest(r, one_value): a bitstring
            getattr(msg.type_spec.bitstring, "int" if d.type.signed else "bit").bitwidth = d.type.width
            return
        msg.type_spec.struct.name = d.name
        struct = p.type_info.structs[d.name]
        types = dict(getattr(d.type, "fields", ()))
        for field, width in d.fields:
            spec = struct.members.add(name=field).type_spec
            if isinstance(types.get(field), T.ErrorT):      # p4c: the error type, listed in type_info
                spec.error.SetInParent()
                if not p.type_info.error.members:
                    p.type_info.error.members.extend(getattr(self.c, "errors", None) or [])
            elif isinstance(types.get(field), T.NewBitT):
                spec.new_type.name = types[field].name
                self.new_type(types[field])
            elif not self.enum_type_spec(p, spec, types.get(field)):
                spec.bitstring.bit.bitwidth = width

    @staticmethod
    def enum_type_spec(p, spec, t):
        """Describe enum type `t` as p4c does: by name in `spec`, its members in type_info."""
        if not isinstance(t, T.EnumT):
            return False
        if t.base is not None:
            spec.serializable_enum.name = t.name
            info = p.type_info.serializable_enums[t.name]
            info.underlying_type.bitwidth = t.base.width
            if not info.members:
                for member in t.members:
                    info.members.add(name=member, value=_encode(t.values[member] & t.base.mask, t.base.width))
        else:
            spec.enum.name = t.name
            info = p.type_info.enums[t.name]
            if not info.members:
                for member in t.members:
                    info.members.add(name=member)
        return True

    def controller_header(self, msg, name, htype, annos=None):
        # The preamble shows the @controller_header name; the id hashes the type's name (p4c).
        self.preamble(msg, PREFIX.CONTROLLER_HEADER, htype.name, shown_name=name, alias=name, annos=annos)
        annos = [htype.field_annos.get(f) for f, _ in htype.fields]
        for (field, ftype), field_id, fannos in zip(htype.fields, field_ids(annos), annos):
            if _hidden(fannos):
                continue
            field_msg = msg.metadata.add(id=field_id, name=field)
            add_annotations(field_msg, fannos)
            self.typed_width(field_msg, ftype, ftype.width)


def _loc(info):
    return getattr(getattr(info, "decl", None), "loc", None)


def _key_annotations(t):
    decl = getattr(t, "decl", None)
    for prop in getattr(decl, "props", None) or ():
        if prop.kind == "tp_key":
            elems = [k for k in prop.keys if k.match_kind != "selector"]
            if len(elems) == len(t.keys):
                return [k.annos for k in elems]
    return [None] * len(t.keys)


def controller_width(t, width):
    """The width P4Runtime clients use for a value of type `t` (`width` bits in the data plane):
    the @p4runtime_translation width of a `type` that has one (0 for string), as p4c gives it."""
    translation = getattr(t, "translation", None)
    if translation is None:
        return width
    return translation[1] or 0


def _param_types(action):
    """The types of an action's directionless parameters (None where the compiler gives none)."""
    params = getattr(action, "params", None)
    types = [t for _, d, t in params if d is None] if params else []
    return types if len(types) == len(action.runtime_params) else [None] * len(action.runtime_params)


def _param_annotations(action):
    decl = getattr(action, "decl", None)
    params = [p for p in getattr(decl, "params", None) or () if p.direction is None]
    if len(params) == len(action.runtime_params):
        return [p.annos for p in params]
    return [None] * len(action.runtime_params)


def _entries_property(t):
    decl = getattr(t, "decl", None)
    for prop in getattr(decl, "props", None) or ():
        if prop.kind == "tp_entries":
            return prop
    return None


def _unit(units, e, what):
    kind = e.kind_arg
    if kind not in units:
        raise P4Error(f"{what} {e.name}: unknown unit {kind!r} (expected {', '.join(units)})", e.loc)
    return units[kind]


def _encode(value, width):
    return value.to_bytes(max(1, (max(width, 1) + 7) // 8), "big")


def build_p4info(compiled):
    """The P4Info (p4.config.v1.p4info_pb2.P4Info) of a compiled program; P4Error for bad @ids."""
    try:
        return _Builder(compiled).build()
    except P4Error as exc:
        source_map = getattr(compiled, "source_map", None)     # for the source line and caret
        raise (exc.with_source_map(source_map) if source_map else exc) from None


# ------------------------------------------------------------------ serialisation
FORMATS = ("text", "binary", "json")


def serialize(p4info, fmt="text"):
    """P4Info as bytes in p4c's --p4runtime-files formats (text protobuf, binary, JSON)."""
    if fmt == "text":
        from google.protobuf import text_format
        return text_format.MessageToString(p4info).encode()
    if fmt == "binary":
        return p4info.SerializeToString()
    if fmt == "json":
        from google.protobuf import json_format
        return (json_format.MessageToJson(p4info, preserving_proto_field_name=False) + "\n").encode()
    raise ValueError(f"unknown P4Info format {fmt!r} (expected {', '.join(FORMATS)})")
