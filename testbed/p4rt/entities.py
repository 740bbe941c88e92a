"""Write and Read of P4Runtime entities against an engine Pipeline.

Translates P4Info ids to engine names and byte strings to ints (and back),
validates what the spec asks servers to validate, and maps engine errors to
canonical codes. Packet replication (multicast groups, clone sessions) and
digest configuration are kept here too, since the engine only takes them
write-only.
"""
import time

from google.rpc import code_pb2

from p4.v1 import p4data_pb2, p4runtime_pb2

from testbed.p4engine import tables as E
from testbed.p4rt.errors import P4RuntimeError, from_table_error, invalid, not_found, unimplemented
from testbed.p4rt.oneshot import OneShots, is_hidden
from testbed.p4rt.p4info import decode_int, encode_int

READ_CHUNK = 256            # entities produced per hold of the switch lock in a Read
Update = p4runtime_pb2.Update
INSERT, MODIFY, DELETE = Update.INSERT, Update.MODIFY, Update.DELETE
OP_NAMES = {INSERT: "INSERT", MODIFY: "MODIFY", DELETE: "DELETE"}


def _entry_id(info, keys, priority):
    """A table entry's identity (table, match, priority), as the one-shot groups are kept by."""
    return info.id, tuple(_key_form(k) for k in keys), priority


def _has_direct(info, resources):
    """Whether the table has one of `resources` (the P4Info's direct counters or meters)."""
    return bool(info.direct_resource_ids & resources.keys())


def _key_form(key):
    """A comparable form of an engine key object (engine classes or the stand-ins)."""
    if key is None:
        return None
    kind = type(key).__name__
    if kind == "Lpm":
        return (kind, key.value, key.prefix_len)
    if kind == "Ternary":
        return (kind, key.value, key.mask)
    if kind == "Range":
        return (kind, key.low, key.high)
    return (kind, key.value)


def _items(collection):
    """(id, value) pairs from a dict, a list of pairs, or objects with an .id."""
    if isinstance(collection, dict):
        return list(collection.items())
    out = []
    for item in collection:
        if isinstance(item, tuple) and len(item) == 2:
            out.append(item)
        else:
            out.append((item.id, item))
    return out


def add_matches(matches, fields, keys):
    """Engine key objects -> FieldMatch messages appended to `matches` (None: left out)."""
    for field, key in zip(fields, keys):
        if key is None:
            continue
        fm = matches.add(field_id=field.id)
        kind = type(key).__name__
        if kind == "Exact":
            fm.exact.value = encode_int(key.value)
        elif kind == "Lpm":
            fm.lpm.value = encode_int(key.value)
            fm.lpm.prefix_len = key.prefix_len
        elif kind == "Ternary":
            fm.ternary.value = encode_int(key.value)
            fm.ternary.mask = encode_int(key.mask)
        elif kind == "Range":
            fm.range.low = encode_int(key.low)
            fm.range.high = encode_int(key.high)
        else:
            fm.optional.value = encode_int(key.value)


def _as_kind(key, field):
    """An Exact key in the form of `field`'s match kind (the same values matched)."""
    if type(key).__name__ != "Exact" or field.kind == "exact":
        return key
    if field.kind == "ternary":
        return E.Ternary(key.value, (1 << field.bitwidth) - 1)
    if field.kind == "lpm":
        return E.Lpm(key.value, field.bitwidth)
    if field.kind == "range":
        return E.Range(key.value, key.value)
    if field.kind == "optional":
        return E.Optional(key.value)
    return key


class DeviceState:
    """What the server keeps besides the pipeline: PRE entries and digest configs."""

    def __init__(self):
        self.multicast_groups = {}     # id -> MulticastGroupEntry
        self.clone_sessions = {}       # id -> CloneSessionEntry
        self.digest_configs = {}       # digest id -> DigestEntry
        self.default_metadata = {}     # table id -> (controller_metadata, metadata) of its default entry
        self.group_max_sizes = {}      # (action profile id, group id) -> max_size given at INSERT
        self.digest_lists = None       # digests.DigestLists the server builds DigestList messages with
        self.oneshots = OneShots()     # the hidden groups of entries programmed with action sets


MAX_INSTANCE = 0xFFFF     # v1model's egress_rid is bit<16>: the largest replica instance
# PI keeps multicast group ids from 2**15 up for the clone sessions it builds on BMv2's PRE, so
# group ids stop below it (OUT_OF_RANGE) and clone session ids too (INVALID_ARGUMENT)
FIRST_RESERVED_MC_GROUP = 1 << 15


def _check_mc_group_id(group_id, wildcard=False):
    if group_id == 0 and not wildcard:
        raise invalid("multicast group id 0 is not valid")
    if group_id >= FIRST_RESERVED_MC_GROUP:
        raise P4RuntimeError(code_pb2.OUT_OF_RANGE, f"multicast group id {group_id} is too high: ids stop at "
                             f"{FIRST_RESERVED_MC_GROUP - 1} (as PI, which keeps the rest for clone sessions)")


