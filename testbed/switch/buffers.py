"""Switch buffer sizes, priority-group profiles, PFC headroom and watchdog times: the
defaults in one place, with where each number comes from, for both clocks.

Everything is bytes and seconds. The traffic manager (traffic_manager.BufferAccount) does the
accounting; this module only says how big things are.

Headroom (the lossless-Ethernet sizing rule): after a PG passes XOFF, what is still on its way
must fit in the PG's headroom:

    headroom = rate x (2 x cable delay + the peer's response time) + 2 x a maximum frame

    2 x cable delay   the XOFF travels to the peer, the last bytes it sent before stopping
                      travel back
    response time     the peer's time to act on the XOFF; in real time this includes the
                      emulated switch's and NIC's loop lag (how late they run on a loaded machine)
    2 x max frame     the frame the peer had started when the XOFF arrived, and the frame our
                      port was sending when the XOFF wanted out (a PFC frame waits for it)
"""
from dataclasses import dataclass
import math
from typing import Optional

NUM_PRIORITIES = 8
ETHERNET_OVERHEAD = 18            # header 14 + FCS 4: a maximum frame is MTU + 18 bytes
PROPAGATION_NS_PER_M = 5.0        # light in fibre or copper: about 2/3 c, 5 ns per metre

# --- real time (the lab: 10 Mb/s links, engine switches as processes on a shared machine) ----
#: The response time the real-time headroom covers: the engine switches' measured loop lag
#: (Switch.loop_lag, in summary.json "buffers"), twice over: the switch that should pause runs
#: late, then the peer that should stop does. Measured 2026-11-24 on the 2-core development
#: machine (load average 7-31 from other work): 16:1 incast (`rocelab run --spines 1 --leaves
#: 17 --hosts-per-leaf 1 --pattern incast --pfc on --cts off`) with a busy loop per core beside
#: it, 99.9th percentile 28-100 ms on the spine, 15-52 ms on the leaves; the qpscaling lab (2 Mb/s
#: rings), up to 158 ms on a spine and 126 ms on a leaf (maxima 306 ms), where 150 ms of headroom
#: was not enough (9-34 headroom drops per phase). 300 ms covers a switch's plus its peer's worst
#: 99.9th percentile seen.
REALTIME_RESPONSE_US = 300_000.0
LAB_CABLE_M = 0.0                  # veths: no propagation unless --delay-us says so
LAB_MTU = 1500
#: The lab's whole buffer: large, so that static per-PG thresholds never exhaust the shared
#: pool before XOFF (a 16:1 incast holds 16 PGs at XOFF + headroom on one switch) and every
#: port's headroom fits (378 KB per port at 10 Mb/s: ~170 ports). It is accounting only: memory
#: holds what is actually queued.
LAB_BUFFER_BYTES = 64 * 1024 * 1024
#: XOFF/XON of a lossless PG, bytes the PG holds in the shared pool: the 16/8 packets (of ~1 KB)
#: the egress queues paused at before, now per ingress port. XOFF - XON sets how long a paused
#: upstream stays paused (the PG drains at its share of the egress rate), XON how much it still
#: holds when it asks the upstream to resume. XOFF stays above the incast lab's 12 KB CTS budget.
LAB_XOFF_BYTES = 16 * 1024
LAB_XON_BYTES = 8 * 1024

# --- production (virtual time): Meta's 400G AI zone ------------------------------------------
PRODUCTION_RATE_BPS = 400e9
PRODUCTION_CABLE_M = 100.0         # a leaf-spine run in one building (assumed)
PRODUCTION_RESPONSE_US = 1.0       # NIC/switch PFC reaction (assumed; hardware, not software)
PRODUCTION_MTU = 4200              # RoCE 4096-byte payload + headers (assumed)
#: A shallow-buffer 400G leaf (RTSW). Meta's Table 2 shows up to 65.6 MB occupied per leaf
#: in AlltoAll; a 64 MB shared buffer is the assumed size here.
PRODUCTION_BUFFER_BYTES = 64 * 1024 * 1024

# --- common -------------------------------------------------------------------------------------
#: Dynamic threshold of lossy queues: a queue may hold alpha x the free shared buffer
#: (Choudhury & Hahne; alpha 1 is the usual default of shared-buffer switches).
LOSSY_ALPHA = 1.0
#: PFC watchdog (Meta's paper, sec. 7: "catch any long-duration PFC pause (>200ms)"). That is
#: the detection time at production rates; by default (watchdog_detect_s None: "auto") a switch
#: uses 200 ms or twice the longest pause its own lossless PGs can legitimately cause, whichever
#: is longer: at the lab's 10 Mb/s a PG filled to XOFF + headroom by a 16:1 incast drains at
#: 1/16 of 10 Mb/s and keeps its upstream paused for a second or more without any fault.
WATCHDOG_DETECT_S = 0.200
WATCHDOG_RESTORE_S = 0.200
WATCHDOG_ACTIONS = ("drop", "forward")


class BufferConfigError(ValueError):
    """A buffer size or threshold that cannot work; the message names it."""


