"""Match-action tables and action profiles/selectors, with BMv2's matching rules.

Lookup structures, chosen from the table's match kinds:

- only ``exact`` keys: one dict from the key tuple to the entry;
- one ``lpm`` key plus ``exact`` keys: a dict per prefix length, probed from the
  longest prefix down (priorities play no part, as in BMv2);
- any ``ternary``/``range``/``optional`` key: priority order (a higher P4Runtime
  priority wins; among equal priorities the entry with the lowest handle wins,
  as in BMv2's handle-ordered entry list -- handles are reused smallest-first,
  so this is usually the entry inserted first). Without range keys the entries are grouped by mask
  ("tuple space"): one dict per distinct mask, probed in order of the best
  priority each group holds, stopping once no group can beat the match found.
  Range keys fall back to a scan in priority order.

Action selectors pick a group member the way simple_switch_grpc does: the
selector hash (the profile's algorithm over the selector fields, truncated to 32
bits) modulo the number of member copies in the group, where the copies are
ordered by BMv2 member handle; P4Runtime weights become extra copies of a member,
created and released as PI does (p4lang/PI proto/frontend/src/action_prof_mgr.cpp).
"""
from collections import namedtuple

from testbed.p4engine import hashes

MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional", "selector")

KeySpec = namedtuple("KeySpec", "name match_kind width")

Exact = namedtuple("Exact", "value")
Lpm = namedtuple("Lpm", "value prefix_len")
Ternary = namedtuple("Ternary", "value mask")
Range = namedtuple("Range", "low high")
Optional = namedtuple("Optional", "value")
MemberRef = namedtuple("MemberRef", "id")
GroupRef = namedtuple("GroupRef", "id")

_KEY_CLASS = {"exact": Exact, "lpm": Lpm, "ternary": Ternary, "range": Range, "optional": Optional}


class TableError(Exception):
    """A control-plane request the table refuses; `code` names the P4Runtime status."""

    CODES = ("ALREADY_EXISTS", "NOT_FOUND", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED",
             "PERMISSION_DENIED", "FAILED_PRECONDITION")

    def __init__(self, code, message=""):
        super().__init__(message or code)
        self.code = code
        self.message = message or code


class ActionCall:
    """An action with its arguments by parameter name: ActionCall("MyIngress.fwd", {"port": 2})."""

    __slots__ = ("action", "args")

    def __init__(self, action, args=None):
        self.action = action
        self.args = dict(args or {})

    def __eq__(self, other):
        return isinstance(other, ActionCall) and self.action == other.action and self.args == other.args

    def __hash__(self):
        return hash((self.action, tuple(sorted(self.args.items()))))

    def __repr__(self):
        args = ", ".join(f"{k}={v:#x}" if isinstance(v, int) else f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.action}({args})"


# What BMv2 runs when an entry points at a group that has become empty: nothing.
EMPTY_ACTION = ActionCall(None, {})


def _mask(width):
    return (1 << width) - 1


class _HandleAllocator:
    """BMv2's HandleMgr: always hands out the smallest free handle."""

    __slots__ = ("_used", "_next")

    def __init__(self):
        self._used = set()
        self._next = 0

    def get(self):
        handle = self._next
        self._used.add(handle)
        while self._next in self._used:
            self._next += 1
        return handle

    def release(self, handle):
        self._used.discard(handle)
        if handle < self._next:
            self._next = handle


# ====================================================================== entries