class EntityHandler:
    def __init__(self, index, pipeline, state, lock, ports=None, now_us=None):
        self.index = index
        self.pipeline = pipeline
        self.state = state
        self.lock = lock
        self.ports = ports        # the switch's port numbers replicas may name (None: unchecked)
        self.now_us = now_us or (lambda: 0)   # the switch's clock (idle timeout), microseconds

    # == Write ================================================================
    def write(self, update):
        kind = update.entity.WhichOneof("entity")
        if update.type not in OP_NAMES:
            raise invalid(f"update type {update.type} is not INSERT, MODIFY or DELETE")
        handler = getattr(self, f"_write_{kind}", None) if kind else None
        if handler is None:
            raise unimplemented(f"writing {kind or 'an empty entity'} is not supported")
        with self.lock:
            try:
                handler(update.type, getattr(update.entity, kind))
            except E.TableError as exc:
                raise from_table_error(exc) from None
            except (KeyError, IndexError, ValueError) as exc:
                raise invalid(f"{kind}: {exc}") from None

    # -- tables --
    def _engine(self, collection, name, kind):
        try:
            return getattr(self.pipeline, collection)[name]
        except KeyError:
            raise not_found(f"{kind} {name!r} is in the P4Info but not in the loaded program") from None

    def _write_table_entry(self, op, te):
        info = self.index.table(te.table_id)
        table = self._engine("tables", info.name, "table")
        if te.HasField("time_since_last_hit"):
            # as PI, for every update type: the field is only ever filled in by the server
            raise invalid(f"table {info.name}: time_since_last_hit is read-only, leave it unset in a Write")
        if op != DELETE:            # (PI looks at idle_timeout_ns in no DELETE)
            _check_idle_timeout_fields(info, te)
        if te.is_default_action:
            self._write_default_entry(op, info, table, te)
            return
        if is_immutable(info, table):
            self._write_immutable_entry(op, info, table, te)
            return
        keys = self._keys(info, te.match)
        priority = self._priority(info, te.priority)
        entry_id = _entry_id(info, keys, priority)
        if op == DELETE:
            table.delete(keys, priority=priority)
            self._drop_oneshot(entry_id)
            return
        if not te.HasField("action"):
            raise invalid(f"table {info.name}: {OP_NAMES[op]} needs an action")
        oneshot = te.action.WhichOneof("type") == "action_profile_action_set"
        calls = self._oneshot_calls(info, te.action.action_profile_action_set) if oneshot else None
        action = None if oneshot else self._table_action(info, te.action)
        # direct resources are checked before the entry changes: a refused update changes nothing
        counter, meter = self._direct_resource_values(info, te)
        if oneshot:
            entry = self._place_oneshot_entry(op, info, table, keys, priority, calls)
        else:
            entry = (table.insert if op == INSERT else table.modify)(keys, action, priority=priority)
            self._drop_oneshot(entry_id)            # the group a MODIFY replaced
        if entry is not None:         # (the engine's tables return it; stand-ins may not)
            entry.controller_metadata, entry.metadata = te.controller_metadata, te.metadata
            if info.supports_idle_timeout:
                # as PI on BMv2: every INSERT and MODIFY sets the TTL and restarts its timer
                entry.idle_timeout_ns = te.idle_timeout_ns
                entry.last_hit_us, entry.notified_us = self.now_us(), None
        self._set_direct_resources(table, info, keys, priority, counter, meter)

    def _write_immutable_entry(self, op, info, table, te):
        """The spec: a const table's entries take only a MODIFY of their direct resources."""
        if op != MODIFY or te.HasField("action") \
                or not (te.HasField("counter_data") or te.HasField("meter_config")):
            what = "const entries" if info.is_const else \
                "initial entries, kept immutable as BMv2 keeps them"
            raise P4RuntimeError(code_pb2.PERMISSION_DENIED, f"table {info.name} has {what}: only "
                                 "their direct counters and meters can be modified (without an action)")
        keys = self._keys(info, te.match)
        priority = self._priority(info, te.priority)
        self._set_direct_resources(table, info, keys, priority, *self._direct_resource_values(info, te))

    def _place_oneshot_entry(self, op, info, table, keys, priority, calls):
        """INSERT or MODIFY an entry pointing at a new hidden group of `calls`; the group is
        removed again if the table refuses the entry, and a MODIFY frees the group it replaced."""
        profile = self._profile(info.implementation_id)
        group_id, member_ids = self.state.oneshots.create(profile, calls)
        try:
            entry = (table.insert if op == INSERT else table.modify)(keys, E.GroupRef(group_id), priority=priority)
        except Exception:
            self.state.oneshots.drop(profile, group_id, member_ids)
            raise
        entry_id = _entry_id(info, keys, priority)
        self._drop_oneshot(entry_id)
        self.state.oneshots.adopt(entry_id, info.implementation_id, group_id, member_ids, calls)
        return entry

    def _set_direct_resources(self, table, info, keys, priority, counter, meter):
        if counter is not None:     # a table entry's counter_data: the other unit becomes 0
            kind = _counter_kind(getattr(table, "direct_counter", None))
            self._set_entry(table, info, keys, priority, "counter", _written_counts(kind, counter))
        if meter is not None:
            self._set_entry(table, info, keys, priority, "meter_config", meter)

    def _oneshot_calls(self, info, action_set):
        """[(ActionCall, weight)] of a one-shot action set, checked as PI checks it."""
        if not info.implementation_id:
            raise invalid(f"table {info.name} has no action profile: use a direct action")
        pinfo = self.index.action_profile(info.implementation_id)
        self._check_selector_mode(pinfo, oneshot=True)
        actions = action_set.action_profile_actions
        if not actions:
            raise unimplemented(f"table {info.name}: an empty one-shot action set is not supported (as PI)")
        calls = []
        for item in actions:
            if item.weight <= 0:
                raise invalid(f"table {info.name}: one-shot action weight {item.weight}; weights are positive")
            calls.append((self._action_call(info, item.action), item.weight))
        total = sum(w for _, w in calls)
        if pinfo.max_group_size and total > pinfo.max_group_size:
            raise P4RuntimeError(code_pb2.RESOURCE_EXHAUSTED, f"table {info.name}: one-shot weights sum to "
                                 f"{total}, above max_group_size {pinfo.max_group_size}")
        return calls

    def _check_selector_mode(self, pinfo, oneshot):
        """A selector holds either one-shot groups or the client's members and groups (as PI)."""
        pid = pinfo.preamble.id
        if oneshot:
            profile = self._profile(pid)
            mixed = any(not is_hidden(i) for i in _ids_of(profile.members())) or \
                any(not is_hidden(i) for i in _ids_of(profile.groups()))
        else:
            mixed = self.state.oneshots.in_use(pid)
        if mixed:
            raise invalid(f"action profile {pinfo.preamble.name}: one-shot action sets and "
                          "members/groups cannot be mixed in one action selector")

    def _drop_oneshot(self, key):
        dropped = self.state.oneshots.forget(key)
        if dropped is not None:
            profile_id, group_id, member_ids = dropped
            self.state.oneshots.drop(self._profile(profile_id), group_id, member_ids)

    def _write_default_entry(self, op, info, table, te):
        """The spec's (and PI's) rules for the default entry: MODIFY only, no match, priority 0,
        not on an indirect table (its default is a const NoAction), PERMISSION_DENIED if const."""
        if op != MODIFY:
            raise invalid(f"table {info.name}: the default entry can only be modified, not {OP_NAMES[op]}")
        if te.match:
            raise invalid(f"table {info.name}: a default entry has no match fields")
        if te.priority:
            raise invalid(f"table {info.name}: a default entry has priority 0, got {te.priority}")
        if info.implementation_id:
            raise invalid(f"table {info.name} uses an action profile: its default entry cannot be "
                          "set or reset (the spec keeps it a constant NoAction)")
        if info.const_default_action_id:
            raise P4RuntimeError(code_pb2.PERMISSION_DENIED, f"table {info.name}: the default action is const")
        kind = te.action.WhichOneof("type") if te.HasField("action") else None
        if kind is None:
            table.reset_default()
            # a reset also resets the entry's metadata (spec, "Default Entry")
            self.state.default_metadata.pop(info.id, None)
            return
        if kind != "action":
            raise invalid(f"table {info.name}: a default entry takes a direct action, not {kind}")
        table.set_default(self._action_call(info, te.action.action, default=True))
        self.state.default_metadata[info.id] = (te.controller_metadata, te.metadata)

    def _direct_resource_values(self, info, te):
        """The counter_data and meter_config a written TableEntry carries (None when absent),
        refused with INVALID_ARGUMENT, as PI does, when the table has no such direct resource."""
        counter = meter = None
        if te.HasField("counter_data"):
            if not _has_direct(info, self.index.direct_counters):
                raise invalid(f"table {info.name} has no direct counter: leave counter_data unset")
            counter = te.counter_data
        if te.HasField("meter_config"):
            if not _has_direct(info, self.index.direct_meters):
                raise invalid(f"table {info.name} has no direct meter: leave meter_config unset")
            c = te.meter_config
            meter = _checked_meter_config(f"table {info.name} meter_config", c)
        return counter, meter

    def _keys(self, info, matches, owner=None):
        owner = owner or f"table {info.name}"      # (or a value set's member)
        keys = [None] * len(info.match_fields)
        for fm in matches:
            try:
                i, field = info.field_by_id[fm.field_id]
            except KeyError:
                raise invalid(f"{owner}: match field id {fm.field_id} is not one of its keys") from None
            if keys[i] is not None:
                raise invalid(f"{owner}: match field {field.name or fm.field_id} given twice")
            kind = fm.WhichOneof("field_match_type")
            if kind != field.kind:
                raise invalid(f"{owner}: field {field.name or fm.field_id} is {field.kind}, got a {kind} match")
            what = f"{owner} field {field.name or fm.field_id}"
            width = field.bitwidth
            translated = self.index.translation(field.type_name)
            if translated is not None:
                _untranslated_field(what, field, translated, getattr(info, "data_plane_widths", {}).get(field.name))
            if kind == "exact":
                keys[i] = E.Exact(decode_int(fm.exact.value, width, what))
            elif kind == "lpm":
                value = decode_int(fm.lpm.value, width, what)
                plen = fm.lpm.prefix_len
                if not 0 < plen <= width:
                    raise invalid(f"{what}: prefix length {plen} not in 1..{width} (omit the field to match all)")
                if value & ((1 << (width - plen)) - 1):
                    raise invalid(f"{what}: value has bits set beyond the /{plen} prefix")
                keys[i] = E.Lpm(value, plen)
            elif kind == "ternary":
                value = decode_int(fm.ternary.value, width, what)
                mask = decode_int(fm.ternary.mask, width, what + " mask")
                if mask == 0:
                    raise invalid(f"{what}: all-zero mask (omit the field for don't care)")
                if value & ~mask:
                    raise invalid(f"{what}: value has bits set outside the mask")
                keys[i] = E.Ternary(value, mask)
            elif kind == "range":
                low = decode_int(fm.range.low, width, what + " low")
                high = decode_int(fm.range.high, width, what + " high")
                if low > high:
                    raise invalid(f"{what}: range low {low} > high {high}")
                if low == 0 and high == (1 << width) - 1:
                    raise invalid(f"{what}: full range (omit the field for don't care)")
                keys[i] = E.Range(low, high)
            elif kind == "optional":
                keys[i] = E.Optional(decode_int(fm.optional.value, width, what))
            else:
                raise unimplemented(f"{what}: match kind {kind} is not supported")
        for i, field in enumerate(info.match_fields):
            if keys[i] is None and field.kind == "exact":
                raise invalid(f"{owner}: exact field {field.name or field.id} is missing")
        return keys

    def _priority(self, info, priority):
        if info.needs_priority:
            if priority <= 0:
                raise invalid(f"table {info.name} has ternary/range/optional keys: entries need a priority > 0")
            return priority
        if priority:
            raise invalid(f"table {info.name} has only exact/lpm keys: priority must be 0")
        return None

    def _action_call(self, info, action, default=False):
        ainfo = self.index.action(action.action_id)
        if info is not None:
            if ainfo.id not in info.action_ids:
                raise invalid(f"table {info.name}: action {ainfo.name} is not one of its actions")
            # a valid action used outside its P4Info scope: PERMISSION_DENIED (the spec, PI)
            if default and ainfo.id in info.table_only:
                raise P4RuntimeError(code_pb2.PERMISSION_DENIED,
                                     f"table {info.name}: action {ainfo.name} is @tableonly, not a default action")
            if not default and ainfo.id in info.default_only:
                raise P4RuntimeError(code_pb2.PERMISSION_DENIED,
                                     f"table {info.name}: action {ainfo.name} is @defaultonly")
        args = {}
        for p in action.params:
            param = ainfo.param_by_id.get(p.param_id)
            if param is None:
                raise invalid(f"action {ainfo.name}: param id {p.param_id} is not one of its params")
            if param.name in args:
                raise invalid(f"action {ainfo.name}: param {param.name} given twice")
            what = f"action {ainfo.name} param {param.name}"
            args[param.name] = decode_int(p.value, param.bitwidth, what)
            translated = self.index.translation(param.type_name)
            if translated is not None:
                _untranslated_value(what, param, translated, ainfo.data_plane_widths.get(param.name),
                                    args[param.name])
        missing = [p.name for p in ainfo.params if p.name not in args]
        if missing:
            raise invalid(f"action {ainfo.name}: missing param(s) {', '.join(missing)}")
        return E.ActionCall(ainfo.name, args)

    def _table_action(self, info, table_action):
        kind = table_action.WhichOneof("type")
        if kind == "action":
            return self._action_call(info, table_action.action)
        if kind in ("action_profile_member_id", "action_profile_group_id"):
            if not info.implementation_id:
                raise invalid(f"table {info.name} has no action profile: use a direct action")
            self._check_selector_mode(self.index.action_profile(info.implementation_id), oneshot=False)
            if kind == "action_profile_member_id":
                return E.MemberRef(table_action.action_profile_member_id)
            return E.GroupRef(table_action.action_profile_group_id)
        raise invalid(f"table {info.name}: the entry has no action")

    def _find_entry(self, table, info, keys, priority):
        if hasattr(table, "find"):
            return table.find(keys, priority)
        wanted = [_key_form(k) for k in keys]
        for entry in table.entries():
            if [_key_form(k) for k in entry.keys] == wanted and (entry.priority or None) == priority:
                return entry
        raise not_found(f"table {info.name}: no entry with that match")

    def _set_entry(self, table, info, keys, priority, attr, value):
        entry = self._find_entry(table, info, keys, priority)
        try:
            setattr(entry, attr, value)
        except AttributeError:
            raise unimplemented(f"table {info.name}: entries do not take {attr} writes") from None

    # -- action profiles --
    def _profile(self, profile_id):
        return self._engine("action_profiles", self.index.action_profile(profile_id).preamble.name,
                            "action profile")

    def _write_action_profile_member(self, op, m):
        profile = self._profile(m.action_profile_id)
        self._check_selector_mode(self.index.action_profile(m.action_profile_id), oneshot=False)
        if op == DELETE:
            profile.delete_member(m.member_id)
            return
        call = self._action_call(None, m.action)
        (profile.insert_member if op == INSERT else profile.modify_member)(m.member_id, call)

    def _write_action_profile_group(self, op, g):
        """As PI's action profile manager (and the spec): max_size is fixed when the group is
        inserted, may not exceed the P4Info's max_group_size, and weights are positive."""
        pinfo = self.index.action_profile(g.action_profile_id)
        profile = self._profile(g.action_profile_id)
        self._check_selector_mode(pinfo, oneshot=False)
        key = (pinfo.preamble.id, g.group_id)
        if op == DELETE:
            profile.delete_group(g.group_id)
            self.state.group_max_sizes.pop(key, None)
            return
        what = f"action profile {pinfo.preamble.name} group {g.group_id}"
        if g.max_size < 0:
            raise invalid(f"{what}: max_size {g.max_size} is negative")
        if pinfo.max_group_size and g.max_size > pinfo.max_group_size:
            raise invalid(f"{what}: max_size {g.max_size} exceeds the P4Info's max_group_size "
                          f"{pinfo.max_group_size}")
        if op == MODIFY and key in self.state.group_max_sizes and g.max_size != self.state.group_max_sizes[key]:
            raise invalid(f"{what}: max_size is set when the group is inserted "
                          f"({self.state.group_max_sizes[key]}), it cannot change to {g.max_size}")
        members = []
        for m in g.members:
            if m.weight <= 0:
                raise invalid(f"{what}: member {m.member_id} has weight {m.weight}; weights are positive")
            members.append((m.member_id, m.weight))
        limit = g.max_size or pinfo.max_group_size
        if limit and sum(w for _, w in members) > limit:
            raise P4RuntimeError(code_pb2.RESOURCE_EXHAUSTED,
                                 f"{what}: total weight exceeds the maximum group size {limit}")
        (profile.insert_group if op == INSERT else profile.modify_group)(g.group_id, members)
        if op == INSERT:
            self.state.group_max_sizes[key] = g.max_size

    # -- parser value sets --
    def _write_value_set_entry(self, op, v):
        # P4Runtime: a value set is only modified, all its members at once
        info = self.index.value_set(v.value_set_id)
        self._modify_only(op, f"value set {info.name}")
        value_set = self._engine("value_sets", info.name, "value set")
        value_set.replace([self._keys(info, m.match, f"value set {info.name} member")
                           for m in v.members])

    # -- indexed externs --
    def _index_of(self, entry, size, name):
        if not entry.HasField("index"):
            raise invalid(f"{name}: writes need an index")
        i = entry.index.index
        if i < 0:
            raise invalid(f"{name}: negative index {i}")
        if i >= size:
            raise P4RuntimeError(code_pb2.OUT_OF_RANGE, f"{name}: index {i} not in 0..{size - 1}")
        return i

    def _modify_only(self, op, name):
        if op != MODIFY:
            raise invalid(f"{name}: only MODIFY is allowed, not {OP_NAMES[op]}")

    def _write_counter_entry(self, op, c):
        info = self.index.counter(c.counter_id)
        name = info.preamble.name
        self._modify_only(op, name)
        counter = self._engine("counters", name, "counter")
        index = self._index_of(c, info.size, name) if c.HasField("index") else None
        if not c.HasField("data"):
            return      # the spec: without data the counter is not modified (PI zeroes it)
        kind = _counter_kind(counter)
        for i in ([index] if index is not None else range(info.size)):
            counter.write(i, *_written_counts(kind, c.data, counter.read(i)))

    def _write_meter_entry(self, op, m):
        info = self.index.meter(m.meter_id)
        name = info.preamble.name
        self._modify_only(op, name)
        meter = self._engine("meters", name, "meter")
        i = self._index_of(m, info.size, name)
        if not m.HasField("config"):
            meter.reset_config(i)       # as PI: no config is the default (every packet GREEN)
            return
        meter.set_config(i, *_checked_meter_config(name, m.config))

    def _write_register_entry(self, op, r):
        info = self.index.register(r.register_id)
        name = info.preamble.name
        self._modify_only(op, name)
        register = self._engine("registers", name, "register")
        if r.data.WhichOneof("data") != "bitstring":
            raise invalid(f"register {name}: data must be a bitstring")
        width = self.index.bitstring_width(info.type_spec)
        value = decode_int(r.data.bitstring, width, f"register {name}")
        if r.HasField("index"):
            register.write(self._index_of(r, info.size, name), value)
        else:
            for i in range(info.size):
                register.write(i, value)

    def _direct_table(self, info, resources, kind):
        """The engine table of `info`, refused (INVALID_ARGUMENT, as PI) if it has no `kind`."""
        if not _has_direct(info, resources):
            raise invalid(f"table {info.name} has no {kind}")
        return self._engine("tables", info.name, "table")

    def _direct_target(self, te, resources, kind):
        info = self.index.table(te.table_id)
        table = self._direct_table(info, resources, kind)
        keys = self._keys(info, te.match)
        priority = self._priority(info, te.priority)
        return table, info, keys, priority

    def _write_direct_counter_entry(self, op, d):
        self._modify_only(op, "direct counter")
        table, info, keys, priority = self._direct_target(d.table_entry, self.index.direct_counters, "direct counter")
        if not d.HasField("data"):
            # the spec: without data the counter is not modified (PI zeroes it); the entry
            # must still exist
            self._find_entry(table, info, keys, priority)
            return
        current = self._find_entry(table, info, keys, priority).counter
        counts = _written_counts(_counter_kind(getattr(table, "direct_counter", None)), d.data, current)
        self._set_entry(table, info, keys, priority, "counter", counts)

    def _write_direct_meter_entry(self, op, d):
        self._modify_only(op, "direct meter")
        table, info, keys, priority = self._direct_target(d.table_entry, self.index.direct_meters, "direct meter")
        config = _checked_meter_config(f"table {info.name} direct meter", d.config) if d.HasField("config") else None
        self._set_entry(table, info, keys, priority, "meter_config", config)

    # -- packet replication engine and digests --
    def _write_packet_replication_engine_entry(self, op, pre):
        kind = pre.WhichOneof("type")
        if kind == "multicast_group_entry":
            g = pre.multicast_group_entry
            _check_mc_group_id(g.multicast_group_id)
            self._pre_write(op, g.multicast_group_id, g, self.state.multicast_groups, "multicast group",
                            lambda: self.pipeline.set_mc_group(g.multicast_group_id, self._replicas(g.replicas)),
                            lambda: self.pipeline.delete_mc_group(g.multicast_group_id))
        elif kind == "clone_session_entry":
            s = pre.clone_session_entry
            if s.session_id >= FIRST_RESERVED_MC_GROUP:
                raise invalid(f"clone session id {s.session_id} is out of range (1..{FIRST_RESERVED_MC_GROUP - 1}, as PI)")
            if op != DELETE and s.class_of_service:
                raise unimplemented("class_of_service in clone sessions is not supported (as PI): leave it 0")
            self._pre_write(op, s.session_id, s, self.state.clone_sessions, "clone session",
                            lambda: self.pipeline.set_clone_session(s.session_id, self._replicas(s.replicas),
                                                                    truncate=s.packet_length_bytes),
                            lambda: self.pipeline.delete_clone_session(s.session_id))
        else:
            raise invalid("packet replication engine entry without a multicast group or clone session")

    def _replicas(self, replicas):
        out = []
        for r in replicas:
            port = r.egress_port if r.WhichOneof("port_kind") != "port" else decode_int(r.port, 32, "replica port")
            # the spec: a replica's port must be a (singleton) port of the switch
            if self.ports is not None and port not in self.ports:
                raise invalid(f"replica port {port} is not a port of this switch "
                              f"(ports: {', '.join(map(str, sorted(self.ports))) or 'none'})")
            if r.instance > MAX_INSTANCE:
                raise invalid(f"replica instance {r.instance} does not fit v1model's egress_rid "
                              f"(bit<16>, at most {MAX_INSTANCE})")
            out.append((port, r.instance))
        if len(set(out)) != len(out):
            raise invalid("replicas must be unique (port, instance) pairs")
        return out

    def _pre_write(self, op, id_, message, store, what, apply, remove):
        if id_ == 0:
            raise invalid(f"{what} id 0 is not valid")
        exists = id_ in store
        if op == INSERT and exists:
            raise P4RuntimeError(code_pb2.ALREADY_EXISTS, f"{what} {id_} already exists")
        if op in (MODIFY, DELETE) and not exists:
            raise not_found(f"{what} {id_} does not exist")
        if op == DELETE:
            remove()
            del store[id_]
            return
        apply()
        copy = type(message)()
        copy.CopyFrom(message)
        store[id_] = copy

    def _write_digest_entry(self, op, d):
        info = self.index.digest(d.digest_id)
        store = self.state.digest_configs
        exists = d.digest_id in store
        if op == INSERT and exists:
            raise P4RuntimeError(code_pb2.ALREADY_EXISTS, f"digest {info.preamble.name} is already configured")
        if op in (MODIFY, DELETE) and not exists:
            raise not_found(f"digest {info.preamble.name} is not configured")
        if op == DELETE:
            del store[d.digest_id]
        else:
            copy = p4runtime_pb2.DigestEntry()
            copy.CopyFrom(d)
            store[d.digest_id] = copy
        if self.state.digest_lists is not None:
            self.state.digest_lists.configure(d.digest_id, None if op == DELETE else store[d.digest_id].config)

    # == Read =================================================================
    def read(self, entity, new_entity=p4runtime_pb2.Entity):
        """The entities that answer `entity`, each made by new_entity() (a Read's response
        can have them made in place: a copy of each costs as much as building it)."""
        self._new_entity = new_entity
        kind = entity.WhichOneof("entity")
        handler = getattr(self, f"_read_{kind}", None) if kind else None
        if handler is None:
            raise unimplemented(f"reading {kind or 'an empty entity'} is not supported")
        # The lock is held READ_CHUNK entities at a time, then let go: a wildcard read of a
        # 65536-cell counter takes seconds of protobuf building and must not stop the data path
        # (or Writes) that long. A wildcard read is thus not one atomic snapshot.
        entities = []
        produce = handler(getattr(entity, kind))
        try:
            while True:
                with self.lock:
                    for _ in range(READ_CHUNK):
                        entities.append(next(produce))
                time.sleep(0)       # let a waiting data path take the lock
        except StopIteration:
            return entities
        except E.TableError as exc:
            raise from_table_error(exc) from None

    def _wrap(self, field, message):
        entity = self._new_entity()
        getattr(entity, field).CopyFrom(message)
        return entity

    def _selected(self, mapping, id_, lookup):
        return [lookup(id_)] if id_ else list(mapping.values())

    def _read_table_entry(self, te):
        infos = self._selected(self.index.tables, te.table_id, self.index.table)
        want_counters = te.HasField("counter_data")
        want_meters = te.HasField("meter_config")
        want_elapsed = te.HasField("time_since_last_hit")
        now_us = self.now_us() if want_elapsed else 0
        if te.is_default_action and want_elapsed:
            raise invalid("default entries do not age: leave time_since_last_hit unset when reading them")
        action_filter = _action_filter(te)
        for info in infos:
            table = self._engine("tables", info.name, "table")
            if want_elapsed and not info.supports_idle_timeout:
                # as PI: refused even in a wildcard read over tables some of which support it
                raise invalid(f"table {info.name} does not support idle timeout: leave "
                              "time_since_last_hit unset when reading it")
            if te.is_default_action:
                # with table_id 0, every table's default entry (as PI reads them)
                out = p4runtime_pb2.TableEntry(table_id=info.id, is_default_action=True)
                default = table.get_default()
                # a table with an action profile has no default action to read: BMv2 keeps
                # none (p4c-bm2-ss drops it), so PI answers the entry without an action
                if default is not None and default.action is not None and not info.implementation_id:
                    out.action.action.CopyFrom(self._action_proto(default))
                out.controller_metadata, out.metadata = self.state.default_metadata.get(info.id, (0, b""))
                yield self._wrap("table_entry", out)
                continue
            wanted = None
            if te.match:
                wanted = ([_key_form(k) for k in self._keys(info, te.match)],
                          self._priority(info, te.priority))
            for entry in table.entries():
                if wanted is not None and ([_key_form(k) for k in entry.keys], entry.priority or None) != wanted:
                    continue
                if wanted is None and te.priority and entry.priority != te.priority:
                    continue
                if not self._passes_read_filters(te, entry, action_filter):
                    continue
                out = self._entry_proto(info, entry, want_counters, want_meters)
                if want_elapsed:
                    since = getattr(entry, "last_hit_us", now_us)
                    out.time_since_last_hit.elapsed_ns = max(0, now_us - since) * 1000
                yield self._wrap("table_entry", out)

    def _passes_read_filters(self, te, entry, action_filter):
        """The spec's wildcard-read filters besides match and priority: a set action_id,
        controller_metadata or metadata keeps only the entries that have it (PI ignores them)."""
        if te.controller_metadata and getattr(entry, "controller_metadata", 0) != te.controller_metadata:
            return False
        if te.metadata and getattr(entry, "metadata", b"") != te.metadata:
            return False
        if action_filter is not None:
            ainfo = self.index.action_by_name.get(getattr(entry.action, "action", None))
            if ainfo is None or ainfo.id != action_filter:
                return False
        return True

    def _entry_proto(self, info, entry, want_counters=False, want_meters=False):
        out = p4runtime_pb2.TableEntry(table_id=info.id, priority=entry.priority or 0)
        add_matches(out.match, info.match_fields, entry.keys)
        out.controller_metadata = getattr(entry, "controller_metadata", 0)
        out.metadata = getattr(entry, "metadata", b"")
        out.idle_timeout_ns = getattr(entry, "idle_timeout_ns", 0)
        action = entry.action
        kind = type(action).__name__
        if kind == "MemberRef":
            out.action.action_profile_member_id = action.id
        elif kind == "GroupRef" and is_hidden(action.id):
            action_set = self.state.oneshots.action_set(_entry_id(info, entry.keys, entry.priority or None))
            for call, weight in action_set or ():
                item = out.action.action_profile_action_set.action_profile_actions.add(weight=weight)
                item.action.CopyFrom(self._action_proto(call))
        elif kind == "GroupRef":
            out.action.action_profile_group_id = action.id
        elif action is not None and action.action is not None:
            out.action.action.CopyFrom(self._action_proto(action))
        if want_counters and _has_direct(info, self.index.direct_counters) \
                and getattr(entry, "counter", None) is not None:
            out.counter_data.packet_count, out.counter_data.byte_count = entry.counter
        if want_meters and getattr(entry, "meter_config", None) is not None:
            cir, cburst, pir, pburst = entry.meter_config[:4]
            out.meter_config.cir, out.meter_config.cburst = cir, cburst
            out.meter_config.pir, out.meter_config.pburst = pir, pburst
        return out

    def _action_proto(self, call):
        ainfo = self.index.action_by_name.get(call.action)
        if ainfo is None:
            raise P4RuntimeError(code_pb2.INTERNAL, f"engine action {call.action!r} is not in the P4Info")
        out = p4runtime_pb2.Action(action_id=ainfo.id)
        for param in ainfo.params:
            out.params.add(param_id=param.id, value=encode_int(call.args.get(param.name, 0)))
        return out

    def _read_action_profile_member(self, m):
        for pinfo in self._selected(self.index.action_profiles, m.action_profile_id, self.index.action_profile):
            profile = self._engine("action_profiles", pinfo.preamble.name, "action profile")
            for member_id, call in _items(profile.members()):
                if (m.member_id and member_id != m.member_id) or is_hidden(member_id):
                    continue
                call = getattr(call, "action", call) if not hasattr(call, "args") else call
                out = p4runtime_pb2.ActionProfileMember(action_profile_id=pinfo.preamble.id, member_id=member_id)
                out.action.CopyFrom(self._action_proto(call))
                yield self._wrap("action_profile_member", out)

    def _read_action_profile_group(self, g):
        for pinfo in self._selected(self.index.action_profiles, g.action_profile_id, self.index.action_profile):
            profile = self._engine("action_profiles", pinfo.preamble.name, "action profile")
            for group_id, members in _items(profile.groups()):
                if (g.group_id and group_id != g.group_id) or is_hidden(group_id):
                    continue
                members = getattr(members, "members", members)
                out = p4runtime_pb2.ActionProfileGroup(action_profile_id=pinfo.preamble.id, group_id=group_id)
                out.max_size = self.state.group_max_sizes.get((pinfo.preamble.id, group_id), 0)
                for member_id, weight in members:
                    out.members.add(member_id=member_id, weight=weight)
                yield self._wrap("action_profile_group", out)

    def _indices(self, entry, size, name):
        if entry.HasField("index"):
            i = entry.index.index
            if i < 0:
                raise invalid(f"{name}: negative index {i}")
            if i >= size:
                raise P4RuntimeError(code_pb2.OUT_OF_RANGE, f"{name}: index {i} not in 0..{size - 1}")
            return [i]
        return range(size)

    def _read_counter_entry(self, c):
        for info in self._selected(self.index.counters, c.counter_id, self.index.counter):
            name = info.preamble.name
            counter = self._engine("counters", name, "counter")
            for i in self._indices(c, info.size, name):
                packets, nbytes = counter.read(i)
                entity = self._new_entity()           # built in place: no copy per cell
                out = entity.counter_entry
                out.counter_id = info.preamble.id
                out.index.index = i
                out.data.packet_count, out.data.byte_count = packets, nbytes
                yield entity

    def _read_meter_entry(self, m):
        for info in self._selected(self.index.meters, m.meter_id, self.index.meter):
            name = info.preamble.name
            meter = self._engine("meters", name, "meter")
            for i in self._indices(m, info.size, name):
                out = p4runtime_pb2.MeterEntry(meter_id=info.preamble.id)
                out.index.index = i
                config = meter.get_config(i)
                if config:
                    out.config.cir, out.config.cburst, out.config.pir, out.config.pburst = config[:4]
                yield self._wrap("meter_entry", out)

    def _read_value_set_entry(self, v):
        for info in self._selected(self.index.value_sets, v.value_set_id, self.index.value_set):
            value_set = self._engine("value_sets", info.name, "value set")
            out = p4runtime_pb2.ValueSetEntry(value_set_id=info.id)
            for member in value_set.members():
                # a member added exactly (simple_switch_CLI's pvs_add) is shown in its field's kind
                keys = [_as_kind(key, field) for key, field in zip(member, info.match_fields)]
                add_matches(out.members.add().match, info.match_fields, keys)
            yield self._wrap("value_set_entry", out)

    def _read_register_entry(self, r):
        for info in self._selected(self.index.registers, r.register_id, self.index.register):
            name = info.preamble.name
            register = self._engine("registers", name, "register")
            for i in self._indices(r, info.size, name):
                entity = self._new_entity()
                out = entity.register_entry
                out.register_id = info.preamble.id
                out.index.index = i
                out.data.bitstring = encode_int(register.read(i))
                yield entity

    def _direct_entries(self, te, resources, kind):
        """(table info, entry) for the entries a direct resource read selects."""
        if te.table_id:
            infos = [self.index.table(te.table_id)]
        else:
            table_ids = {r.direct_table_id for r in resources.values()}
            infos = [self.index.tables[t] for t in table_ids if t in self.index.tables]
        for info in infos:
            table = self._direct_table(info, resources, kind)
            if te.match:
                keys = self._keys(info, te.match)
                yield info, self._find_entry(table, info, keys, self._priority(info, te.priority))
            else:
                for entry in table.entries():
                    yield info, entry

    def _read_direct_counter_entry(self, d):
        for info, entry in self._direct_entries(d.table_entry, self.index.direct_counters, "direct counter"):
            out = p4runtime_pb2.DirectCounterEntry()
            _key_proto(out.table_entry, info, entry)
            packets, nbytes = getattr(entry, "counter", None) or (0, 0)
            out.data.packet_count, out.data.byte_count = packets, nbytes
            yield self._wrap("direct_counter_entry", out)

    def _read_direct_meter_entry(self, d):
        for info, entry in self._direct_entries(d.table_entry, self.index.direct_meters, "direct meter"):
            out = p4runtime_pb2.DirectMeterEntry()
            _key_proto(out.table_entry, info, entry)
            config = getattr(entry, "meter_config", None)
            if config:
                out.config.cir, out.config.cburst, out.config.pir, out.config.pburst = config[:4]
            yield self._wrap("direct_meter_entry", out)

    def _read_packet_replication_engine_entry(self, pre):
        kind = pre.WhichOneof("type")
        if kind is None:
            raise invalid("read a packet replication engine entry with multicast_group_entry or "
                          "clone_session_entry set (an empty one selects neither, as PI answers)")
        if kind == "multicast_group_entry":
            _check_mc_group_id(pre.multicast_group_entry.multicast_group_id, wildcard=True)
        if kind == "clone_session_entry":
            wanted, store, field = pre.clone_session_entry.session_id, self.state.clone_sessions, "clone_session_entry"
        else:
            wanted, store = pre.multicast_group_entry.multicast_group_id, self.state.multicast_groups
            field = "multicast_group_entry"
        if wanted and wanted not in store:
            raise not_found(f"{field.replace('_', ' ')} {wanted} does not exist")
        for id_, message in sorted(store.items()):
            if wanted and id_ != wanted:
                continue
            out = p4runtime_pb2.PacketReplicationEngineEntry()
            getattr(out, field).CopyFrom(message)
            yield self._wrap("packet_replication_engine_entry", out)

    def _read_digest_entry(self, d):
        if d.digest_id:
            info = self.index.digest(d.digest_id)
            if d.digest_id not in self.state.digest_configs:
                raise not_found(f"digest {info.preamble.name} is not configured")     # as PI
        for id_, message in sorted(self.state.digest_configs.items()):
            if not d.digest_id or id_ == d.digest_id:
                yield self._wrap("digest_entry", message)


