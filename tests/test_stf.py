"""The STF runner (testbed/p4engine/stf.py) against a small hand-written pipeline.

The fake pipeline uses the engine's real Table/Register/Counter classes:
ingress looks the first payload byte after Ethernet (a "class" byte) up in a
ternary table and the destination MAC in an exact table; actions forward,
multicast, clone or drop. Packets leave unmodified except that `mark` writes a
byte, so expectations are easy to state.
"""
import io

import pytest

from testbed.p4engine import stf
from testbed.p4engine.externs import Counter, DirectCounter, Register
from testbed.p4engine.tables import ActionProfile, Exact, KeySpec, Lpm, Range, Table, Ternary

FWD, MCAST, DROP, MARK, CLONE = ("MyIngress.fwd", "MyIngress.mcast", "MyIngress.drop",
                                 "MyIngress.mark", "MyIngress.fwd_and_clone")
PARAMS = {FWD: [("port", 9)], MCAST: [("grp", 16)], DROP: [], MARK: [("value", 8)],
          CLONE: [("port", 9), ("session", 16)], "NoAction": []}


class FakePipeline:
    def __init__(self):
        self.tables = {
            "MyIngress.dmac": Table("MyIngress.dmac", [KeySpec("hdr.ethernet.dstAddr", "exact", 48)],
                                    [FWD, MCAST, DROP, CLONE, "NoAction"], action_params=PARAMS,
                                    direct_counter=DirectCounter("MyIngress.dmac_hits", "packets_and_bytes")),
            "MyIngress.classify": Table("MyIngress.classify", [KeySpec("hdr.payload.cls", "ternary", 8)],
                                        [MARK, "NoAction"], action_params=PARAMS),
            "MyIngress.route": Table("MyIngress.route", [KeySpec("hdr.ipv4.dstAddr", "lpm", 32)],
                                     [FWD, "NoAction"], action_params=PARAMS),
            "MyIngress.ports": Table("MyIngress.ports", [KeySpec("standard_metadata.ingress_port", "range", 9)],
                                     [MARK, "NoAction"], action_params=PARAMS),
        }
        self.registers = {"MyIngress.last_port": Register("MyIngress.last_port", 4, 9)}
        self.counters = {"MyIngress.per_port": Counter("MyIngress.per_port", 8, "packets_and_bytes"),
                         "MyIngress.dmac_hits": self.tables["MyIngress.dmac"].direct_counter}
        self.meters = {}
        self.clone_sessions = {}
        self.mc_groups = {}

    def set_clone_session(self, session, replicas, truncate=0):
        self.clone_sessions[session] = list(replicas)

    def delete_clone_session(self, session):
        del self.clone_sessions[session]

    def set_mc_group(self, group, replicas):
        self.mc_groups[group] = list(replicas)

    def delete_mc_group(self, group):
        del self.mc_groups[group]

    def process(self, port, data, now_us=0):
        data = bytearray(data)
        self.registers["MyIngress.last_port"].packet_write(0, port)
        self.counters["MyIngress.per_port"].count(port, len(data))
        action, hit, _ = self.tables["MyIngress.classify"].lookup((data[14],))
        if action.action == MARK:
            data[15] = action.args["value"]
        action, hit, _ = self.tables["MyIngress.ports"].lookup((port,))
        if action.action == MARK:
            data[16] = action.args["value"]
        action, hit, _ = self.tables["MyIngress.dmac"].lookup((int.from_bytes(data[0:6], "big"),),
                                                              packet_length=len(data))
        if not hit and len(data) >= 34:
            action, hit, _ = self.tables["MyIngress.route"].lookup((int.from_bytes(data[30:34], "big"),))
        out = bytes(data)
        if action.action == FWD:
            return [(action.args["port"], out)]
        if action.action == CLONE:
            copies = [(p, out) for p, _ in self.clone_sessions.get(action.args["session"], [])]
            return [(action.args["port"], out)] + copies
        if action.action == MCAST:
            return [(p, out[:6] + bytes([rid & 0xFF]) + out[7:])
                    for p, rid in self.mc_groups.get(action.args["grp"], [])]
        return []


def frame(dst="000000000002", cls="00", tail="0000"):
    return dst + "000000000001" + "0800" + cls + tail


def run(text):
    pipeline = FakePipeline()
    out = io.StringIO()
    status = stf.run_stf_text(pipeline, text, out=out, filename="t.stf")
    return status, out.getvalue(), pipeline


# ------------------------------------------------------------------ parsing