class Entry:
    """One table entry. `counter` and `meter_config` can be read and assigned."""

    __slots__ = ("keys", "action", "priority", "table", "_packets", "_bytes", "meter", "seq",
                 "_ident", "_check", "rank", "handle", "controller_metadata", "metadata",
                 "idle_timeout_ns", "last_hit_us", "notified_us")

    def __init__(self, table, keys, action, priority, ident, seq, handle):
        self.table = table
        self.keys = keys
        self.action = action
        self.priority = priority
        self._ident = ident
        self.seq = seq
        self.handle = handle
        # BMv2 keeps ternary entries in handle order and takes the first of
        # equal priority; handles are reused smallest-first.
        self.rank = (-(priority or 0), handle)
        self._packets = 0
        self._bytes = 0
        self.meter = table.direct_meter.new_cell() if table.direct_meter is not None else None
        self._check = None
        # What P4Runtime reads back as written (the engine itself never looks at them).
        self.controller_metadata = 0
        self.metadata = b""
        # Idle timeout (tables with support_timeout): the TTL, the switch time (us) of the last
        # hit (or of the write that set the TTL), and of the last idle notification.
        self.idle_timeout_ns = 0
        self.last_hit_us = 0
        self.notified_us = None

    @property
    def counter(self):
        """(packets, bytes) of the entry's direct counter: both counted and read back, whatever
        its type, as BMv2 does (see externs._Cells)."""
        return self._packets, self._bytes

    @counter.setter
    def counter(self, value):
        if self.table.direct_counter is None:
            raise AttributeError(f"table {self.table.name} has no direct counter")
        self._packets, self._bytes = (int(v) for v in value)

    @property
    def meter_config(self):
        """(cir, cburst, pir, pburst) in P4Runtime units (per second), or None."""
        if self.meter is None or not self.meter.configured:
            return None
        (cir, cburst), (pir, pburst) = self.meter.rates()
        return int(round(cir * 1e6)), cburst, int(round(pir * 1e6)), pburst

    @meter_config.setter
    def meter_config(self, value):
        if self.meter is None:
            raise AttributeError(f"table {self.table.name} has no direct meter")
        if value is None:
            self.meter.reset()
            return
        cir, cburst, pir, pburst = value
        self.meter.set_rates(cir / 1e6, cburst, pir / 1e6, pburst)

    def set_meter_rates_bmv2(self, rates):
        """simple_switch_CLI units: [(cir_per_us, cburst), (pir_per_us, pburst)]."""
        if self.meter is None:
            raise TableError("INVALID_ARGUMENT", f"table {self.table.name} has no direct meter")
        (cir, cburst), (pir, pburst) = rates
        self.meter.set_rates(cir, cburst, pir, pburst)

    def __repr__(self):
        prio = f" priority {self.priority}" if self.priority is not None else ""
        return f"<Entry {self.table.name} {list(self.keys)}{prio} -> {self.action}>"


# ====================================================================== tables