def _counter_kind(counter):
    """The declared unit of an engine counter ("packets", "bytes" or "packets_and_bytes")."""
    return getattr(counter, "type", "packets_and_bytes")


def _written_counts(kind, data, current=(0, 0)):
    """The (packets, bytes) a P4Runtime CounterData leaves in a counter declared with `kind`, as
    simple_switch_grpc writes it: PI takes only the declared unit's count from the message
    (DeviceMgr's counter_data_proto_to_pi) while BMv2 keeps both counts, so the other one keeps
    the cell's value on a CounterEntry/DirectCounterEntry write (merge_current_value in BMv2's
    PI/src/pi_counter_imp.cpp) and is 0 from a TableEntry's counter_data
    (convert_from_counter_data in set_direct_resources)."""
    packets, nbytes = current
    if kind != "bytes":
        packets = data.packet_count
    if kind != "packets":
        nbytes = data.byte_count
    return packets, nbytes


def _action_filter(te):
    """The action_id a table read filters on (None: no action filter). The spec filters on a
    direct action's id only, not on its parameters nor on member or group ids."""
    if not te.HasField("action"):
        return None
    kind = te.action.WhichOneof("type")
    if kind != "action":
        raise invalid(f"table entry read (table id {te.table_id}): a read filters on a direct action's "
                      f"action_id only, not on {kind or 'an empty action'}")
    return te.action.action.action_id or None


