"""Hash algorithms of v1model, bit-exact with BMv2 (src/bm_sim/calculations.cpp).

A field list is serialised the way BMv2's BufBuilder does it: fields are
concatenated most-significant bit first with no alignment between them, and the
last byte is padded with zero bits at the end. (Fields of invalid headers are
skipped entirely by BMv2; the caller leaves them out of the list.) The bytes
are then hashed:

- ``crc16``: CRC-16/ARC (poly 0x8005, init 0, reflected in and out, xorout 0).
- ``crc32``: CRC-32 as in Ethernet/zlib (poly 0x04C11DB7 reflected, init and
  xorout 0xFFFFFFFF).
- ``crc16_custom`` / ``crc32_custom``: BMv2's configurable CRCs; their default
  parameters equal crc16 / crc32 above. :func:`set_custom_crc` changes them.
- ``identity``: the first (at most 8) bytes read as a big-endian integer.
- ``csum16``: the Internet checksum (one's complement of the one's complement
  sum of 16-bit big-endian words, odd length padded with a zero byte).
- ``xor16``: XOR of the 16-bit big-endian words, odd length zero-padded.

v1model's ``hash(out, algo, base, data, max)`` is ``base + (h % max)`` (a max
of 0 counts as 1), truncated to the width of ``out``: :func:`v1model_hash`.
"""
import binascii

ALGORITHMS = ("crc16", "crc32", "crc16_custom", "crc32_custom", "identity", "csum16", "xor16",
              "crc8_custom", "crcCCITT", "xor32", "cksum16")
# The widest value each algorithm returns (identity: its first 8 bytes).
OUTPUT_BITS = {"crc16": 16, "crc32": 32, "crc16_custom": 16, "crc32_custom": 32, "identity": 64,
               "csum16": 16, "xor16": 16, "crc8_custom": 8, "crcCCITT": 16, "xor32": 32, "cksum16": 16}
# Declared in v1model's HashAlgorithm but not something BMv2 can compute.
UNSUPPORTED = {"random": "BMv2 has no 'random' hash algorithm (simple_switch refuses such a program)"}


class HashError(ValueError):
    """An unknown algorithm or a malformed field list."""


# ---------------------------------------------------------------- packing