class Table:
    """A match-action table (see the module docstring for lookup structures).

    Arguments:
      name             P4Info name, e.g. "MyIngress.ipv4_lpm"
      keys             [KeySpec(name, match_kind, width)] -- match fields only
      actions          names of the actions the table may run
      size             maximum number of entries (RESOURCE_EXHAUSTED beyond)
      default_action   ActionCall run on a miss (NoAction if None)
      const_default_action  the default cannot be changed (PERMISSION_DENIED)
      const_entries    [(keys, ActionCall, priority or None)]: the table becomes
                       read-only; without priorities, earlier entries win
      implementation   an ActionProfile (entries then take MemberRef/GroupRef)
      selector_keys    [KeySpec(name, "selector", width)] hashed by a selector
      direct_counter   a DirectCounter (entries count hits)
      direct_meter     a DirectMeter (entries meter hits)
      action_params    {action: [(param, width)]} to validate arguments (optional)
      table_only / default_only  action names with @tableonly / @defaultonly
    """

    supports_timeout = False     # (IdleTimeoutTable: support_timeout = true)

    def __init__(self, name, keys, actions, size=1024, default_action=None,
                 const_default_action=False, const_entries=None, implementation=None,
                 selector_keys=(), direct_counter=None, direct_meter=None,
                 action_params=None, table_only=(), default_only=()):
        self.name = name
        self.keys = [k if isinstance(k, KeySpec) else KeySpec(*k) for k in keys]
        for k in self.keys:
            if k.match_kind not in _KEY_CLASS:
                raise ValueError(f"table {name}: key {k.name} has unsupported match kind {k.match_kind!r}")
        self.actions = list(actions)
        self.size = size
        self.implementation = implementation
        self.selector_keys = [k if isinstance(k, KeySpec) else KeySpec(*k) for k in selector_keys]
        self.direct_counter = direct_counter
        self.direct_meter = direct_meter
        if direct_counter is not None:
            direct_counter.table = self
        if direct_meter is not None:
            direct_meter.table = self
        self.action_params = dict(action_params or {})
        self.table_only = set(table_only)
        self.default_only = set(default_only)
        self.const_default_action = const_default_action
        self._initial_default = default_action or ActionCall("NoAction", {})
        self.default_action = self._initial_default
        self.is_const = False

        kinds = [k.match_kind for k in self.keys]
        self._widths = [k.width for k in self.keys]
        self._field_masks = [_mask(w) for w in self._widths]
        if any(k in ("ternary", "range", "optional") for k in kinds):
            self.mode = "range" if "range" in kinds else "ternary"
        elif kinds.count("lpm") > 1:
            self.mode = "ternary"      # several lpm keys: priorities decide, as in BMv2
        elif "lpm" in kinds:
            self.mode = "lpm"
        else:
            self.mode = "exact"
        self.needs_priority = self.mode in ("ternary", "range")
        self._lpm_index = kinds.index("lpm") if self.mode == "lpm" else None
        self._total_width = sum(self._widths)

        self._entries = {}          # ident -> Entry
        self._seq = 0
        self._handles = _HandleAllocator()
        self._exact = {}            # key tuple -> Entry
        self._lpm = {}              # prefix_len -> {key tuple -> Entry}
        self._lpm_order = []        # prefix lengths, longest first
        self._groups = {}           # combined mask -> _MaskGroup
        self._group_order = []
        self._scan = []             # entries in rank order (range mode)
        self.last_entry = None

        if const_entries:
            n = len(const_entries)
            for i, (ckeys, action, priority) in enumerate(const_entries):
                if priority is None and self.needs_priority:
                    priority = n - i
                self.insert(ckeys, action, priority)
            self.is_const = True

    # ------------------------------------------------------------ validation

    def _fail(self, code, message):
        raise TableError(code, f"table {self.name}: {message}")

    def _normalise_keys(self, keys):
        """Check `keys` against the key specs; returns (stored keys, identity, match data)."""
        if keys is None:
            keys = []
        keys = list(keys)
        if len(keys) != len(self.keys):
            self._fail("INVALID_ARGUMENT", f"expected {len(self.keys)} key fields "
                       f"({', '.join(k.name for k in self.keys)}), got {len(keys)}")
        ident = []
        match = []   # per field: (value, mask) or (low, high) for range
        for spec, key in zip(self.keys, keys):
            width_mask = _mask(spec.width)
            kind = spec.match_kind
            if key is None:
                if kind == "exact":
                    self._fail("INVALID_ARGUMENT", f"exact field {spec.name} needs a value")
                ident.append(None)
                match.append((0, width_mask) if kind == "range" else (0, 0))
                continue
            expected = _KEY_CLASS[kind]
            if type(key).__name__ != expected.__name__:
                self._fail("INVALID_ARGUMENT",
                           f"field {spec.name} is {kind}; got {type(key).__name__} {tuple(key)}")
            if kind == "exact" or kind == "optional":
                value = key.value
                self._fit(spec, value)
                ident.append((value,))
                match.append((value, width_mask))
            elif kind == "lpm":
                value, plen = key.value, key.prefix_len
                if not 0 <= plen <= spec.width:
                    self._fail("INVALID_ARGUMENT",
                               f"prefix length {plen} of {spec.name} is outside 0..{spec.width}")
                self._fit(spec, value)
                mask = width_mask ^ _mask(spec.width - plen)
                if value & ~mask:
                    self._fail("INVALID_ARGUMENT",
                               f"{spec.name}: value {value:#x} has bits set beyond its /{plen} prefix")
                if plen == 0:
                    ident.append(None)
                    match.append((0, 0))
                else:
                    ident.append((value, plen))
                    match.append((value, mask))
            elif kind == "ternary":
                value, mask = key.value, key.mask
                self._fit(spec, value)
                self._fit(spec, mask)
                if value & ~mask:
                    self._fail("INVALID_ARGUMENT",
                               f"{spec.name}: value {value:#x} has bits set outside mask {mask:#x}")
                if mask == 0:
                    ident.append(None)
                    match.append((0, 0))
                else:
                    ident.append((value, mask))
                    match.append((value, mask))
            else:  # range
                low, high = key.low, key.high
                self._fit(spec, low)
                self._fit(spec, high)
                if low > high:
                    self._fail("INVALID_ARGUMENT", f"{spec.name}: range low {low} > high {high}")
                if low == 0 and high == width_mask:
                    ident.append(None)
                else:
                    ident.append((low, high))
                match.append((low, high))
        return keys, tuple(ident), match

    def _fit(self, spec, value):
        if not isinstance(value, int) or value < 0 or value >> spec.width:
            self._fail("INVALID_ARGUMENT", f"value {value!r} does not fit field {spec.name} "
                       f"(bit<{spec.width}>)")

    def _check_priority(self, priority):
        if self.needs_priority:
            if priority is None or priority <= 0:
                self._fail("INVALID_ARGUMENT", "entries of a ternary/range/optional table need a priority > 0")
            return priority
        if priority:
            self._fail("INVALID_ARGUMENT", f"priority {priority} given, but the table has only "
                       "exact/lpm keys")
        return None

    def _check_action(self, action, default=False):
        if isinstance(action, (MemberRef, GroupRef)):
            if default:
                self._fail("INVALID_ARGUMENT", "the default action must be a direct action")
            if self.implementation is None:
                self._fail("INVALID_ARGUMENT", f"{type(action).__name__} given, but the table has "
                           "no action profile")
            self.implementation._check_ref(action)
            return action
        if not isinstance(action, ActionCall):
            self._fail("INVALID_ARGUMENT", f"expected an ActionCall, MemberRef or GroupRef, got {action!r}")
        if self.implementation is not None and not default:
            self._fail("INVALID_ARGUMENT", "the table uses an action profile: entries take a "
                       "MemberRef or GroupRef")
        if action.action not in self.actions:
            self._fail("INVALID_ARGUMENT", f"action {action.action} is not one of the table's "
                       f"actions ({', '.join(self.actions)})")
        if default and action.action in self.table_only:
            self._fail("INVALID_ARGUMENT", f"action {action.action} is @tableonly")
        if not default and action.action in self.default_only:
            self._fail("INVALID_ARGUMENT", f"action {action.action} is @defaultonly")
        check_action_args(action, self.action_params, f"table {self.name}")
        return action

    # ------------------------------------------------------------ control plane

    def insert(self, keys, action, priority=None):
        if self.is_const:
            self._fail("PERMISSION_DENIED", "the table has const entries")
        keys, ident, match = self._normalise_keys(keys)
        priority = self._check_priority(priority)
        full_ident = (ident, priority)
        if full_ident in self._entries:
            self._fail("ALREADY_EXISTS", f"an entry with keys {keys}"
                       + (f" and priority {priority}" if priority is not None else "") + " exists")
        if len(self._entries) >= self.size:
            self._fail("RESOURCE_EXHAUSTED", f"the table is full ({self.size} entries)")
        action = self._check_action(action)
        self._seq += 1
        entry = Entry(self, keys, action, priority, full_ident, self._seq, self._handles.get())
        self._ref(action, +1)
        self._entries[full_ident] = entry
        self._index_add(entry, match)
        return entry

    def modify(self, keys, action, priority=None):
        if self.is_const:
            self._fail("PERMISSION_DENIED", "the table has const entries")
        entry = self.find(keys, priority)
        action = self._check_action(action)
        self._ref(entry.action, -1)
        self._ref(action, +1)
        entry.action = action
        return entry

    def delete(self, keys, priority=None):
        if self.is_const:
            self._fail("PERMISSION_DENIED", "the table has const entries")
        entry = self.find(keys, priority)
        self._ref(entry.action, -1)
        del self._entries[entry._ident]
        self._index_remove(entry)
        self._handles.release(entry.handle)
        return entry

    def find(self, keys, priority=None):
        """The entry with exactly these keys (and priority); NOT_FOUND otherwise."""
        keys, ident, _ = self._normalise_keys(keys)
        if not self.needs_priority:
            priority = None
        entry = self._entries.get((ident, priority))
        if entry is None:
            self._fail("NOT_FOUND", f"no entry with keys {keys}"
                       + (f" and priority {priority}" if priority is not None else ""))
        return entry

    def clear(self):
        if self.is_const:
            self._fail("PERMISSION_DENIED", "the table has const entries")
        for entry in list(self._entries.values()):
            self.delete(entry.keys, entry.priority)

    def set_default(self, action):
        if self.const_default_action:
            self._fail("PERMISSION_DENIED", "the default action is const")
        self.default_action = self._check_action(action, default=True)

    def reset_default(self):
        if self.const_default_action:
            self._fail("PERMISSION_DENIED", "the default action is const")
        self.default_action = self._initial_default

    def get_default(self):
        return self.default_action

    def entries(self):
        return sorted(self._entries.values(), key=lambda e: e.seq)

    def __len__(self):
        return len(self._entries)

    def _ref(self, action, delta):
        if self.implementation is not None and isinstance(action, (MemberRef, GroupRef)):
            self.implementation._ref(action, delta)

    # ------------------------------------------------------------ indexes

    def _index_add(self, entry, match):
        if self.mode == "exact":
            self._exact[tuple(v for v, _ in match)] = entry
        elif self.mode == "lpm":
            i = self._lpm_index
            plen = entry.keys[i].prefix_len if entry.keys[i] is not None else 0
            bucket = self._lpm.get(plen)
            if bucket is None:
                bucket = self._lpm[plen] = {}
                self._lpm_order = sorted(self._lpm, reverse=True)
            bucket[tuple(v for v, _ in match)] = entry
            entry._check = plen
        elif self.mode == "ternary":
            value = mask = 0
            for (v, m), w in zip(match, self._widths):
                value = (value << w) | v
                mask = (mask << w) | m
            group = self._groups.get(mask)
            if group is None:
                group = self._groups[mask] = _MaskGroup(mask)
            group.add(value, entry)
            entry._check = (mask, value)
            self._group_order = sorted(self._groups.values(), key=lambda g: g.best)
        else:
            entry._check = [(i, a, b, self.keys[i].match_kind == "range") for i, (a, b) in enumerate(match)]
            self._scan.append(entry)
            self._scan.sort(key=lambda e: e.rank)

    def _index_remove(self, entry):
        if self.mode == "exact":
            del self._exact[tuple(k.value for k in entry.keys)]
        elif self.mode == "lpm":
            plen = entry._check
            bucket = self._lpm[plen]
            for key, e in list(bucket.items()):
                if e is entry:
                    del bucket[key]
            if not bucket:
                del self._lpm[plen]
                self._lpm_order = sorted(self._lpm, reverse=True)
        elif self.mode == "ternary":
            mask, value = entry._check
            group = self._groups[mask]
            group.remove(value, entry)
            if not group.by_value:
                del self._groups[mask]
            self._group_order = sorted(self._groups.values(), key=lambda g: g.best)
        else:
            self._scan.remove(entry)

    # ------------------------------------------------------------ data plane

    def lookup(self, values, packet_length=0, now_us=0, selector_values=None):
        """Match `values` (aligned with `keys`); returns (ActionCall, hit, entry or None).

        On a hit the entry's direct counter counts `packet_length` bytes and its
        direct meter runs (colour in ``direct_meter.color``). For a table with an
        action selector, `selector_values` are the selector fields' values
        (None for a field of an invalid header, which BMv2 leaves out of the hash).
        """
        entry = self._match(values)
        self.last_entry = entry
        meter = self.direct_meter
        if entry is None:
            if meter is not None:
                meter.hit = False
            return self.default_action, False, None
        entry._packets += 1
        entry._bytes += packet_length
        if meter is not None:
            meter.hit = True
            meter.color = entry.meter.execute(now_us, packet_length)
        action = entry.action
        if self.implementation is not None:
            action = self.implementation.resolve(action, self.selector_keys, selector_values)
        return action, True, entry

    def _match(self, values):
        mode = self.mode
        if mode == "exact":
            return self._exact.get(tuple(values)) if self._exact else None
        if mode == "lpm":
            i = self._lpm_index
            width = self._widths[i]
            full = self._field_masks[i]
            if len(values) == 1:
                value = values[0]
                for plen in self._lpm_order:
                    entry = self._lpm[plen].get((value & (full ^ ((1 << (width - plen)) - 1)),))
                    if entry is not None:
                        return entry
                return None
            values = list(values)
            value = values[i]
            for plen in self._lpm_order:
                values[i] = value & (full ^ ((1 << (width - plen)) - 1))
                entry = self._lpm[plen].get(tuple(values))
                if entry is not None:
                    return entry
            return None
        if mode == "ternary":
            if not self._group_order:
                return None
            key = 0
            for v, w, m in zip(values, self._widths, self._field_masks):
                key = (key << w) | (v & m)
            best = None
            for group in self._group_order:
                if best is not None and best.rank <= group.best:
                    break
                found = group.by_value.get(key & group.mask)
                if found is not None and (best is None or found[0].rank < best.rank):
                    best = found[0]
            return best
        for entry in self._scan:
            for i, a, b, is_range in entry._check:
                v = values[i]
                if is_range:
                    if v < a or v > b:
                        break
                elif v & b != a:
                    break
            else:
                return entry
        return None