def is_immutable(info, table):
    """A const table, or one with initial `entries` (not const): the engine keeps both
    immutable, as BMv2 keeps every table its JSON gives entries (the spec would let the
    latter be written)."""
    return info.is_const or getattr(table, "is_const", False)


def _ids_of(collection):
    return collection.keys() if isinstance(collection, dict) else [i for i, _ in _items(collection)]


def _key_proto(out, info, entry):
    """The table entry of a DirectCounterEntry / DirectMeterEntry read: its key only (table id,
    match, priority), as PI answers; the action and the rest are the TableEntry's to read."""
    out.table_id, out.priority = info.id, entry.priority or 0
    add_matches(out.match, info.match_fields, entry.keys)


def _checked_meter_config(what, c):
    """A MeterConfig as (cir, cburst, pir, pburst), refused with INVALID_ARGUMENT before anything
    is written (as PI validates it first) if it is not a two-rate config the meter can take."""
    values = (c.cir, c.cburst, c.pir, c.pburst)
    if min(values) < 0:
        raise invalid(f"{what}: rates and bursts must be >= 0, got cir {c.cir} cburst {c.cburst} "
                      f"pir {c.pir} pburst {c.pburst}")
    if max(c.cburst, c.pburst) > 0xFFFFFFFF:
        # PI keeps bursts in 32 bits and refuses larger ones first (validate_meter_spec)
        raise unimplemented(f"{what}: a burst above 2^32-1 is not supported (cburst {c.cburst}, "
                            f"pburst {c.pburst})")
    if c.cir > c.pir:
        raise invalid(f"{what}: committed rate {c.cir} exceeds peak rate {c.pir}")
    return values


