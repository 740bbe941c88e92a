"""Tables and action profiles of the embedded engine (testbed/p4engine/tables.py)."""
import random

import pytest

from testbed.p4engine import hashes
from testbed.p4engine.externs import GREEN, RED, YELLOW, DirectCounter, DirectMeter
from testbed.p4engine.tables import (
    EMPTY_ACTION, ActionCall, ActionProfile, Exact, GroupRef, KeySpec, Lpm, MemberRef, Optional, Range,
    Table, TableError, Ternary)

FWD = "MyIngress.fwd"
DROP = "MyIngress.drop"
NOACTION = "NoAction"


def fwd(port):
    return ActionCall(FWD, {"port": port})


def make(keys, **kw):
    kw.setdefault("action_params", {FWD: [("port", 9)], DROP: [], NOACTION: []})
    return Table("MyIngress.t", [KeySpec(*k) for k in keys], [FWD, DROP, NOACTION], **kw)


def code_of(fn, *args, **kw):
    with pytest.raises(TableError) as info:
        fn(*args, **kw)
    return info.value.code


# ------------------------------------------------------------------ exact

def test_exact_hit_miss_and_default():
    t = make([("hdr.ethernet.dstAddr", "exact", 48), ("meta.vrf", "exact", 8)])
    t.insert([Exact(0x0A0000000001), Exact(3)], fwd(1))
    action, hit, entry = t.lookup((0x0A0000000001, 3))
    assert (action, hit) == (fwd(1), True) and entry.keys == [Exact(0x0A0000000001), Exact(3)]
    action, hit, entry = t.lookup((0x0A0000000001, 4))
    assert (action.action, hit, entry) == (NOACTION, False, None)
    t.set_default(ActionCall(DROP))
    assert t.lookup((1, 1))[0] == ActionCall(DROP)
    t.reset_default()
    assert t.get_default().action == NOACTION


def test_modify_and_delete():
    t = make([("k", "exact", 16)])
    t.insert([Exact(5)], fwd(1))
    t.modify([Exact(5)], fwd(2))
    assert t.lookup((5,))[0] == fwd(2)
    t.delete([Exact(5)])
    assert t.lookup((5,))[1] is False
    assert code_of(t.delete, [Exact(5)]) == "NOT_FOUND"
    assert code_of(t.modify, [Exact(5)], fwd(1)) == "NOT_FOUND"


def test_errors_have_p4runtime_codes():
    t = make([("k", "exact", 8)], size=2)
    t.insert([Exact(1)], fwd(1))
    assert code_of(t.insert, [Exact(1)], fwd(2)) == "ALREADY_EXISTS"
    assert code_of(t.insert, [Exact(256)], fwd(2)) == "INVALID_ARGUMENT"          # too wide
    assert code_of(t.insert, [Ternary(1, 1)], fwd(2)) == "INVALID_ARGUMENT"       # wrong kind
    assert code_of(t.insert, [Exact(2)], ActionCall("Other")) == "INVALID_ARGUMENT"
    assert code_of(t.insert, [Exact(2)], ActionCall(FWD, {"port": 1 << 9})) == "INVALID_ARGUMENT"
    assert code_of(t.insert, [Exact(2)], ActionCall(FWD, {})) == "INVALID_ARGUMENT"
    assert code_of(t.insert, [Exact(2)], fwd(1), priority=3) == "INVALID_ARGUMENT"
    assert code_of(t.insert, [None], fwd(1)) == "INVALID_ARGUMENT"
    t.insert([Exact(2)], fwd(2))
    err = pytest.raises(TableError, t.insert, [Exact(3)], fwd(3)).value
    assert err.code == "RESOURCE_EXHAUSTED" and "MyIngress.t" in str(err)


def test_const_entries_and_const_default():
    t = make([("k", "ternary", 8)], const_entries=[
        ([Ternary(0x10, 0xF0)], fwd(1), None),
        ([None], fwd(2), None)],
        default_action=ActionCall(DROP), const_default_action=True)
    assert t.lookup((0x12,))[0] == fwd(1)          # earlier const entry wins
    assert t.lookup((0x22,))[0] == fwd(2)
    assert code_of(t.insert, [Ternary(0, 0xFF)], fwd(3), priority=1) == "PERMISSION_DENIED"
    assert code_of(t.delete, [None], priority=1) == "PERMISSION_DENIED"
    assert code_of(t.set_default, fwd(3)) == "PERMISSION_DENIED"
    assert [e.action for e in t.entries()] == [fwd(1), fwd(2)]


