"""P4_16 syntax p4c accepts that the engine once refused: trailing commas (p4c's optTrailingComma)
and default initializers (`...`). Each program is run and its output compared with what BMv2
sends; what p4c refuses is refused at the same place."""
import pytest

from testbed.p4engine import P4Error, compile_source

from test_p4engine_accept import frame, program, refused, run


def line_col(src, needle, occurrence=0):
    """1-based line and column of the `occurrence`-th `needle` in `src`."""
    at = -1
    for _ in range(occurrence + 1):
        at = src.index(needle, at + 1)
    line = src.count("\n", 0, at) + 1
    return line, at - (src.rfind("\n", 0, at) + 1) + 1


# ------------------------------------------------------------------ trailing commas

def test_trailing_commas_in_list_and_structure_expressions():
    src = program("""
        apply {
            tuple<bit<16>, bit<16>> t = {0x1111, 0x2222,};
            pair_t p = {hi = 0x33, lo = 0x44,};
            pair_t q = (pair_t){hi = 0x55, lo = 0x66,};
            pair_t r = (pair_t){0x77, 0x88,};
            hdr.eth.type = t[1];
            hdr.eth.src = p.hi ++ p.lo ++ q.hi ++ q.lo ++ r.hi ++ r.lo;
        }""", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    assert run(src, frame()) == [(0, frame(src=0x334455667788, ethertype=0x2222))]


def test_trailing_commas_in_structured_annotations_and_translation_mappings():
    src = program("""
        action fwd(bit<9> port) { sm.egress_spec = port; }
        @Lists[1, "text", true,] @Pairs[label = "x", size = 4,] @Empty[]
        table t {
            key = { hdr.eth.type : exact; }
            actions = { fwd; }
            const entries = { 0x0800 : fwd(2); }
        }
        apply { port_t p = (port_t)9w4; t.apply(); sm.egress_spec = sm.egress_spec + (bit<9>)p; }""",
                  decls="""
        @p4runtime_translation("example.org/port_t", string)
        @p4runtime_translation_mappings({ {"CPU", 4}, {"", 0}, })
        type bit<9> port_t;""")
    assert run(src, frame()) == [(6, frame())]


def test_a_trailing_comma_in_an_error_declaration_is_refused_as_p4c_does():
    src = program("apply { }", decls="error { Oops, }")
    line, col = line_col(src, "Oops, }")
    assert refused(src).startswith(f"<string>:{line}:{col + len('Oops, ')}: error: syntax error")


def test_an_empty_list_may_be_written_with_a_lone_comma_as_p4c_parses_it():
    src = program("""
        @Nothing[,] action fwd(in empty_t nothing) { sm.egress_spec = 3; }
        apply { empty_t e = {,}; fwd(e); }""", decls="struct empty_t { }")
    assert run(src, frame()) == [(3, frame())]


@pytest.mark.parametrize("text", ["{1, 2,,}", "{hi = 1,,}"])
def test_one_trailing_comma_only(text):
    src = program(f"apply {{ pair_t p = {text}; }}", decls="struct pair_t { bit<8> hi; bit<8> lo; }")
    line, col = line_col(src, ",,}")
    assert refused(src).startswith(f"<string>:{line}:{col + 1}: error: syntax error: unexpected ','")


# ------------------------------------------------------------------ header widths

PUNT_HEADER = """
@controller_header("packet_in")
header punt_t { bit<9> ingress_port; bit<9> target_egress_port; }"""


def test_a_header_type_no_instance_uses_may_have_any_width_as_p4c_bm2_ss_allows():
    # sonic-pins' SAI P4 declares its 18-bit packet_in header for other targets only
    src = program("apply { sm.egress_spec = 2; }", decls=PUNT_HEADER)
    prog = compile_source(src)
    assert prog.new_pipeline().process(0, frame()) == [(2, frame())]
    [punt] = prog.p4info.controller_packet_metadata
    assert [(m.name, m.bitwidth) for m in punt.metadata] == [("ingress_port", 9), ("target_egress_port", 9)]


@pytest.mark.parametrize("body, meta", [("apply { punt_t p; p.setValid(); }", ""),
                                        ("apply { }", "punt_t punt;")])
def test_an_instance_of_a_header_not_made_of_bytes_is_refused_at_its_type(body, meta):
    src = program(body, decls=PUNT_HEADER, meta=meta)
    line, col = line_col(src, "@controller_header")
    assert refused(src).startswith(
        f"<string>:{line}:{col}: error: header punt_t is 18 bits long; BMv2 needs a multiple of 8")
