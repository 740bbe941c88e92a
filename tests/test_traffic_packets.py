"""RoCEv2 packets byte for byte: BTH/RETH/ImmDt/AETH/CNP/CTS/PFC fields, ICRC, templates, tshark."""
import shutil
import struct
import subprocess
import zlib

import pytest
from scapy.compat import raw

from traffic import icrc
from traffic import packets as P
from traffic.fastpath import FrameTemplate, ip_checksum

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SRC_IP, DST_IP = "10.1.2.3", "10.4.5.6"


def frame_of(bth, **kw):
    return raw(P.roce(SRC_MAC, DST_MAC, SRC_IP, DST_IP, 0xC0DE, bth, **kw))


def hand_icrc(frame):
    """ICRC recomputed here from the RoCEv2 rules, independently of traffic.icrc and Scapy."""
    ip = bytearray(frame[14:34])
    ip[1] = 0xFF                 # DSCP/ECN
    ip[8] = 0xFF                 # TTL
    ip[10:12] = b"\xff\xff"      # header checksum
    udp = bytearray(frame[34:42])
    udp[6:8] = b"\xff\xff"       # UDP checksum
    bth = bytearray(frame[42:54])
    bth[4] = 0xFF                # FECN, BECN, reserved
    rest = frame[54:-4]
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + rest) & 0xFFFFFFFF
    return struct.pack("<I", crc)


def test_write_first_headers_are_byte_exact():
    f = frame_of(P.write_bth(P.RC_WRITE_FIRST, 0xABCDEF, 0x123456, ackreq=True, va=0x1122334455667788,
                             rkey=0xCAFEBABE, dma_len=4096, payload=b"\x01" * 1024), dscp=26, ecn=P.ECT0, ip_id=0x4242)
    assert f[12:14] == b"\x08\x00"
    assert f[15] == (26 << 2) | 2                                   # DSCP 26, ECT(0)
    assert f[18:20] == b"\x42\x42"
    assert f[23] == 17 and f[24:26] == struct.pack("!H", ip_checksum(f[14:24] + b"\0\0" + f[26:34]))
    assert struct.unpack("!HHHH", f[34:42]) == (0xC0DE, 4791, 8 + 12 + 16 + 1024 + 4, 0)
    # BTH: opcode, SE/M/pad/tver, P_Key, FECN/BECN/resv, DestQP, A/resv, PSN
    assert f[42:54] == bytes([0x06, 0x00, 0xFF, 0xFF, 0x00, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56])
    assert f[54:70] == bytes.fromhex("1122334455667788" "cafebabe" "00001000")     # RETH
    assert f[70:1094] == b"\x01" * 1024 and len(f) == 1098
    assert f[-4:] == hand_icrc(f)


def test_write_only_with_immediate_and_padding():
    f = frame_of(P.write_bth(P.RC_WRITE_ONLY_IMM, 7, 9, ackreq=True, va=0x10, rkey=1, dma_len=5, imm=0xDEADBEEF,
                             payload=b"hello"))
    assert f[42] == 0x0B and f[43] == 0x30                            # padcount 3 (5 -> 8 bytes)
    assert f[54:70] == struct.pack("!QII", 0x10, 1, 5)
    assert f[70:74] == b"\xde\xad\xbe\xef"                            # ImmDt after RETH
    assert f[74:82] == b"hello\0\0\0"
    assert f[-4:] == hand_icrc(f)
    last = frame_of(P.write_bth(P.RC_WRITE_LAST_IMM, 7, 10, imm=0x01020304, payload=b"\xaa" * 8))
    assert last[42] == 0x09 and last[54:58] == b"\x01\x02\x03\x04"    # ImmDt right after BTH


