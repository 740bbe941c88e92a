"""Packet-processing details where the engine must do what BMv2's simple_switch does (each test
names the BMv2 or p4c source that decides it). Frames are tiny: an 'out' header the ingress
fills with what it saw, then the headers as parsed."""
from testbed.p4engine import compile_source

ERROR_CODES = """
    if (sm.parser_error == error.NoError) hdr.o.err = 0;
    else if (sm.parser_error == error.PacketTooShort) hdr.o.err = 1;
    else if (sm.parser_error == error.NoMatch) hdr.o.err = 2;
    else if (sm.parser_error == error.ParserInvalidArgument) hdr.o.err = 6;
    else hdr.o.err = 0xff;
"""


def program(parser_states, verify="", ingress="", egress="", compute=""):
    """h1 (2 bytes) then h2 (4 bytes, a 16-bit value and its checksum); ingress prepends `o`
    with the parser error, checksum_error and h2's validity, then sends to port 1."""
    return f"""
#include <core.p4>
#include <v1model.p4>
header h1_t {{ bit<8> a; bit<8> b; }}
header h2_t {{ bit<16> x; bit<16> c; }}
header out_t {{ bit<8> err; bit<8> cs; bit<8> v2; }}
struct H {{ out_t o; h1_t h1; h2_t h2; }}
struct M {{ bit<16> c; }}
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {{
    {parser_states}
}}
control V(inout H hdr, inout M m) {{ apply {{ {verify} }} }}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {{ apply {{
    hdr.o.setValid();
    {ERROR_CODES}
    hdr.o.cs = (bit<8>)sm.checksum_error;
    hdr.o.v2 = hdr.h2.isValid() ? 8w1 : 8w0;
    sm.egress_spec = 1;
    {ingress}
}} }}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) {{ apply {{ {egress} }} }}
control C(inout H hdr, inout M m) {{ apply {{ {compute} }} }}
control D(packet_out pkt, in H hdr) {{ apply {{ pkt.emit(hdr); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def run(src, data):
    return compile_source(src).new_pipeline().process(0, data)


TWO_STATES = """
    state start { pkt.extract(hdr.h1); transition select(hdr.h1.a) { 1: s2; default: accept; } }
    state s2 { pkt.extract(hdr.h2); transition accept; }
"""


# ------------------------------------------------------------------ checksums

def test_verify_checksum_is_skipped_when_the_checksum_fields_header_is_invalid():
    # BMv2's Checksum::verify returns "correct" when the target field's header is invalid
    # (src/bm_sim/checksums.cpp, is_target_field_valid), whatever the condition says
    src = program(TWO_STATES,
                  verify="verify_checksum(true, {hdr.h2.x}, hdr.h2.c, HashAlgorithm.csum16);")
    assert run(src, bytes.fromhex("0100" "1234edcb")) == [(1, bytes.fromhex("000001" "0100" "1234edcb"))]
    assert run(src, bytes.fromhex("0100" "1234edcc")) == [(1, bytes.fromhex("000101" "0100" "1234edcc"))]
    # h2 never extracted: no checksum error although csum16 of nothing differs from its zero field
    assert run(src, bytes.fromhex("0200")) == [(1, bytes.fromhex("000000" "0200"))]


def test_verify_checksum_into_metadata_always_runs():
    # metadata is always valid in BMv2 (Header::is_valid), so only the condition decides
    src = program(TWO_STATES,
                  verify="verify_checksum(true, {hdr.h1.a}, m.c, HashAlgorithm.csum16);")
    assert run(src, bytes.fromhex("0200")) == [(1, bytes.fromhex("000100" "0200"))]


# ------------------------------------------------------------------ parser errors

def test_select_without_a_matching_case_ends_the_parse_without_an_error():
    # p4c-bm2-ss adds no NoMatch state (its simple_switch midend has no HandleNoMatch) and BMv2's
    # ParseState::find_next_state then returns the null default state: accept, parser_error
    # stays NoError (src/bm_sim/parser.cpp); what was extracted stays valid, the rest is payload
    src = program("""
    state start { pkt.extract(hdr.h1); transition select(hdr.h1.a) { 1: s2; 2: accept; } }
    state s2 { pkt.extract(hdr.h2); transition accept; }