def test_parse_commands_and_comments():
    cmds = stf.parse_stf(
        "# a comment\n"
        "add dmac 3 hdr.ethernet.dstAddr:0x000000000002 fwd(port:1) = A  # trailing\n"
        "packet 0 0000 0000 0002 ab\n"
        "expect 1 0000**** $\n"
        "expect 2\n"
        "mc_node_create 400 1 2 3\n", "x.stf")
    assert [c.name for c in cmds] == ["add", "packet", "expect", "expect", "mc_node_create"]
    assert cmds[0].args == ("dmac", 3, [("hdr.ethernet.dstAddr", "0x000000000002")], "fwd",
                            [("port", "1")], "A")
    assert cmds[1].args == (0, bytes.fromhex("00000000 0002ab"))
    assert cmds[2].args == (1, "0000****", True)
    assert cmds[3].args == (2, None, False)
    assert cmds[0].line == 2 and cmds[4].line == 6


@pytest.mark.parametrize("text, message", [
    ("frobnicate 1 2\n", "unknown command 'frobnicate'"),
    ("packet 0 00zz\n", "hex digits"),
    ("packet 0 000\n", "odd number"),
    ("expect x 00\n", "port number"),
    ("add t k:1 noparen\n", "action call"),
    ("add t k1 a()\n", "field:value"),
])
def test_parse_errors_name_file_and_line(text, message):
    with pytest.raises(stf.StfError) as info:
        stf.parse_stf("\n" + text, "bad.stf")
    assert str(info.value).startswith("bad.stf:2: error:") and message in str(info.value)


@pytest.mark.parametrize("kind, width, text, expected", [
    ("exact", 16, "0x0800", Exact(0x0800)),
    ("exact", 16, "2048", Exact(2048)),
    ("exact", 4, "0b1010", Exact(10)),
    ("lpm", 32, "0x0a010000/16", Lpm(0x0A010000, 16)),
    ("lpm", 32, "0x0a01****", Lpm(0x0A010000, 16)),
    ("lpm", 32, "0x0a010065", Lpm(0x0A010065, 32)),
    ("lpm", 32, "0x00000000/0", None),
    ("ternary", 16, "0x08**", Ternary(0x0800, 0xFF00)),
    ("ternary", 8, "0b01**", Ternary(0b0100, 0b1100)),
    ("ternary", 16, "0x0800&&&0xff00", Ternary(0x0800, 0xFF00)),
    ("ternary", 16, "0x****", None),
    ("ternary", 8, "17", Ternary(17, 0xFF)),
    ("range", 16, "10->20", Range(10, 20)),
    ("range", 16, "10..20", Range(10, 20)),
    ("optional", 8, "*", None),
])
def test_key_values(kind, width, text, expected):
    assert stf.key_value(KeySpec("f", kind, width), text, "table t") == expected


@pytest.mark.parametrize("kind, text", [("lpm", "0x1&&&0xf"), ("lpm", "1/x"), ("exact", "0x"), ("ternary", "0b12"),
                                        ("range", "5->z"), ("exact", "-1")])
def test_bad_key_values_are_stf_errors(kind, text):
    with pytest.raises(stf.StfError, match="table t field f"):
        stf.key_value(KeySpec("f", kind, 8), text, "table t")


# ------------------------------------------------------------------ running

def test_forwarding_passes_and_reports():
    status, out, _ = run(
        "add dmac hdr.ethernet.dstAddr:0x000000000002 MyIngress.fwd(port:3)\n"
        f"packet 0 {frame()}\n"
        f"expect 3 {frame()}$\n")
    assert status == 0, out
    assert "PASS" in out


def test_wrong_bytes_are_marked():
    status, out, _ = run(
        "add dmac hdr.ethernet.dstAddr:0x000000000002 fwd(port:3)\n"
        f"packet 0 {frame(tail='1234')}\n"
        f"expect 3 {frame(tail='12ff')}\n")
    assert status == 1
    assert "port 3" in out and "differs from the expect on line 3" in out
    got_line = next(l for l in out.splitlines() if l.strip().startswith("got"))
    marks_line = out.splitlines()[out.splitlines().index(got_line) + 1]
    marked = [i for i, c in enumerate(marks_line) if c == "^"]
    assert [got_line[i] for i in marked] == ["3", "4"]


def test_prefix_match_wildcards_and_exact_length():
    base = frame()
    ok = run(f"add dmac dstAddr:0x000000000002 fwd(port:1)\npacket 0 {base}\nexpect 1 {base[:8]}****\n")
    assert ok[0] == 0, ok[1]
    too_long = run(f"add dmac dstAddr:0x000000000002 fwd(port:1)\npacket 0 {base}\nexpect 1 {base[:8]}$\n")
    assert too_long[0] == 1 and "exactly" in too_long[1]


