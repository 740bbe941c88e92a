"""Registers, counters and meters of the embedded engine (testbed/p4engine/externs.py)."""
import pytest

from testbed.p4engine.externs import GREEN, RED, YELLOW, Counter, Meter, Register
from testbed.p4engine.tables import TableError


def test_register_masks_to_width_and_checks_indices():
    r = Register("MyIngress.r", 4, 8)
    r.write(1, 0x1FF)
    assert r.read(1) == 0xFF and r.read(0) == 0
    with pytest.raises(TableError) as info:
        r.read(4)
    assert info.value.code == "INVALID_ARGUMENT" and "MyIngress.r" in str(info.value)
    # data plane: out of range is ignored, the destination keeps its value
    r.packet_write(9, 5)
    assert r.packet_read(9, 42) == 42
    r.packet_write(2, 0x123)
    assert r.packet_read(2, 0) == 0x23


@pytest.mark.parametrize("kind", ["packets", "bytes", "packets_and_bytes"])
def test_counters_count_and_read_both_units_whatever_their_type(kind):
    # BMv2's Counter::increment_counter counts packets and bytes for every counter and its
    # counter_read (CLI, and P4Runtime through simple_switch_grpc's PI) returns both
    c = Counter("c", 3, kind)
    c.count(1, 64)
    c.count(1, 1000)
    c.count(3, 1000)          # out of range: ignored like simple_switch
    assert c.read(1) == (2, 1064)
    assert c.read(0) == (0, 0)
    c.write(1, 7, 8)
    assert c.read(1) == (7, 8)


def test_unconfigured_meter_is_green():
    m = Meter("m", 2, "bytes")
    assert all(m.execute(0, t, 1500) == GREEN for t in range(0, 1000, 100))
    assert m.get_config(0) is None
    assert m.execute(5, 0, 100) is None      # bad index: destination unchanged


def test_bytes_meter_two_rates_three_colours():
    m = Meter("m", 1, "bytes")
    # CIR 1 MB/s = 1 byte/us with a 1000-byte bucket; PIR 2 bytes/us with 2000.
    m.set_config(0, 1_000_000, 1000, 2_000_000, 2000)
    assert m.get_config(0) == (1_000_000, 1000, 2_000_000, 2000)
    t = 1_000_000
    colours = [m.execute(0, t, 600) for _ in range(4)]
    # buckets (P, C): (2000,1000) -> G (1400,400) -> Y (800,400) -> Y (200,400) -> R
    assert colours == [GREEN, YELLOW, YELLOW, RED]
    # 600 us later the committed bucket has refilled to its 1000 cap and the peak one to 1400
    assert m.execute(0, t + 600, 600) == GREEN


def test_packets_meter_refills_over_time():
    m = Meter("m", 1, "packets")
    m.set_rates_bmv2(0, [(0.001, 1), (0.002, 2)])   # per microsecond: 1000 and 2000 packets/s
    assert [m.execute(0, 0, 1) for _ in range(3)] == [GREEN, YELLOW, RED]
    assert m.execute(0, 1000, 1) == GREEN            # 1 ms later both buckets have refilled


def test_meter_rejects_committed_above_peak():
    m = Meter("m", 1, "packets")
    with pytest.raises(TableError):
        m.set_config(0, 10, 1, 5, 1)
    with pytest.raises(TableError):
        m.set_config(1, 1, 1, 2, 1)
