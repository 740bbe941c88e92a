"""Stateful v1model externs as BMv2 implements them: registers, counters, meters.

Two kinds of access:

- control plane (P4Runtime, STF): ``read``/``write``/``set_config``..., which check
  indices and raise :class:`~testbed.p4engine.tables.TableError`;
- data plane (the compiled program): ``packet_read``/``packet_write``/``count``/
  ``execute``, which behave like simple_switch on a bad index (the access is
  ignored, the destination keeps its value) and never raise.

Meters are BMv2's two-rate three-colour markers (src/bm_sim/meters.cpp): colours
GREEN=0, YELLOW=1, RED=2; an unconfigured meter marks everything GREEN. Rates are
kept as BMv2 keeps them, in units (bytes or packets) per microsecond; the
control-plane ``set_config`` takes P4Runtime's units per second and converts as
the PI layer of simple_switch_grpc does.
"""
from testbed.p4engine.tables import TableError

GREEN, YELLOW, RED = 0, 1, 2

COUNTER_TYPES = ("packets", "bytes", "packets_and_bytes")
METER_TYPES = ("packets", "bytes")


def _check_index(kind, name, index, size):
    if not isinstance(index, int) or not 0 <= index < size:
        raise TableError("INVALID_ARGUMENT",
                         f"{kind} {name}: index {index} is out of range (size {size})")


# ---------------------------------------------------------------- registers

class Register:
    """``register<bit<W>>(size)``; values are unsigned ints of `width` bits (0 at start)."""

    __slots__ = ("name", "size", "width", "values", "_mask", "signed")

    def __init__(self, name, size, width, signed=False):
        if size < 0 or width <= 0:
            raise ValueError(f"register {name}: bad size {size} or width {width}")
        self.name, self.size, self.width, self.signed = name, size, width, signed
        self._mask = (1 << width) - 1
        self.values = [0] * size

    def read(self, index):
        _check_index("register", self.name, index, self.size)
        return self.values[index]

    def write(self, index, value):
        _check_index("register", self.name, index, self.size)
        self.values[index] = value & self._mask

    def reset(self):
        self.values = [0] * self.size

    # data plane
    def packet_read(self, index, old):
        """register.read(): out-of-range leaves the destination as it was (`old`)."""
        if 0 <= index < self.size:
            return self.values[index]
        return old

    def packet_write(self, index, value):
        if 0 <= index < self.size:
            self.values[index] = value & self._mask


# ---------------------------------------------------------------- counters

class _Cells:
    """Packet and byte counts of `size` cells. BMv2 counts both whatever the declared type
    (Counter::increment_counter) and reads both back: simple_switch_CLI's counter_read, and
    simple_switch_grpc's P4Runtime reads (its PI marks both units valid), so read() gives both."""

    __slots__ = ("name", "size", "type", "packets", "bytes")

    def __init__(self, name, size, counter_type):
        if counter_type not in COUNTER_TYPES:
            raise ValueError(f"counter {name}: unknown type {counter_type!r} "
                             f"(one of {', '.join(COUNTER_TYPES)})")
        self.name, self.size, self.type = name, size, counter_type
        self.packets = [0] * size
        self.bytes = [0] * size

    def reset(self):
        self.packets = [0] * self.size
        self.bytes = [0] * self.size


class Counter(_Cells):
    """``counter(size, CounterType)``: indexed packet/byte counts."""

    __slots__ = ()

    def read(self, index):
        _check_index("counter", self.name, index, self.size)
        return self.packets[index], self.bytes[index]

    def write(self, index, packets, nbytes):
        _check_index("counter", self.name, index, self.size)
        self.packets[index] = packets
        self.bytes[index] = nbytes

    def count(self, index, packet_length):
        """counter.count(index) for a packet of `packet_length` bytes (as received)."""
        if 0 <= index < self.size:
            self.packets[index] += 1
            self.bytes[index] += packet_length


class DirectCounter:
    """``direct_counter(CounterType)``: one cell per entry of its table.

    The cells live on the table entries (Entry.counter); this object carries the
    declared type and is what Pipeline.counters lists under the extern's name.
    """

    __slots__ = ("name", "type", "table")

    def __init__(self, name, counter_type):
        if counter_type not in COUNTER_TYPES:
            raise ValueError(f"direct_counter {name}: unknown type {counter_type!r}")
        self.name, self.type, self.table = name, counter_type, None


# ---------------------------------------------------------------- meters