class IdleTimeoutTable(Table):
    """A table with ``support_timeout = true``: a hit also records the packet's time in the
    entry (``last_hit_us``), which the P4Runtime server's ager compares with the entry's TTL.
    A subclass, so tables without the property pay nothing per packet; the generated code
    passes the time (as for direct counters) only to these."""

    supports_timeout = True

    def lookup(self, values, packet_length=0, now_us=0, selector_values=None):
        result = Table.lookup(self, values, packet_length, now_us, selector_values)
        entry = result[2]
        if entry is not None:
            entry.last_hit_us = now_us
        return result


class _MaskGroup:
    """Entries of a ternary table sharing one combined mask, by masked value."""

    __slots__ = ("mask", "by_value", "best")

    def __init__(self, mask):
        self.mask = mask
        self.by_value = {}     # masked value -> [entries by rank]
        self.best = None       # the best (lowest) rank in the group

    def add(self, value, entry):
        bucket = self.by_value.setdefault(value, [])
        bucket.append(entry)
        bucket.sort(key=lambda e: e.rank)
        if self.best is None or entry.rank < self.best:
            self.best = entry.rank

    def remove(self, value, entry):
        bucket = self.by_value[value]
        bucket.remove(entry)
        if not bucket:
            del self.by_value[value]
        self.best = min((b[0].rank for b in self.by_value.values()), default=None)


