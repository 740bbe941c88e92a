"""`rocelab p4 conformance`: the engine held to a p4c checkout's record of BMv2. Here on a
miniature checkout laid out as p4c's is, with cases that agree, disagree and fall outside the
engine's subset in each check; on a real checkout when ROCELAB_P4C_SRC names one."""
import os
import shutil
from pathlib import Path

import pytest

from testbed.cli import main as rocelab
from testbed.p4engine import compile_source

from test_p4engine_accept import program

INCLUDE = Path(__file__).resolve().parents[1] / "testbed" / "p4engine" / "include"
FORWARD = program("""
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table t { key = { hdr.eth.dst : exact; } actions = { fwd; NoAction; } }
    apply { t.apply(); }""")
USER_EXTERN = program("apply { tally(hdr.eth.type); }", decls="extern void tally<T>(in T data);")
ARRAY = program("apply { bit<8>[4] a; a[0] = 1; hdr.eth.type = (bit<16>)a[0]; }")
TWICE = FORWARD.replace("    table t", "    action fwd() { }\n    table t", 1)
TWICE_LINE = TWICE[:TWICE.index("action fwd() { }")].count("\n") + 1
FRAME = "0000000000AA000000000001" + "0800" + "00" * 50
STF = f"add t hdr.eth.dst:0xAA fwd(port:3)\npacket 0 {FRAME}\nexpect {{port}} {FRAME}\n"


@pytest.fixture
def checkout(tmp_path):
    """p4c's layout: p4include, testdata/p4_16_samples(+_outputs), p4_16_bmv_errors, the BMv2
    back end's CMakeLists.txt with its XFAIL list."""
    root = tmp_path / "p4c"
    shutil.copytree(INCLUDE, root / "p4include")
    samples, outputs = root / "testdata" / "p4_16_samples", root / "testdata" / "p4_16_samples_outputs"
    errors = root / "testdata" / "p4_16_bmv_errors"
    front_end, front_end_outputs = root / "testdata" / "p4_16_errors", root / "testdata" / "p4_16_errors_outputs"
    for d in (samples, outputs, errors, front_end, front_end_outputs, root / "backends" / "bmv2"):
        d.mkdir(parents=True)
    files = {samples / "fwd-bmv2.p4": FORWARD, samples / "fwd-bmv2.stf": STF.format(port=3),
             samples / "wrong-bmv2.p4": FORWARD, samples / "wrong-bmv2.stf": STF.format(port=5),
             samples / "extern-bmv2.p4": USER_EXTERN, samples / "extern-bmv2.stf": f"packet 0 {FRAME}\n",
             samples / "array-bmv2.p4": ARRAY, samples / "listed-array-bmv2.p4": ARRAY,
             errors / "array-bmv2.p4": ARRAY, errors / "forward-bmv2.p4": FORWARD,
             front_end / "twice.p4": TWICE, front_end / "elsewhere.p4": TWICE, front_end / "fine.p4": FORWARD,
             front_end_outputs / "twice.p4-stderr": f"twice.p4({TWICE_LINE}): [--Werror=duplicate] error: fwd: ...\n",
             front_end_outputs / "elsewhere.p4-stderr": "elsewhere.p4(2): [--Werror=type-error] error: ...\n",
             front_end_outputs / "fine.p4-stderr": "fine.p4(3): [--Werror=type-error] error: ...\n",
             root / "backends" / "bmv2" / "CMakeLists.txt":
                 "set (XFAIL_TESTS\n  # arrays of bytes\n  testdata/p4_16_samples/listed-array-bmv2.p4\n)\n"}
    for path, text in files.items():
        path.write_text(text)
    info = compile_source(FORWARD).p4info
    (outputs / "fwd-bmv2.p4.p4info.txtpb").write_text(str(info))
    reordered = type(info)()
    reordered.CopyFrom(info)
    reordered.actions.reverse()                     # P4Runtime finds them by id: reported only
    (outputs / "extern-bmv2.p4.p4info.txtpb").write_text(str(reordered))   # refused: not compared
    shutil.copy(samples / "fwd-bmv2.p4", samples / "reordered.p4")
    (outputs / "reordered.p4.p4info.txtpb").write_text(str(reordered))
    info.tables[0].size = 512                       # not what the engine writes
    (outputs / "wrong-bmv2.p4.p4info.txtpb").write_text(str(info))
    return root


def test_each_check_counts_agreements_and_lists_disagreements(checkout, capsys):
    status = rocelab(["p4", "conformance", str(checkout)])
    out = capsys.readouterr().out.splitlines()
    table_id = compile_source(FORWARD).p4info.tables[0].preamble.id
    assert out == [
        "stf     1 of 3 agree with p4c, 1 outside the engine's subset",
        "bmv2    3 of 6 agree with p4c, 1 outside the engine's subset",
        "p4info  2 of 4 agree with p4c (1 list entities in another order), 1 not compared (the engine refuses them)",
        "errors  2 of 3 agree with p4c (1 refused at another line than p4c)",
        "stf: p4_16_samples/wrong-bmv2.stf: port 5: expected 1 packet(s), got 0",
        out[5],
        "bmv2: p4_16_bmv_errors/forward-bmv2.p4: accepted, but p4c-bm2-ss refuses it",
        f"p4info: p4_16_samples/wrong-bmv2.p4: tables I.t (id {table_id}): differs",
        "errors: p4_16_errors/fine.p4: accepted, but p4c refuses it",
    ]
    assert out[5].startswith("bmv2: p4_16_samples/array-bmv2.p4: ") and "header stacks must hold headers" in out[5]
    assert status == 1


def test_only_and_check_narrow_the_run_and_agreement_exits_0(checkout, capsys):
    assert rocelab(["p4", "conformance", str(checkout), "--only", "fwd-", "--check", "stf", "--check", "p4info"]) == 0
    assert capsys.readouterr().out.splitlines() == ["stf     1 of 1 agree with p4c", "p4info  1 of 1 agree with p4c"]
    assert rocelab(["p4", "conformance", str(checkout), "--only", "extern", "-v", "--check", "stf"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "stf     0 of 1 agree with p4c, 1 outside the engine's subset"
    assert out[1].startswith("stf: p4_16_samples/extern-bmv2.stf: outside the engine's subset: ") and "tally" in out[1]
    assert rocelab(["p4", "conformance", str(checkout), "--only", "reordered", "-v", "--check", "p4info"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "p4info  1 of 1 agree with p4c (1 list entities in another order)",
        "p4info: p4_16_samples/reordered.p4: same entities, actions in another order"]
    assert rocelab(["p4", "conformance", str(checkout), "--only", "elsewhere", "-v", "--check", "errors"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "errors  1 of 1 agree with p4c (1 refused at another line than p4c)",
        f"errors: p4_16_errors/elsewhere.p4: refused at line {TWICE_LINE}, p4c at 2: "
        f"'fwd' is declared twice in one scope (first at line {TWICE_LINE - 1})"]


def test_a_directory_that_is_no_checkout_is_refused(tmp_path, capsys):
    assert rocelab(["p4", "conformance", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"rocelab p4 conformance: error: {tmp_path}: not a p4c source checkout "
        "(no testdata/p4_16_samples and p4include/v1model.p4 in it)")


@pytest.mark.skipif(not os.environ.get("ROCELAB_P4C_SRC"),
                    reason="ROCELAB_P4C_SRC names no p4c checkout (takes minutes: p4c's whole v1model record)")
def test_a_real_p4c_checkout_finds_no_disagreement(capsys):
    assert rocelab(["p4", "conformance", os.environ["ROCELAB_P4C_SRC"]]) == 0, capsys.readouterr().out