def test_action_scopes():
    t = Table("t", [KeySpec("k", "exact", 8)], ["a", "b"], table_only={"a"}, default_only={"b"})
    assert code_of(t.insert, [Exact(1)], ActionCall("b")) == "INVALID_ARGUMENT"
    assert code_of(t.set_default, ActionCall("a")) == "INVALID_ARGUMENT"
    t.insert([Exact(1)], ActionCall("a"))
    t.set_default(ActionCall("b"))


def test_keyless_table_runs_its_default_until_its_one_entry_is_inserted():
    # as BMv2: a keyless table is an exact table whose key is empty, so it holds one entry,
    # which every lookup hits
    t = Table("t", [], ["a", "b"], default_action=ActionCall("a"))
    assert t.lookup(()) == (ActionCall("a"), False, None)
    entry = t.insert([], ActionCall("b"))
    assert t.lookup(()) == (ActionCall("b"), True, entry)
    assert code_of(t.insert, [], ActionCall("a")) == "ALREADY_EXISTS"
    t.delete([])
    assert t.lookup(()) == (ActionCall("a"), False, None)


# ------------------------------------------------------------------ lpm

def test_lpm_longest_prefix_wins():
    t = make([("hdr.ipv4.dstAddr", "lpm", 32)])
    t.insert([Lpm(0x0A000000, 8)], fwd(1))
    t.insert([Lpm(0x0A010000, 16)], fwd(2))
    t.insert([Lpm(0x0A010203, 32)], fwd(3))
    t.insert([None], fwd(4))                      # /0 default route
    assert t.lookup((0x0A010203,))[0] == fwd(3)
    assert t.lookup((0x0A010204,))[0] == fwd(2)
    assert t.lookup((0x0A020204,))[0] == fwd(1)
    assert t.lookup((0x0B000000,))[0] == fwd(4)
    t.delete([Lpm(0x0A010000, 16)])
    assert t.lookup((0x0A010204,))[0] == fwd(1)
    assert code_of(t.insert, [Lpm(0x0A000001, 8)], fwd(1)) == "INVALID_ARGUMENT"   # bits past prefix
    assert code_of(t.insert, [Lpm(0, 33)], fwd(1)) == "INVALID_ARGUMENT"


def test_lpm_with_exact_keys():
    t = make([("meta.vrf", "exact", 8), ("hdr.ipv4.dstAddr", "lpm", 32)])
    t.insert([Exact(1), Lpm(0x0A000000, 8)], fwd(1))
    t.insert([Exact(2), Lpm(0x0A000000, 16)], fwd(2))
    assert t.lookup((1, 0x0A000001))[0] == fwd(1)
    assert t.lookup((2, 0x0A000001))[0] == fwd(2)
    assert t.lookup((2, 0x0A010001))[1] is False


# ------------------------------------------------------------------ ternary / range / optional

def test_ternary_higher_priority_wins_and_ties_go_to_first_inserted():
    t = make([("k", "ternary", 16)])
    t.insert([Ternary(0x0800, 0xFF00)], fwd(1), priority=10)
    t.insert([Ternary(0x0806, 0xFFFF)], fwd(2), priority=20)
    t.insert([None], fwd(3), priority=1)
    assert t.lookup((0x0806,))[0] == fwd(2)
    assert t.lookup((0x0801,))[0] == fwd(1)
    assert t.lookup((0x1234,))[0] == fwd(3)
    t.insert([Ternary(0x0000, 0x0001)], fwd(4), priority=10)      # same priority as entry 1
    t.insert([Ternary(0x0800, 0xFF00)], fwd(5), priority=5)       # same key, other priority
    assert t.lookup((0x0800,))[0] == fwd(1)
    assert code_of(t.insert, [Ternary(1, 1)], fwd(1)) == "INVALID_ARGUMENT"         # no priority
    assert code_of(t.insert, [Ternary(3, 1)], fwd(1), priority=1) == "INVALID_ARGUMENT"
    t.delete([Ternary(0x0800, 0xFF00)], priority=10)
    assert t.lookup((0x0800,))[0] == fwd(4)


