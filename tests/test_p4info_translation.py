"""`type` declarations in P4Info, as p4c writes them (control-plane/typeSpecConverter.cpp,
bytestrings.cpp; its expected P4Info for issue2283_1-bmv2 and v1model-digest-custom-type):
match fields, action parameters and packet metadata of a `type` carry its name (type_name) and
type_info.new_types describes it; with @p4runtime_translation("uri", bit<W>) their bitwidth is
the controller's W (0 for string), not the data plane's.

The P4Runtime server translates no URI (like simple_switch_grpc, whose PI layer has none):
values pass unchanged, and it refuses those that could not (see testbed/p4rt/entities.py)."""
import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from testbed.p4engine import compile_source

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
@p4runtime_translation("p4.org/psa/v1/PortId_t", 32)
type bit<9> PortId_t;
@p4runtime_translation("example.org/addr", bit<32>)
type bit<32> Addr_t;
@p4runtime_translation("example.org/mac", bit<32>)
type bit<48> Mac_t;
@p4runtime_translation("example.org/small", bit<16>)
type bit<8> Small_t;
@p4runtime_translation("example.org/name", string)
type bit<16> Named_t;
type bit<16> Plain_t;
type Plain_t Chained_t;
enum bit<8> Color_t { RED = 1, BLUE = 3 }

