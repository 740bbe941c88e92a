"""A P4Info, indexed by id and by name, and the byte-string <-> int codec.

P4Runtime sends values as big-endian byte strings, either canonical (no leading
zero bytes) or padded to the full width; both are accepted, and values are
answered in canonical form.
"""
from collections import namedtuple

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2

from testbed.p4rt.errors import P4RuntimeError, invalid, not_found

MatchField = namedtuple("MatchField", "id name bitwidth kind type_name", defaults=(None,))
Param = namedtuple("Param", "id name bitwidth type_name", defaults=(None,))
MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


def decode_int(data, bitwidth, what):
    """A P4Runtime byte string -> int, checked against `bitwidth`: an empty string or a value
    wider than the field is OUT_OF_RANGE (spec 1.4, "Bytestrings"); leading zero bytes are
    fine."""
    if not data:
        raise P4RuntimeError(code_pb2.OUT_OF_RANGE, f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if bitwidth and value >> bitwidth:
        shown = data.hex() if len(data) <= 32 else data[:32].hex() + f"... ({len(data)} bytes)"
        raise P4RuntimeError(code_pb2.OUT_OF_RANGE, f"{what}: value 0x{shown} does not fit in {bitwidth} bits")
    return value


def encode_int(value, bitwidth=None):
    """int -> canonical P4Runtime byte string (shortest, at least one byte)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class TableInfo:
    def __init__(self, table):
        self.id = table.preamble.id
        self.name = table.preamble.name
        self.match_fields = [MatchField(m.id, m.name, m.bitwidth, MATCH_KINDS.get(m.match_type, m.other_match_type or "unknown"),
                                        m.type_name.name or None)
                             for m in table.match_fields]
        self.field_by_id = {m.id: (i, m) for i, m in enumerate(self.match_fields)}
        self.data_plane_widths = {}     # match field name -> the program's width, where P4Info translates it
        self.action_ids = {ref.id for ref in table.action_refs}
        self.default_only = {ref.id for ref in table.action_refs if ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY}
        self.table_only = {ref.id for ref in table.action_refs if ref.scope == p4info_pb2.ActionRef.TABLE_ONLY}
        self.const_default_action_id = table.const_default_action_id
        self.implementation_id = table.implementation_id
        self.direct_resource_ids = set(table.direct_resource_ids)
        self.is_const = table.is_const_table
        self.size = table.size
        self.supports_idle_timeout = table.idle_timeout_behavior == p4info_pb2.Table.NOTIFY_CONTROL
        # Tables with ternary, range or optional keys order entries by priority.
        self.needs_priority = any(m.kind in ("ternary", "range", "optional") for m in self.match_fields)


class ValueSetInfo:
    """A parser value set: its members' match fields are checked as a table's keys are."""

    def __init__(self, value_set):
        self.id = value_set.preamble.id
        self.name = value_set.preamble.name
        self.match_fields = [MatchField(m.id, m.name, m.bitwidth, MATCH_KINDS.get(m.match_type, m.other_match_type or "unknown"))
                             for m in value_set.match]
        self.field_by_id = {m.id: (i, m) for i, m in enumerate(self.match_fields)}
        self.size = value_set.size


class ActionInfo:
    def __init__(self, action):
        self.id = action.preamble.id
        self.name = action.preamble.name
        self.params = [Param(p.id, p.name, p.bitwidth, p.type_name.name or None) for p in action.params]
        self.data_plane_widths = {}     # param name -> the program's width, where P4Info translates it
        self.param_by_id = {p.id: p for p in self.params}
        self.param_by_name = {p.name: p for p in self.params}


class P4InfoIndex:
    """Everything the server needs to translate between P4Runtime ids and engine names."""

    def __init__(self, p4info):
        self.p4info = p4info
        self.tables = {t.preamble.id: TableInfo(t) for t in p4info.tables}
        self.actions = {a.preamble.id: ActionInfo(a) for a in p4info.actions}
        self.action_profiles = {p.preamble.id: p for p in p4info.action_profiles}
        self.counters = {c.preamble.id: c for c in p4info.counters}
        self.direct_counters = {c.preamble.id: c for c in p4info.direct_counters}
        self.meters = {m.preamble.id: m for m in p4info.meters}
        self.direct_meters = {m.preamble.id: m for m in p4info.direct_meters}
        self.registers = {r.preamble.id: r for r in p4info.registers}
        self.digests = {d.preamble.id: d for d in p4info.digests}
        self.value_sets = {v.preamble.id: ValueSetInfo(v) for v in p4info.value_sets}
        self.table_by_name = {t.name: t for t in self.tables.values()}
        self.action_by_name = {a.name: a for a in self.actions.values()}
        self.digest_by_name = {d.preamble.name: d for d in self.digests.values()}
        # @p4runtime_translation types by name: P4Info gives their values' controller width
        self.translations = {name: spec.translated_type for name, spec in p4info.type_info.new_types.items()
                             if spec.HasField("translated_type")}
        self.controller_headers = {}
        for header in p4info.controller_packet_metadata:
            self.controller_headers[header.preamble.name] = [
                (m.id, m.name, m.bitwidth) for m in header.metadata]

    def translation(self, type_name):
        """The translated_type of a `type` with @p4runtime_translation, else None."""
        return self.translations.get(type_name) if type_name else None

    def _get(self, mapping, id_, kind):
        try:
            return mapping[id_]
        except KeyError:
            # INVALID_ARGUMENT, as PI answers ("Invalid P4 id") and as the spec asks of action ids;
            # NOT_FOUND is for entities (entries, members, groups...) that do not exist
            raise invalid(f"{kind} id {id_} is not in the P4Info") from None

    def table(self, id_):
        return self._get(self.tables, id_, "table")

    def action(self, id_):
        return self._get(self.actions, id_, "action")

    def action_profile(self, id_):
        return self._get(self.action_profiles, id_, "action profile")

    def counter(self, id_):
        return self._get(self.counters, id_, "counter")

    def direct_counter(self, id_):
        return self._get(self.direct_counters, id_, "direct counter")

    def meter(self, id_):
        return self._get(self.meters, id_, "meter")

    def direct_meter(self, id_):
        return self._get(self.direct_meters, id_, "direct meter")

    def register(self, id_):
        return self._get(self.registers, id_, "register")

    def digest(self, id_):
        if id_ not in self.digests:   # PI's digest manager answers NOT_FOUND ("not a valid digest id")
            raise not_found(f"digest id {id_} is not in the P4Info")
        return self.digests[id_]

    def value_set(self, id_):
        return self._get(self.value_sets, id_, "value set")

    def type_members(self, type_spec):
        """[(member name, bitwidth)] of a struct type spec, or None for a plain bitstring."""
        if type_spec.HasField("struct"):
            struct = self.p4info.type_info.structs[type_spec.struct.name]
            return [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in struct.members]
        return None

    def bitstring_width(self, type_spec):
        if type_spec.HasField("bitstring"):
            kind = type_spec.bitstring.WhichOneof("type_spec")
            return getattr(type_spec.bitstring, kind).bitwidth
        return 0