""")
    assert run(src, bytes.fromhex("0100" "12340000")) == [(1, bytes.fromhex("000001" "0100" "12340000"))]
    assert run(src, bytes.fromhex("0500" "12340000")) == [(1, bytes.fromhex("000000" "0500" "12340000"))]


def test_no_match_in_a_sub_parser_ends_the_whole_parse_without_an_error():
    # p4c inlines sub-parsers into the one BMv2 parser: the null default state ends it all
    src = program("""
    Sub() sub;
    state start { sub.apply(pkt, hdr); pkt.extract(hdr.h2); transition accept; }
""").replace("parser P(", """
parser Sub(packet_in pkt, inout H hdr) {
    state start { pkt.extract(hdr.h1); transition select(hdr.h1.a) { 1: accept; } }
}
parser P(""")
    assert run(src, bytes.fromhex("0100" "12340000")) == [(1, bytes.fromhex("000001" "0100" "12340000"))]
    assert run(src, bytes.fromhex("0700" "12340000")) == [(1, bytes.fromhex("000000" "0700" "12340000"))]


def test_no_member_of_a_value_set_matching_ends_the_parse_without_an_error():
    src = program("""
    value_set<bit<8>>(4) kinds;
    state start { pkt.extract(hdr.h1); transition select(hdr.h1.a) { kinds: s2; } }
    state s2 { pkt.extract(hdr.h2); transition accept; }
""")
    pipeline = compile_source(src).new_pipeline()
    pipeline.value_sets["P.kinds"].add(3)
    assert pipeline.process(0, bytes.fromhex("0300" "12340000")) == [(1, bytes.fromhex("000001" "0300" "12340000"))]
    assert pipeline.process(0, bytes.fromhex("0400" "12340000")) == [(1, bytes.fromhex("000000" "0400" "12340000"))]


def test_packet_too_short_keeps_what_was_extracted_and_the_unparsed_bytes():
    # BMv2's Parser::parse records the error, removes only the bytes of the headers extracted
    # before it, and ingress runs (src/bm_sim/parser.cpp, simple_switch.cpp ingress_thread)
    src = program(TWO_STATES)
    assert run(src, bytes.fromhex("0100" "1234")) == [(1, bytes.fromhex("010000" "0100" "1234"))]


# ------------------------------------------------------------------ standard metadata

def test_egress_reads_egress_spec_as_the_nine_bit_field_simple_switch_leaves():
    # simple_switch's egress_thread sets egress_spec to drop_port + 1 (512); the field is
    # bit<9>, so egress reads 0 (targets/simple_switch/simple_switch.cpp, fields.h's mask)
    src = program(TWO_STATES, egress="hdr.h2.x = (bit<16>)sm.egress_spec; hdr.h2.c = (bit<16>)sm.egress_port;")
    assert run(src, bytes.fromhex("0100" "ffffffff")) == [(1, bytes.fromhex("000001" "0100" "00000001"))]


def test_verify_checksum_compares_the_whole_checksum_with_a_narrower_field():
    # CalcBasedChecksum::verify_ compares the calculation's whole output with the field
    # (src/bm_sim/checksums.cpp): a crc32 cannot match a bit<16> field unless its top half is 0
    import zlib
    low = zlib.crc32(bytes.fromhex("1234")) & 0xFFFF
    src = program(TWO_STATES,
                  verify="verify_checksum(true, {hdr.h2.x}, hdr.h2.c, HashAlgorithm.crc32);")
    frame = bytes.fromhex("0100" "1234") + low.to_bytes(2, "big")
    assert run(src, frame) == [(1, bytes.fromhex("000101") + frame)]



# ------------------------------------------------------------------ setValid / setInvalid

VALIDITY_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
header n_t { bit<8> a; bit<8> b; bit<16> c; }
header len_t { bit<16> egress; bit<16> ingress; bit<8> it; }
struct H { len_t l; h_t h; n_t n; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    if (hdr.h.a == 1) {
        hdr.n.a = 7; hdr.n.c = 9;       // written while invalid
        hdr.n.setValid();
        hdr.n.b = 2;
        hdr.h.setInvalid();
        hdr.h.setValid();
        hdr.h.a = 1;
    }
    if (hdr.h.a == 2) { hdr.h.setInvalid(); hdr.h.setInvalid(); clone(CloneType.I2E, 5); }
    if (hdr.h.a == 3) { hdr.n = {1, 2, 3}; hdr.n.setValid(); sm.mcast_grp = 4; }
    hdr.l = {0, (bit<16>)sm.packet_length, 0};
    sm.egress_spec = 1;
} }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    if (!hdr.l.isValid()) { hdr.l.setValid(); }
    hdr.l.egress = (bit<16>)sm.packet_length;
    hdr.l.it = (bit<8>)sm.instance_type;
    if (sm.instance_type == 0 && hdr.h.isValid() && hdr.h.b == 0xee) {
        hdr.h.setInvalid(); clone(CloneType.E2E, 5);
    }
} }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_set_valid_zeroes_the_fields_of_a_header_that_was_invalid():
    # p4c-bm2-ss compiles setValid() to BMv2's add_header primitive, which resets every field of
    # an invalid header to 0 before marking it valid (targets/simple_switch/primitives.cpp,
    # Header::reset); a valid header keeps its fields. n was written while invalid, h was
    # parsed, invalidated and made valid again
    out = run(VALIDITY_PROGRAM, bytes.fromhex("0122" "3344"))
    assert [(port, frame[5:]) for port, frame in out] == [(1, bytes.fromhex("0100" "00020000" "3344"))]


def test_egress_packet_length_counts_the_headers_ingress_made_valid_or_invalid():
    # add_header/remove_header add or take the header's bytes from simple_switch's packet-length
    # register when the validity changes, and egress_thread sets standard_metadata.packet_length
    # from that register (ingress still reads the received length); multicast copies and E2E
    # clones take the register, an I2E clone the received length (simple_switch.cpp)
    pipeline = compile_source(VALIDITY_PROGRAM).new_pipeline()
    pipeline.set_clone_session(5, [(7, 0)])
    pipeline.set_mc_group(4, [(2, 0)])
    frame = bytes.fromhex("0122" "3344")
    # + l (5) + n (4) - h (2) + h (2)
    assert pipeline.process(0, frame)[0][1][:5] == bytes.fromhex("000d" "0004" "00")
    # h made invalid once (the second setInvalid finds it invalid); the clone: received length,
    # no l from ingress (the received packet parsed again)
    assert [(port, f[:5]) for port, f in pipeline.process(0, bytes.fromhex("0222" "3344"))] == \
        [(7, bytes.fromhex("0004" "0000" "01")), (1, bytes.fromhex("0007" "0004" "00"))]
    # a list assigned to a header is a setValid() first (p4c's SetHeaders); the copy's register
    assert [(port, f[:5]) for port, f in pipeline.process(0, bytes.fromhex("0322" "3344"))] == \
        [(2, bytes.fromhex("000d" "0004" "05"))]
    # the E2E clone takes the register as egress left it (h invalidated there)
    assert [(port, f[:5]) for port, f in pipeline.process(0, bytes.fromhex("00ee" "3344"))] == \
        [(1, bytes.fromhex("0009" "0004" "00")), (7, bytes.fromhex("0007" "0004" "02"))]



def test_a_header_assigned_from_lookahead_is_made_valid_as_p4c_expands_it():
    # p4c's ExpandLookahead writes `h = pkt.lookahead<H>()` as h.setValid() then the fields
    # (midend/expandLookahead.cpp): h's bytes count in the register egress reads
    src = program("""
    state start { pkt.extract(hdr.h1); hdr.h2 = pkt.lookahead<h2_t>(); transition accept; }
""", egress="hdr.h2.x = (bit<16>)sm.packet_length;")
    # received 6, + o (3) in ingress, + h2 (4) in the parser; the looked-at bytes stay payload
    assert run(src, bytes.fromhex("0100" "12345678")) == \
        [(1, bytes.fromhex("000001" "0100" "000d5678" "12345678"))]



def test_a_valid_header_assigned_to_a_union_member_invalidates_the_other_member():
    # p4c-bm2-ss writes a header assignment as assign_header, whose mark_valid() goes through the
    # union (Header::mark_valid, HeaderUnion::make_header_valid): the member valid before becomes
    # invalid; an invalid source leaves the other member alone
    src = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; }
header g_t { bit<8> a; }
header_union U { h_t x; g_t y; }
struct H { h_t h; h_t n; U u; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.u.y); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    if (hdr.h.a == 1) { hdr.u.x = hdr.h; } else { hdr.u.x = hdr.n; }
    sm.egress_spec = 1;
} }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    assert run(src, bytes.fromhex("01" "22" "3344")) == [(1, bytes.fromhex("01" "01" "3344"))]
    assert run(src, bytes.fromhex("02" "22" "3344")) == [(1, bytes.fromhex("02" "22" "3344"))]



# ------------------------------------------------------------------ signed keys

SIGNED_KEYS = """
#include <core.p4>
#include <v1model.p4>
header h_t { int<8> a; int<8> b; bit<8> t; bit<8> s; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.a) { -2: minus_two; 8s0x40 &&& 8s0x40: bit6; default: accept; }
    }
    state minus_two { hdr.h.s = 1; transition accept; }
    state bit6 { hdr.h.s = 2; transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action set(bit<8> v) { hdr.h.t = hdr.h.t + v; }
    table e { key = { hdr.h.a : exact; } actions = { set; NoAction; } default_action = NoAction(); }
    table r { key = { hdr.h.b : range; } actions = { set; NoAction; } default_action = NoAction();
              const entries = { 0 .. 0x90 : set(10); } }
    apply { e.apply(); r.apply(); sm.egress_spec = 1; }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_signed_table_and_select_keys_match_their_twos_complement_bytes():
    # BMv2 builds a lookup key from the field's bytes (MatchKeyBuilder, ParseSwitchKeyBuilder in
    # src/bm_sim), and entries (P4Runtime, CLI, p4c's const entries and select case values) are
    # written as the same unsigned bit patterns: int<8> -1 matches 0xff, 0x85 lies in 0..0x90
    from testbed.p4engine.tables import ActionCall, Exact
    pipeline = compile_source(SIGNED_KEYS).new_pipeline()
    pipeline.tables["I.e"].insert([Exact(0xFF)], ActionCall("I.set", {"v": 1}))

    def send(a, b):
        (port, frame), = pipeline.process(0, bytes([a, b, 0, 0]))
        return frame[2], frame[3]
    assert send(0xFF, 0x85) == (11, 2)      # exact -1 and range hit; bit 6 of -1 is set
    assert send(0xFE, 0x05) == (10, 1)      # select -2
    assert send(0x85, 0x91) == (0, 0)       # no case (bit 6 clear), range missed


# ------------------------------------------------------------------ log_msg

def test_log_msg_formats_as_bmv2s_primitive():
    # src/bm_sim/core/primitives.cpp log_msg: any `{...}` takes the next value, `\\{` `\\}` are
    # literal braces, values print in decimal as the field holds them (signed for int<W>)
    src = program(TWO_STATES, ingress=r"""
        int<8> s = (int<8>)hdr.h1.b;
        log_msg("a={} s={name} \\{lit\\}", {hdr.h1.a, s});
    """)
    lines = []
    compile_source(src).new_pipeline(log=lines.append).process(0, bytes.fromhex("02ff"))
    assert "a=2 s=-1 {lit}" in lines


# ------------------------------------------------------------------ clone sessions in STF

def test_stf_clone_session_follows_later_changes_to_its_multicast_group():
    # simple_switch's mirroring session keeps the group id (MirroringSessionConfig.mgid) and
    # replicates through the PRE when a packet is cloned, so nodes associated later count (an
    # I2E clone is the received packet parsed again: no `o` header)
    import io
    from testbed.p4engine.stf import run_stf_text
    src = program(TWO_STATES, ingress="clone(CloneType.I2E, 8);",
                  egress="if (sm.instance_type == 1) { hdr.h1.b = (bit<8>)sm.egress_rid; }")
    stf = """
mc_mgrp_create 3
mirroring_add_mc 8 3
mc_node_create 7 4 5
mc_node_associate 3 0
packet 0 0200
expect 1 000000 0200
expect 4 0207
expect 5 0207
"""
    out = io.StringIO()
    assert run_stf_text(compile_source(src).new_pipeline(), stf, out=out, filename="t.stf") == 0, out.getvalue()


# ------------------------------------------------------------------ the PRE (simple_switch.cpp)

PRE_PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> op; bit<8> it; bit<16> plen; bit<16> inport; bit<8> m1; bit<8> m2; bit<16> rid; }
struct H { h_t h; }
struct M { @field_list(1) bit<8> a; @field_list(1, 2) bit<8> b; }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    sm.egress_spec = 2;
    if (sm.instance_type == 0) {
        m.a = 0xaa; m.b = 0xbb;
        if (hdr.h.op == 1) { clone_preserving_field_list(CloneType.I2E, 5, 1); }
        if (hdr.h.op == 2) { resubmit_preserving_field_list(2); }
        if (hdr.h.op == 5) { sm.mcast_grp = 3; clone_preserving_field_list(CloneType.I2E, 5, 2); }
    } else {
        hdr.h.it = (bit<8>)sm.instance_type; hdr.h.plen = (bit<16>)sm.packet_length;
        hdr.h.inport = (bit<16>)sm.ingress_port; hdr.h.m1 = m.a; hdr.h.m2 = m.b;
        if (sm.instance_type == 4) { sm.egress_spec = 3; }
    }
} }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    if (sm.instance_type == 1 || sm.instance_type == 2 || sm.instance_type == 5) {
        hdr.h.it = (bit<8>)sm.instance_type; hdr.h.plen = (bit<16>)sm.packet_length;
        hdr.h.inport = (bit<16>)sm.ingress_port; hdr.h.m1 = m.a; hdr.h.m2 = m.b; hdr.h.rid = sm.egress_rid;
    }
    if (sm.instance_type == 0 && hdr.h.op == 3) {
        m.a = 1; m.b = 2; clone_preserving_field_list(CloneType.E2E, 5, 2); hdr.h.op = 0x33;
    }
    if (sm.instance_type == 0 && hdr.h.op == 4) {
        m.a = 1; m.b = 2; recirculate_preserving_field_list(1); hdr.h.op = 0x44; truncate(4);
    }
    if (sm.instance_type == 0 && hdr.h.op == 6) { clone_preserving_field_list(CloneType.E2E, 5, 2); mark_to_drop(sm); }
} }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_clones_resubmit_recirculate_and_multicast_carry_what_simple_switch_carries():
    # simple_switch.cpp: every copy but a multicast replica starts from reset metadata (so
    # ingress_port 0) plus its field list; I2E clones and resubmits are the received packet
    # parsed again, E2E clones keep egress's headers; packet_length is the received length
    # (the deparsed length after recirculate); truncate does not reach a recirculated copy;
    # an E2E clone is made even when the packet is then dropped
    pipeline = compile_source(PRE_PROGRAM).new_pipeline()
    pipeline.set_clone_session(5, [(7, 0)])
    pipeline.set_mc_group(3, [(8, 11), (9, 12)])

    def send(op):
        return [(port, frame.hex()) for port, frame in
                pipeline.process(4, bytes([op]) + bytes(9) + b"PAYLOAD")]
    payload = b"PAYLOAD".hex()
    assert send(1) == [(7, "01" "01" "0011" "0000" "aa" "bb" "0000" + payload),
                       (2, "01" "00" "0000" "0000" "00" "00" "0000" + payload)]
    assert send(2) == [(2, "02" "06" "0011" "0000" "00" "bb" "0000" + payload)]
    assert send(3) == [(2, "33" "00" "0000" "0000" "00" "00" "0000" + payload),
                       (7, "33" "02" "0011" "0000" "00" "02" "0000" + payload)]
    assert send(4) == [(3, "44" "04" "0011" "0000" "01" "02" "0000" + payload)]
    assert send(5) == [(7, "05" "01" "0011" "0000" "00" "bb" "0000" + payload),
                       (8, "05" "05" "0011" "0004" "aa" "bb" "000b" + payload),
                       (9, "05" "05" "0011" "0004" "aa" "bb" "000c" + payload)]
    assert send(6) == [(7, "06" "02" "0011" "0000" "00" "bb" "0000" + payload)]