def test_missing_and_unexpected_packets_fail():
    status, out, _ = run(f"packet 0 {frame()}\nexpect 3 {frame()}\n")
    assert status == 1 and "not received" in out
    status, out, _ = run(
        "add dmac dstAddr:0x000000000002 fwd(port:0)\n"
        f"packet 0 {frame()}\n")
    assert status == 1 and "unexpected" in out


def test_packets_to_untested_ports_are_ignored_like_bmv2():
    status, out, _ = run(
        "add dmac dstAddr:0x000000000002 fwd(port:7)\n"
        f"packet 0 {frame()}\n")
    assert status == 0 and "port 7" in out and "ignored" in out


def test_expect_without_data_accepts_anything():
    status, out, _ = run(
        "add dmac dstAddr:0x000000000002 fwd(port:4)\n"
        f"packet 0 {frame()}\npacket 0 {frame()}\nexpect 4\n")
    assert status == 0, out


def test_stf_priority_higher_wins():
    text = ("add dmac dstAddr:0x000000000002 fwd(port:1)\n"
            "add classify 10 hdr.payload.cls:0x1* mark(value:0xaa)\n"
            "add classify 20 cls:0x12 mark(value:0xbb)\n"
            f"packet 0 {frame(cls='12')}\n"
            f"expect 1 {frame(cls='12', tail='bb00')}\n"
            f"packet 0 {frame(cls='13')}\n"
            f"expect 1 {frame(cls='13', tail='aa00')}\n")
    status, out, _ = run(text)
    assert status == 0, out
    swapped = text.replace("classify 10", "classify 30")
    status, out, _ = run(swapped)
    assert status == 1


def test_lpm_and_range_tables():
    ip = "c0a80001"
    pkt = frame(dst="0000000000ff", tail="00" * 15 + ip)
    status, out, _ = run(
        "add route hdr.ipv4.dstAddr:0xc0a8****  fwd(port:2)\n"
        "add route hdr.ipv4.dstAddr:0xc0a80000/24 fwd(port:5)\n"
        "add ports 1 ingress_port:0->3 mark(value:0x77)\n"
        f"packet 1 {pkt}\n"
        f"expect 5 {pkt[:32]}77\n")
    assert status == 0, out


def test_multicast_nodes_follow_bmv2_order():
    status, out, pipeline = run(
        "mc_mgrp_create 1\n"
        "mc_node_create 400 3 1\n"
        "mc_node_create 401 2\n"
        "mc_node_associate 1 1\n"
        "mc_node_associate 1 0\n"
        "add dmac dstAddr:0x000000000002 mcast(grp:1)\n"
        f"packet 0 {frame()}\n"
        f"expect 2 {frame()[:12]}91\n"
        f"expect 1 {frame()[:12]}90\n"
        f"expect 3 {frame()[:12]}90\n")
    assert status == 0, out
    assert pipeline.mc_groups[1] == [(2, 401), (1, 400), (3, 400)]


def test_mirroring_and_clone_sessions():
    status, out, pipeline = run(
        "mirroring_add 5 6\n"
        "add dmac dstAddr:0x000000000002 fwd_and_clone(port:1, session:5)\n"
        f"packet 0 {frame()}\nexpect 1 {frame()}\nexpect 6 {frame()}\n")
    assert status == 0, out
    assert pipeline.clone_sessions == {5: [(6, 0)]}


def test_registers_counters_and_check_counter():
    status, out, pipeline = run(
        "add dmac dstAddr:0x000000000002 fwd(port:1) = E1\n"
        "register_write last_port 2 77\n"
        f"packet 3 {frame()}\nexpect 1\n"
        f"packet 3 {frame()}\nexpect 1\n"
        "register_read MyIngress.last_port 0\n"
        "register_read last_port 2\n"
        "counter_read per_port 3\n"
        "check_counter dmac_hits($E1) packets == 2\n"
        "check_counter dmac_hits(E1) bytes == 34\n")
    assert status == 0, out
    assert "MyIngress.last_port[0] = 3" in out and "MyIngress.last_port[2] = 77" in out
    assert "MyIngress.per_port[3] = 2 packets, 34 bytes" in out
    status, out, _ = run(
        "add dmac dstAddr:0x000000000002 fwd(port:1) = E1\n"
        f"packet 3 {frame()}\nexpect 1\n"
        "check_counter dmac_hits($E1) packets == 5\n")
    assert status == 1 and "check_counter failed" in out


def test_control_plane_errors_fail_with_line_numbers():
    status, out, _ = run("add nosuchtable k:1 fwd(port:1)\n")
    assert status == 1 and "t.stf:1: error: no table 'nosuchtable'" in out
    status, out, _ = run("add dmac dstAddr:1 fwd(port:1)\nadd dmac dstAddr:1 fwd(port:2)\n")
    assert status == 1 and "t.stf:2:" in out and "exists" in out
    status, out, _ = run("add dmac dstAddr:1 fwd(prt:1)\n")
    assert status == 1 and "no parameter 'prt'" in out
    with pytest.raises(stf.StfError, match="ambiguous"):
        stf._resolve(["ingress.a.t", "egress.b.t"], "t", "table")
    assert stf._resolve(["ingress.a.t", "egress.b.t", "t"], "t", "table") == "t"
    assert stf._resolve(["ingress.port_t", "egress.t"], "t", "table") == "egress.t"