def test_ack_nak_cnp_cts_are_byte_exact():
    ack = frame_of(P.ack_bth(0x000111, 0x00ABCD, msn=0x000042), dscp=26, ecn=0)
    assert ack[42] == 0x11 and ack[47:50] == b"\x00\x01\x11" and ack[51:54] == b"\x00\xab\xcd"
    assert ack[54:58] == bytes([P.AETH_ACK, 0x00, 0x00, 0x42]) and len(ack) == 62
    nak = frame_of(P.ack_bth(0x111, 5, msn=1, syndrome=P.AETH_NAK_SEQ))
    assert nak[54] == 0x60
    cnp = frame_of(P.cnp_bth(0x000222), dscp=48, ecn=0)
    assert cnp[15] == 48 << 2
    assert cnp[42] == 0x81 and cnp[46] == 0x40                        # CNP opcode, BECN set
    assert cnp[47:50] == b"\x00\x02\x22" and cnp[54:70] == b"\0" * 16 and len(cnp) == 74
    cts = frame_of(P.cts_bth(0xC75, src_rank=3, channel=2, granted=1 << 33, seq=7), dscp=46, ecn=0)
    assert cts[42] == 0x24                                            # UC SEND Only
    assert cts[54:70] == struct.pack("!HHHHQ", P.CTS_MAGIC, 3, 2, 7, 1 << 33)
    for f in (ack, nak, cnp, cts):
        assert f[-4:] == hand_icrc(f)


def test_pfc_frame_is_byte_exact_and_matches_the_switch_builder():
    from testbed.switch import pfc as switch_pfc
    f = raw(P.pfc_frame(SRC_MAC, {3: 0x1234, 6: 0xFFFF}))
    assert f[:6] == bytes.fromhex("0180c2000001") and f[6:12] == bytes.fromhex("020000000001")
    assert f[12:16] == b"\x88\x08\x01\x01"
    assert f[16:18] == struct.pack("!H", (1 << 3) | (1 << 6))
    assert struct.unpack("!8H", f[18:34]) == (0, 0, 0, 0x1234, 0, 0, 0xFFFF, 0)
    assert len(f) == 60 and f[34:] == b"\0" * 26
    assert f == switch_pfc.build_pfc(SRC_MAC, {3: 0x1234, 6: 0xFFFF})
    assert switch_pfc.decode_pfc(f) == [(3, 0x1234), (6, 0xFFFF)]
    with pytest.raises(ValueError, match="priority 8"):
        P.pfc_frame(SRC_MAC, {8: 1})


def test_icrc_agrees_with_scapy_and_survives_exactly_the_switch_rewrites():
    f = bytearray(frame_of(P.write_bth(P.RC_WRITE_MIDDLE, 0x42, 77, payload=bytes(range(256)) * 4), ecn=P.ECT0))
    assert bytes(f[-4:]) == hand_icrc(f) == icrc.pack(icrc.compute(f))
    # What switches rewrite is masked: TTL, DSCP/ECN (CE marking), IP checksum, UDP checksum, FECN/BECN.
    rewritten = bytearray(f)
    rewritten[22] -= 1
    rewritten[15] = (46 << 2) | P.CE
    rewritten[24:26] = struct.pack("!H", ip_checksum(bytes(rewritten[14:24]) + b"\0\0" + bytes(rewritten[26:34])))
    rewritten[40:42] = b"\x12\x34"
    rewritten[46] |= 0xC0
    assert icrc.trailer_ok(rewritten) and hand_icrc(rewritten) == bytes(f[-4:])
    # Anything else is covered: payload, PSN, QPN, IP addresses.
    for offset in (100, 53, 49, 30):
        broken = bytearray(f)
        broken[offset] ^= 0x01
        assert not icrc.trailer_ok(broken), offset


