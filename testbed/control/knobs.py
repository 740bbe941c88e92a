"""Runtime knobs of fabric.p4, validated, and the table entries that carry them.

How each knob reaches the switch (all over P4Runtime):

  hash mode, QP-aware hashing,   default action of FabricIngress.ecmp_config (a keyless
  flowlet gap and choice, seed   table): set_ecmp_config(mode, qp_aware, gap, least_loaded, seed)
  DSCP -> priority               entries of FabricIngress.dscp_to_priority
  PFC on/off per priority, the   entries of FabricIngress.pfc_ingress_config (no entry = PFC
  PG profile (XOFF, XON,         off); the engine's traffic manager takes the lossless PG
  headroom, reserved), refresh   profiles from them too (testbed/switch/buffers.py)
  PFC pause time                 FabricEgress.pfc_port: quanta per port, from its link rate
  ECN Kmin/Kmax/Pmax per queue   entries of FabricEgress.ecn_config (no entry = no marking)

Hash modes: "5tuple" (src/dst IP, protocol, L4 ports), "qpn" (the same plus the BTH
destination QP: Meta's E-ECMP), "flowlet" (a per-flow choice kept while packets keep
coming closer than the flowlet gap; the flow key includes the QP when qp_aware).
ECN thresholds are in packets, like enq_qdepth; PFC thresholds and buffers in bytes (held
per ingress priority group); times in microseconds.
"""
from dataclasses import dataclass, field, replace
from typing import Dict, Optional

from testbed.control import program_names as N
from testbed.control.entries import Entry, exact, mac_to_int, params
from testbed.switch import buffers

HASH_MODES = ("5tuple", "qpn", "flowlet")
FLOWLET_CHOICES = ("random", "least_loaded")

#: RoCE data -> 3 (lossless), CNP -> 6, CTS/control (EF, CS7) -> 7; everything else 0.
DEFAULT_DSCP_MAP = {26: 3, 48: 6, 46: 7, 56: 7}
PMAX_SCALE = 65536
MAX_QUEUE_PACKETS = (1 << 19) - 1           # enq_qdepth is 19 bits wide
MAX_TIME_US = (1 << 48) - 1
MAX_BYTES = (1 << 32) - 1                    # the PG registers and profile fields are 32 bits
PFC_QUANTUM_BITS = 512


class KnobError(ValueError):
    """A knob value out of range; the message names the knob and the allowed values."""