@dataclass(frozen=True)
class PgProfile:
    """One priority group's share of the buffer, bytes. lossless: PFC pauses it at XOFF and
    the headroom absorbs what is in flight; lossy PGs only have a reservation."""
    xoff: int = 0
    xon: int = 0
    headroom: int = 0
    reserved: int = 0
    lossless: bool = False

    def check(self, where="PG profile"):
        for name in ("xoff", "xon", "headroom", "reserved"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise BufferConfigError(f"{where}: {name} must be a whole number of bytes >= 0 (got {value!r})")
        if self.lossless and not self.xon < self.xoff:
            raise BufferConfigError(f"{where}: XON ({self.xon}) must be below XOFF ({self.xoff}) bytes")
        return self


LOSSY_PROFILE = PgProfile()


@dataclass(frozen=True)
class BufferConfig:
    """The buffer of one switch: total bytes, lossy alpha, the watchdog."""
    total_bytes: int = LAB_BUFFER_BYTES
    alpha: float = LOSSY_ALPHA
    watchdog_detect_s: Optional[float] = None       # None: auto (see WATCHDOG_DETECT_S); 0: off
    watchdog_restore_s: float = WATCHDOG_RESTORE_S
    watchdog_action: str = "drop"

    def check(self):
        if not isinstance(self.total_bytes, int) or self.total_bytes <= 0:
            raise BufferConfigError(f"buffer size must be a positive number of bytes (got {self.total_bytes!r})")
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < math.inf):
            raise BufferConfigError(f"lossy alpha must be a positive number (got {self.alpha!r})")
        for name in ("watchdog_detect_s", "watchdog_restore_s"):
            value = getattr(self, name)
            if value is None and name == "watchdog_detect_s":
                continue
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise BufferConfigError(f"{name.replace('_', ' ')} must be >= 0 seconds (got {value!r})")
        if self.watchdog_action not in WATCHDOG_ACTIONS:
            raise BufferConfigError(f"watchdog action {self.watchdog_action!r}: choose drop or forward")
        return self


def legitimate_pause_s(profile, fan_in, rate_bps):
    """The longest a lossless PG can keep its upstream paused with nothing wrong: filled to
    XOFF + headroom, it drains to XON at its 1/fan_in share of the egress rate."""
    return (profile.xoff + profile.headroom - profile.xon) * 8 * fan_in / rate_bps


def auto_watchdog_detect_s(profiles, fan_in, rate_bps):
    """The "auto" detection time: 200 ms, or twice the longest legitimate pause if longer."""
    longest = max((legitimate_pause_s(p, fan_in, rate_bps) for p in profiles if p.lossless), default=0.0)
    return max(WATCHDOG_DETECT_S, 2 * longest)


def fabric_watchdog_detect_s(fan_in, slowest_bps, fastest_bps, mtu=LAB_MTU):
    """The real-time fabric's detection time: "auto" for the default lab profile at the most
    ports feeding one queue (`fan_in`) and the slowest link (a pause comes from the peer, whose
    fan-in a switch cannot see, so the fabric, which knows the Clos, sets it on all)."""
    return auto_watchdog_detect_s([lab_pg_profile(fastest_bps, mtu)], max(1, fan_in), slowest_bps)


def max_frame_bytes(mtu):
    return int(mtu) + ETHERNET_OVERHEAD


def headroom_bytes(rate_bps, cable_m, mtu, response_us):
    """Bytes a lossless PG must still take after it sent XOFF (the formula above)."""
    for name, value in (("rate", rate_bps), ("cable length", cable_m), ("MTU", mtu), ("response time", response_us)):
        if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
            raise BufferConfigError(f"headroom: {name} must be a finite number >= 0 (got {value!r})")
    in_flight_s = 2 * cable_m * PROPAGATION_NS_PER_M * 1e-9 + response_us * 1e-6
    # (rounded first: 100e9 x 2e-6 / 8 is 25000.000000000004 in floating point)
    return math.ceil(round(rate_bps * in_flight_s / 8, 6)) + 2 * max_frame_bytes(mtu)


def lab_pg_profile(rate_bps, mtu=LAB_MTU, cable_m=LAB_CABLE_M, response_us=REALTIME_RESPONSE_US):
    """The real-time lossless profile of a port running at `rate_bps`."""
    return PgProfile(xoff=LAB_XOFF_BYTES, xon=LAB_XON_BYTES,
                     headroom=headroom_bytes(rate_bps, cable_m, mtu, response_us), lossless=True)


def production_pg_profile(rate_bps=PRODUCTION_RATE_BPS, mtu=PRODUCTION_MTU, cable_m=PRODUCTION_CABLE_M,
                          response_us=PRODUCTION_RESPONSE_US):
    """A lossless profile at production scale (virtual time): XOFF/XON a few frames apart."""
    frame = max_frame_bytes(mtu)
    return PgProfile(xoff=32 * frame, xon=16 * frame,
                     headroom=headroom_bytes(rate_bps, cable_m, mtu, response_us), lossless=True)

#: The engine target's buffer profiles come from this table of the P4 program: entries keyed by
#: priority whose action carries xoff, xon, headroom and reserved (bytes). fabric.p4's PFC knob
#: table is it, so the PFC knobs written over P4Runtime also set the PG profiles.
PG_PROFILE_TABLE = "FabricIngress.pfc_ingress_config"