def test_range_and_optional():
    t = make([("meta.port", "range", 16), ("hdr.ipv4.protocol", "optional", 8)])
    t.insert([Range(1000, 1999), Optional(17)], fwd(1), priority=5)
    t.insert([Range(1500, 1600), None], fwd(2), priority=3)
    t.insert([None, Optional(6)], fwd(3), priority=1)
    assert t.lookup((1550, 17))[0] == fwd(1)
    assert t.lookup((1550, 6))[0] == fwd(2)
    assert t.lookup((5, 6))[0] == fwd(3)
    assert t.lookup((5, 17))[1] is False
    assert code_of(t.insert, [Range(5, 4), None], fwd(1), priority=1) == "INVALID_ARGUMENT"


@pytest.mark.parametrize("seed", range(4))
def test_ternary_index_agrees_with_a_linear_scan(seed):
    rng = random.Random(seed)
    t = make([("a", "ternary", 8), ("b", "lpm", 16), ("c", "exact", 4)])
    reference = []
    priorities = rng.sample(range(1, 10000), 120)
    for prio in priorities:
        mask = rng.choice([0xFF, 0xF0, 0x0F, 0x00, 0x81])
        a = rng.getrandbits(8) & mask
        plen = rng.choice([0, 4, 8, 16])
        b = rng.getrandbits(16) & (0xFFFF ^ ((1 << (16 - plen)) - 1))
        c = rng.getrandbits(4)
        keys = [Ternary(a, mask) if mask else None, Lpm(b, plen) if plen else None, Exact(c)]
        t.insert(keys, fwd(prio % 512), priority=prio)
        reference.append((prio, a, mask, b, plen, c))
    for victim in rng.sample(reference, 30):
        prio, a, mask, b, plen, c = victim
        t.delete([Ternary(a, mask) if mask else None, Lpm(b, plen) if plen else None, Exact(c)], priority=prio)
        reference.remove(victim)
    for _ in range(400):
        va, vb, vc = rng.getrandbits(8), rng.getrandbits(16), rng.getrandbits(4)
        matching = [r for r in reference
                    if va & r[2] == r[1] and (vb >> (16 - r[4]) if r[4] else 0) == (r[3] >> (16 - r[4]) if r[4] else 0)
                    and vc == r[5]]
        action, hit, entry = t.lookup((va, vb, vc))
        if matching:
            best = max(matching)
            assert hit and entry.priority == best[0]
        else:
            assert not hit


# ------------------------------------------------------------------ direct counters and meters

def test_direct_counter_counts_hits_only():
    counter = DirectCounter("MyIngress.c", "packets_and_bytes")
    t = make([("k", "exact", 8)], direct_counter=counter)
    entry = t.insert([Exact(1)], fwd(1))
    t.lookup((1,), packet_length=100)
    t.lookup((1,), packet_length=60)
    t.lookup((2,), packet_length=60)
    assert entry.counter == (2, 160)
    entry.counter = (0, 0)
    assert t.entries()[0].counter == (0, 0)
    packets_only = make([("k", "exact", 8)], direct_counter=DirectCounter("c2", "packets"))
    e2 = packets_only.insert([Exact(1)], fwd(1))
    packets_only.lookup((1,), packet_length=99)
    assert e2.counter == (1, 99)      # BMv2 counts (and reads back) bytes too


def test_direct_meter_colours_on_hit():
    meter = DirectMeter("MyIngress.m", "packets")
    t = make([("k", "exact", 8)], direct_meter=meter)
    entry = t.insert([Exact(1)], fwd(1))
    assert entry.meter_config is None
    t.lookup((1,), packet_length=64, now_us=0)
    assert meter.hit and meter.color == GREEN            # unconfigured: GREEN
    entry.meter_config = (1, 2, 2, 3)                    # 1 pkt/s committed, 2 pkt/s peak
    assert entry.meter_config == (1, 2, 2, 3)
    colours = []
    for _ in range(5):
        t.lookup((1,), packet_length=64, now_us=10)
        colours.append(meter.color)
    assert colours == [GREEN, GREEN, YELLOW, RED, RED]
    t.lookup((2,), packet_length=64, now_us=10)
    assert meter.hit is False and meter.read(7) == 7     # miss: destination unchanged


# ------------------------------------------------------------------ action profiles and selectors