@dataclass(frozen=True)
class EcnProfile:
    kmin: int
    kmax: int
    pmax: float

    def check(self, where="ECN"):
        for name in ("kmin", "kmax"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_QUEUE_PACKETS:
                raise KnobError(f"{where}: {name.capitalize()} must be a whole number of packets "
                                f"in 0..{MAX_QUEUE_PACKETS} (got {value!r})")
        if self.kmin >= self.kmax:
            raise KnobError(f"{where}: Kmin ({self.kmin}) must be below Kmax ({self.kmax})")
        if not isinstance(self.pmax, (int, float)) or not 0.0 <= self.pmax <= 1.0:
            raise KnobError(f"{where}: Pmax must be a probability in 0..1 (got {self.pmax!r})")
        return self

    @property
    def pmax_scaled(self):
        return int(round(self.pmax * PMAX_SCALE))


@dataclass(frozen=True)
class PfcConfig:
    """A lossless priority group's profile, bytes per (ingress port, priority): XOFF/XON
    thresholds, the headroom after XOFF (None: the headroom calculator's value for the
    switch's fastest port, filled in per switch by the controller), the reserved share, and
    how often a still-full PG refreshes its XOFF (us)."""
    xoff: int
    xon: int
    refresh_us: int
    headroom: Optional[int] = None
    reserved: int = 0

    def check(self, where="PFC"):
        for name in ("xoff", "xon", "reserved") + (("headroom",) if self.headroom is not None else ()):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_BYTES:
                raise KnobError(f"{where}: {name.upper() if name in ('xoff', 'xon') else name} must be a "
                                f"whole number of bytes in 0..{MAX_BYTES} (got {value!r})")
        if not self.xon < self.xoff:
            raise KnobError(f"{where}: XON ({self.xon}) must be below XOFF ({self.xoff}) bytes")
        _check_time("PFC XOFF refresh", self.refresh_us, minimum=1)
        return self


#: Lossless priority 3's profile (testbed/switch/buffers.py has the numbers and why). XOFF/XON
#: are bytes one ingress PG holds: production switches account the buffer per ingress port and
#: priority, so each upstream gets its own XOFF and its own headroom for what it still sends
#: after it (the headroom calculator: cable delay, response time incl. the real-time loop lag,
#: a maximum frame each way).
#: The pause an XOFF asks for is long (200 ms, Knobs.pfc_pause_us) and the PG's XON ends it;
#: while the PG stays above XOFF the program refreshes the pause every refresh interval.
DEFAULT_PFC_XOFF, DEFAULT_PFC_XON, DEFAULT_PFC_REFRESH_US = buffers.LAB_XOFF_BYTES, buffers.LAB_XON_BYTES, 10_000


def default_pfc():
    return PfcConfig(DEFAULT_PFC_XOFF, DEFAULT_PFC_XON, DEFAULT_PFC_REFRESH_US)


def with_headroom(knobs, rate_mbps, mtu=buffers.LAB_MTU, response_us=buffers.REALTIME_RESPONSE_US,
                  cable_m=buffers.LAB_CABLE_M):
    """`knobs` with every PFC profile's unset headroom filled in from the headroom calculator
    for a port of `rate_mbps` (by default the real-time response time and lab cables)."""
    if all(c.headroom is not None for c in knobs.pfc.values()):
        return knobs
    room = buffers.headroom_bytes(rate_mbps * 1e6, cable_m, mtu, response_us)
    return replace(knobs, pfc={p: c if c.headroom is not None else replace(c, headroom=room)
                               for p, c in knobs.pfc.items()})


@dataclass(frozen=True)
class Knobs:
    """Everything settable at runtime on one switch (defaults: the lab's starting point)."""
    hash_mode: str = "5tuple"
    qp_aware: bool = False
    flowlet_gap_us: int = 50_000       # a few queue-drain times at lab link rates
    flowlet_choice: str = "random"
    hash_seed: int = 0
    dscp_map: Dict[int, int] = field(default_factory=lambda: dict(DEFAULT_DSCP_MAP))
    ecn: Dict[int, EcnProfile] = field(default_factory=lambda: {3: EcnProfile(5, 20, 0.2)})
    pfc: Dict[int, PfcConfig] = field(default_factory=lambda: {3: default_pfc()})
    pfc_pause_us: int = 200_000        # pause an XOFF asks for (quanta follow the link rate): XON ends it sooner

    def check(self):
        if self.hash_mode not in HASH_MODES:
            raise KnobError(f"hash mode {self.hash_mode!r}: choose one of {', '.join(HASH_MODES)}")
        if self.hash_mode == "5tuple" and self.qp_aware:
            raise KnobError("hash mode 5tuple with QP-aware hashing is the qpn mode: use mode qpn")
        if self.hash_mode == "qpn" and not self.qp_aware:
            raise KnobError("hash mode qpn always includes the QP: use mode 5tuple for plain hashing")
        if self.flowlet_choice not in FLOWLET_CHOICES:
            raise KnobError(f"flowlet choice {self.flowlet_choice!r}: choose one of {', '.join(FLOWLET_CHOICES)}")
        _check_time("flowlet gap", self.flowlet_gap_us, minimum=1)
        if not 0 <= self.hash_seed <= 0xFFFF:
            raise KnobError(f"hash seed {self.hash_seed} is not in 0..65535")
        for dscp, prio in self.dscp_map.items():
            if not (isinstance(dscp, int) and 0 <= dscp <= 63):
                raise KnobError(f"DSCP map: DSCP {dscp!r} is not in 0..63")
            _check_priority(prio, f"DSCP map: DSCP {dscp} -> priority")
        for prio, profile in self.ecn.items():
            _check_priority(prio, "ECN priority")
            profile.check(f"ECN on priority {prio}")
        for prio, cfg in self.pfc.items():
            _check_priority(prio, "PFC priority")
            cfg.check(f"PFC on priority {prio}")
        _check_time("PFC pause time", self.pfc_pause_us, minimum=1)
        return self

    # --- the operations the controller exposes, as pure updates ---
    def with_hash_mode(self, mode, qp_aware=None):
        if mode not in HASH_MODES:
            raise KnobError(f"hash mode {mode!r}: choose one of {', '.join(HASH_MODES)}")
        if mode == "5tuple":
            qp = False if qp_aware is None else bool(qp_aware)
        elif mode == "qpn":
            qp = True if qp_aware is None else bool(qp_aware)
        else:
            qp = self.qp_aware if qp_aware is None else bool(qp_aware)
        return replace(self, hash_mode=mode, qp_aware=qp).check()

    def with_flowlet(self, gap_us=None, choice=None):
        return replace(self, flowlet_gap_us=self.flowlet_gap_us if gap_us is None else gap_us,
                       flowlet_choice=self.flowlet_choice if choice is None else choice).check()

    def with_ecn(self, kmin, kmax, pmax, priority=3):
        _check_priority(priority, "ECN priority")
        ecn = dict(self.ecn)
        ecn[priority] = EcnProfile(kmin, kmax, pmax)
        return replace(self, ecn=ecn).check()

    def without_ecn(self, priority=3):
        ecn = dict(self.ecn)
        ecn.pop(priority, None)
        return replace(self, ecn=ecn).check()

    def with_pfc(self, xoff=None, xon=None, priorities=(3,), enabled=True, refresh_us=None, pause_us=None,
                 headroom=None, reserved=None):
        """enabled=True: exactly `priorities` are lossless, with these thresholds (None keeps the
        current ones, or the defaults); enabled=False: PFC off on `priorities`."""
        priorities = tuple(priorities)
        for prio in priorities:
            _check_priority(prio, "PFC priority")
        pfc = dict(self.pfc)
        if enabled:
            template = next(iter(self.pfc.values()), default_pfc())
            new = {}
            for prio in priorities:
                old = self.pfc.get(prio, template)
                new[prio] = PfcConfig(old.xoff if xoff is None else xoff,
                                      old.xon if xon is None else xon,
                                      old.refresh_us if refresh_us is None else refresh_us,
                                      old.headroom if headroom is None else headroom,
                                      old.reserved if reserved is None else reserved)
            pfc = new
        else:
            for prio in priorities:
                pfc.pop(prio, None)
        return replace(self, pfc=pfc, pfc_pause_us=self.pfc_pause_us if pause_us is None else pause_us).check()

    def with_dscp_map(self, mapping):
        return replace(self, dscp_map={int(k): int(v) for k, v in mapping.items()}).check()


def _check_priority(prio, what):
    if not (isinstance(prio, int) and not isinstance(prio, bool) and 0 <= prio <= 7):
        raise KnobError(f"{what} {prio!r} is not a priority in 0..7")


def _check_time(what, value, minimum=0):
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_TIME_US:
        raise KnobError(f"{what} must be a whole number of microseconds >= {minimum} (got {value!r})")


def pause_quanta(pause_us, rate_mbps):
    """Quanta (512 bit times at the link rate) that pause a port for about `pause_us`."""
    quanta = round(pause_us * rate_mbps / PFC_QUANTUM_BITS)   # us * Mb/s = bits
    return max(1, min(0xFFFF, quanta))


# --- knobs -> entries ------------------------------------------------------------

def ecmp_config_entry(knobs):
    mode = N.HASH_MODE_FLOWLET if knobs.hash_mode == "flowlet" else N.HASH_MODE_HASH
    return Entry(N.ECMP_CONFIG, (), N.SET_ECMP_CONFIG,
                 params(mode=mode, qp_aware=int(knobs.qp_aware), flowlet_gap_us=knobs.flowlet_gap_us,
                        least_loaded=int(knobs.flowlet_choice == "least_loaded"), seed=knobs.hash_seed),
                 default=True)


def knob_entries(knobs, switch):
    """Entries of every knob table for `switch` (a clos.Switch: its ports get PFC quanta)."""
    out = [ecmp_config_entry(knobs)]
    for dscp, prio in sorted(knobs.dscp_map.items()):
        out.append(Entry(N.DSCP_TO_PRIORITY, (exact(dscp),), N.SET_PRIORITY, params(priority=prio)))
    fastest = max((p.rate_mbps for p in switch.ports.values()), default=0.0)
    for prio, cfg in sorted(with_headroom(knobs, fastest).pfc.items()):
        out.append(Entry(N.PFC_INGRESS_CONFIG, (exact(prio),), N.SET_PFC_INGRESS,
                         params(xoff=cfg.xoff, xon=cfg.xon, headroom=cfg.headroom, reserved=cfg.reserved,
                                refresh_us=cfg.refresh_us)))
    for prio, profile in sorted(knobs.ecn.items()):
        out.append(Entry(N.ECN_CONFIG, (exact(prio),), N.SET_ECN_THRESHOLDS,
                         params(kmin=profile.kmin, kmax=profile.kmax, pmax=profile.pmax_scaled)))
    for port in sorted(switch.ports.values(), key=lambda p: p.number):
        out.append(Entry(N.PFC_PORT, (exact(port.number),), N.SET_PFC_PORT,
                         params(smac=mac_to_int(port.mac), quanta=pause_quanta(knobs.pfc_pause_us, port.rate_mbps))))
    return out


KNOB_TABLES = (N.ECMP_CONFIG, N.DSCP_TO_PRIORITY, N.PFC_INGRESS_CONFIG, N.ECN_CONFIG, N.PFC_PORT)


def knobs_from_entries(entries, base=None, switch=None):
    """Rebuild Knobs from what a switch holds (the switch is the source of truth).

    The pause time is read back from the per-port quanta of `switch` (a clos.Switch: quanta
    depend on each port's rate); without `switch` it stays `base`'s."""
    base = base or Knobs()
    quanta = {}
    hash_mode, qp_aware, gap, choice, seed = base.hash_mode, base.qp_aware, base.flowlet_gap_us, \
        base.flowlet_choice, base.hash_seed
    dscp_map, ecn, pfc = {}, {}, {}
    for e in entries:
        if e.table == N.ECMP_CONFIG and e.default and e.action == N.SET_ECMP_CONFIG:
            qp_aware = bool(e.param("qp_aware"))
            if e.param("mode") == N.HASH_MODE_FLOWLET:
                hash_mode = "flowlet"
            else:
                hash_mode = "qpn" if qp_aware else "5tuple"
            gap = e.param("flowlet_gap_us")
            choice = "least_loaded" if e.param("least_loaded") else "random"
            seed = e.param("seed")
        elif e.table == N.DSCP_TO_PRIORITY and e.action == N.SET_PRIORITY:
            dscp_map[e.match[0][1]] = e.param("priority")
        elif e.table == N.ECN_CONFIG and e.action == N.SET_ECN_THRESHOLDS:
            ecn[e.match[0][1]] = EcnProfile(e.param("kmin"), e.param("kmax"), _pmax_from_scaled(e.param("pmax")))
        elif e.table == N.PFC_INGRESS_CONFIG and e.action == N.SET_PFC_INGRESS:
            pfc[e.match[0][1]] = PfcConfig(e.param("xoff"), e.param("xon"), e.param("refresh_us"),
                                           e.param("headroom"), e.param("reserved"))
        elif e.table == N.PFC_PORT and e.action == N.SET_PFC_PORT:
            quanta[e.match[0][1]] = e.param("quanta")
    return replace(base, hash_mode=hash_mode, qp_aware=qp_aware, flowlet_gap_us=gap, flowlet_choice=choice,
                   hash_seed=seed, dscp_map=dscp_map, ecn=ecn,
                   pfc_pause_us=_pause_from_quanta(quanta, switch, base.pfc_pause_us),
                   pfc=pfc)


def _pause_from_quanta(quanta, switch, default):
    """The pause time (us) that gives every port of `switch` the quanta it holds."""
    ports = [switch.ports[p] for p in quanta if switch is not None and p in switch.ports]
    if not ports:
        return default
    fastest = max(ports, key=lambda p: p.rate_mbps)
    estimate = round(quanta[fastest.number] * PFC_QUANTUM_BITS / fastest.rate_mbps)
    # quanta were rounded per port: of the times near the estimate that explain them all,
    # the roundest is the one a person set (5000 rather than 5018)
    fits = [t for t in range(max(1, estimate - 64), estimate + 65)
            if all(pause_quanta(t, p.rate_mbps) == quanta[p.number] for p in ports)]
    if not fits:
        return max(1, estimate)
    return max(fits, key=lambda t: (_trailing_zeros(t), -abs(t - estimate)))


def _trailing_zeros(n):
    text = str(n)
    return len(text) - len(text.rstrip("0"))


def _pmax_from_scaled(scaled):
    """The shortest decimal probability that scales to `scaled` (0.2, not 0.1999969...)."""
    for digits in range(1, 7):
        p = round(scaled / PMAX_SCALE, digits)
        if round(p * PMAX_SCALE) == scaled:
            return p
    return scaled / PMAX_SCALE
