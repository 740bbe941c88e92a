"""for-in loops (P4_16 1.2.5): `for (T v in lo .. hi)` and `for (T v in (list<T>) {a, b, ..})`.
As p4c unrolls them: the bounds and the list's elements are evaluated once before the first
pass, and v takes each value in turn whatever the body assigns to it (p4-guide's
loop-test-progs record p4test's answers for these cases)."""
import pytest

from testbed.p4engine import P4Error, compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { eth_t eth; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control V(inout headers_t hdr, inout meta_t meta) { apply { } }
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    bit<8> n;
    bit<8> m;
    apply {
        n = 0;
        m = hdr.eth.dst[7:0];
        BODY
        hdr.eth.src[7:0] = n;
        hdr.eth.src[15:8] = m;
        sm.egress_spec = 1;
    }
}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def run(body, dst_low=3):
    pipe = compile_source(PROGRAM.replace("BODY", body)).new_pipeline()
    frame = bytes(5) + bytes([dst_low]) + bytes(6) + b"\x08\x00payload"
    [(port, out)] = pipe.process(0, frame)
    return out[11], out[10]          # (n, m) as the program left them


@pytest.mark.parametrize("body, n, m", [
    # p4test: the upper bound is read once (n is 3, not 7)
    ("for (bit<8> i in 1 .. m) { n = n + 1; m = 7; }", 3, 7),
    # the body's assignment to i does not change the next value: (1+1)+(2+1)+..+(5+1)
    ("for (bit<8> i in 1 .. 5) { i = i + 1; n = n + i; }", 20, 3),
    ("for (bit<8> i in 5 .. 1) { n = n + 1; }", 0, 3),                      # no pass
    ("for (bit<8> i in 1 .. 6) { if (i == 2) { continue; } if (i == 5) { break; } n = n + i; }", 8, 3),
    ("for (bit<8> i in 0 .. 2) { for (bit<8> j in i .. 2) { n = n + 1; } }", 6, 3),
    ("for (int<8> i in -2 .. 1) { n = n + (bit<8>)i; }", 254, 3),          # -2 -1 0 1 wraps to 0xFE
    # p4test: the list's elements are evaluated once, before the first pass
    ("for (bit<8> i in (list<bit<8>>) {1, 2, m, m}) { n = n + i; m = 32; }", 9, 32),
    ("for (bit<8> i in {4, 8}) { n = n + i; }", 12, 3),
])
def test_for_in_loops_run_as_p4c_unrolls_them(body, n, m):
    assert run(body) == (n, m)


@pytest.mark.parametrize("body, message", [
    ("for (i in 1 .. 5) { n = n + 1; }", "syntax error"),                  # p4c needs the type
    ("for (bit<8> i in (list<bit<16>>) {1, 2}) { }", "the list holds bit<16>, the loop variable is bit<8>"),
    ("for (bit<8> i in hdr.eth.type) { }", "a for-in loop runs over a range"),
    ("for (bool b in {true}) { }", "a for-in loop variable must be bit<W> or int<W>, not bool"),
    ("for (bit<8> i in 1 .. 2) { } n = i;", "unknown name 'i'"),           # the variable is the loop's
])
def test_for_in_misuse_is_refused_where_it_is(body, message):
    with pytest.raises(P4Error) as e:
        compile_source(PROGRAM.replace("BODY", body))
    assert message in str(e.value)
    line = next(i for i, text in enumerate(PROGRAM.replace("BODY", body).splitlines(), 1) if "for (" in text)
    assert f"<string>:{line}:" in str(e.value)


def test_bmv2_target_refuses_for_in_loops_as_p4c_bm2_ss_does():
    with pytest.raises(P4Error) as e:
        compile_source(PROGRAM.replace("BODY", "for (bit<8> i in 1 .. 2) { n = n + i; }"), target="bmv2")
    assert "[bmv2 loops] for-in loops are not supported on this target" in str(e.value)