header h_t { bit<48> dst; Mac_t src; Addr_t addr; Small_t small; Named_t name; Plain_t tag; Color_t color; }
@controller_header("packet_in")
header packet_in_t { PortId_t ingress_port; bit<7> pad; }
struct H { packet_in_t pin; h_t h; }
struct learn_t { Mac_t src; Chained_t tag; }
struct M { PortId_t port; }
parser P(packet_in p, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { p.extract(hdr.h); transition accept; }
}
control VC(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action set_src(Mac_t mac, Small_t s) { hdr.h.src = mac; hdr.h.small = s; sm.egress_spec = 1; }
    action set_tag(Chained_t t) { hdr.h.tag = (Plain_t)t; }
    table by_addr {
        key = { hdr.h.addr : exact; }
        actions = { set_src; NoAction; }
        default_action = set_src((Mac_t)48w0xA0B, (Small_t)8w5);
    }
    table by_port { key = { m.port : exact; } actions = { set_tag; NoAction; } }
    table by_name { key = { hdr.h.name : exact; } actions = { NoAction; } }
    table by_color { key = { hdr.h.color : exact; } actions = { NoAction; } }
    apply {
        m.port = (PortId_t)sm.ingress_port;
        by_addr.apply();
        by_port.apply();
        by_name.apply();
        by_color.apply();
        digest<learn_t>(1, { hdr.h.src, (Chained_t)hdr.h.tag });
    }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control D(packet_out p, in H hdr) { apply { p.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), VC(), D()) main;
"""


@pytest.fixture(scope="module")
def program():
    return compile_source(PROGRAM, "translated.p4")


def by_name(entities):
    return {e.preamble.name: e for e in entities}


def test_match_fields_params_and_metadata_show_the_controller_width_and_type_name(program):
    info = program.p4info
    tables = by_name(info.tables)
    fields = {m.name: (m.bitwidth, m.type_name.name)
              for t in tables.values() for m in t.match_fields}
    assert fields == {"hdr.h.addr": (32, "Addr_t"), "m.port": (32, "PortId_t"), "hdr.h.name": (0, "Named_t"),
                      "hdr.h.color": (8, "")}
    actions = by_name(info.actions)
    assert [(p.name, p.bitwidth, p.type_name.name) for p in actions["I.set_src"].params] == \
        [("mac", 32, "Mac_t"), ("s", 16, "Small_t")]
    assert [(p.name, p.bitwidth, p.type_name.name) for p in actions["I.set_tag"].params] == \
        [("t", 16, "Chained_t")]
    # the initial default's arguments are written at the controller's width
    assert [a.value for a in tables["I.by_addr"].initial_default_action.arguments] == \
        [b"\x00\x00\x0a\x0b", b"\x00\x05"]
    [packet_in] = info.controller_packet_metadata
    assert [(m.name, m.bitwidth, m.type_name.name) for m in packet_in.metadata] == \
        [("ingress_port", 32, "PortId_t"), ("pad", 7, "")]


def test_new_types_describe_the_translation_or_the_bits_underneath(program):
    new_types = program.p4info.type_info.new_types
    assert set(new_types) == {"PortId_t", "Addr_t", "Mac_t", "Small_t", "Named_t", "Chained_t"}
    translated = {name: (spec.translated_type.uri, spec.translated_type.sdn_bitwidth,
                         spec.translated_type.HasField("sdn_string"))
                  for name, spec in new_types.items() if spec.HasField("translated_type")}
    assert translated == {"PortId_t": ("p4.org/psa/v1/PortId_t", 32, False),
                          "Addr_t": ("example.org/addr", 32, False),
                          "Mac_t": ("example.org/mac", 32, False),
                          "Small_t": ("example.org/small", 16, False),
                          "Named_t": ("example.org/name", 0, True)}
    assert new_types["Chained_t"].original_type.bitstring.bit.bitwidth == 16
    color = program.p4info.type_info.serializable_enums["Color_t"]      # a match field's enum too
    assert color.underlying_type.bitwidth == 8
    assert [(m.name, m.value) for m in color.members] == [("RED", b"\x01"), ("BLUE", b"\x03")]
    members = program.p4info.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.new_type.name) for m in members] == [("src", "Mac_t"), ("tag", "Chained_t")]


def test_bad_translation_annotations_are_located_errors():
    from testbed.p4engine import P4Error
    source = PROGRAM.replace('("example.org/small", bit<16>)', '("example.org/small", int<16>)')
    with pytest.raises(P4Error) as e:
        compile_source(source, "translated.p4")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "int<16>" in text)
    assert str(e.value).startswith(f"translated.p4:{line}:")
    assert "controller type must be bit<W> or string" in str(e.value)


# ------------------------------------------------------------------ the P4Runtime server

@pytest.fixture
def p4rt(program):
    from test_p4rt_hardening import ELECTION, Stream
    from test_p4rt_server import free_port
    from testbed.p4rt.server import P4RuntimeServer
    from testbed.switch.datapath import Switch
    switch = Switch({})
    addr = f"127.0.0.1:{free_port()}"
    server = P4RuntimeServer(switch, device_id=1, address=addr, compiler=lambda cfg: program).start()
    server.load_program(program)            # its P4Info, translated widths and all, is accepted
    stream = Stream(addr)
    assert stream.arbitrate(election=ELECTION).arbitration.status.code == code_pb2.OK
    channel = grpc.insecure_channel(addr)
    yield {"stub": p4runtime_pb2_grpc.P4RuntimeStub(channel), "server": server}
    channel.close()
    stream.close()
    server.stop()
    switch.close()


def entry(program, table, field_value, action, params):
    ids = {e.preamble.name: e.preamble.id for e in list(program.p4info.tables) + list(program.p4info.actions)}
    update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    te = update.entity.table_entry
    te.table_id = ids[table]
    te.match.add(field_id=1).exact.value = field_value
    te.action.action.action_id = ids[action]
    for param_id, value in enumerate(params, 1):
        te.action.action.params.add(param_id=param_id, value=value)
    return update


def refusal(stub, update):
    from test_p4rt_hardening import _write
    with pytest.raises(grpc.RpcError) as e:
        _write(stub, update)
    status = status_pb2.Status.FromString(dict(e.value.trailing_metadata())["grpc-status-details-bin"])
    error = p4runtime_pb2.Error()
    status.details[0].Unpack(error)
    return error.canonical_code, error.message


def frame(addr):
    return (0xAA).to_bytes(6, "big") + (0x11).to_bytes(6, "big") + addr.to_bytes(4, "big") + bytes(6)


def test_values_of_translated_types_pass_unchanged_where_they_can(program, p4rt):
    from test_p4rt_hardening import _write
    stub = p4rt["stub"]
    # Addr_t: the controller's width is the data plane's; Mac_t and Small_t values fit theirs
    _write(stub, entry(program, "I.by_addr", b"\x0a\x00\x00\x01", "I.set_src", [b"\x01\x02\x03\x04", b"\x7f"]))
    [(port, out)] = p4rt["server"].installed.pipeline.process(0, frame(0x0A000001))
    assert port == 1
    assert out[6:12] == bytes([0, 0, 1, 2, 3, 4]) and out[16] == 0x7F
    # packet metadata is cut at the program's widths (9 + 7 bits), not P4Info's 32 + 7
    assert p4rt["server"].installed.index.controller_headers["packet_in"] == [(1, "ingress_port", 9), (2, "pad", 7)]


def test_values_that_would_need_a_translation_are_refused_naming_the_uri(program, p4rt):
    stub = p4rt["stub"]
    code, message = refusal(stub, entry(program, "I.by_addr", b"\x0a\x00\x00\x02", "I.set_src",
                                        [b"\x01", b"\x01\xff"]))       # 0x1ff: fits 16 bits, not 8
    assert code == code_pb2.INVALID_ARGUMENT
    assert "example.org/small" in message and "8 bits" in message
    # PortId_t: 32 bits for the controller, 9 in the data plane (simple_switch_grpc: BAD_MATCH_KEY)
    code, message = refusal(stub, entry(program, "I.by_port", b"\x00\x00\x00\x02", "I.set_tag", [b"\x01"]))
    assert code == code_pb2.INVALID_ARGUMENT
    assert "p4.org/psa/v1/PortId_t" in message and "9 bits" in message
    code, message = refusal(stub, entry(program, "I.by_name", b"\x00\x01", "NoAction", []))
    assert code == code_pb2.INVALID_ARGUMENT and "example.org/name" in message