class MeterCell:
    """One two-rate three-colour marker (BMv2's Meter with two rates)."""

    __slots__ = ("by_bytes", "configured", "_rates")

    def __init__(self, by_bytes):
        self.by_bytes = by_bytes
        self.configured = False
        # Checked in this order, as BMv2 does after reversing {CIR, PIR}:
        # [rate_per_us, burst, tokens, tokens_last, colour]
        self._rates = None

    def set_rates(self, cir_per_us, cburst, pir_per_us, pburst):
        """BMv2's set_rates({cir, cburst}, {pir, pburst}) (rates in units per microsecond)."""
        if cir_per_us > pir_per_us:
            raise TableError("INVALID_ARGUMENT",
                             f"committed rate {cir_per_us} exceeds peak rate {pir_per_us}")
        if min(cir_per_us, pir_per_us, cburst, pburst) < 0:
            raise TableError("INVALID_ARGUMENT", "meter rates and bursts must be >= 0")
        self._rates = [[float(pir_per_us), int(pburst), int(pburst), 0, RED],
                       [float(cir_per_us), int(cburst), int(cburst), 0, YELLOW]]
        self.configured = True

    def reset(self):
        self._rates = None
        self.configured = False

    def rates(self):
        """((cir_per_us, cburst), (pir_per_us, pburst)) or None when unconfigured."""
        if not self.configured:
            return None
        (pir, pburst, *_), (cir, cburst, *_) = self._rates
        return (cir, cburst), (pir, pburst)

    def execute(self, now_us, packet_length):
        """The colour for one packet at time `now_us` (microseconds since the switch started)."""
        if not self.configured:
            return GREEN
        size = packet_length if self.by_bytes else 1
        for rate in self._rates:
            since_init = int(now_us * rate[0])
            if since_init > rate[3]:
                rate[2] = min(rate[2] + since_init - rate[3], rate[1])
                rate[3] = since_init
            if rate[2] < size:
                return rate[4]
            rate[2] -= size
        return GREEN


def _per_second_to_per_us(value):
    return value / 1_000_000.0


def _per_us_to_per_second(value):
    return int(round(value * 1_000_000))


class Meter:
    """``meter(size, MeterType)``: indexed two-rate three-colour markers."""

    __slots__ = ("name", "size", "type", "cells")

    def __init__(self, name, size, meter_type):
        if meter_type not in METER_TYPES:
            raise ValueError(f"meter {name}: unknown type {meter_type!r} (one of packets, bytes)")
        self.name, self.size, self.type = name, size, meter_type
        self.cells = [MeterCell(meter_type == "bytes") for _ in range(size)]

    def set_config(self, index, cir, cburst, pir, pburst):
        """P4Runtime MeterConfig: rates in units per second, bursts in units."""
        _check_index("meter", self.name, index, self.size)
        self.cells[index].set_rates(_per_second_to_per_us(cir), cburst, _per_second_to_per_us(pir), pburst)

    def get_config(self, index):
        """(cir, cburst, pir, pburst) in P4Runtime units, or None when unconfigured."""
        _check_index("meter", self.name, index, self.size)
        rates = self.cells[index].rates()
        if rates is None:
            return None
        (cir, cburst), (pir, pburst) = rates
        return _per_us_to_per_second(cir), cburst, _per_us_to_per_second(pir), pburst

    def reset_config(self, index):
        _check_index("meter", self.name, index, self.size)
        self.cells[index].reset()

    def set_rates_bmv2(self, index, rates):
        """simple_switch_CLI's meter_set_rates: [(cir_per_us, cburst), (pir_per_us, pburst)]."""
        _check_index("meter", self.name, index, self.size)
        (cir, cburst), (pir, pburst) = rates
        self.cells[index].set_rates(cir, cburst, pir, pburst)

    def execute(self, index, now_us, packet_length):
        """meter.execute_meter(index, out colour); None for a bad index (destination unchanged)."""
        if 0 <= index < self.size:
            return self.cells[index].execute(now_us, packet_length)
        return None


class DirectMeter:
    """``direct_meter<T>(MeterType)``: one marker per entry of its table.

    BMv2 runs the entry's meter when the table hits, before the action, and the
    action's ``read(out)`` sees that colour: Table.lookup stores it in
    :attr:`color` (GREEN on a miss, where BMv2 leaves the destination alone).
    """

    __slots__ = ("name", "type", "table", "color", "hit")

    def __init__(self, name, meter_type):
        if meter_type not in METER_TYPES:
            raise ValueError(f"direct_meter {name}: unknown type {meter_type!r}")
        self.name, self.type, self.table = name, meter_type, None
        self.color = GREEN
        self.hit = False

    def new_cell(self):
        return MeterCell(self.type == "bytes")

    def read(self, old):
        """direct_meter.read(out): the colour of the last hit, or `old` after a miss."""
        return self.color if self.hit else old
