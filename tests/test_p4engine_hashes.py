"""Hashes of the embedded engine against BMv2's published values and independent references."""
import random
import zlib

import pytest

from testbed.p4engine import hashes

SAMPLE = bytes([0x0B, 0xB8, 0x1F, 0x90])
IPV4_HEADER = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")


def bitwise_crc(data, width, poly, init, xor_out, refin, refout):
    """A slow, obviously-correct CRC (bit by bit), independent of the engine's tables."""
    def reflect(v, n):
        return int(f"{v:0{n}b}"[::-1], 2)
    reg = init
    top = 1 << (width - 1)
    mask = (1 << width) - 1
    for byte in data:
        if refin:
            byte = reflect(byte, 8)
        for bit in range(7, -1, -1):
            incoming = (byte >> bit) & 1
            msb = 1 if reg & top else 0
            reg = (reg << 1) & mask
            if msb ^ incoming:
                reg ^= poly
    if refout:
        reg = reflect(reg, width)
    return reg ^ xor_out


def reference_csum16(data):
    if len(data) % 2:
        data += b"\x00"
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def bits_to_bytes(fields):
    """Pack via a '0'/'1' string: MSB first, zero bits appended to a byte boundary."""
    bits = "".join(f"{v:0{w}b}" for v, w in fields)
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


# Values asserted by BMv2's own unit tests (tests/test_calculations.cpp).
@pytest.mark.parametrize("algo, data, expected", [
    ("crc16", SAMPLE, 0x5D8A),
    ("crc16_custom", SAMPLE, 0x5D8A),
    ("crc32", SAMPLE, 0x005D6A6F),
    ("crc32_custom", SAMPLE, 0x005D6A6F),
    ("crcCCITT", SAMPLE, 0x5D75),
    ("xor16", SAMPLE, 0x1428),
    ("xor16", SAMPLE + b"\x5a", 0x4E28),
    ("xor32", bytes([0x0B, 0x0B, 0xB8, 0xB8, 0x1F, 0x1F, 0x90, 0x90]), 0x14142828),
    ("xor32", bytes([0x0B, 0x0B, 0xB8, 0xB8, 0x1F, 0x1F, 0x90, 0x90, 0x5A, 0x5A, 0xBD]), 0x4E4E9528),
    ("csum16", IPV4_HEADER, 0xB861),
    ("identity", bytes([1, 2, 3, 4, 5]), 0x0102030405),
])
def test_bmv2_published_values(algo, data, expected):
    assert hashes.hash_bytes(algo, data) == expected


def test_bmv2_non_aligned_field_lists():
    # BMv2's CalculationTest.WithConstantNonAligned and .Extra (identity over packed bits)
    assert hashes.hash_fields("identity", [(0, 4), (0xFFFF, 16), (0x9FD, 12)]) == 0x0FFFF9FD
    assert hashes.hash_fields("identity", [(0x3D, 6), (0x3E, 8), (1, 9), (0, 9)]) == 0xF4F80200


def test_check_strings_match_catalogue_crcs():
    assert hashes.hash_bytes("crc16", b"123456789") == 0xBB3D       # CRC-16/ARC
    assert hashes.hash_bytes("crc32", b"123456789") == 0xCBF43926    # CRC-32
    assert hashes.hash_bytes("crc8_custom", b"123456789") == 0xF4    # CRC-8 (poly 7)


@pytest.mark.parametrize("seed", range(5))
def test_random_buffers_against_independent_references(seed):
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    assert hashes.crc16(data) == bitwise_crc(data, 16, 0x8005, 0, 0, True, True)
    assert hashes.crc32(data) == zlib.crc32(data)
    assert hashes.crc32(data) == bitwise_crc(data, 32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True, True)
    assert hashes.csum16(data) == reference_csum16(data)
    words = data + b"\x00" * (len(data) % 2)
    expected_xor = 0
    for i in range(0, len(words), 2):
        expected_xor ^= int.from_bytes(words[i:i + 2], "big")
    assert hashes.xor16(data) == expected_xor
    assert hashes.identity(data) == int.from_bytes(data[:8], "big")


@pytest.mark.parametrize("seed", range(5))
def test_packing_of_unaligned_field_lists(seed):
    rng = random.Random(100 + seed)
    fields = []
    for _ in range(rng.randrange(1, 8)):
        width = rng.randrange(1, 49)
        fields.append((rng.getrandbits(width), width))
    assert hashes.pack_fields(fields) == bits_to_bytes(fields)
    packed = bits_to_bytes(fields)
    assert hashes.hash_fields("crc16", fields) == bitwise_crc(packed, 16, 0x8005, 0, 0, True, True)


def test_values_wider_than_their_field_are_truncated():
    assert hashes.pack_fields([(0x1FF, 8)]) == b"\xff"


def test_custom_crc_parameters_change_and_reset():
    try:
        hashes.set_custom_crc("crc16_custom", 0x1021, 0x0000, 0x0000, False, False)  # XMODEM
        assert hashes.hash_bytes("crc16_custom", SAMPLE) == 0xD9B5   # BMv2's own expectation
        assert hashes.hash_bytes("crc16", SAMPLE) == 0x5D8A          # the fixed crc16 is unaffected
        with pytest.raises(hashes.HashError):
            hashes.set_custom_crc("crc16", 1, 0, 0, False, False)
    finally:
        hashes.reset_custom_crcs()
    assert hashes.hash_bytes("crc16_custom", SAMPLE) == 0x5D8A


def test_v1model_hash_base_and_max():
    fields = [(0x0A000001, 32), (0x0A000002, 32), (6, 8)]
    h = hashes.hash_fields("crc32", fields)
    assert hashes.v1model_hash("crc32", 10, fields, 7, 16) == 10 + h % 7
    # max 0 is treated as 1 by simple_switch: only the base remains
    assert hashes.v1model_hash("crc32", 5, fields, 0, 16) == 5
    # the result is truncated to the destination width
    assert hashes.v1model_hash("crc32", 0, fields, 1 << 32, 8) == h & 0xFF


def test_unknown_and_unsupported_algorithms_are_named():
    with pytest.raises(hashes.HashError, match="random"):
        hashes.algorithm("random")
    with pytest.raises(hashes.HashError, match="crc64"):
        hashes.algorithm("crc64")


def test_checksum_of_a_header_with_its_checksum_is_zero():
    header = bytearray(IPV4_HEADER)
    header[10:12] = hashes.csum16(bytes(header)).to_bytes(2, "big")
    assert hashes.csum16(bytes(header)) == 0
    assert hashes.csum16(b"\x00\x00") == 0xFFFF
