"""Compiling in a child process (testbed/p4engine/isolated.py) gives the same program and the same
diagnostics as compiling in-process."""
from pathlib import Path

import pytest

from testbed.p4engine import P4Error, compile_file, compile_source
from testbed.p4engine.isolated import compile_file_isolated, compile_source_isolated
from testbed.p4engine.tables import ActionCall, Exact

ROOT = Path(__file__).resolve().parent.parent
BASIC = ROOT / "tests" / "p4" / "switch_basic.p4"
FRAME = bytes.fromhex("ffffffffffff0000000000010800") + bytes(20)


def test_isolated_program_matches_in_process():
    local, isolated = compile_file(BASIC), compile_file_isolated(BASIC)
    assert isolated.compiled.source == local.compiled.source
    assert isolated.p4info.SerializeToString() == local.p4info.SerializeToString()
    results = []
    for program in (local, isolated):
        pipeline = program.new_pipeline(cpu_port=255)
        pipeline.tables["MyIngress.forward"].insert([Exact(1)], ActionCall("MyIngress.set_port", {"port": 2}))
        results.append((pipeline.process(1, FRAME), pipeline.process(3, FRAME)))
    assert results[0] == results[1]
    assert results[1][0] and results[1][0][0][0] == 2, "the entry forwards port 1 to port 2"
    assert results[1][1] == [], "the default action drops"


@pytest.mark.parametrize("text", [
    "control C(inout bit<8> x) { apply { x = x + ; } }\n",                 # syntax error
    '#include "no_such_file.p4"\n',                                         # preprocessor error
    "#include <v1model.p4>\ncontrol C(inout bit<8> x) { apply { y = 1; } }\n"
    "V1Switch(C(), C(), C(), C(), C(), C()) main;\n",                      # checker error
])
def test_isolated_diagnostics_are_identical(text):
    with pytest.raises(P4Error) as local:
        compile_source(text, filename="prog.p4")
    with pytest.raises(P4Error) as isolated:
        compile_source_isolated(text, filename="prog.p4")
    assert str(isolated.value) == str(local.value)
    assert isolated.value.diagnostics == local.value.diagnostics
    assert "prog.p4:" in str(isolated.value)


def test_isolated_missing_file_is_a_p4_error(tmp_path):
    missing = tmp_path / "absent.p4"
    with pytest.raises(P4Error) as local:
        compile_file(missing)
    with pytest.raises(P4Error) as isolated:
        compile_file_isolated(missing)
    assert str(isolated.value) == str(local.value)