def test_an_i2e_clone_is_parsed_with_the_port_the_packet_came_in_on():
    # simple_switch's ingress_thread sets the clone's ingress_port to packet->get_ingress_port()
    # before parsing it again: the receive port, which resubmitted and recirculated copies keep,
    # whatever ingress wrote into the field (resubmit/recirculate reset it to 0); the field is
    # reset again after the parse
    src = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> op; bit<8> it; bit<8> extra_valid; bit<8> port; }
header x_t { bit<8> x; }
struct H { h_t h; x_t x; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition select(sm.ingress_port) { 4: extra; default: accept; } }
    state extra { pkt.extract(hdr.x); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    sm.egress_spec = 1;
    if (hdr.h.op == 1) { sm.ingress_port = 9; clone(CloneType.I2E, 5); }
    if (hdr.h.op == 2) {
        if (sm.instance_type == 0) { resubmit_preserving_field_list(0); } else { clone(CloneType.I2E, 5); }
    }
} }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply {
    hdr.h.it = (bit<8>)sm.instance_type;
    hdr.h.extra_valid = hdr.x.isValid() ? 8w1 : 8w0;
    hdr.h.port = (bit<8>)sm.ingress_port;
} }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    pipeline = compile_source(src).new_pipeline()
    pipeline.set_clone_session(5, [(7, 0)])
    out = dict(pipeline.process(4, bytes.fromhex("01000000" "aa")))
    assert out[7] == bytes.fromhex("01010100" "aa")          # the clone: x parsed (port 4)
    assert out[1] == bytes.fromhex("01000109" "aa")
    out = dict(pipeline.process(4, bytes.fromhex("02000000" "aa")))
    assert out[7] == bytes.fromhex("02010100" "aa")          # cloned by the resubmitted packet
    assert out[1] == bytes.fromhex("02000000" "aa")        # parsed with ingress_port 0: no x


