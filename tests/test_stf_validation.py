"""STF input validation (`rocelab p4 test`): a value wider than its field is an error, not
truncated; malformed lines are named by file:line with what is wrong; never a traceback."""
import io

import pytest

from test_stf import FakePipeline, frame
from testbed.p4engine import stf, stf_parse
from testbed.p4engine.tables import KeySpec


def run(text):
    out = io.StringIO()
    status = stf.run_stf_text(FakePipeline(), text, out=out, filename="t.stf")
    return status, out.getvalue()


@pytest.mark.parametrize("kind, width, text", [
    ("exact", 9, "0x201"), ("exact", 8, "256"), ("exact", 4, "0b10000"),
    ("optional", 8, "0x100"), ("range", 8, "0->0x100"), ("range", 8, "0x100..0x200"),
    ("ternary", 8, "0x100&&&0xff"), ("ternary", 8, "0x1&&&0x1ff"), ("ternary", 8, "0x1ff"),
    ("ternary", 8, "0x1**"), ("ternary", 8, "300"),
    ("lpm", 8, "0x1ff/8"), ("lpm", 8, "0x10/9"), ("lpm", 8, "0x1f*"), ("lpm", 8, "999"),
])
def test_values_wider_than_the_field_are_errors(kind, width, text):
    with pytest.raises(stf.StfError, match=rf"does not fit in bit<{width}>|longer than the field"):
        stf.key_value(KeySpec("f", kind, width), text, "table t")


def test_empty_range_is_an_error():
    with pytest.raises(stf.StfError, match="empty"):
        stf.key_value(KeySpec("f", "range", 8), "9->3", "table t")


def test_port_key_0x201_for_bit9_is_refused_with_line_and_reason():
    status, out = run("add ports standard_metadata.ingress_port:0x201 mark(value:1)\n"
                      f"packet 0 {frame()}\n")
    assert status == 1
    assert "t.stf:1: error:" in out and "'0x201' does not fit in bit<9>" in out


@pytest.mark.parametrize("line, message", [
    ("add dmac hdr.ethernet.dstAddr:0x000000000002 fwd(port:0x200)", "argument port of MyIngress.fwd: '0x200' does not fit in bit<9>"),
    ("add classify hdr.payload.cls:1 mark(value:256)", "argument value of MyIngress.mark: '256' does not fit in bit<8>"),
    ("register_write last_port 0 512", "register MyIngress.last_port: '512' does not fit in bit<9>"),
    ("mirroring_add 5 512", "mirroring_add: port: '512' does not fit in bit<9>"),
    ("mc_node_create 0x10000 1", "mc_node_create: rid: '0x10000' does not fit in bit<16>"),
    ("mc_node_create 1 2 600", "mc_node_create: port: '600' does not fit in bit<9>"),
    ("register_write last_port 9 1", "register MyIngress.last_port: index 9 is out of range"),
    ("counter_write per_port 0 0x10000000000000000 1", "counter_write packets: '0x10000000000000000' does not fit in bit<64>"),
])
def test_control_plane_values_are_checked_per_line(line, message):
    status, out = run(f"# first\n{line}\n")
    assert status == 1
    assert f"t.stf:2: error: {message}" in out, out


@pytest.mark.parametrize("line, message", [
    ("wait abc", "wait takes no argument"),
    ("wait 1 2", "wait takes no argument"),
    ("packet 512 00", "port '512' is out of range"),
    ("expect 99999999999999999999999 00", "out of range"),
    ("packet ٣ 00", "expected a port number"),
    ("x" * 5000, "unknown command 'xxxx"),
    ("add t " + "9" * 5000 + " k:1 a()", "add: priority: '99999999"),
    ("add t 2147483648 k:1 a()", "add: priority: '2147483648' does not fit in bit<30>"),
])
def test_malformed_lines_name_file_line_and_reason(line, message):
    with pytest.raises(stf.StfError) as info:
        stf.parse_stf(f"\n{line}\n", "bad.stf")
    text = str(info.value)
    assert text.startswith("bad.stf:2: error:") and message in text
    assert len(text) < 300                      # the bad input is not echoed in full


@pytest.mark.parametrize("word", ["inf:1", "nan:1", "-1:1", "1:-1", "1e999:1", "x:1", "1:"])
def test_meter_rates_must_be_finite_non_negative(word):
    with pytest.raises(stf.StfError, match="meter_set_rates: .*(finite|not RATE:BURST)"):
        stf_parse.parse_meter_rates([word], "meter_set_rates")


def test_wait_alone_or_with_seconds_is_fine():
    assert [c.name for c in stf.parse_stf("wait\nwait 2\nwait 0.5\n")] == ["wait"] * 3


def test_every_bad_line_is_reported_not_only_the_first():
    with pytest.raises(stf.StfError) as info:
        stf.parse_stf("wait abc\npacket 0 00\nfrob\nexpect x\n", "bad.stf")
    lines = str(info.value).splitlines()
    assert [l.split(": error:")[0] for l in lines] == ["bad.stf:1", "bad.stf:3", "bad.stf:4"]


def test_cli_reports_bad_stf_lines_without_traceback(tmp_path, capsys):
    from testbed.cli import main
    prog = tmp_path / "p.p4"
    prog.write_text(open(__file__.replace("test_stf_validation.py", "p4/rt_tables_exact.p4")).read())
    bad = tmp_path / "bad.stf"
    bad.write_text("add smac_rewrite ingress_port:0x201 etherType:0x0800 set_smac(mac:1)\n"
                   "add dmac dstAddr:0x1000000000002 forward(port:1)\n"
                   "packet 0 000000000002000000000001 0800\n")
    status = main(["p4", "test", str(prog), str(bad)])
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    assert f"{bad}:1: error:" in out and "does not fit in bit<9>" in out
    assert f"{bad}:2: error:" in out and "does not fit in bit<48>" in out