def check_action_args(action, action_params, where):
    """Validate an ActionCall's arguments against {action: [(param, width)]} when known."""
    params = action_params.get(action.action) if action_params else None
    if params is None:
        return
    names = [p for p, _ in params]
    missing = [p for p in names if p not in action.args]
    extra = [a for a in action.args if a not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if extra:
            parts.append("unknown " + ", ".join(extra))
        raise TableError("INVALID_ARGUMENT", f"{where}: action {action.action}: {'; '.join(parts)} "
                         f"(parameters: {', '.join(names) or 'none'})")
    for param, width in params:
        value = action.args[param]
        if not isinstance(value, int) or value < 0 or value >> width:
            raise TableError("INVALID_ARGUMENT", f"{where}: action {action.action}: argument {param}="
                             f"{value!r} does not fit bit<{width}>")


# ====================================================================== profiles

class _Member:
    __slots__ = ("id", "action", "handles", "refs")

    def __init__(self, member_id, action, handle):
        self.id = member_id
        self.action = action
        self.handles = [handle]   # BMv2 handles: the member and its weighted copies
        self.refs = 0             # table entries pointing at it


class _Group:
    __slots__ = ("id", "members", "refs", "selection")

    def __init__(self, group_id):
        self.id = group_id
        self.members = {}         # member id -> weight
        self.refs = 0
        self.selection = ()       # ActionCalls in BMv2 handle order (weighted copies included)


class ActionProfile:
    """``action_profile(size)`` or, with `algorithm`, ``action_selector(algo, size, width)``."""

    def __init__(self, name, size=1024, algorithm=None, max_group_size=0, actions=None,
                 action_params=None):
        self.name = name
        self.size = size
        self.with_selector = algorithm is not None
        self.algorithm = algorithm
        self.max_group_size = max_group_size
        self.actions = list(actions) if actions is not None else None
        self.action_params = dict(action_params or {})
        self._hash = hashes.algorithm(algorithm) if algorithm is not None else None
        self._members = {}
        self._groups = {}
        self._handles = _HandleAllocator()
        self._by_handle = {}      # BMv2 handle -> _Member

    # A program compiled in a child process (isolated.py) comes back pickled; the hash is a
    # closure (or, for a custom CRC, a lambda), so it travels as its algorithm name.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_hash"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._hash = hashes.algorithm(self.algorithm) if self.algorithm is not None else None

    def _fail(self, code, message):
        raise TableError(code, f"action profile {self.name}: {message}")

    # ------------------------------------------------------------ members

    def _check_member_action(self, action):
        if not isinstance(action, ActionCall):
            self._fail("INVALID_ARGUMENT", f"a member needs an ActionCall, got {action!r}")
        if self.actions is not None and action.action not in self.actions:
            self._fail("INVALID_ARGUMENT", f"action {action.action} is not one of the profile's "
                       f"actions ({', '.join(self.actions)})")
        check_action_args(action, self.action_params, f"action profile {self.name}")

    def insert_member(self, member_id, action):
        if member_id in self._members:
            self._fail("ALREADY_EXISTS", f"member {member_id} exists")
        if len(self._by_handle) >= self.size:
            self._fail("RESOURCE_EXHAUSTED", f"the profile is full ({self.size} members)")
        self._check_member_action(action)
        handle = self._handles.get()
        member = self._members[member_id] = _Member(member_id, action, handle)
        self._by_handle[handle] = member

    def modify_member(self, member_id, action):
        member = self._member(member_id)
        self._check_member_action(action)
        member.action = action
        for group in self._groups.values():
            if member_id in group.members:
                self._refresh(group)

    def delete_member(self, member_id):
        member = self._member(member_id)
        if member.refs:
            self._fail("FAILED_PRECONDITION", f"member {member_id} is used by {member.refs} table entries")
        users = [g.id for g in self._groups.values() if member_id in g.members]
        if users:
            self._fail("FAILED_PRECONDITION", f"member {member_id} is in group(s) "
                       + ", ".join(map(str, users)))
        for handle in member.handles:
            self._handles.release(handle)
            del self._by_handle[handle]
        del self._members[member_id]

    def _member(self, member_id):
        member = self._members.get(member_id)
        if member is None:
            self._fail("NOT_FOUND", f"no member {member_id}")
        return member

    def members(self):
        """{member id: ActionCall}"""
        return {m.id: m.action for m in self._members.values()}

    # ------------------------------------------------------------ groups

    def insert_group(self, group_id, members=()):
        if not self.with_selector:
            self._fail("INVALID_ARGUMENT", "groups need an action selector")
        if group_id in self._groups:
            self._fail("ALREADY_EXISTS", f"group {group_id} exists")
        self._validate_membership(members)
        group = self._groups[group_id] = _Group(group_id)
        self._set_membership(group, members)

    def modify_group(self, group_id, members):
        group = self._group(group_id)
        self._validate_membership(members)
        self._set_membership(group, members)

    def delete_group(self, group_id):
        group = self._group(group_id)
        if group.refs:
            self._fail("FAILED_PRECONDITION", f"group {group_id} is used by {group.refs} table entries")
        old = dict(group.members)
        del self._groups[group_id]
        for member_id in old:
            self._purge_copies(self._members[member_id])

    def _group(self, group_id):
        group = self._groups.get(group_id)
        if group is None:
            self._fail("NOT_FOUND", f"no group {group_id}")
        return group

    def groups(self):
        """{group id: [(member id, weight)] in member id order}"""
        return {g.id: sorted(g.members.items()) for g in self._groups.values()}

    def _validate_membership(self, members):
        seen = set()
        total = 0
        for item in members:
            member_id, weight = item if isinstance(item, tuple) else (item, 1)
            if member_id not in self._members:
                self._fail("NOT_FOUND", f"no member {member_id}")
            if member_id in seen:
                self._fail("INVALID_ARGUMENT", f"member {member_id} given twice; use weights instead")
            if not isinstance(weight, int) or weight <= 0:
                self._fail("INVALID_ARGUMENT", f"member {member_id}: weight must be a positive integer")
            seen.add(member_id)
            total += weight
        if self.max_group_size and total > self.max_group_size:
            self._fail("RESOURCE_EXHAUSTED", f"the sum of weights {total} exceeds the maximum group "
                       f"size {self.max_group_size}")

    def _set_membership(self, group, members):
        wanted = {}
        for item in members:
            member_id, weight = item if isinstance(item, tuple) else (item, 1)
            wanted[member_id] = weight
        old = group.members
        # As PI does: walk members in id order; a member whose weight grows gets
        # its missing copies (new BMv2 handles) before it joins.
        for member_id in sorted(set(old) | set(wanted)):
            member = self._members[member_id]
            for _ in range(len(member.handles), wanted.get(member_id, 0)):
                handle = self._handles.get()
                member.handles.append(handle)
                self._by_handle[handle] = member
        group.members = wanted
        for member_id in sorted(set(old) | set(wanted)):
            self._purge_copies(self._members[member_id])
        self._refresh(group)

    def _purge_copies(self, member):
        needed = max([g.members[member.id] for g in self._groups.values() if member.id in g.members]
                     or [1])
        while len(member.handles) > needed:
            handle = member.handles.pop()
            self._handles.release(handle)
            del self._by_handle[handle]

    def _refresh(self, group):
        handles = []
        for member_id, weight in group.members.items():
            handles.extend(self._members[member_id].handles[:weight])
        group.selection = tuple(self._by_handle[h].action for h in sorted(handles))

    def selection(self, group_id):
        """The group's member copies as BMv2 orders them: [(member id, ActionCall)]."""
        group = self._group(group_id)
        handles = sorted(h for mid, w in group.members.items() for h in self._members[mid].handles[:w])
        return [(self._by_handle[h].id, self._by_handle[h].action) for h in handles]

    # ------------------------------------------------------------ use by tables

    def _check_ref(self, ref):
        if isinstance(ref, MemberRef):
            self._member(ref.id)
        else:
            if not self.with_selector:
                self._fail("INVALID_ARGUMENT", "a GroupRef needs an action selector")
            if not self._group(ref.id).members:
                # BMv2 refuses to point an entry at an empty group (EMPTY_GRP).
                self._fail("INVALID_ARGUMENT", f"group {ref.id} is empty")

    def _ref(self, ref, delta):
        if isinstance(ref, MemberRef):
            self._members[ref.id].refs += delta
        else:
            self._groups[ref.id].refs += delta

    def selector_hash(self, selector_keys, selector_values):
        """The 32-bit hash BMv2 computes over the selector fields."""
        if self._hash is None:
            return 0
        acc = nbits = 0
        for k, v in zip(selector_keys, selector_values or ()):
            if v is not None:
                acc = (acc << k.width) | v      # values arrive truncated to their widths
                nbits += k.width
        pad = -nbits % 8
        return self._hash((acc << pad).to_bytes((nbits + pad) >> 3, "big")) & 0xFFFFFFFF

    def resolve(self, ref, selector_keys=(), selector_values=None):
        """The ActionCall an entry's MemberRef/GroupRef runs for this packet."""
        if type(ref) is MemberRef:
            return self._members[ref.id].action
        if type(ref) is GroupRef:
            selection = self._groups[ref.id].selection
            if not selection:
                return EMPTY_ACTION
            if len(selection) == 1:
                return selection[0]
            return selection[self.selector_hash(selector_keys, selector_values) % len(selection)]
        return ref