def test_setdefault_and_remove_all():
    status, out, _ = run(
        "setdefault dmac fwd(port:2)\n"
        f"packet 0 {frame()}\nexpect 2 {frame()}\n"
        "add dmac dstAddr:0x000000000002 fwd(port:3)\n"
        f"packet 0 {frame()}\nexpect 3 {frame()}\n"
        "remove all\n"
        f"packet 0 {frame()}\nexpect 2 {frame()}\n")
    assert status == 0, out


def test_indirect_tables_get_implicit_members():
    pipeline = FakePipeline()
    profile = ActionProfile("MyIngress.prof", actions=[FWD, "NoAction"])
    pipeline.tables["MyIngress.dmac"] = Table(
        "MyIngress.dmac", [KeySpec("hdr.ethernet.dstAddr", "exact", 48)], [FWD, "NoAction"],
        implementation=profile, action_params=PARAMS)
    out = io.StringIO()
    status = stf.run_stf_text(pipeline, (
        "add dmac dstAddr:0x000000000002 fwd(port:4)\n"
        "add dmac dstAddr:0x000000000003 fwd(port:4)\n"
        f"packet 0 {frame()}\nexpect 4 {frame()}\n"), out=out)
    assert status == 0, out.getvalue()
    assert list(profile.members().values()) == [stf.ActionCall(FWD, {"port": 4})]


def test_run_stf_reports_unreadable_files(tmp_path):
    out = io.StringIO()
    assert stf.run_stf(tmp_path / "x.p4", tmp_path / "missing.stf", out=out) == 1
    assert "missing.stf" in out.getvalue() and "Traceback" not in out.getvalue()


def test_selector_groups_through_act_prof_commands():
    pipeline = FakePipeline()
    profile = ActionProfile("MyIngress.sel", algorithm="crc16", actions=[FWD, "NoAction"])
    table = Table("MyIngress.dmac", [KeySpec("hdr.ethernet.dstAddr", "exact", 48)], [FWD, "NoAction"],
                  implementation=profile, action_params=PARAMS,
                  selector_keys=[KeySpec("hdr.ethernet.srcAddr", "selector", 48)])
    pipeline.tables["MyIngress.dmac"] = table
    out = io.StringIO()
    status = stf.run_stf_text(pipeline, (
        "act_prof_create_member sel fwd(port:7)\n"
        "act_prof_create_member MyIngress.sel fwd 8\n"
        "act_prof_create_group sel\n"
        "act_prof_add_member_to_group sel 1 0\n"
        "act_prof_add_member_to_group sel 0 0\n"
        "add dmac dstAddr:0x000000000002 $group(id:0)\n"
        "add dmac dstAddr:0x000000000003 $member(id:1)\n"), out=out)
    assert status == 0, out.getvalue()
    assert profile.groups() == {0: [(0, 1), (1, 1)]}
    assert [m for m, _ in profile.selection(0)] == [0, 1]
    action, hit, entry = table.lookup((3,))
    assert action == stf.ActionCall(FWD, {"port": 8})
    status = stf.run_stf_text(pipeline, "act_prof_add_member_to_group sel 5 0\n", out=out)
    assert status == 1 and "no member 5" in out.getvalue()


def test_direct_meter_rates_by_entry_handle():
    from testbed.p4engine.externs import DirectMeter
    pipeline = FakePipeline()
    meter = DirectMeter("MyIngress.flow_meter", "packets")
    table = Table("MyIngress.flows", [KeySpec("k", "exact", 8)], ["NoAction"], direct_meter=meter)
    pipeline.tables["MyIngress.flows"] = table
    out = io.StringIO()
    status = stf.run_stf_text(pipeline, (
        "add flows k:1 NoAction()\n"
        "add flows k:2 NoAction() = B\n"
        "meter_set_rates flow_meter 0 0.5:10 1.5:20\n"
        "meter_set_rates flow_meter $B 0.25:1 0.5:2\n"
        "meter_get_rates flow_meter 1\n"), out=out)
    assert status == 0, out.getvalue()
    first, second = table.entries()
    assert first.meter.rates() == ((0.5, 10), (1.5, 20))
    assert second.meter.rates() == ((0.25, 1), (0.5, 2))
    assert "0.25:1 0.5:2" in out.getvalue()
