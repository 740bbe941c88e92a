"""The engine's resource bounds (testbed/p4engine/resource_limits.py): a program asking for an
absurd width, stack, extern or table size, shift or literal gets a located error instead of
exhausting memory or time."""
import os
import re

import pytest

from testbed.p4engine import P4Error, compile_source

BASE = open(os.path.join(os.path.dirname(__file__), "p4", "rt_externs.p4")).read()
DECL = "struct headers_t {"


def with_decl(text):
    return BASE.replace(DECL, text + "\n" + DECL, 1)


@pytest.mark.parametrize("source, message", [
    (with_decl("header big_t { bit<4294967296> x; }"), "bit width must be from 0 to 65536"),
    (with_decl("typedef bit<(1 << 40)> big_t;"), "bit width must be from 0 to 65536"),
    (with_decl("typedef varbit<1048576> v_t;"), "varbit<1048576>"),
    (BASE.replace(DECL, "header h9 { bit<8> x; }\n" + DECL + " h9[1000000000] hs;", 1),
     "header stack size must be from 1 to 4096"),
    (BASE.replace("register<bit<32>>(8)", "register<bit<32>>(1000000000000)"), "size must be from 0 to 4194304"),
    (BASE.replace("counter(8,", "counter(1000000000000,"), "size must be from 0 to 4194304"),
    (BASE.replace("meter(4,", "meter(1000000000000,"), "size must be from 0 to 4194304"),
    (with_decl("const int XX = 1 << 100000000000;"), "shift amount 100000000000 is too large"),
    (with_decl("const int XX = 1 << -1;"), "negative shift amount"),
    (with_decl("const bit<8> XX = " + "9" * 5000 + ";"), "has more than 4000 digits"),
    (with_decl("const bit<8> XX = 99999999999w1;"), "width 99999999999 is above 65536"),
])
def test_absurd_requests_are_located_errors(source, message):
    with pytest.raises(P4Error) as info:
        compile_source(source, "big.p4")
    text = str(info.value)
    assert re.match(r"big\.p4:[1-9]\d*:\d+: error: ", text), text
    assert message in text


def test_a_huge_constant_shift_of_a_sized_value_compiles():
    program = compile_source(with_decl("const bit<8> XX = 8w1 << 100000000000;"), "ok.p4")
    assert "MyIngress.pkt_count" in program.compiled.externs      # compiled, nothing built huge


def test_folded_constants_beyond_python_s_decimal_limit_compile_and_run():
    # 1 << 20000 has 6021 decimal digits: more than str(int) will write (4300)
    from test_p4engine_accept import frame, program, run
    big = 1 << 20000
    src = program("""apply {
        hdr.eth.type = (bit<16>)((1 << 20000) / 3 + 0x1234);
        if ((1 << 20000) < (1 << 20001)) { hdr.eth.src = ((bit<30000>)(1 << 20000) + 5)[47:0]; }
        sm.egress_spec = 1;
    }""")
    (_, out), = run(src, frame())
    assert int.from_bytes(out[12:14], "big") == (big // 3 + 0x1234) & 0xFFFF
    assert int.from_bytes(out[6:12], "big") == 5
    # masks of the widest types are as long: bit<20000> arithmetic, slices and a slice assignment
    src = program("""apply {
        bit<20000> wide = 0;
        wide[19999:19984] = 16w0xBEEF;
        wide = wide + (wide >> 19984) - 1;
        int<20000> signed_wide = (int<20000>)wide;
        hdr.eth.type = wide[19999:19984];
        hdr.eth.src = (bit<48>)(wide[47:0]) |+| (bit<48>)(signed_wide >> 19990)[47:0];
        sm.egress_spec = 1;
    }""")
    (_, out), = run(src, frame())
    wide = (0xBEEF << 19984) + 0xBEEF - 1
    signed = wide - (1 << 20000) if wide >> 19999 else wide
    assert int.from_bytes(out[12:14], "big") == 0xBEEF
    expected_src = min((wide & (2 ** 48 - 1)) + ((signed >> 19990) & (2 ** 48 - 1)), 2 ** 48 - 1)
    assert int.from_bytes(out[6:12], "big") == expected_src
    message = refused_text(program("register<bit<8>>(1 << 20000) r; apply { }"))
    assert "size must be from 0 to 4194304, got (a 20001-bit number)" in message


def refused_text(source):
    with pytest.raises(P4Error) as info:
        compile_source(source, "big.p4")
    return str(info.value)


def test_table_size_beyond_the_bound_is_located():
    base = open(os.path.join(os.path.dirname(__file__), "p4", "rt_tables_exact.p4")).read()
    with pytest.raises(P4Error, match=r"big\.p4:\d+:\d+: error: table dmac: size must be from 0 to 4194304"):
        compile_source(base.replace("size = 16;", "size = 1000000000000000000000000000;", 1), "big.p4")


def test_isolated_compile_is_stopped_at_its_time_limit(monkeypatch):
    from testbed.p4engine import isolated
    monkeypatch.setattr(isolated, "COMPILE_SECONDS", 0.05)
    with pytest.raises(P4Error, match=r"big\.p4:0:0: error: compiling the program took longer than 0.05 s"):
        isolated.compile_source_isolated(BASE, filename="big.p4")


@pytest.mark.parametrize("source, line", [
    (with_decl("const bit<8> XX = " + "1+" * 5000 + "1;"), 15),
    (BASE.replace("apply {", "apply { " + "if (true) { " * 3000 + "}" * 3000, 1), None),
])
def test_nesting_too_deep_is_a_located_error_not_an_internal_one(source, line):
    with pytest.raises(P4Error) as info:
        compile_source(source, "deep.p4")
    text = str(info.value)
    m = re.match(r"deep\.p4:([1-9]\d*):\d+: error: the program nests .* too deeply", text)
    assert m, text[:200]
    if line is not None:
        assert int(m.group(1)) == line


def test_exponential_macro_expansion_is_stopped_with_the_line_named():
    macros = "\n".join(["#define A0 x"] + [f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 40)])
    from testbed.p4engine.preprocess import Preprocessor
    with pytest.raises(P4Error, match=r"laughs\.p4:41:1: error: macro expansion of this line exceeds"):
        Preprocessor().run_text(macros + "\nconst bit<8> Q = A39;\n", "laughs.p4")


@pytest.mark.parametrize("condition, taken", [
    ("1 << 99999999999", False),                     # 64-bit arithmetic: shifted out, no huge number
    ("(1 << 63) < 0 && (1 << 64) == 0", True),
    ("0x7fffffffffffffff + 1 < 0", True),
    ("0x1F == 31 && 10UL == 10", True),              # hex and suffixed literals are numbers, not names
    ("UNDEFINED_NAME == 0", True),
])
def test_preprocessor_if_is_64_bit_arithmetic(condition, taken):
    from testbed.p4engine.preprocess import Preprocessor
    out = Preprocessor().run_text(f"#if {condition}\ntaken\n#endif\n", "if.p4")
    assert ("taken" in out) == taken


def test_preprocessor_if_too_long_to_evaluate_is_located():
    from testbed.p4engine.preprocess import Preprocessor
    with pytest.raises(P4Error, match=r"if\.p4:1:1: error: cannot evaluate #if expression"):
        Preprocessor().run_text("#if " + "1+" * 20000 + "1\n#endif\n", "if.p4")
