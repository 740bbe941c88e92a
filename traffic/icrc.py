"""The RoCEv2 invariant CRC (ICRC) over IPv4, straight from the masking rules.

IBA annex A17 (RoCEv2): the ICRC is CRC-32 (the Ethernet polynomial, as zlib
computes it) over 8 bytes of 0xFF standing in for the LRH, then the IP header
with the fields routers may rewrite masked to ones (IPv4: TOS i.e. DSCP+ECN,
TTL, header checksum), the UDP header with its checksum masked, the BTH with
its FECN/BECN/reserved byte masked, and everything up to the trailer. It goes
on the wire least-significant byte first. Because switches only rewrite masked
fields, the ICRC stays valid across the fabric.
"""
import struct
import zlib

ETH_LEN = 14
LRH_STANDIN = b"\xff" * 8
_CRC_OF_LRH = zlib.crc32(LRH_STANDIN)


def masked_bytes(frame, l3=ETH_LEN):
    """The bytes the ICRC covers (without the LRH stand-in) of an Ethernet/IPv4 RoCEv2 frame."""
    ihl = (frame[l3] & 0x0F) * 4
    udp = l3 + ihl
    bth = udp + 8
    out = bytearray(frame[l3:len(frame) - 4])
    out[1] = 0xFF                     # TOS: DSCP + ECN
    out[8] = 0xFF                     # TTL
    out[10:12] = b"\xff\xff"          # header checksum
    out[ihl + 6:ihl + 8] = b"\xff\xff"  # UDP checksum
    out[bth - l3 + 4] = 0xFF          # BTH: FECN, BECN, 6 reserved bits
    return out


def compute(frame, l3=ETH_LEN):
    """ICRC value (an int) for `frame`, which must already end with a 4-byte trailer slot."""
    return zlib.crc32(masked_bytes(frame, l3), _CRC_OF_LRH) & 0xFFFFFFFF


def pack(value):
    return struct.pack("<I", value)


def trailer_ok(frame, l3=ETH_LEN):
    """True when the frame's last 4 bytes are the right ICRC."""
    return len(frame) >= l3 + 20 + 8 + 12 + 4 and frame[-4:] == pack(compute(frame, l3))


def crc_of_lrh():
    """zlib.crc32 state after the LRH stand-in, to continue over masked bytes."""
    return _CRC_OF_LRH