def selector_table(profile):
    return Table("MyIngress.ecmp", [KeySpec("meta.dst", "exact", 32)], [FWD, NOACTION],
                 implementation=profile,
                 selector_keys=[KeySpec("hdr.ipv4.srcAddr", "selector", 32),
                                KeySpec("hdr.udp.srcPort", "selector", 16)])


def test_member_order_follows_bmv2_handles_not_ids():
    profile = ActionProfile("MyIngress.sel", algorithm="crc16")
    for member_id, port in ((30, 3), (10, 1), (20, 2)):      # created in this order: handles 0, 1, 2
        profile.insert_member(member_id, fwd(port))
    profile.insert_group(7, [(10, 1), (20, 1), (30, 1)])
    assert [m for m, _ in profile.selection(7)] == [30, 10, 20]
    t = selector_table(profile)
    t.insert([Exact(1)], GroupRef(7))
    ports = [3, 1, 2]
    for src in range(40):
        fields = [(0x0A000000 + src, 32), (1000 + src, 16)]
        expected = ports[(hashes.hash_fields("crc16", fields) & 0xFFFFFFFF) % 3]
        action, hit, _ = t.lookup((1,), selector_values=(0x0A000000 + src, 1000 + src))
        assert hit and action == fwd(expected)


def test_weights_become_copies_and_handles_are_reused():
    profile = ActionProfile("sel", algorithm="crc32")
    profile.insert_member(1, fwd(1))     # handle 0
    profile.insert_member(2, fwd(2))     # handle 1
    profile.insert_member(3, fwd(3))     # handle 2
    profile.insert_group(100, [(1, 2), (2, 1)])          # member 1's copy gets handle 3
    assert profile.selection(100) == [(1, fwd(1)), (2, fwd(2)), (1, fwd(1))]
    profile.modify_group(100, [(2, 1)])                  # the copy (handle 3) is released
    assert profile.selection(100) == [(2, fwd(2))]
    profile.delete_member(3)                             # frees handle 2
    profile.insert_member(4, fwd(4))                     # reuses handle 2
    profile.modify_group(100, [(2, 1), (4, 1), (1, 1)])
    assert [m for m, _ in profile.selection(100)] == [1, 2, 4]
    assert profile.groups() == {100: [(1, 1), (2, 1), (4, 1)]}


def test_profile_references_and_errors():
    profile = ActionProfile("prof", actions=[FWD, NOACTION])
    profile.insert_member(1, fwd(1))
    t = Table("t", [KeySpec("k", "exact", 8)], [FWD, NOACTION], implementation=profile)
    t.insert([Exact(1)], MemberRef(1))
    assert t.lookup((1,))[0] == fwd(1)
    profile.modify_member(1, fwd(5))
    assert t.lookup((1,))[0] == fwd(5)
    assert code_of(profile.delete_member, 1) == "FAILED_PRECONDITION"
    assert code_of(t.insert, [Exact(2)], MemberRef(9)) == "NOT_FOUND"
    assert code_of(t.insert, [Exact(2)], fwd(1)) == "INVALID_ARGUMENT"
    assert code_of(profile.insert_group, 1, [(1, 1)]) == "INVALID_ARGUMENT"      # no selector
    assert code_of(profile.insert_member, 1, fwd(1)) == "ALREADY_EXISTS"
    assert code_of(profile.insert_member, 2, ActionCall("nope")) == "INVALID_ARGUMENT"
    t.delete([Exact(1)])
    profile.delete_member(1)


def test_selector_group_errors_and_empty_group():
    profile = ActionProfile("sel", algorithm="crc16", max_group_size=3)
    profile.insert_member(1, fwd(1))
    assert code_of(profile.insert_group, 5, [(9, 1)]) == "NOT_FOUND"
    assert code_of(profile.insert_group, 5, [(1, 4)]) == "RESOURCE_EXHAUSTED"
    assert code_of(profile.insert_group, 5, [(1, 0)]) == "INVALID_ARGUMENT"
    profile.insert_group(5, [])
    t = selector_table(profile)
    assert code_of(t.insert, [Exact(1)], GroupRef(5)) == "INVALID_ARGUMENT"    # BMv2: EMPTY_GRP
    profile.modify_group(5, [(1, 1)])
    t.insert([Exact(1)], GroupRef(5))
    assert code_of(profile.delete_group, 5) == "FAILED_PRECONDITION"
    profile.modify_group(5, [])
    assert t.lookup((1,), selector_values=(1, 2))[0] is EMPTY_ACTION