# ------------------------------------------------------------------ direct meters

def test_a_direct_meter_colours_its_read_destination_when_the_table_hits():
    # p4c-bm2-ss turns dm.read(dst) into the meter's result_target and drops the call; BMv2
    # writes the colour into dst on a hit, before the entry's action runs, whatever that action
    # is (src/bm_sim/match_tables.cpp); a miss leaves dst alone
    from testbed.p4engine.tables import ActionCall, Exact
    src = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k; bit<8> c; }
struct H { h_t h; }
struct M { bit<8> color; }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    direct_meter<bit<8>>(MeterType.packets) dm;
    action reads() { dm.read(m.color); }
    action overwrites() { m.color = 9; dm.read(m.color); }
    action other() { }
    table t {
        key = { hdr.h.k : exact; }
        actions = { reads; overwrites; other; }
        meters = dm;
        default_action = other();
    }
    apply { m.color = 7; t.apply(); hdr.h.c = m.color; sm.egress_spec = 1; }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    pipeline = compile_source(src).new_pipeline()
    table = pipeline.tables["I.t"]
    for key, action in ((1, "I.reads"), (2, "I.overwrites"), (3, "I.other")):
        table.insert([Exact(key)], ActionCall(action, {}))
    colour = {k: pipeline.process(0, bytes([k, 0]))[0][1][1] for k in (1, 2, 3, 4)}
    # an unconfigured meter is GREEN (0); the miss (4) keeps 7
    assert colour == {1: 0, 2: 9, 3: 0, 4: 7}


