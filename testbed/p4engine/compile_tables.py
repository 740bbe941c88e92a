"""Tables: keys, actions, properties, const entries and the code that applies them (a Compiler
mixin)."""
from . import p4types as T
from .compile_values import H_INLEN, H_NOW, SUPPORTED_MATCH_KINDS, Val, wrap
from .errors import P4Error
from .program_info import anno, anno_string, expr_text, TableInfo, unnamed_key_part
from .resource_limits import MAX_EXTERN_SIZE
from .syntax import Node


def _marked(info, annotation):
    """The names of a table's actions listed with @tableonly or @defaultonly."""
    return {ai.name for ai, annos in info.actions if anno(annos, annotation)}


class TablesMixin:
    """Compiler methods; the Compiler (compiler.py) provides the state they use."""

    # ------------------------------------------------------------------------- tables
    def compile_table(self, d, ctx, prefix):
        name = self.qualified(prefix, d.name, d.annos)
        info = TableInfo(name, d)
        info.owner = prefix         # the control instance that declares it
        if self.limits is not None:
            self.limits.table(d)
        self._table_properties(info, ctx, prefix)
        self._complete_table(info, ctx)
        info.obj = self._runtime_table(info, ctx)
        if name in self.out.tables:
            self.err(f"two tables are both named '{name}'", d.loc, late=True)
        self.out.tables[name] = info
        self.emit_table_apply(info)
        return info

    def _table_properties(self, info, ctx, prefix):
        d = info.decl
        seen_props = set()
        for p in d.props:
            pname = _PROPERTY_NAMES.get(p.kind, getattr(p, "name", None))
            if pname in seen_props:
                self.err(f"table {d.name}: property '{pname}' given twice", p.loc)
            seen_props.add(pname)
            if p.kind == "tp_key":
                for ke in p.keys:
                    self._table_key(info, ke, ctx)
            elif p.kind == "tp_actions":
                for ar in p.actions:
                    self._table_action(info, ar, ctx)
            elif p.kind == "tp_entries":
                info._entries_node = p
            elif p.kind == "tp_value":
                self._table_value_property(info, p, ctx, prefix)

    def _table_key(self, info, ke, ctx):
        mk = ke.match_kind
        if mk not in self.match_kinds:
            self.err(f"unknown match kind '{mk}'", ke.loc)
        if mk not in SUPPORTED_MATCH_KINDS:
            self.err(f"match kind '{mk}' is not supported", ke.loc)
        # what the key's expression emits (a function call's temporaries) runs in
        # the table's own apply function, before its lookup
        v, lines = self.captured(ctx, lambda: self.scalar(self.expr(ke.expr, ctx), ke.expr.loc))
        indent = "    " * ctx.em.level
        info.key_lines.extend(line[len(indent):] for line in lines)
        if isinstance(v.type, T.BoolT):
            v = Val("rv", T.BitT(1), f"(1 if {v.code} else 0)")
        w = T.width_of(v.type)
        if w is None:
            self.err(f"table key must be a bit<W> value, not {v.type}", ke.expr.loc)
        base = v.type.base if isinstance(v.type, T.EnumT) else v.type
        if getattr(base, "signed", False):
            # BMv2 matches the key's bytes (two's complement), as P4Runtime, the CLI and const
            # entries write its values: an int<W> key is looked up as its bit<W> pattern
            v = Val("rv", T.BitT(w), f"({v.code} & {(1 << w) - 1:#x})")
        kname = anno_string(ke.annos, "name")
        if kname is None:
            unnamed = unnamed_key_part(ke.expr)
            if unnamed is not None:
                self.err(f"{expr_text(unnamed)}: complex key expression requires a @name "
                         f"annotation (p4c cannot name it for P4Runtime)", unnamed.loc)
            kname = expr_text(ke.expr, lambda m: self.field_key_name(m, ctx))
        if mk == "selector":
            valid = self.valid_slot_of(ke.expr, ctx)
            info.selector_keys.append((kname, w, v, valid))
        else:
            info.keys.append((kname, mk, w, v))

    def _table_action(self, info, ar, ctx):
        s = ctx.scope.lookup(ar.name)
        if s is None or s.kind != "action":
            self.err(f"table {info.decl.name}: '{ar.name}' is not an action", ar.loc)
        if ar.args:
            info.action_fns[s.info.name] = self.bound_action(s.info, ar, ctx)
        info.actions.append((s.info, ar.annos))

    def _table_value_property(self, info, p, ctx, prefix):
        """`name = value;`: default_action, size, the table's externs and the other properties."""
        tname = info.decl.name
        if p.name == "default_action":
            info.default_action = self.action_call_const(p.value, ctx, f"table {tname} default_action")
            info.const_default = p.const
            info._default_loc = p.value.loc
        elif p.name == "size":
            info.size = self.const_int(p.value, "table size", ctx.scope)
            if not 0 <= info.size <= MAX_EXTERN_SIZE:   # (also P4Info's int64)
                self.err(f"table {tname}: size must be from 0 to {MAX_EXTERN_SIZE}, got {info.size}",
                         p.value.loc)
        elif p.name in _EXTERN_PROPERTIES:
            attr, kinds = _EXTERN_PROPERTIES[p.name]
            setattr(info, attr, self.table_extern(p.value, ctx, prefix, info.name, kinds, p.annos))
        elif p.name == "largest_priority_wins":
            info.largest_priority_wins = self.const_bool(p.value, "largest_priority_wins", ctx.scope)
        elif p.name == "priority_delta":
            info.priority_delta = self.const_int(p.value, "priority_delta", ctx.scope)
            if info.priority_delta <= 0:
                self.err(f"table {tname}: priority_delta must be a positive value", p.value.loc)
        elif p.name == "support_timeout":
            info.idle_timeout = True
        elif p.name in ("max_group_size", "selector_size_semantics", "selector_max_group_size"):
            pass
        else:   # p4c type-checks it, then warns and ignores it (properties are the architecture's)
            if p.value.kind != "ctor":
                self.captured(ctx, lambda: self.expr(p.value, ctx))
            self.warn(f"table {tname}: unknown table property '{p.name}' ignored", p.loc)

    def _complete_table(self, info, ctx):
        """What p4c fills in or drops after the properties: NoAction for a table without actions,
        the default action, selector keys nothing selects with."""
        d = info.decl
        if not info.actions:     # p4c gives such a table NoAction (as its default only)
            noaction = ctx.scope.lookup("NoAction")
            if noaction is None or noaction.kind != "action":
                self.err(f"table {d.name} has no actions", d.loc)
            info.actions.append((noaction.info, [Node("annotation", d.loc, name="defaultonly", args=[])]))
        if info.selector_keys and (info.implementation is None or info.implementation.type_name != "action_selector"):
            # p4c-bm2-ss leaves them out of the table (and P4Info) when nothing selects with them
            self.warn(f"table {d.name}: selector keys are ignored without implementation = action_selector(...)",
                      d.loc)
            info.selector_keys = []
        if info.default_action is None:
            noaction = ctx.scope.lookup("NoAction")
            na = noaction.info if noaction and noaction.kind == "action" else None
            info.default_action = (na, {}) if na else None
        else:
            ai = info.default_action[0]
            if ai.name not in [a.name for a, _ in info.actions]:
                self.err(f"table {d.name}: default action {ai.name} is not in its actions list",
                         getattr(info, "_default_loc", d.loc))
            if ai.name in _marked(info, "tableonly"):
                self.err(f"table {info.name}: action {ai.name} is @tableonly: it cannot be the default action",
                         getattr(info, "_default_loc", d.loc))

    def _runtime_table(self, info, ctx):
        """The tables.Table the pipelines run (with its const entries)."""
        from . import tables as tb
        d = info.decl
        keys = [tb.KeySpec(n, mk, w) for n, mk, w, _ in info.keys]
        sel_keys = [tb.KeySpec(n, "selector", w) for n, w, _, _ in info.selector_keys]
        default = tb.ActionCall(info.default_action[0].name, info.default_action[1]) if info.default_action and info.default_action[0] else None
        const_entries = None
        if hasattr(info, "_entries_node"):
            const_entries = self.const_entries(info, info._entries_node, ctx)
            info.const_entries = const_entries
        capacity = self._table_capacity(info, keys, const_entries)
        action_names = [ai.name for ai, _ in info.actions]
        action_params = {ai.name: ai.runtime_params for ai, _ in info.actions}
        table_only, default_only = _marked(info, "tableonly"), _marked(info, "defaultonly")
        try:
            table_class = tb.IdleTimeoutTable if info.idle_timeout else tb.Table
            obj = table_class(info.name, keys, action_names, size=capacity, default_action=default,
                              const_default_action=info.const_default, const_entries=const_entries,
                              implementation=info.implementation.obj if info.implementation else None,
                              selector_keys=sel_keys,
                              direct_counter=info.direct_counter.obj if info.direct_counter else None,
                              direct_meter=info.direct_meter.obj if info.direct_meter else None,
                              action_params=action_params, table_only=table_only, default_only=default_only)
        except (tb.TableError, ValueError) as e:
            self.err(f"table {d.name}: {getattr(e, 'message', e)}", d.loc)
        if info.implementation is not None and info.implementation.obj.actions is None:
            info.implementation.obj.actions = action_names
            info.implementation.obj.action_params = action_params
        return obj

    def _table_capacity(self, info, keys, const_entries):
        """How many entries the runtime table holds: its size, unless p4c drops that."""
        d = info.decl
        size_prop = next((p for p in d.props if p.kind == "tp_value" and p.name == "size"), None)
        if size_prop is None:
            return info.size
        # p4c's midend (CheckTableSize) warns and drops the size of a table that cannot hold
        # control-plane entries; P4Info keeps it as written
        entries_node = getattr(info, "_entries_node", None)
        why = ("with constant entries" if entries_node is not None and entries_node.const
               else "without keys" if not keys and info.size != 1 else None)
        if why is None:
            return info.size
        self.warn(f"table {d.name}: size {info.size} specified for table {why}", size_prop.loc)
        return max(info.size, len(const_entries or ()))

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
            cv = self.convert(self.scalar(v, a.loc), pt, a.loc).const
            if isinstance(pt, T.BitT):
                cv = wrap(cv, pt) & pt.mask
            args[pn] = int(cv)
        return (ai, ai.control_args(args))

    def const_entries(self, info, node, ctx):
        from . import tables as tb
        entries = []
        nkeys = len(info.keys)
        default_only = _marked(info, "defaultonly")
        for e in node.entries:
            # a list expression {a, b} there is the keyset tuple (a, b), as p4c reads it
            ks = e.keyset.items if e.keyset.kind in ("ks_tuple", "list") else [e.keyset]
            if len(ks) != nkeys:
                self.err(f"entry has {len(ks)} key value(s); table {info.decl.name} has {nkeys} key(s)", e.loc)
            keys = []
            for (kn, mk, w, _), k in zip(info.keys, ks):
                keys.append(self.entry_key(k, mk, w, ctx))
            ai, args = self.action_call_const(e.action, ctx, "entry action")
            if ai.name not in [a.name for a, _ in info.actions]:
                self.err(f"entry action {ai.name} is not in table {info.decl.name}'s actions", e.action.loc)
            if ai.name in default_only:
                self.err(f"table {info.name}: action {ai.name} is @defaultonly: an entry cannot use it", e.loc)
            prio = None
            pa = anno(e.annos, "priority") or anno(e.annos2, "priority")
            if pa is not None and pa.args:
                prio = self.const_int(pa.args[0], "priority")
            entries.append((keys, tb.ActionCall(ai.name, args), prio))
        entries = self.order_by_entry_priority(info, node, entries)
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

    def order_by_entry_priority(self, info, node, entries):
        """`priority = N:` entries (P4_16 1.2.4): an entry without one follows the previous by
        priority_delta, downwards when the largest priority wins. Entries out of priority order
        are sorted (p4c does, then numbers them by position for BMv2, ignoring the values), so
        the order is all that matters: the first entry wins."""
        given = [e for e in node.entries if e.priority is not None]
        if not given:
            return entries
        if node.const:
            self.err("a table with 'const' entries cannot have priorities", given[0].priority.loc)
        if all(mk in ("exact", "lpm") for _, mk, _, _ in info.keys):
            self.err(f"table {info.decl.name}: its key match kinds do not need priorities, "
                     "but some entries give one", given[0].priority.loc)
        if node.entries[0].priority is None:
            self.err("the first entry must have a priority", node.entries[0].loc)
        largest_wins = getattr(info, "largest_priority_wins", True)
        delta = getattr(info, "priority_delta", 1)
        prios, cur = [], 0
        for e in node.entries:
            cur = self.const_int(e.priority, "an entry priority") if e.priority is not None else cur
            if cur < 0:
                self.err("entry priority below 0 (overflow in the priority computation)", e.loc)
            prios.append(cur)
            cur = cur - delta if largest_wins else cur + delta
        order = sorted(range(len(entries)), key=lambda i: -prios[i] if largest_wins else prios[i])
        return [entries[i] for i in order]

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

    def const_bool(self, node, what, scope=None):
        v = self.const_eval(node, scope)
        if not isinstance(v, bool):
            self.err(f"{what} must be a compile-time boolean", node.loc)
        return v

    def const_int_val(self, node, ctx):
        v = self.expr(node, ctx)
        if not v.is_const:
            self.err("expected a compile-time constant", node.loc)
        c = v.const
        if isinstance(c, bool):
            return int(c)
        if isinstance(c, str):      # a string literal is a constant, but no number (p4c's wording)
            self.err(f"\"{c}\": expected an integer value", node.loc)
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
        em.line(f"def {fn}(S):")
        em.indent()
        for line in info.key_lines:
            em.line(line)
        keys = ", ".join(v.code for _, _, _, v in info.keys)
        if info.keys:
            keys += ","
        timed = info.direct_counter or info.direct_meter or info.idle_timeout
        extra = f", S[{H_INLEN}], S[{H_NOW}]" if timed else ""
        if info.selector_keys:
            sel = ", ".join(v.code if vs is None else f"({v.code} if S[{vs}] else None)"
                            for _, _, v, vs in info.selector_keys) + ","
            extra = f", S[{H_INLEN}], S[{H_NOW}], ({sel})"
        em.line(f"a, hit, e = {tname}.lookup(({keys}){extra})")
        for slot, mask in sorted(info.direct_meter.read_slots if info.direct_meter else ()):
            em.line(f"if hit: S[{slot}] = {info.direct_meter.pyname}.color & {mask:#x}")   # see direct_meter.read
        em.line("n = a.action")
        em.line(f"{dname}[n](S, a.args)")
        em.line("return hit, n")
        em.dedent()


_PROPERTY_NAMES = {"tp_key": "key", "tp_actions": "actions", "tp_entries": "entries"}
# a table's extern properties: the TableInfo attribute each sets, and the extern types it takes
_EXTERN_PROPERTIES = {
    "implementation": ("implementation", ("action_profile", "action_selector")),
    "counters": ("direct_counter", ("direct_counter",)),
    "meters": ("direct_meter", ("direct_meter",)),
}
