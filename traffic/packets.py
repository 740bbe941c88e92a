"""RoCEv2 packets, the Scapy way: the layers Scapy lacks and builders for every frame we send.

Scapy's ``scapy.contrib.roce`` already has BTH (with the ICRC trailer), AETH and the
CNP; ``scapy.contrib.mac_control`` has the 802.1Qbb PFC frame. This module adds the
extended transport headers RC WRITEs need (RETH, ImmDt), the payload of our
receiver-driven admission message (CTS), binds them to the BTH opcodes that carry
them, and offers one builder per frame kind. The builders are used once per
template (see :mod:`traffic.fastpath`); the hot path patches bytes, it never calls
them per packet.
"""
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import AETH, BTH, CNP_OPCODE, CNPPadding
from scapy.fields import BitField, IntField, LongField, ShortField, XIntField, XLongField, XShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

ROCE_UDP_PORT = 4791

# RC opcodes (IBA table 38), transport bits 0b000.
RC_SEND_ONLY = 0x04
RC_WRITE_FIRST = 0x06
RC_WRITE_MIDDLE = 0x07
RC_WRITE_LAST = 0x08
RC_WRITE_LAST_IMM = 0x09
RC_WRITE_ONLY = 0x0A
RC_WRITE_ONLY_IMM = 0x0B
RC_ACK = 0x11
# UC SEND_ONLY: unacknowledged, used for the CTS admission message.
UC_SEND_ONLY = 0x24
CNP = CNP_OPCODE

WRITE_OPCODES = (RC_WRITE_FIRST, RC_WRITE_MIDDLE, RC_WRITE_LAST, RC_WRITE_LAST_IMM,
                 RC_WRITE_ONLY, RC_WRITE_ONLY_IMM)
OPCODES_WITH_RETH = (RC_WRITE_FIRST, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM)
OPCODES_WITH_IMM = (RC_WRITE_LAST_IMM, RC_WRITE_ONLY_IMM, 0x03, 0x05, 0x23, 0x25)
# Opcodes that end a message (the responder's MSN advances).
OPCODES_LAST = (RC_WRITE_LAST, RC_WRITE_LAST_IMM, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM, RC_SEND_ONLY)

# AETH syndromes (IBA 9.7.5.1.1): ACK with "invalid" credit count, NAK PSN sequence error.
AETH_ACK = 0x1F
AETH_NAK_SEQ = 0x60

# ECN codepoints (RFC 3168).
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3

CTS_MAGIC = 0xC75D   # marks our admission payload inside a UC SEND_ONLY


class RETH(Packet):
    """RDMA Extended Transport Header: where a WRITE lands and how long it is."""
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload):
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode in OPCODES_WITH_IMM:
            return ImmDt
        return Raw


class ImmDt(Packet):
    """Immediate data: 4 bytes delivered to the responder's completion queue."""
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class CTS(Packet):
    """Clear-to-send: the receiver grants the sender credit on one channel.

    ``granted`` is cumulative (bytes the sender may have written in total on this
    connection), so a lost CTS is repaired by any later one.
    """
    name = "CTS"
    fields_desc = [XShortField("magic", CTS_MAGIC), ShortField("src_rank", 0),
                   ShortField("channel", 0), ShortField("seq", 0), LongField("granted", 0)]


for _op in OPCODES_WITH_RETH:
    bind_layers(BTH, RETH, opcode=_op)
for _op in (RC_WRITE_LAST_IMM, 0x03, 0x05, 0x23, 0x25):
    bind_layers(BTH, ImmDt, opcode=_op)
bind_layers(BTH, CTS, opcode=UC_SEND_ONLY)


def ip_layer(src_ip, dst_ip, dscp, ecn, ip_id=0, ttl=64):
    return IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, id=ip_id, ttl=ttl, flags="DF")


def roce(src_mac, dst_mac, src_ip, dst_ip, sport, bth, dscp=26, ecn=ECT0, ip_id=0, ttl=64):
    """Ether/IPv4/UDP(4791)/BTH... with UDP checksum 0 (as RoCEv2 NICs send) and the ICRC."""
    return (Ether(src=src_mac, dst=dst_mac)
            / ip_layer(src_ip, dst_ip, dscp, ecn, ip_id, ttl)
            / UDP(sport=sport, dport=ROCE_UDP_PORT, chksum=0)
            / bth)


def write_bth(opcode, dqpn, psn, ackreq=False, va=0, rkey=0, dma_len=0, imm=None, payload=b""):
    """BTH (+RETH, +ImmDt) + payload for one RC WRITE packet.

    The payload is padded to a multiple of 4 bytes and BTH.padcount says by how
    much, as the IBA requires.
    """
    pad = -len(payload) % 4
    payload = bytes(payload) + b"\x00" * pad
    pkt = BTH(opcode=opcode, dqpn=dqpn, psn=psn, ackreq=int(ackreq), padcount=pad)
    if opcode in OPCODES_WITH_RETH:
        pkt = pkt / RETH(va=va, rkey=rkey, dma_len=dma_len)
    if opcode in OPCODES_WITH_IMM:
        pkt = pkt / ImmDt(imm=imm or 0)
    return pkt / Raw(payload) if payload else pkt


def ack_bth(dqpn, psn, msn, syndrome=AETH_ACK):
    return BTH(opcode=RC_ACK, dqpn=dqpn, psn=psn) / AETH(syndrome=syndrome, msn=msn)


def cnp_bth(dqpn):
    """The RoCEv2 CNP (opcode 0x81): BECN set, 16 reserved bytes."""
    return BTH(opcode=CNP, dqpn=dqpn, becn=1) / CNPPadding()


def cts_bth(dqpn, src_rank, channel, granted, seq=0):
    return BTH(opcode=UC_SEND_ONLY, dqpn=dqpn, psn=seq & 0xFFFFFF) / CTS(
        src_rank=src_rank, channel=channel, granted=granted, seq=seq & 0xFFFF)


def pfc_frame(src_mac, quanta_by_priority):
    """802.1Qbb frame pausing {priority: quanta} (0 quanta resumes), padded to 60 bytes."""
    fields = {}
    for prio, quanta in quanta_by_priority.items():
        if not 0 <= prio <= 7:
            raise ValueError(f"PFC priority {prio} is not in 0..7")
        if not 0 <= quanta <= 0xFFFF:
            raise ValueError(f"PFC quanta {quanta} is not in 0..65535")
        fields[f"c{prio}_enabled"] = 1
        fields[f"c{prio}_pause_time"] = quanta
    return Ether(src=src_mac, dst="01:80:c2:00:00:01", type=0x8808) / MACControlClassBasedFlowControl(**fields)