def _check_idle_timeout_fields(info, te):
    """The spec's rules for idle_timeout_ns in a written TableEntry (INVALID_ARGUMENT, as PI
    answers): no negative TTL, none at all on a table without support_timeout (P4Info
    NOTIFY_CONTROL) or on the default entry. (time_since_last_hit is refused in every Write.)"""
    if te.idle_timeout_ns < 0:
        raise invalid(f"table {info.name}: idle_timeout_ns must not be negative, got {te.idle_timeout_ns}")
    if te.is_default_action and te.idle_timeout_ns:
        raise invalid(f"table {info.name}: the default entry takes no idle_timeout_ns")
    if not info.supports_idle_timeout and te.idle_timeout_ns:
        raise invalid(f"table {info.name} does not support idle timeout (no support_timeout = true): "
                      "idle_timeout_ns must be 0")


# @p4runtime_translation: P4Info gives such a type's values at the controller's width, and the
# P4Runtime server is to translate them to the data plane's. This server knows no URI, like
# simple_switch_grpc (PI translates nothing): values pass unchanged. It refuses what would not
# pass unchanged, where simple_switch_grpc refuses a match key whose byte count differs from
# the field's (BAD_MATCH_KEY) and silently truncates a too-wide action argument.
def _translation_text(type_name, translated):
    sdn = "string" if translated.HasField("sdn_string") else f"bit<{translated.sdn_bitwidth}>"
    return f'type {type_name} (@p4runtime_translation("{translated.uri}", {sdn}))'


