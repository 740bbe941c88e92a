"""Production defaults of virtual time, each with where it comes from.

Virtual time runs the paper's units: 400 Gb/s links (Meta's AI zone, RTSW-CTSW over 400G
optics), RoCE path MTU 4096, cables in meters, thresholds from the paper. The fabric program's
queue thresholds count packets (like `enq_qdepth`), so byte figures are converted at one
full-size frame per packet.
"""
from dataclasses import replace

LINK_RATE_MBPS = 400_000           # 400G (the paper's 400G deployment)
NIC_MTU = 4096                     # RoCE path MTU used by NCCL on 400G NICs
SWITCH_MTU = 9000                  # jumbo frames on every switch port
# A full-size data frame: the payload and 66 B of headers, between a WRITE's middle packet (Eth 14,
# IPv4 20, UDP 8, BTH 12, ICRC 4: 58 B) and its first, which adds RETH's 16 (74 B)
FRAME_BYTES = NIC_MTU + 66
# Captures keep each frame's first 128 bytes (Ethernet, a VLAN tag, IPv4, UDP, BTH, RETH/AETH
# and the CTS header all fit; PFC frames are 60): at 400G the 4 KB payloads of a quick lab's
# captures came to 2-3 GB per seed, for bytes nobody reads.
CAPTURE_SNAPLEN = 128
QUEUE_PACKETS = 4096               # per egress queue: ~17 MB of 4 KB frames (a deep-buffer CTSW port)
ECN_BYTES = 5_000_000              # "relaxed (5 MB) ECN threshold in CTSW" (the paper, section 5.2.1)
FLOWLET_GAP_US = 256               # the paper's flowlet gaps are a few hundred microseconds
HOST_CABLE_M = 3                   # RTSW to GPU NIC: copper DAC inside the rack
FABRIC_CABLE_M = 100               # RTSW to CTSW: single-mode fiber across the hall
NS_PER_METER = 5                   # light in fiber/copper: ~5 ns per meter


# An XOFF asks for the longest pause (65535 quanta): 84 us at 400G, 42 us at 800G. A PG still
# above XOFF must send it again before it runs out, or the peer resumes into a full headroom
# (the lab default of 10 ms, made for megabit links, dropped lossless packets here).
PFC_REFRESH_US = 20


def packets(nbytes):
    """A byte threshold as the program's packet count (at least 1)."""
    return max(1, round(nbytes / FRAME_BYTES))


def knobs():
    """The fabric knobs of a production-like switch: ECN at 5 MB (a step: Kmin = Kmax - 1), and
    the lossless PG profile of testbed/switch/buffers.py (XOFF/XON a few frames apart per
    ingress port and priority). The headroom is left to the controller, which sizes it per
    switch for its fastest port with `headroom_model()` (an 800G uplink needs twice a 400G's)."""
    from testbed.control.knobs import EcnProfile, Knobs, PfcConfig
    from testbed.switch import buffers
    ecn = packets(ECN_BYTES)
    base = Knobs()
    pg = buffers.production_pg_profile(LINK_RATE_MBPS * 1e6, cable_m=FABRIC_CABLE_M)
    return replace(base, flowlet_gap_us=FLOWLET_GAP_US,
                   ecn={3: EcnProfile(ecn - 1, ecn, 1.0)},
                   pfc={3: PfcConfig(pg.xoff, pg.xon, PFC_REFRESH_US)})


def headroom_model():
    """FabricController options: the physical terms of the headroom formula (no loop lag)."""
    from testbed.switch import buffers
    return {"headroom_response_us": buffers.PRODUCTION_RESPONSE_US, "headroom_cable_m": FABRIC_CABLE_M,
            "headroom_mtu": buffers.PRODUCTION_MTU}


def buffer_config():
    """A switch's shared buffer at production scale, with the paper's 200 ms PFC watchdog."""
    from testbed.switch import buffers
    return buffers.BufferConfig(total_bytes=buffers.PRODUCTION_BUFFER_BYTES,
                                watchdog_detect_s=buffers.WATCHDOG_DETECT_S)
