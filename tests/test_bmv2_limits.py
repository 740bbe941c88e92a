"""`rocelab p4 check --target bmv2`: what p4c-bm2-ss refuses although P4_16 allows it is reported
as located errors naming the limit, and every program the project ships passes it.

Each case is a small program the engine runs as it is (target engine) that BMv2 refuses; the
test checks the error's line and column and the limit's name, and that the engine target still
accepts it (the limits belong to BMv2, not to the language)."""
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.p4engine import P4Error, compile_source

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(ROOT.glob("p4/*.p4")) + [ROOT / "testbed/switch/bench_forward.p4"]


def program(ingress="", egress="", ingress_locals="", deparser="pkt.emit(hdr.eth);", verify="", compute="",
            action_params="", meta="bit<9> port; bit<16> wide;", decls=""):
    return f"""#include <core.p4>
#include <v1model.p4>
header eth_t {{ bit<48> dst; bit<48> src; bit<16> type; }}
struct headers_t {{ eth_t eth; }}
struct meta_t {{ {meta} }}
{decls}
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(hdr.eth); transition accept; }}
}}
control V(inout headers_t hdr, inout meta_t meta) {{ apply {{ {verify} }} }}
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{
    action set_port({action_params}) {{ sm.egress_spec = 1; }}
{ingress_locals}
    apply {{
{ingress}
    }}
}}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{ apply {{ {egress} }} }}
control C(inout headers_t hdr, inout meta_t meta) {{ apply {{ {compute} }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ {deparser} }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


LINE0 = program().splitlines().index("    apply {") + 2     # the first line of the ingress body


def bmv2_errors(text):
    """[(line, col, message)] of check --target bmv2; also asserts the engine accepts the program."""
    compile_source(text, "prog.p4")
    with pytest.raises(P4Error) as err:
        compile_source(text, "prog.p4", target="bmv2")
    return [(line, col, msg) for _, line, col, msg in err.value.diagnostics]


def test_a_shift_by_a_9_bit_field_is_refused_at_its_operator_naming_the_8_bit_limit():
    errors = bmv2_errors(program(ingress="        hdr.eth.type = (bit<16>)1 << sm.ingress_port;"))
    assert errors == [(LINE0, 24, "[bmv2 shift-amount] 1 << sm.ingress_port: shift amount limited to 8 bits "
                                  "on this target (the amount is bit<9>; cast it to bit<8>)")]


def test_shift_amounts_bmv2_accepts_pass_and_each_too_wide_one_is_listed():
    ok = program(ingress="""        hdr.eth.type = hdr.eth.type << (bit<8>)sm.ingress_port;
        hdr.eth.type = hdr.eth.type >> 8w3;
        hdr.eth.type = hdr.eth.type << 200;
        hdr.eth.type = (bit<16>)(16w1 << 9w3);
        hdr.eth.type = 16w0 >> hdr.eth.type;
        hdr.eth.type = 16w0 << sm.ingress_port;""")     # constant operands, or zero shifted, fold away
    compile_source(ok, "prog.p4", target="bmv2")
    errors = bmv2_errors(program(ingress="""        hdr.eth.type = hdr.eth.type >> meta.wide;
        hdr.eth.type = hdr.eth.type << 16w2;
        hdr.eth.type = hdr.eth.type << 300;"""))
    assert [(line - LINE0, msg.split(":")[0]) for line, _, msg in errors] == [
        (0, "[bmv2 shift-amount] hdr.eth.type >> meta.wide"), (1, "[bmv2 shift-amount] hdr.eth.type << 16w2"),
        (2, "[bmv2 shift-amount] hdr.eth.type << 300")]
    assert "limited to 256 on this target" in errors[2][2]


def test_a_table_with_two_lpm_keys_is_refused_at_the_second():
    table = """    table t {
        key = { hdr.eth.dst : lpm; hdr.eth.src : lpm; }
        actions = { set_port; }
    }"""
    errors = bmv2_errors(program(ingress_locals=table, ingress="        t.apply();"))
    assert len(errors) == 1 and errors[0][2].startswith("[bmv2 lpm-keys] table t: multiple lpm keys")


def test_a_bool_action_parameter_is_refused():
    errors = bmv2_errors(program(action_params="bool flag"))
    assert len(errors) == 1 and errors[0][2].startswith("[bmv2 action-params] action parameter 'flag'")


def test_a_register_of_no_cells_is_refused_at_its_declaration():
    errors = bmv2_errors(program(ingress_locals="    register<bit<32>>(0) r;",
                                 ingress="        r.write(0, 32w1);"))
    assert [(line, col, msg.split(":")[0]) for line, col, msg in errors] == [
        (LINE0 - 2, 5, "[bmv2 direct-register] register I.r")]


def test_a_register_of_zero_width_cells_is_refused_on_every_target():
    # the mutating fuzzer's find: the engine stopped with an internal error here
    text = program(ingress_locals="    register<bit<0>>(8) r;")
    for target in ("engine", "bmv2"):
        with pytest.raises(P4Error) as err:
            compile_source(text, "prog.p4", target=target)
        assert err.value.diagnostics[0][1:3] == (LINE0 - 2, 5)
        assert "register I.r: its cells are bit<0>, which holds nothing" in str(err.value)


def test_a_for_loop_in_an_apply_block_is_refused():
    errors = bmv2_errors(program(ingress="        for (bit<8> i = 0; i < 4; i = i + 1) { hdr.eth.type = hdr.eth.type + 1; }"))
    assert [(line, msg.split("]")[0]) for line, _, msg in errors] == [(LINE0, "[bmv2 loops")]
    assert "only inside an action's body" in errors[0][2]


def test_a_for_loop_inside_an_action_passes_as_p4c_bm2_ss_1_2_5_16_accepts_it():
    # p4c's BMv2 back end turns it into _jump/_jump_if_zero primitives (since 1.2.5.12)
    action = """    action count_up() {
        for (bit<8> i = 0; i < hdr.eth.dst[7:0]; i = i + 1) {
            if (i == 3) { continue; }
            hdr.eth.type = hdr.eth.type + 1;
            if (hdr.eth.type == 100) { break; }
        }
    }"""
    compile_source(program(ingress_locals=action, ingress="        count_up();"), "prog.p4", target="bmv2")


def test_a_loop_in_a_function_counts_where_p4c_inlines_the_function():
    function = """bit<16> add_up(in bit<8> n) {
    bit<16> sum = 0;
    for (bit<8> i = 0; i < n; i = i + 1) { sum = sum + (bit<16>)i; }
    return sum;
}"""
    action = "    action set_type() { hdr.eth.type = add_up(hdr.eth.dst[7:0]); }"
    compile_source(program(decls=function, ingress_locals=action, ingress="        set_type();"), "prog.p4",
                   target="bmv2")
    text = program(decls=function, ingress_locals=action, ingress="        set_type();\n        meta.wide = add_up(3);")
    loop_line = next(n for n, line in enumerate(text.splitlines(), 1) if "for (bit<8> i = 0" in line)
    assert [(line, msg) for line, _, msg in bmv2_errors(text)] == [
        (loop_line, "[bmv2 loops] for loops are supported on this target only inside an action's body "
                    "(function add_up is called outside an action, and p4c inlines it there); move the loop "
                    "into an action, or unroll it")]


def test_a_for_in_loop_is_refused_even_inside_an_action():
    action = """    action sum() {
        for (bit<8> i in 1 .. 4) { hdr.eth.type = hdr.eth.type + (bit<16>)i; }
    }"""
    text = program(ingress_locals=action, ingress="        sum();")
    loop_line = next(n for n, line in enumerate(text.splitlines(), 1) if "for (bit<8> i in" in line)
    assert [(line, msg.split(" (")[0]) for line, _, msg in bmv2_errors(text)] == [
        (loop_line, "[bmv2 loops] for-in loops are not supported on this target")]


def test_hash_and_checksum_data_must_be_a_list_struct_or_header():
    # p4c-bm2-ss makes a field list of it (convertToList) and says "expected a struct" otherwise
    ok = program(ingress="""        hash(meta.wide, HashAlgorithm.crc16, 16w0, { hdr.eth.type }, 16w1024);
        hash(meta.wide, HashAlgorithm.crc16, 16w0, hdr.eth, 16w1024);""")
    compile_source(ok, "prog.p4", target="bmv2")
    errors = bmv2_errors(program(ingress="        hash(meta.wide, HashAlgorithm.crc16, 16w0, hdr.eth.type, 16w1024);",
                                 compute="update_checksum(true, hdr.eth.src, hdr.eth.type, HashAlgorithm.csum16);"))
    assert [(line, msg.split(";")[0]) for line, _, msg in errors] == [
        (LINE0, "[bmv2 field-list] hash: its data hdr.eth.type is a bit<16>"),
        (LINE0 + 4, "[bmv2 field-list] update_checksum: its data hdr.eth.src is a bit<48>")]


def test_checksum_controls_hold_only_checksum_calls_without_computations():
    assert bmv2_errors(program(compute="hdr.eth.type = 1;"))[0][2].startswith(
        "[bmv2 checksum-control] only calls to update_checksum or update_checksum_with_payload")
    errors = bmv2_errors(program(verify="verify_checksum(true, { hdr.eth.dst + 1, hdr.eth.src }, hdr.eth.type, "
                                        "HashAlgorithm.csum16);"))
    assert len(errors) == 1 and errors[0][2].startswith(
        "[bmv2 checksum-control] hdr.eth.dst + 1: computations are not supported in verify_checksum")
    compile_source(program(verify="verify_checksum(true, { hdr.eth.dst, hdr.eth.src }, hdr.eth.type, "
                                  "HashAlgorithm.csum16);"), "prog.p4", target="bmv2")


def test_a_deparser_holds_only_emits():
    errors = bmv2_errors(program(deparser="if (hdr.eth.isValid()) { pkt.emit(hdr.eth); }"))
    assert len(errors) == 1 and errors[0][2].startswith("[bmv2 deparser] 'if' statement")


def test_a_table_applied_twice_on_one_path_is_refused_but_once_per_branch_is_not():
    table = """    table t { key = { hdr.eth.dst : exact; } actions = { set_port; } }"""
    errors = bmv2_errors(program(ingress_locals=table, ingress="""        t.apply();
        if (hdr.eth.type == 1) { t.apply(); }"""))
    assert [(line - LINE0, msg.split(":")[0]) for line, _, msg in errors] == [
        (1, "[bmv2 table-reapplied] table t is applied twice on one path; BMv2 cannot implement a path from "
            "a table back to itself")]
    for body in ("if (hdr.eth.type == 1) { t.apply(); } else { t.apply(); }",
                 "if (hdr.eth.type == 1) { t.apply(); exit; } t.apply();"):
        compile_source(program(ingress_locals=table, ingress=body), "prog.p4", target="bmv2")


def _located(text, errors):
    """[(the source from the error's column on, message)] for checking where errors point."""
    lines = text.splitlines()
    return [(lines[line - 1][col - 1:], msg) for line, col, msg in errors]


METERED = """    direct_meter<bit<2>>(MeterType.packets) dm;
    action metered() { %s }
    table t { key = { hdr.eth.dst : exact; } actions = { metered; } %s }"""


def test_a_direct_meter_no_action_reads_is_refused_at_its_table():
    text = program(ingress_locals=METERED % ("sm.egress_spec = 1;", "meters = dm;"), ingress="        t.apply();")
    [(at, msg)] = _located(text, bmv2_errors(text))
    assert at.startswith("table t {") and msg.startswith(
        "[bmv2 direct-meter] table t: its direct meter I.dm is never read; a table with a direct meter must "
        "have at least one action calling dm.read(...)")
    compile_source(program(ingress_locals=METERED % ("dm.read(meta.wide[1:0]);", "meters = dm;"),
                           ingress="        t.apply();"), "prog.p4", target="bmv2")


def test_a_direct_meter_read_but_attached_to_no_table_is_refused_at_its_declaration():
    text = program(ingress_locals=METERED % ("dm.read(meta.wide[1:0]);", ""), ingress="        t.apply();")
    [(at, msg)] = _located(text, bmv2_errors(text))
    assert at.startswith("direct_meter<bit<2>>(MeterType.packets) dm;") and msg == (
        "[bmv2 direct-meter] I.dm: direct meter is read but not associated with any table via the 'meters' "
        "table property")
    # an action nothing uses is dropped with its read: nothing to associate
    compile_source(program(ingress_locals=METERED % ("sm.egress_spec = 1;", "") +
                           "\n    action spare() { dm.read(meta.wide[3:2]); }", ingress="        t.apply();"),
                   "prog.p4", target="bmv2")


def test_direct_meter_reads_into_two_destinations_are_refused():
    text = program(ingress_locals=METERED % ("dm.read(meta.wide[1:0]);", "meters = dm;") +
                   "\n    action again() { dm.read(meta.wide[3:2]); }\n"
                   "    table u { key = { hdr.eth.src : exact; } actions = { again; } }",
                   ingress="        t.apply(); u.apply();")
    [(at, msg)] = _located(text, bmv2_errors(text))
    assert at.startswith("meta.wide[3:2]") and msg.startswith(
        "[bmv2 direct-meter] meta.wide[3:2]: every read of direct meter I.dm must write the same destination")


def test_a_direct_meter_on_two_tables_is_refused_at_the_second():
    text = program(ingress_locals=METERED % ("dm.read(meta.wide[1:0]);", "meters = dm;") +
                   "\n    table u { key = { hdr.eth.src : exact; } actions = { metered; } meters = dm; }",
                   ingress="        t.apply(); u.apply();")
    [(at, msg)] = _located(text, bmv2_errors(text))
    assert at.startswith("table u {") and msg == (
        "[bmv2 direct-meter] table u: direct meter I.dm is attached to table t already; a direct meter "
        "belongs to one table")


SELECTED = """    action_selector(HashAlgorithm.crc16, 32w64, 32w8) sel;
    table t1 { key = { hdr.eth.dst : exact; meta.port : selector; meta.wide : selector; }
               actions = { set_port; } implementation = sel; }
    table t2 { key = { hdr.eth.src : exact; %s }
               actions = { set_port; } implementation = sel; }"""


def test_tables_sharing_a_selector_with_other_selector_keys_are_refused_at_the_second():
    text = program(ingress_locals=SELECTED % "meta.wide : selector; meta.port : selector;",
                   ingress="        t1.apply(); t2.apply();")
    [(at, msg)] = _located(text, bmv2_errors(text))
    assert at.startswith("table t2 {") and msg == (
        "[bmv2 shared-selector] table t2: action selector I.sel is used by multiple tables with different "
        "selector inputs (meta.wide, meta.port here, meta.port, meta.wide in table t1)")
    compile_source(program(ingress_locals=SELECTED % "meta.port : selector; meta.wide : selector;",
                           ingress="        t1.apply(); t2.apply();"), "prog.p4", target="bmv2")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_program_passes_the_bmv2_check(path):
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "p4", "check", "--target", "bmv2", str(path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ok for bmv2" in done.stdout


def test_the_cli_prints_located_errors_and_exits_1(tmp_path):
    prog = tmp_path / "shift.p4"
    prog.write_text(program(ingress="        hdr.eth.type = (bit<16>)1 << sm.ingress_port;"))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "p4", "check", "--target", "bmv2", str(prog)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith(f"{prog}:{LINE0}:24: error: [bmv2 shift-amount]")
    assert "Traceback" not in done.stderr


def test_rocelab_switch_target_bmv2_refuses_the_program_before_opening_any_port(tmp_path):
    prog = tmp_path / "shift.p4"
    prog.write_text(program(ingress="        hdr.eth.type = (bit<16>)1 << sm.ingress_port;"))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "switch", "--target", "bmv2",
                           "--agent-addr", "none", "--grpc-server-addr", "127.0.0.1:1", str(prog)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{prog}:{LINE0}:24: error: [bmv2 shift-amount]" in done.stderr


def test_a_bmv2_fabric_checks_its_program_before_booting(tmp_path):
    from testbed.clos import ClosSpec, build
    from testbed.net.fabric import FabricError, FabricNet
    prog = tmp_path / "shift.p4"
    prog.write_text(program(ingress="        hdr.eth.type = (bit<16>)1 << sm.ingress_port;"))
    clos = build(ClosSpec(spines=1, leaves=1, hosts_per_leaf=1))
    with pytest.raises(FabricError, match=r"p4c-bm2-ss would refuse .*shift\.p4:\n.*\[bmv2 shift-amount\]"):
        FabricNet(clos, target="bmv2", program=prog, out_dir=tmp_path).check_bmv2_limits()
    FabricNet(clos, target="bmv2", out_dir=tmp_path).check_bmv2_limits()     # the shipped program


def test_a_pipeline_pushed_to_a_bmv2_held_switch_is_refused_naming_the_limit():
    """rocelab switch --target bmv2 compiles SetForwardingPipelineConfig's source with the limits."""
    from testbed.p4rt.server import P4RuntimeError, compile_device_config
    source = program(ingress="        hdr.eth.type = (bit<16>)1 << sm.ingress_port;").encode()
    assert compile_device_config(source).compiled.tables is not None          # the engine runs it
    with pytest.raises(P4RuntimeError, match=r"\[bmv2 shift-amount\] 1 << sm.ingress_port"):
        compile_device_config(source, target="bmv2")
