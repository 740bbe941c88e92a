"""`_` as a type argument (p4c's typeArg DONTCARE: a type left to inference), which the grammar
refused (p4c's issue1304: `Switch<my_packet, my_metadata, _, _>(p0) main;`)."""
import pytest

from test_p4engine_accept import frame, program
from testbed.p4engine import P4Error, compile_source


def _first_error(src):
    with pytest.raises(P4Error) as e:
        compile_source(src, "dc.p4")
    return str(e.value).splitlines()[0]


@pytest.mark.parametrize("package", ["V1Switch<_, _>(", "V1Switch<headers_t, _>("])
def test_package_type_arguments_left_to_inference(package):
    src = program("apply { sm.egress_spec = 2; }").replace("V1Switch(", package)
    assert compile_source(src, "dc.p4").new_pipeline().process(0, frame()) == [(2, frame())]


def test_extern_function_type_arguments_left_to_inference_give_the_inferred_result():
    call = "hash{}(x, HashAlgorithm.crc16, 8w0, {{hdr.eth.src}}, 8w255); sm.egress_spec = (bit<9>)x;"
    body = "apply {{ bit<8> x; " + call + " }}"
    inferred = compile_source(program(body.format("<_, _, _, _>")), "dc.p4").new_pipeline()
    explicit = compile_source(program(body.format("")), "dc.p4").new_pipeline()
    for src in (1, 2, 0x123456789A):
        out = inferred.process(0, frame(src=src))
        assert out == explicit.process(0, frame(src=src)) and len(out) == 1


def test_a_package_other_than_v1switch_is_refused_after_parsing_its_dontcare_arguments():
    src = program("apply { }").replace(
        "V1Switch(P(), V(), I(), E(), C(), D()) main;",
        "package Two<H0, H1>(Ingress<H0, metadata_t> a, @optional Ingress<H1, metadata_t> b);\n"
        "Two<headers_t, _>(I()) main;")
    assert "only the V1Switch package (v1model) is supported, not Two" in _first_error(src)


def test_dontcare_where_the_engine_needs_the_type_is_refused_where_it_is_written():
    src = program("register<_>(4) r; apply { r.write(0, 8w1); }")
    assert _first_error(src).startswith("dc.p4:15:14: error: '_' as a type argument")