def pack_fields(fields):
    """Serialise [(value, width), ...] into bytes exactly as BMv2's BufBuilder does."""
    acc = 0
    nbits = 0
    for value, width in fields:
        if width < 0:
            raise HashError(f"field width must be >= 0, got {width}")
        acc = (acc << width) | (value & ((1 << width) - 1))
        nbits += width
    pad = -nbits % 8
    return (acc << pad).to_bytes((nbits + pad) // 8, "big")


# ---------------------------------------------------------------- CRCs

def _reflect(value, nbits):
    out = 0
    for _ in range(nbits):
        out = (out << 1) | (value & 1)
        value >>= 1
    return out


def _reflected_crc(table, init, xor_out):
    def compute(data):
        rem = init
        for byte in data:
            rem = table[(rem ^ byte) & 0xFF] ^ (rem >> 8)
        return rem ^ xor_out
    return compute


def _direct_crc(table, init, xor_out, width, refin, refout):
    mask, shift = (1 << width) - 1, width - 8
    in_byte = [_reflect(b, 8) for b in range(256)] if refin else list(range(256))

    def compute(data):
        rem = init
        for byte in data:
            rem = table[(in_byte[byte] ^ (rem >> shift)) & 0xFF] ^ ((rem << 8) & mask)
        if refout:
            rem = _reflect(rem, width)
        return rem ^ xor_out
    return compute


class Crc:
    """A table-driven CRC with the Rocksoft parameters BMv2's crc_custom uses.

    ``compute`` (also reachable by calling the object) is a closure over the
    precomputed table and initial value: this runs twice per packet in a fabric
    pipeline (selector and hash()), so nothing is looked up or reflected per call.
    """

    __slots__ = ("width", "poly", "init", "xor_out", "refin", "refout", "compute")

    def __init__(self, width, poly, init, xor_out, refin, refout):
        self.width, self.poly, self.init, self.xor_out = width, poly, init, xor_out
        self.refin, self.refout = refin, refout
        mask = (1 << width) - 1
        top = 1 << (width - 1)
        if refin and refout:
            # Both directions reflected: run the whole computation reflected
            # (the classic LSB-first loop), which avoids a per-byte reflect.
            rpoly = _reflect(poly, width)
            table = []
            for byte in range(256):
                rem = byte
                for _ in range(8):
                    rem = (rem >> 1) ^ rpoly if rem & 1 else rem >> 1
                table.append(rem)
            self.compute = _reflected_crc(table, _reflect(init, width), xor_out)
            return
        table = []
        for dividend in range(256):
            rem = dividend << (width - 8)
            for _ in range(8):
                rem = ((rem << 1) ^ poly) if rem & top else (rem << 1)
            table.append(rem & mask)
        self.compute = _direct_crc(table, init, xor_out, width, refin, refout)

    def __call__(self, data):
        return self.compute(data)

    def config(self):
        return dict(width=self.width, poly=self.poly, init=self.init, xor_out=self.xor_out,
                    refin=self.refin, refout=self.refout)


# BMv2's fixed algorithms and its custom CRCs' defaults (crc_custom_init<T>::config).
_CRC16 = Crc(16, 0x8005, 0x0000, 0x0000, True, True)
_CRC_CCITT = Crc(16, 0x1021, 0xFFFF, 0x0000, False, False)
_CUSTOM_DEFAULTS = {
    "crc8_custom": (8, 0x07, 0x00, 0x00, False, False),
    "crc16_custom": (16, 0x8005, 0x0000, 0x0000, True, True),
    "crc32_custom": (32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True),
}
_custom = {name: Crc(*params) for name, params in _CUSTOM_DEFAULTS.items()}


def set_custom_crc(name, poly, init, xor_out, refin, refout):
    """Change a custom CRC's parameters (BMv2's set_crc16_parameters / set_crc32_parameters).

    The change is process-wide, as in one BMv2 switch; :func:`reset_custom_crcs` undoes it.
    """
    if name not in _custom:
        raise HashError(f"{name!r} is not a custom CRC (one of {', '.join(sorted(_custom))})")
    width = _custom[name].width
    _custom[name] = Crc(width, poly, init, xor_out, bool(refin), bool(refout))


def reset_custom_crcs():
    for name, params in _CUSTOM_DEFAULTS.items():
        _custom[name] = Crc(*params)


crc16 = _CRC16.compute


def crc32(data):
    return binascii.crc32(data) & 0xFFFFFFFF


crc_ccitt = _CRC_CCITT.compute


# ---------------------------------------------------------------- sums and xors

def csum16(data):
    """The Internet checksum of `data` (BMv2's csum16/cksum16)."""
    if len(data) & 1:
        data = bytes(data) + b"\x00"
    value = int.from_bytes(data, "big")
    total = value % 0xFFFF               # see ones_complement_sum
    return 0 if total == 0 and value else ~total & 0xFFFF


def ones_complement_sum(data):
    """The 16-bit one's complement sum of `data` as big-endian words (odd length zero-padded)."""
    if len(data) & 1:
        data = bytes(data) + b"\x00"
    # 2**16 == 1 (mod 0xFFFF), so the end-around-carry sum of the words is the
    # whole buffer as one integer modulo 0xFFFF -- except that a non-zero buffer
    # whose sum is a multiple of 0xFFFF sums to 0xFFFF, never to 0.
    value = int.from_bytes(data, "big")
    total = value % 0xFFFF
    if total == 0 and value:
        return 0xFFFF
    return total


def _xor_words(data, nbytes):
    rem = len(data) % nbytes
    if rem:
        data = bytes(data) + bytes(nbytes - rem)
    out = 0
    for i in range(0, len(data), nbytes):
        out ^= int.from_bytes(data[i:i + nbytes], "big")
    return out


def xor16(data):
    return _xor_words(data, 2)


def xor32(data):
    return _xor_words(data, 4)


def identity(data):
    return int.from_bytes(data[:8], "big")


# ---------------------------------------------------------------- dispatch

_FIXED = {
    "crc16": crc16,
    "crc32": crc32,
    "crcCCITT": crc_ccitt,
    "identity": identity,
    "csum16": csum16,
    "cksum16": csum16,
    "xor16": xor16,
    "xor32": xor32,
}


def algorithm(name):
    """The callable bytes -> int for a BMv2 algorithm name (custom CRCs follow set_custom_crc)."""
    fn = _FIXED.get(name)
    if fn is not None:
        return fn
    if name in _custom:
        return lambda data, _name=name: _custom[_name](data)
    if name in UNSUPPORTED:
        raise HashError(UNSUPPORTED[name])
    raise HashError(f"unknown hash algorithm {name!r} (known: {', '.join(ALGORITHMS)})")


def hash_bytes(algorithm_name, data):
    return algorithm(algorithm_name)(data)


def hash_fields(algorithm_name, fields):
    """BMv2's calculation output for `fields` = [(value, width), ...]."""
    return algorithm(algorithm_name)(pack_fields(fields))


def v1model_hash(algorithm_name, base, fields, max_value, out_width):
    """v1model ``hash(out, algo, base, data, max)`` as simple_switch computes it."""
    h = hash_fields(algorithm_name, fields)
    return (base + h % (max_value or 1)) & ((1 << out_width) - 1)