def _skip_program(skip):
    """h1, then `skip`, then h2; ingress reports the parser error."""
    return program(f"""
    state start {{ pkt.extract(hdr.h1); {skip} pkt.extract(hdr.h2); transition accept; }}
""")


def test_advance_by_bits_that_are_not_whole_bytes_is_a_parser_invalid_argument():
    # BMv2's ParserOpAdvance checks the bit count before the length (src/bm_sim/parser.cpp);
    # h1 stays valid and the bytes after it stay in the payload
    src = _skip_program("pkt.advance((bit<32>)hdr.h1.a);")
    assert run(src, bytes.fromhex("0800" "aa" "12345678")) == [(1, bytes.fromhex("000001" "0800" "12345678"))]
    assert run(src, bytes.fromhex("0c00" "aa" "12345678")) == [(1, bytes.fromhex("060000" "0c00" "aa12345678"))]
    src = _skip_program("pkt.advance(12);")
    assert run(src, bytes.fromhex("0800" "aa" "12345678")) == [(1, bytes.fromhex("060000" "0800" "aa12345678"))]


def test_a_lookahead_whose_value_is_unused_does_nothing():
    # p4c-bm2-ss's parser converter emits nothing for a bare lookahead call
    # (backends/bmv2/common/parser.cpp), so a short packet is no PacketTooShort there
    src = _skip_program("pkt.lookahead<bit<64>>();")
    assert run(src, bytes.fromhex("0800" "12345678")) == [(1, bytes.fromhex("000001" "0800" "12345678"))]


def test_an_unused_lookahead_of_a_struct_is_still_checked():
    # p4c's ExpandLookahead turns it into a read of its bits, which BMv2 checks (p4c's
    # issue1768-bmv2 sample: a short packet is PacketTooShort)
    src = program("""
    state start { pkt.extract(hdr.h1); pkt.lookahead<h2_t>(); transition accept; }
""")
    assert run(src, bytes.fromhex("0800" "1234")) == [(1, bytes.fromhex("010000" "0800" "1234"))]


def test_clone_uses_the_low_15_bits_of_its_session_id():
    # simple_switch stores the id in 16 bits with bit 15 as its "clone requested" flag and
    # looks up id & 0x7FFF (targets/simple_switch/primitives.cpp, register_access.h)
    src = program(TWO_STATES, ingress="clone(CloneType.I2E, 32w0x18005);")
    pipeline = compile_source(src).new_pipeline()
    pipeline.set_clone_session(5, [(7, 0)])
    assert pipeline.process(0, bytes.fromhex("0200")) == [(7, bytes.fromhex("0200")),
                                                         (1, bytes.fromhex("000000" "0200"))]
