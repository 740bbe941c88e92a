"""`rocelab p4 check|info|test` (testbed/p4engine/cli.py): exit status, diagnostics format,
P4Info files that p4runtime-shell loads, STF pass/fail. User errors never give a traceback."""
import glob
import os
import re
import subprocess
import sys

import pytest

from testbed.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P4_DIR = os.path.join(ROOT, "tests", "p4")
CASES = sorted(glob.glob(os.path.join(P4_DIR, "*.p4")))


GOOD = """#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
struct headers_t { ethernet_t ethernet; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.ethernet); transition accept; }
}
control V(inout headers_t hdr, inout meta_t meta) { apply { } }
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table dmac {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { fwd; drop; }
        default_action = drop();
    }
    apply { dmac.apply(); }
}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.ethernet); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

GOOD_STF = """
add dmac dstAddr:0x000000000002 fwd(port:3)
packet 1 000000000002 000000000001 0800 cafe
expect 3 000000000002 000000000001 0800 cafe
packet 1 000000000009 000000000001 0800 beef
"""

DIAGNOSTIC = re.compile(r"^(?P<file>\S+\.p4):(?P<line>\d+):(?P<col>\d+): error: .+$", re.M)


def run(capsys, *argv):
    status = main(["p4", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


@pytest.fixture
def good(tmp_path):
    prog = tmp_path / "good.p4"
    prog.write_text(GOOD)
    return prog


# ------------------------------------------------------------------ user errors
def test_missing_files_are_named(capsys, tmp_path, good):
    # usage errors (exit 2, as every rocelab command's), not a program's errors (exit 1)
    status, _, err = run(capsys, "check", str(tmp_path / "nope.p4"))
    assert status == 2 and "nope.p4: error: cannot read the P4 program: no such file" in err
    status, _, err = run(capsys, "test", str(good), str(tmp_path / "nope.stf"))
    assert status == 2 and "nope.stf: error: cannot read the STF file" in err
    status, _, err = run(capsys, "info", str(tmp_path))
    assert status == 2 and "is a directory" in err
    status, _, err = run(capsys, "info", str(good), "-o", str(tmp_path / "no" / "such" / "dir.txt"))
    assert status == 2 and "cannot write the P4Info" in err


def test_a_binary_stf_file_is_named(capsys, tmp_path, good):
    stf = tmp_path / "b.stf"
    stf.write_bytes(b"\xff\xfe garbage")
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 1 and "b.stf: error: not a text file" in out


def test_bad_define_is_named(capsys, good):
    status, _, err = run(capsys, "check", str(good), "-D", "9lives=1")
    assert status == 2 and "'9lives' is not a macro name" in err     # a usage error


def test_no_subcommand_prints_usage(capsys):
    status, _, err = run(capsys)
    assert status == 2 and "check" in err and "info" in err and "test" in err


def test_an_engine_bug_is_reported_as_such_without_a_traceback():
    # A Python exception escaping the engine must come out as one 'internal error' line.
    code = ("import sys, testbed.p4engine.cli as c\n"
            "def boom(args): raise KeyError('x')\n"
            "import argparse; a = argparse.Namespace(p4_command='check')\n"
            "sys.exit(c._guarded(boom)(a))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "ROCELAB_TRACEBACK"})
    assert proc.returncode == 3
    assert "internal error: KeyError: 'x' (at <string>:2 in boom)" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ compiled programs
def test_check_accepts_a_good_program(capsys, good):
    status, out, _ = run(capsys, "check", str(good))
    assert status == 0 and "good.p4: ok" in out


@pytest.mark.parametrize("body, what", [
    ("    apply { dmac.apply() }\n", "syntax"),                       # missing ';'
    ("    apply { dmac.apply(); nosuch.apply(); }\n", "unknown name"),
    ("    apply { bit<8> x = hdr.ethernet; }\n", "type"),
])
def test_check_reports_file_line_col_with_caret(capsys, tmp_path, body, what):
    prog = tmp_path / "bad.p4"
    prog.write_text(GOOD.replace("    apply { dmac.apply(); }\n", body))
    line = GOOD.splitlines().index("    apply { dmac.apply(); }") + 1
    status, _, err = run(capsys, "check", str(prog))
    assert status == 1, what
    m = DIAGNOSTIC.search(err)
    assert m, err
    assert m.group("file").endswith("bad.p4") and int(m.group("line")) == line
    lines = err.splitlines()
    i = lines.index(m.group(0))
    assert lines[i + 1].strip() == body.strip()                    # the source line ...
    assert lines[i + 2].strip() == "^"                             # ... and a caret under it
    assert lines[i + 2].index("^") == int(m.group("col")) - 1


def test_check_and_info_report_a_duplicate_id(capsys, tmp_path):
    prog = tmp_path / "ids.p4"
    prog.write_text(GOOD.replace("    action drop()", "    @id(7) action drop()")
                        .replace("    action fwd(", "    @id(7) action fwd("))
    for command in ("check", "info"):
        status, out, err = run(capsys, command, str(prog))
        assert status == 1 and "@id 0x01000007 is also given to" in err and not out


def test_define_and_include_reach_the_preprocessor(capsys, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "ports.p4").write_text("#define OUT_PORT 3\n")
    prog = tmp_path / "d.p4"
    prog.write_text('#include "ports.p4"\n#ifndef WANTED\n#error WANTED is not defined\n#endif\n' + GOOD)
    assert run(capsys, "check", str(prog), "-I", str(inc), "-D", "WANTED")[0] == 0
    status, _, err = run(capsys, "check", str(prog), "-I", str(inc))
    assert status == 1 and "WANTED" in err


@pytest.mark.parametrize("case", CASES, ids=[os.path.basename(c) for c in CASES])
def test_info_round_trips_through_p4runtime_shell(capsys, tmp_path, case):
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2
    from p4runtime_sh.context import Context, P4Type

    from testbed.p4engine import compile_file
    from testbed.p4rt.p4info import P4InfoIndex
    from testbed.p4rt.server import _check_p4info_matches
    out = tmp_path / "x.p4info.txt"
    status, _, err = run(capsys, "info", case, "-o", str(out))
    assert status == 0, err
    p4info = p4info_pb2.P4Info()
    text_format.Merge(out.read_text(), p4info, allow_unknown_field=True)   # as p4runtime-shell loads it
    program = compile_file(case)
    assert p4info == program.p4info
    ctx = Context()
    ctx.set_p4info(p4info)
    for t in p4info.tables:
        assert ctx.get_obj(P4Type.table, t.preamble.name) is t
        for ref in t.action_refs:
            assert ctx.get_obj_by_id(ref.id).preamble.id == ref.id        # every ref resolves
    for a in p4info.actions:
        assert ctx.get_obj_id(P4Type.action, a.preamble.name) == a.preamble.id
    ids = [x.preamble.id for kind in ("tables", "actions", "action_profiles", "counters", "direct_counters",
                                      "meters", "direct_meters", "registers", "digests")
           for x in getattr(p4info, kind)]
    assert len(ids) == len(set(ids))
    _check_p4info_matches(P4InfoIndex(p4info), program.new_pipeline())   # what the server checks on load


@pytest.mark.parametrize("fmt", ["binary", "json"])
def test_info_formats(capsys, tmp_path, good, fmt):
    from google.protobuf import json_format
    from p4.config.v1 import p4info_pb2
    out = tmp_path / "x.out"
    assert run(capsys, "info", str(good), "-o", str(out), "--format", fmt)[0] == 0
    back = p4info_pb2.P4Info()
    if fmt == "binary":
        back.ParseFromString(out.read_bytes())
    else:
        json_format.Parse(out.read_text(), back)
    assert [t.preamble.name for t in back.tables] == ["I.dmac"]
    assert {a.preamble.name for a in back.actions} == {"I.fwd", "I.drop"}


def test_test_passes_and_fails_with_marked_bytes(capsys, tmp_path, good):
    stf = tmp_path / "t.stf"
    stf.write_text(GOOD_STF)
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 0 and "PASS" in out
    stf.write_text(GOOD_STF.replace("expect 3 000000000002 000000000001 0800 cafe",
                                    "expect 3 000000000002 000000000001 0800 cafa"))
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 1
    assert "port 3:" in out and "differs from the expect on line 4" in out
    got = [line for line in out.splitlines() if line.strip().startswith("got")][0]
    marks = out.splitlines()[out.splitlines().index(got) + 1]
    assert marks.count("^") == 1 and got[marks.index("^")] == "E"    # the differing nibble
    stf.write_text(GOOD_STF + "expect 2 00\n")
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 1 and "port 2" in out and "not received" in out


def test_test_reports_bad_stf_lines_and_bad_programs(capsys, tmp_path, good):
    stf = tmp_path / "t.stf"
    stf.write_text("packet 1 00zz\n")
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 1 and re.search(r"t\.stf:1: error: packet data may only hold hex digits", out)
    stf.write_text("add nosuch_table k:1 fwd(port:1)\n")
    status, out, _ = run(capsys, "test", str(good), str(stf))
    assert status == 1 and "t.stf:1: error: no table 'nosuch_table'" in out
    bad = tmp_path / "bad.p4"
    bad.write_text(GOOD.replace("transition accept;", "transition nowhere;"))
    stf.write_text(GOOD_STF)
    status, out, _ = run(capsys, "test", str(bad), str(stf))
    assert status == 1 and DIAGNOSTIC.search(out)


def test_verbose_test_prints_a_trace(capsys, tmp_path, good):
    stf = tmp_path / "t.stf"
    stf.write_text(GOOD_STF)
    status, quiet, _ = run(capsys, "test", str(good), str(stf))
    status_v, verbose, _ = run(capsys, "test", str(good), str(stf), "-v")
    assert status == status_v == 0
    assert len(verbose.splitlines()) > len(quiet.splitlines())
    assert "-- " + str(stf) + ":3: packet 1 000000000002" in verbose     # each command, then its trace


def test_info_file_drives_p4runtime_shell_against_the_engine(capsys, tmp_path, good):
    """The file `p4 info` writes is what a controller loads: p4runtime-shell pushes it with the
    P4 source as device config, names a table/action/match field/param from it, and the entry
    forwards a packet on the engine switch."""
    import socket

    from p4runtime_sh import shell as sh
    from switch_fake_engine import SocketPort

    from testbed.p4rt.server import P4RuntimeServer
    from testbed.switch.datapath import Switch
    p4info = tmp_path / "good.p4info.txt"
    assert run(capsys, "info", str(good), "-o", str(p4info))[0] == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    ports = {n: SocketPort(n) for n in (1, 3)}
    switch = Switch(ports, cpu_port=64)
    switch.start()
    server = P4RuntimeServer(switch, device_id=1, address=addr).start()
    try:
        sh.setup(device_id=1, grpc_addr=addr, election_id=(0, 1),
                 config=sh.FwdPipeConfig(str(p4info), str(good)), verbose=False)
        try:
            entry = sh.TableEntry("dmac")(action="fwd")
            entry.match["hdr.ethernet.dstAddr"] = "00:00:00:00:00:02"
            entry.action["port"] = "3"
            entry.insert()
            frame = bytes.fromhex("000000000002" "000000000001" "0800") + b"payload"
            ports[1].peer.send(frame)
            assert ports[3].receive_all() == [frame]
            (read,) = list(sh.TableEntry("I.dmac").read())
            assert read.action["port"].value == b"\x03"
        finally:
            sh.teardown()
    finally:
        server.stop()
        switch.close()


def test_a_failed_assert_fails_that_packet_line_and_the_run_goes_on(capsys, tmp_path, good):
    prog = tmp_path / "assert.p4"
    prog.write_text(GOOD.replace("apply { dmac.apply(); }",
                                 "apply { assert(hdr.ethernet.etherType != 0x0bad); dmac.apply(); }"))
    stf = tmp_path / "t.stf"
    stf.write_text(GOOD_STF + "packet 1 000000000002 000000000001 0bad 00\n")
    status, out, _ = run(capsys, "test", str(prog), str(stf))
    assert status == 1
    assert re.search(r"t\.stf:6: error: the program stopped on this packet: assert failed", out)
    assert "port 3" not in out          # the packets before it still passed their expects
