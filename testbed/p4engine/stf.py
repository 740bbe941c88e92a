"""p4c's STF packet tests, run on the embedded engine the way p4c's BMv2 driver runs them:
the commands stf_parse reads are applied to a Pipeline and the packets out compared with
the expected ones (see stf_parse for the format).
"""
import re
import sys
import time

from testbed.p4engine.errors import P4RuntimeFault
from testbed.p4engine.stf_parse import (PORT_WIDTH, STF_PRIORITY_OFFSET, StfError, fitting, key_value,
                                        parse_meter_rates, parse_number, parse_stf, shown_text)
from testbed.p4engine.tables import ActionCall, Exact, GroupRef, MemberRef, TableError


def _resolve(names, wanted, what, where=""):
    """BMv2-driver name lookup: exact, then a unique '.'-suffix, then a unique plain suffix."""
    names = list(names)
    wanted = wanted.replace('"', "")
    if wanted in names:
        return wanted
    for pred in (lambda n: n.endswith("." + wanted), lambda n: n.endswith(wanted)):
        found = [n for n in names if pred(n)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise StfError(f"{what} {wanted!r}{where} is ambiguous: {', '.join(sorted(found))}")
    known = ", ".join(sorted(names)) or "none"
    raise StfError(f"no {what} {wanted!r}{where} (known: {known})")


def _key_aliases(name):
    """Spellings of one key field name under which STF files may refer to it."""
    out = {name}
    for a, b in ((".isValid()", ".$valid$"), ("isValid()", "$valid$")):
        if name.endswith(a):
            out.add(name[: -len(a)] + b)
    return out


def _resolve_key(table, key_name):
    # bmv2stf: hdr.stack$0.f means hdr.stack[0].f
    m = re.fullmatch(r"(.*)\$([0-9]+)(.*)", key_name)
    if m:
        key_name = f"{m.group(1)}[{m.group(2)}]{m.group(3)}"
    aliases = {}
    for i, spec in enumerate(table.keys):
        for alias in _key_aliases(spec.name):
            aliases[alias] = i
    candidates = [key_name, key_name + "$", key_name + ".$valid$"]
    if key_name.endswith(".valid"):
        candidates.append(key_name[:-5] + "$valid$")
    for c in candidates:
        if c in aliases:
            return aliases[c]
    found = {i for alias, i in aliases.items()
             if alias.endswith("." + key_name) or alias.endswith("." + key_name + "$")
             or (key_name == "valid" and alias.endswith(".$valid$"))}
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        raise StfError(f"key field {key_name!r} of table {table.name} is ambiguous")
    raise StfError(f"table {table.name} has no key field {key_name!r} "
                   f"(keys: {', '.join(k.name for k in table.keys) or 'none'})")


class _Report:
    def __init__(self, out):
        self.out = out
        self.failures = 0

    def fail(self, message):
        self.failures += 1
        print(message, file=self.out)

    def note(self, message):
        print(message, file=self.out)


class StfRunner:
    """Runs parsed STF commands against a Pipeline (testbed/p4engine/CONTRACT.md)."""

    def __init__(self, pipeline, out=None, filename="<stf>", echo=False):
        out = out or sys.stdout       # looked up per call: sys.stdout may have been replaced
        self.pipeline = pipeline
        self.echo = echo              # print each command before running it (with a packet trace)
        self.report = _Report(out)
        self.filename = filename
        self.expected = {}        # port -> [(pattern or None, exact, line)]
        self.any_ports = set()    # `expect PORT` without data
        self.tested_ports = set()
        self.received = {}        # port -> [bytes]
        self.entry_ids = {}       # `= ID` of add -> (table, entry)
        self.mc_groups = {}       # mgrp -> [node handles]
        self.mc_nodes = {}        # handle -> (rid, [ports])
        self.mc_sessions = {}     # clone session -> the multicast group it replicates to
        self.implicit_members = {}
        self.packets_in = 0
        self._t0 = time.monotonic()

    # ------------------------------------------------------------ helpers
    def where(self, cmd):
        return f"{self.filename}:{cmd.line}"

    def _now_us(self):
        return int((time.monotonic() - self._t0) * 1_000_000)

    def _table(self, name):
        return self.pipeline.tables[_resolve(self.pipeline.tables, name, "table")]

    def _named(self, collection, name, what):
        objects = getattr(self.pipeline, collection, None) or {}
        return objects[_resolve(objects, name, what)]

    def _action_call(self, table, action_name, args):
        action = _resolve(table.actions, action_name, "action", f" in table {table.name}")
        params = (table.action_params or {}).get(action)
        values = {}
        for name, text in args:
            if params is not None and name not in [p for p, _ in params]:
                raise StfError(f"action {action} has no parameter {name!r} "
                               f"(parameters: {', '.join(p for p, _ in params) or 'none'})")
            values[name] = parse_number(text, f"argument {name} of {action}")
        if params is not None:
            for param, width in params:
                if param not in values:
                    raise StfError(f"action {action}: argument {param} is missing")
                fitting(values[param], width, f"argument {param} of {action}", dict(args)[param])
        return ActionCall(action, values)

    # ------------------------------------------------------------ commands
    def run(self, commands):
        for cmd in commands:
            if cmd.name in ("packet", "expect"):
                self.tested_ports.add(cmd.args[0])
        for cmd in commands:
            if self.echo:
                self.report.note(f"-- {self.where(cmd)}: {cmd.text}")
            try:
                getattr(self, "do_" + cmd.name)(cmd)
            except StfError as exc:
                self.report.fail(f"{self.where(cmd)}: error: {exc.message}\n    {cmd.text}")
            except TableError as exc:
                self.report.fail(f"{self.where(cmd)}: error: {exc}\n    {cmd.text}")
            except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
                if cmd.name == "packet":
                    raise          # the pipeline failed on a packet: an engine bug (exit 3)
                # a value no check above foresaw: still the line's fault, said on one line
                self.report.fail(f"{self.where(cmd)}: error: cannot run this line "
                                 f"({type(exc).__name__}: {shown_text(str(exc), 120)})\n    {cmd.text}")
        self.compare()
        return 0 if self.report.failures == 0 else 1

    def do_packet(self, cmd):
        port, data = cmd.args
        self.packets_in += 1
        try:
            sent = self.pipeline.process(port, data, self._now_us())
        except P4RuntimeFault as exc:
            # BMv2 aborts on a failed assert/assume; the test cannot pass past it.
            raise StfError(f"the program stopped on this packet: {exc}") from None
        for out_port, out_data in sent:
            self.received.setdefault(out_port, []).append((bytes(out_data), cmd.line))

    def do_expect(self, cmd):
        port, pattern, exact = cmd.args
        if pattern is None:
            self.any_ports.add(port)
        else:
            self.expected.setdefault(port, []).append((pattern, exact, cmd.line))

    def do_no_packet(self, cmd):
        pass

    def do_wait(self, cmd):
        pass                      # packets are processed synchronously

    def do_add(self, cmd):
        table_name, priority, key_texts, action_name, args, entry_id = cmd.args
        table = self._table(table_name)
        keys = [None] * len(table.keys)
        for spec_index, spec in enumerate(table.keys):
            if spec.match_kind == "exact":
                keys[spec_index] = Exact(0)          # bmv2stf's default for an unset exact key
        seen = set()
        for key_name, text in key_texts:
            i = _resolve_key(table, key_name)
            if i in seen:
                raise StfError(f"key field {table.keys[i].name} given twice")
            seen.add(i)
            keys[i] = key_value(table.keys[i], text, f"table {table.name}")
        if getattr(table, "needs_priority", False):
            priority = (priority if priority is not None else 0) + STF_PRIORITY_OFFSET
        else:
            priority = None
        if action_name in ("$member", "$group"):
            if table.implementation is None:
                raise StfError(f"{action_name} needs a table with an action profile; "
                               f"{table.name} has none")
            if len(args) != 1:
                raise StfError(f"{action_name} takes one argument, e.g. {action_name}(id:0)")
            ref = parse_number(args[0][1], action_name)
            action = MemberRef(ref) if action_name == "$member" else GroupRef(ref)
        else:
            action = self._action_call(table, action_name, args)
            if table.implementation is not None:
                action = self._implicit_member(table.implementation, action)
        entry = table.insert(keys, action, priority)
        if entry_id:
            self.entry_ids[entry_id] = (table, entry)

    def _implicit_member(self, profile, action):
        # bmv2stf has no syntax for members: each distinct action call becomes one.
        key = (profile.name, action)
        member_id = self.implicit_members.get(key)
        if member_id is None:
            member_id = len([k for k in self.implicit_members if k[0] == profile.name]) + 1
            profile.insert_member(member_id, action)
            self.implicit_members[key] = member_id
        return MemberRef(member_id)

    # -- action profiles (simple_switch_CLI's act_prof_* commands)
    def _profile(self, name):
        profiles = dict(getattr(self.pipeline, "action_profiles", None) or {})
        for table in self.pipeline.tables.values():
            if table.implementation is not None:
                profiles.setdefault(table.implementation.name, table.implementation)
        return profiles[_resolve(profiles, name, "action profile")]

    def _profile_table(self, profile):
        for table in self.pipeline.tables.values():
            if table.implementation is profile:
                return table
        raise StfError(f"no table uses action profile {profile.name}")

    def do_act_prof_create_member(self, cmd):
        profile_name, action_name, args = cmd.args
        profile = self._profile(profile_name)
        table = self._profile_table(profile)
        if args and not isinstance(args[0], tuple):
            # positional arguments, as simple_switch_CLI takes them
            action = _resolve(table.actions, action_name, "action", f" in table {table.name}")
            params = (table.action_params or {}).get(action) or []
            if len(params) != len(args):
                raise StfError(f"action {action} takes {len(params)} arguments, got {len(args)}")
            args = [(p, a) for (p, _), a in zip(params, args)]
        call = self._action_call(table, action_name, args)
        member_id = _smallest_free(profile.members())
        profile.insert_member(member_id, call)
        self.report.note(f"{self.where(cmd)}: member {member_id} of {profile.name} is {call}")

    def do_act_prof_create_group(self, cmd):
        if len(cmd.args) != 1:
            raise StfError("act_prof_create_group takes PROFILE")
        profile = self._profile(cmd.args[0])
        group_id = _smallest_free(profile.groups())
        profile.insert_group(group_id, [])
        self.report.note(f"{self.where(cmd)}: group {group_id} of {profile.name} created")

    def _membership(self, cmd):
        if len(cmd.args) != 3:
            raise StfError(f"{cmd.name} takes PROFILE MEMBER GROUP")
        profile = self._profile(cmd.args[0])
        member = parse_number(cmd.args[1], "member")
        group = parse_number(cmd.args[2], "group")
        groups = profile.groups()
        if group not in groups:
            raise StfError(f"action profile {profile.name} has no group {group}")
        return profile, member, group, dict(groups[group])

    def do_act_prof_add_member_to_group(self, cmd):
        profile, member, group, members = self._membership(cmd)
        if member in members:
            raise StfError(f"member {member} is already in group {group}")
        members[member] = 1
        profile.modify_group(group, sorted(members.items()))

    def do_act_prof_remove_member_from_group(self, cmd):
        profile, member, group, members = self._membership(cmd)
        if members.pop(member, None) is None:
            raise StfError(f"member {member} is not in group {group}")
        profile.modify_group(group, sorted(members.items()))

    def do_act_prof_delete_member(self, cmd):
        if len(cmd.args) != 2:
            raise StfError("act_prof_delete_member takes PROFILE MEMBER")
        self._profile(cmd.args[0]).delete_member(parse_number(cmd.args[1], "member"))

    def do_act_prof_delete_group(self, cmd):
        if len(cmd.args) != 2:
            raise StfError("act_prof_delete_group takes PROFILE GROUP")
        self._profile(cmd.args[0]).delete_group(parse_number(cmd.args[1], "group"))

    def do_setdefault(self, cmd):
        table_name, action_name, args = cmd.args
        table = self._table(table_name)
        table.set_default(self._action_call(table, action_name, args))

    def do_remove(self, cmd):
        if [w.lower() for w in cmd.args] != ["all"]:
            raise StfError("only 'remove all' is supported")
        for table in self.pipeline.tables.values():
            if not table.is_const:
                table.clear()

    # -- clone sessions and multicast (simple_switch_CLI semantics)
    def _ints(self, cmd, n=None, what="arguments", widths=()):
        """The arguments as numbers; `widths` (one per leading argument, the last repeated for
        the rest) bound them: (name, bits)."""
        if n is not None and len(cmd.args) != n:
            raise StfError(f"{cmd.name} takes {n} {what}, got {len(cmd.args)}")
        values = []
        for i, text in enumerate(cmd.args):
            value = parse_number(text, cmd.name)
            if widths:
                name, bits = widths[min(i, len(widths) - 1)]
                fitting(value, bits, f"{cmd.name}: {name}", text)
            values.append(value)
        return values

    def do_mirroring_add(self, cmd):
        session, port = self._ints(cmd, 2, widths=(("session", 32), ("port", PORT_WIDTH)))
        self.mc_sessions.pop(session, None)
        self.pipeline.set_clone_session(session, [(port, 0)])

    def do_mirroring_add_mc(self, cmd):
        session, mgrp = self._ints(cmd, 2, widths=(("session", 32), ("group", 16)))
        if mgrp not in self.mc_groups:
            raise StfError(f"multicast group {mgrp} does not exist (create it with mc_mgrp_create)")
        # BMv2's session names the group: later changes to the group reach its clones
        self.mc_sessions[session] = mgrp
        self.pipeline.set_clone_session(session, self._replicas(mgrp))

    def do_mirroring_delete(self, cmd):
        (session,) = self._ints(cmd, 1)
        self.mc_sessions.pop(session, None)
        self.pipeline.delete_clone_session(session)

    def do_mirroring_get(self, cmd):
        self._ints(cmd, 1)

    def do_mc_mgrp_create(self, cmd):
        (mgrp,) = self._ints(cmd, 1, widths=(("group", 16),))
        if mgrp in self.mc_groups:
            raise StfError(f"multicast group {mgrp} already exists")
        self.mc_groups[mgrp] = []
        self.pipeline.set_mc_group(mgrp, [])

    def do_mc_mgrp_destroy(self, cmd):
        (mgrp,) = self._ints(cmd, 1)
        if self.mc_groups.pop(mgrp, None) is None:
            raise StfError(f"multicast group {mgrp} does not exist")
        self.pipeline.delete_mc_group(mgrp)
        self._push_groups()

    def do_mc_node_create(self, cmd):
        values = self._ints(cmd, widths=(("rid", 16), ("port", PORT_WIDTH)))
        if not values:
            raise StfError("mc_node_create takes RID PORT...")
        handle = 0
        while handle in self.mc_nodes:     # BMv2 hands out the smallest free handle
            handle += 1
        self.mc_nodes[handle] = (values[0], sorted(set(values[1:])))
        self.report.note(f"{self.where(cmd)}: multicast node {handle} created (rid {values[0]})")

    def do_mc_node_update(self, cmd):
        values = self._ints(cmd, widths=(("handle", 32), ("port", PORT_WIDTH)))
        if not values or values[0] not in self.mc_nodes:
            raise StfError(f"mc_node_update: no node {values[0] if values else '?'}")
        rid, _ = self.mc_nodes[values[0]]
        self.mc_nodes[values[0]] = (rid, sorted(set(values[1:])))
        self._push_groups()

    def do_mc_node_destroy(self, cmd):
        (handle,) = self._ints(cmd, 1)
        if self.mc_nodes.pop(handle, None) is None:
            raise StfError(f"mc_node_destroy: no node {handle}")
        for nodes in self.mc_groups.values():
            if handle in nodes:
                nodes.remove(handle)
        self._push_groups()

    def do_mc_node_associate(self, cmd):
        mgrp, handle = self._ints(cmd, 2)
        if mgrp not in self.mc_groups:
            raise StfError(f"multicast group {mgrp} does not exist")
        if handle not in self.mc_nodes:
            raise StfError(f"multicast node {handle} does not exist")
        if any(handle in nodes for nodes in self.mc_groups.values()):
            raise StfError(f"multicast node {handle} is already associated")
        self.mc_groups[mgrp].append(handle)
        self._push_groups()

    def do_mc_node_dissociate(self, cmd):
        mgrp, handle = self._ints(cmd, 2)
        if handle not in self.mc_groups.get(mgrp, []):
            raise StfError(f"node {handle} is not in multicast group {mgrp}")
        self.mc_groups[mgrp].remove(handle)
        self._push_groups()

    def _replicas(self, mgrp):
        # BMv2's PRE: nodes in association order, each node's ports in ascending order.
        out = []
        for handle in self.mc_groups.get(mgrp, ()):
            rid, ports = self.mc_nodes[handle]
            out.extend((port, rid) for port in ports)
        return out

    def _push_groups(self):
        for mgrp in self.mc_groups:
            self.pipeline.set_mc_group(mgrp, self._replicas(mgrp))
        for session, mgrp in self.mc_sessions.items():
            self.pipeline.set_clone_session(session, self._replicas(mgrp))

    # -- registers, counters, meters
    def do_register_read(self, cmd):
        if len(cmd.args) != 2:
            raise StfError("register_read takes NAME INDEX")
        reg = self._named("registers", cmd.args[0], "register")
        index = parse_number(cmd.args[1], "index")
        self.report.note(f"{self.where(cmd)}: {reg.name}[{index}] = {reg.read(index)}")

    def do_register_write(self, cmd):
        if len(cmd.args) != 3:
            raise StfError("register_write takes NAME INDEX VALUE")
        reg = self._named("registers", cmd.args[0], "register")
        value = fitting(parse_number(cmd.args[2], "value"), reg.width, f"register {reg.name}", cmd.args[2])
        reg.write(parse_number(cmd.args[1], "index"), value)

    def do_register_reset(self, cmd):
        if len(cmd.args) != 1:
            raise StfError("register_reset takes NAME")
        self._named("registers", cmd.args[0], "register").reset()

    # -- parser value sets (simple_switch_CLI's pvs_* commands)
    def _value_set_member(self, cmd):
        if len(cmd.args) != 2:
            raise StfError(f"{cmd.name} takes VALUE_SET VALUE")
        vset = self._named("value_sets", cmd.args[0], "value set")
        value = fitting(parse_number(cmd.args[1], "value"), vset.width, f"value set {vset.name}", cmd.args[1])
        return vset, vset.split(value)

    def do_pvs_add(self, cmd):
        vset, member = self._value_set_member(cmd)
        vset.add(member)

    def do_pvs_remove(self, cmd):
        vset, member = self._value_set_member(cmd)
        vset.remove(member)

    def do_pvs_clear(self, cmd):
        if len(cmd.args) != 1:
            raise StfError("pvs_clear takes VALUE_SET")
        self._named("value_sets", cmd.args[0], "value set").clear()

    def do_pvs_get(self, cmd):
        if len(cmd.args) != 1:
            raise StfError("pvs_get takes VALUE_SET")
        vset = self._named("value_sets", cmd.args[0], "value set")
        shown = ", ".join("(" + ", ".join(f"{k.value:#x}" if hasattr(k, "value") else repr(k) for k in m) + ")"
                          for m in vset.members())
        self.report.note(f"{self.where(cmd)}: {vset.name} = {{{shown}}}")

    def _with_direct(self, collection, attribute):
        """The pipeline's externs of a kind plus the direct ones attached to tables."""
        objects = dict(getattr(self.pipeline, collection, None) or {})
        for table in self.pipeline.tables.values():
            direct = getattr(table, attribute, None)
            if direct is not None:
                objects.setdefault(direct.name, direct)
        return objects

    def _entry_of(self, table, index_text):
        """A direct extern's 'index': an entry handle, or the `= ID` given to an add."""
        ident = index_text.lstrip("$")
        if index_text.startswith("$") or ident in self.entry_ids:
            if ident not in self.entry_ids:
                raise StfError(f"no entry was added with id {ident}")
            return self.entry_ids[ident][1]
        handle = parse_number(index_text, "entry handle")
        for entry in table.entries():
            if entry.handle == handle:
                return entry
        raise StfError(f"table {table.name} has no entry with handle {handle}")

    def _counter_cell(self, name, index_text):
        counters = self._with_direct("counters", "direct_counter")
        counter = counters[_resolve(counters, name, "counter")]
        if hasattr(counter, "read"):
            index = parse_number(index_text, "index")
            return counter, index, lambda: counter.read(index)
        entry = self._entry_of(counter.table, index_text)
        return counter, entry, lambda: entry.counter

    def do_counter_read(self, cmd):
        if len(cmd.args) != 2:
            raise StfError("counter_read takes NAME INDEX")
        counter, index, read = self._counter_cell(*cmd.args)
        packets, nbytes = read()
        self.report.note(f"{self.where(cmd)}: {counter.name}[{cmd.args[1]}] = "
                         f"{packets} packets, {nbytes} bytes")

    def do_counter_write(self, cmd):
        if len(cmd.args) != 4:
            raise StfError("counter_write takes NAME INDEX PACKETS BYTES")
        counter = self._named("counters", cmd.args[0], "counter")
        # BMv2's counters are 64-bit
        counter.write(parse_number(cmd.args[1], "index"),
                      fitting(parse_number(cmd.args[2], "packets"), 64, "counter_write packets", cmd.args[2]),
                      fitting(parse_number(cmd.args[3], "bytes"), 64, "counter_write bytes", cmd.args[3]))

    def do_counter_reset(self, cmd):
        counter = self._named("counters", cmd.args[0], "counter")
        counter.reset()

    def do_check_counter(self, cmd):
        name, index_text, kind, op, number = cmd.args
        counter, _, read = self._counter_cell(name, index_text)
        packets, nbytes = read()
        if kind is None:
            self.report.note(f"{self.where(cmd)}: {counter.name}({index_text}) = "
                             f"{packets} packets, {nbytes} bytes")
            return
        actual = packets if kind == "packets" else nbytes
        expected = parse_number(number, "check_counter value")
        ok = {"==": actual == expected, "!=": actual != expected, "<": actual < expected,
              "<=": actual <= expected, ">": actual > expected, ">=": actual >= expected}[op]
        if not ok:
            self.report.fail(f"{self.where(cmd)}: check_counter failed: {counter.name}({index_text}) "
                             f"{kind} is {actual}, expected {op} {expected}")

    def _meter(self, name):
        meters = self._with_direct("meters", "direct_meter")
        return meters[_resolve(meters, name, "meter")]

    def do_meter_set_rates(self, cmd):
        if len(cmd.args) < 3:
            raise StfError("meter_set_rates takes NAME INDEX RATE:BURST RATE:BURST")
        meter = self._meter(cmd.args[0])
        rates = parse_meter_rates(cmd.args[2:], cmd.name)
        if len(rates) != 2:
            raise StfError("meter_set_rates needs two RATE:BURST pairs (committed, peak)")
        if not hasattr(meter, "set_rates_bmv2"):      # a direct meter: index = entry
            self._entry_of(meter.table, cmd.args[1]).set_meter_rates_bmv2(rates)
            return
        meter.set_rates_bmv2(parse_number(cmd.args[1], "index"), rates)

    def do_meter_array_set_rates(self, cmd):
        if len(cmd.args) < 2:
            raise StfError("meter_array_set_rates takes NAME RATE:BURST RATE:BURST")
        meter = self._meter(cmd.args[0])
        rates = parse_meter_rates(cmd.args[1:], cmd.name)
        if len(rates) != 2:
            raise StfError("meter_array_set_rates needs two RATE:BURST pairs (committed, peak)")
        if not hasattr(meter, "set_rates_bmv2"):
            for entry in meter.table.entries():
                entry.set_meter_rates_bmv2(rates)
            return
        for i in range(meter.size):
            meter.set_rates_bmv2(i, rates)

    def do_meter_get_rates(self, cmd):
        if len(cmd.args) != 2:
            raise StfError("meter_get_rates takes NAME INDEX")
        meter = self._meter(cmd.args[0])
        if not hasattr(meter, "cells"):
            entry = self._entry_of(meter.table, cmd.args[1])
            rates = entry.meter.rates() if entry.meter is not None else None
            shown = "unconfigured" if rates is None else " ".join(f"{r:g}:{b}" for r, b in rates)
            self.report.note(f"{self.where(cmd)}: {meter.name}[entry {cmd.args[1]}] rates {shown}")
            return
        index = parse_number(cmd.args[1], "index")
        if not 0 <= index < meter.size:
            raise StfError(f"meter {meter.name}: index {index} is out of range (size {meter.size})")
        rates = meter.cells[index].rates()
        shown = "unconfigured" if rates is None else " ".join(f"{r:g}:{b}" for r, b in rates)
        self.report.note(f"{self.where(cmd)}: {meter.name}[{index}] rates {shown}")

    # ------------------------------------------------------------ verdict
    def compare(self):
        report = self.report
        for port in sorted(set(self.received) - self.tested_ports):
            n = len(self.received[port])
            report.note(f"note: {n} packet(s) went out of port {port}, which no packet/expect line "
                        "uses (BMv2 has no interface there): ignored")
        for port in sorted(self.tested_ports):
            got = self.received.get(port, [])
            if port in self.any_ports:
                if self.expected.get(port):
                    report.fail(f"port {port}: has both 'expect {port}' without data and with data")
                continue
            wanted = self.expected.get(port, [])
            problems = []
            for i in range(max(len(wanted), len(got))):
                if i >= len(got):
                    pattern, exact, line = wanted[i]
                    problems.append(f"  packet {i + 1}: expected (line {line}), not received\n"
                                    f"    expected {_spaced(pattern)}{'$' if exact else ''}")
                    continue
                data, in_line = got[i]
                if i >= len(wanted):
                    problems.append(f"  packet {i + 1}: unexpected (from the packet on line {in_line})\n"
                                    f"    got      {_spaced(data.hex().upper())}")
                    continue
                pattern, exact, line = wanted[i]
                diff = match_packet(pattern, exact, data)
                if diff is not None:
                    problems.append(f"  packet {i + 1}: differs from the expect on line {line} "
                                    f"({diff['why']})\n"
                                    f"    expected {_spaced(pattern)}{'$' if exact else ''}\n"
                                    f"    got      {_spaced(diff['got'])}\n"
                                    f"             {_spaced(diff['marks'])}")
            if problems:
                report.fail(f"port {port}: expected {len(wanted)} packet(s), got {len(got)}\n"
                            + "\n".join(problems))
        if report.failures == 0:
            report.note(f"PASS: {self.packets_in} packet(s) in, "
                        f"{sum(len(v) for p, v in self.received.items() if p in self.tested_ports)} "
                        "checked out")


def _smallest_free(used):
    n = 0
    while n in used:
        n += 1
    return n


def match_packet(pattern, exact, data):
    """None if `data` matches the expect pattern, else a dict describing the difference."""
    got = data.hex().upper()
    marks = []
    why = []
    for i, ch in enumerate(pattern):
        if i >= len(got):
            marks.append("^")
            continue
        marks.append(" " if ch == "*" or ch == got[i] else "^")
    if len(got) < len(pattern):
        why.append(f"{len(data)} bytes received, at least {(len(pattern) + 1) // 2} expected")
    if "^" in "".join(marks[:len(got)]):
        why.append(f"{sum(1 for m in marks[:len(got)] if m == '^')} nibble(s) differ")
    if exact and len(got) > len(pattern):
        why.append(f"{len(data)} bytes received, exactly {(len(pattern) + 1) // 2} expected")
        marks.extend("+" * (len(got) - len(pattern)))
    if not why:
        return None
    return {"why": "; ".join(why), "got": got, "marks": "".join(marks)}


def _spaced(hex_text):
    """Group hex (or a mark line aligned to it) in 8-nibble blocks for reading."""
    return " ".join(hex_text[i:i + 8] for i in range(0, len(hex_text), 8))


def run_stf(program_path, stf_path, include_dirs=(), out=None, defines=None, log=None):
    """Compile `program_path`, run `stf_path` against it; 0 only if every expectation holds.

    `log`: None or callable(str), given the pipeline's per-packet trace (`rocelab p4 test -v`).
    """
    out = out or sys.stdout
    try:
        with open(stf_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        print(f"{stf_path}: error: cannot read the STF file: {exc.strerror}", file=out)
        return 1
    except UnicodeDecodeError as exc:
        print(f"{stf_path}: error: not a text file (byte {exc.start} is not UTF-8)", file=out)
        return 1
    try:
        commands = parse_stf(text, str(stf_path))
    except StfError as exc:
        print(str(exc), file=out)
        return 1
    from testbed.p4engine import P4Error, compile_file
    try:
        program = compile_file(program_path, include_dirs=include_dirs, defines=defines)
    except P4Error as exc:
        print(str(exc), file=out)
        return 1
    pipeline = program.new_pipeline(log=log)
    return StfRunner(pipeline, out=out, filename=str(stf_path), echo=log is not None).run(commands)


def run_stf_text(pipeline, text, out=None, filename="<stf>"):
    """Run STF `text` against an existing pipeline (tests, the switch's self-check)."""
    out = out or sys.stdout
    try:
        commands = parse_stf(text, filename)
    except StfError as exc:
        print(str(exc), file=out)
        return 1
    return StfRunner(pipeline, out=out, filename=filename).run(commands)
