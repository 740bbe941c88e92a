"""`rocelab bench engine` (testbed/p4engine/bench.py): its program forwards as the benchmark
assumes, and the benchmark prints its figures (never asserting a speed)."""
from testbed.p4engine import bench
from testbed.p4engine.hashes import csum16


def test_bench_program_spreads_flows_and_rewrites_like_a_leaf():
    from testbed.p4engine import compile_file
    pipeline = compile_file(bench.PROGRAM).new_pipeline()
    bench.program_tables(pipeline)
    packets = bench.build_packets()
    assert {len(p) for p in packets} == {bench.PACKET_BYTES}
    ports = set()
    for packet in packets:
        assert bench.check_output(pipeline, packet) is None
        (port, data), = pipeline.process(1, packet, 1000)
        ports.add(port)
        assert data[22] == packet[22] - 1 and csum16(bytes(data[14:34])) in (0, 0xFFFF)
        assert data[6:11] == b"\x02\x00\x00\x00\x01"          # source MAC of a next hop
        assert len(data) == len(packet) and data[34:] == packet[34:]
    assert len(ports) > 1                                      # the selector spreads the flows
    reg = pipeline.registers["FabricIngress.flow_last_seen"]
    assert sum(reg.read(i) == 1000 for i in range(reg.size)) > 1   # flows' last-seen times were written


def test_bench_prints_packets_per_second(capsys, monkeypatch):
    real = bench.measure
    monkeypatch.setattr(bench, "measure", lambda p, pk, seconds: real(p, pk, min(seconds, 0.2)))
    assert bench.main(quick=True) == 0
    out = capsys.readouterr().out
    assert "packets/s" in out and "forwarded" in out