@pytest.mark.parametrize("opcode", [P.RC_WRITE_FIRST, P.RC_WRITE_MIDDLE, P.RC_WRITE_LAST_IMM, P.RC_WRITE_ONLY_IMM])
def test_template_rendering_equals_a_fresh_scapy_build(opcode):
    payload = b"\x5a" * 300
    tmpl = FrameTemplate(frame_of(P.write_bth(opcode, 0x333, 0, rkey=0x77, payload=payload), ecn=P.ECT0),
                         has_reth=opcode in P.OPCODES_WITH_RETH, has_imm=opcode in P.OPCODES_WITH_IMM)
    for psn, ip_id, ackreq, va, imm, dma_len in ((1, 1, 0, 0x1000, 5, 300), (0xFFFFFF, 0xFFFF, 1, 2**48 - 8, 0, 9),
                                                 (0x800000, 0x8000, 1, 0, 0xFFFFFFFF, 1 << 20)):
        expected = frame_of(P.write_bth(opcode, 0x333, psn, ackreq=ackreq, va=va, rkey=0x77, dma_len=dma_len,
                                        imm=imm, payload=payload), ecn=P.ECT0, ip_id=ip_id)
        got = tmpl.render(psn, ip_id, ackreq, va, imm, dma_len)
        assert bytes(got) == expected, (psn, ip_id)


def test_hot_path_does_not_build_or_dissect_with_scapy(monkeypatch):
    from scapy.packet import Packet
    from traffic.samples import Recorder
    from traffic.nic import Nic, NicConfig
    clock = [100.0]
    a = Nic("a", SRC_MAC, SRC_IP, NicConfig(line_rate_bps=1e9), clock=lambda: clock[0], open_sockets=False)
    b = Nic("b", DST_MAC, DST_IP, NicConfig(line_rate_bps=1e9), clock=lambda: clock[0], open_sockets=False)
    a.sock, b.sock = Recorder(), Recorder()
    qa = a.create_qp(0x10, 0x20, DST_IP, DST_MAC)
    b.create_qp(0x20, 0x10, SRC_IP, SRC_MAC)

    def exchange(nbytes):
        a.post_write(qa, nbytes, imm=1)
        while qa.pending or qa.outstanding:
            a._transmit(clock[0], budget=1000)
            for frame in a.sock.frames:
                b._on_roce(frame, clock[0])
            a.sock.frames.clear()
            for frame in b.sock.frames:
                a._on_roce(frame, clock[0])
            b.sock.frames.clear()
            clock[0] += 0.001

    exchange(5 * 1024 + 100)             # builds the templates (Scapy, once)

    def forbidden(*_a, **_k):
        raise AssertionError("Scapy used on the hot path")
    monkeypatch.setattr(Packet, "build", forbidden)
    monkeypatch.setattr(Packet, "dissect", forbidden)
    exchange(5 * 1024 + 100)             # same shapes again: only byte patching
    assert qa.stats["tx_messages"] == 2 and qa.stats["tx_packets"] == 12


def test_sample_capture_frames_all_carry_a_valid_icrc():
    from traffic.samples import sample_frames
    frames, (qa, qb) = sample_frames()
    roce = [f for f in frames if f[12:14] == b"\x08\x00"]
    assert len(roce) >= 15 and all(f[-4:] == hand_icrc(f) for f in roce)
    assert qb.stats["oos"] >= 1 and qa.stats["naks_rx"] == 1 and qa.stats["retransmits"] >= 1
    assert qb.stats["cnp_tx"] == 1 and qa.stats["cnp_rx"] == 1
    assert qa.stats["tx_messages"] == qb.stats["rx_messages"] == 4


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_dissects_the_nic_frames_as_infiniband_without_warnings(tmp_path):
    from traffic.samples import write_sample_pcap
    pcap = tmp_path / "sample.pcap"
    n = write_sample_pcap(str(pcap))
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "_ws.expert"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert len(rows) == n
    ib = [r for r in rows if "infiniband" in r[0]]
    assert len(ib) == n - 1                                    # all but the PFC frame
    opcodes = {int(r[1]) for r in ib}
    assert {P.RC_WRITE_FIRST, P.RC_WRITE_MIDDLE, P.RC_WRITE_LAST, P.RC_WRITE_LAST_IMM, P.RC_WRITE_ONLY,
            P.RC_ACK, P.CNP, P.UC_SEND_ONLY} <= opcodes
    assert all(r[3] == "" for r in rows), [r for r in rows if r[3]]       # no expert info at all
    assert not any("malformed" in r[0] for r in rows)
    pfc = [r for r in rows if "infiniband" not in r[0]]
    assert "macc" in pfc[0][0] or "mac" in pfc[0][0]