def _untranslated_field(what, field, translated, width):
    if width is None or translated.HasField("sdn_string") or translated.sdn_bitwidth != width:
        raise invalid(f"{what}: {_translation_text(field.type_name, translated)} is not translated by this "
                      f"server (it knows no URI, like simple_switch_grpc), so it takes match values only "
                      f"where the controller's width equals the data plane's ({width} bits)")


def _untranslated_value(what, param, translated, width, value):
    if translated.HasField("sdn_string") or width is None or value >> width:
        raise invalid(f"{what}: {_translation_text(param.type_name, translated)} is not translated by this "
                      f"server (it knows no URI, like simple_switch_grpc): the value is used as it is, "
                      f"so it must fit the data plane's {width} bits")


def digest_data(index, digest_info, values):
    """Engine digest values (a tuple of ints) -> p4.v1.P4Data per the digest's P4Info type."""
    data = p4data_pb2.P4Data()
    if digest_info.type_spec.HasField("tuple"):   # digest of an unnamed field list
        for value in values:
            data.tuple.members.add(bitstring=encode_int(value))
        return data
    members = index.type_members(digest_info.type_spec)
    if members is None:
        data.bitstring = encode_int(values[0] if isinstance(values, (tuple, list)) else values)
        return data
    for value in values:
        data.struct.members.add(bitstring=encode_int(value))
    return data
