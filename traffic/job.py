"""The job description: which ranks run where, what they run, and how the NICs behave.

A job is a JSON object; every key but ``ranks`` and ``pattern`` has a default::

    {
      "name": "ring4",
      "pattern": "ring_allreduce",        # see traffic.collectives.PATTERNS
      "sizes": [1048576],                 # nccl-tests "size" per row (or "size": N)
      "iterations": 1, "warmup": 0,
      "channels": 1,                      # independent rings/trees, size split across them
      "qps_per_connection": 1,
      "qp_spread": "round_robin",         # or "split": every message cut across the QPs
      "chunk_bytes": 65536,               # WRITE message size (CTS credit unit, pipeline chunk)
      "slicing": false,                   # true: NCCL-style slicing -- a phase's sends leave chunk by
                                          # chunk as the previous phase's data arrives, and phases
                                          # wait for their data to be out, not ACKed (the last does)
      "preset": "dense",                  # workload only: dense (Llama-3-like) or moe (DeepSeek-V2-like)
      "alltoallv_weights": [[...], ...],  # alltoallv only: n x n non-negative numbers, row r = how
                                          # rank r's buffer splits over the ranks (default: uneven, fixed)
      "cts": {"enabled": true, "buffer_bytes": 262144, "refresh_s": 0.02,
              "budget_bytes": null},      # receiver-wide: all credit granted and not yet consumed
                                          # <= budget, one chunk per waiting sender in turn
                                          # (budget / chunk_bytes senders at a time); null: each
                                          # connection has buffer_bytes of credit on its own
      "dcqcn": {"enabled": false, "g": 0.0039, ...},   # traffic.dcqcn.DcqcnParams
      "classes": {"data": {"dscp": 26, "priority": 3, "ecn": "ect0"},
                  "cnp": {"dscp": 48, "priority": 6}, "control": {"dscp": 46, "priority": 7}},
      "nic": {"line_rate_mbps": 100, "mtu": 1024, "ack_every": 16, "ack_delay_s": 0.0005,
              "lat_timeout_s": null, "retry_count": 7, "max_outstanding": 512,
              "cnp_interval_s": 0.0005, "burst_bytes": 16384, "check_icrc": true,
              "slow_rx_mbps": 0, "pfc_xoff_bytes": 65536, "pfc_xon_bytes": 16384, "pfc_quanta": 65535},
      "timeout_s": 60, "control_port": 18515, "qpn_base": 256,
      "gateway_mac": null,                # next-hop MAC for every rank (else ARP, else the peer's MAC)
      "ranks": [{"host": "h1", "ip": "10.0.0.1", "mac": "00:00:00:00:00:01", "iface": "h1-eth0"}, ...]
    }

``nic.lat_timeout_s`` null (the default) means 50 ms or the time 256 full packets
take at the line rate, whichever is longer (lab rates are scaled down, real
timeouts are not; see ``traffic.nic``).

Errors name the key that is wrong (``JobError``), never a traceback.
"""
import ipaddress
import json
import math
import random
from dataclasses import dataclass, field

from testbed.argtypes import nests_deeper
from traffic.collectives import PATTERNS
from traffic.dcqcn import DcqcnParams
from traffic.nic import DEFAULT_CLASSES, NicConfig, TrafficClass


class JobError(ValueError):
    pass


MAX_TIMEOUT_S = 86400          # a run longer than a day is a mistake, not a lab
MAX_SIZE = 1 << 40             # bytes per collective row
MAX_RATE_MBPS = 1_000_000      # 1 Tb/s: beyond any emulated NIC
MAX_JOB_BYTES = 16 << 20       # a job file; the largest real ones are a few hundred kB
MAX_NESTING = 32               # JSON depth; real jobs nest 4 deep
MAX_RANKS = 1024


@dataclass
class RankHost:
    rank: int
    host: str
    ip: str
    mac: str
    iface: str
    gateway_mac: str = None


@dataclass
class Job:
    name: str
    pattern: str
    sizes: list
    ranks: list
    iterations: int = 1
    warmup: int = 0
    channels: int = 1
    qps_per_connection: int = 1
    qp_spread: str = "round_robin"
    chunk_bytes: int = 65536
    slicing: bool = False
    cts: bool = True
    cts_buffer_bytes: int = 262144
    cts_refresh_s: float = 0.02
    cts_budget_bytes: int = None
    nic: NicConfig = field(default_factory=NicConfig)
    timeout_s: float = 60.0
    control_port: int = 18515
    qpn_base: int = 0x100
    gateway_mac: str = None
    alltoallv_weights: list = None
    preset: str = None
    raw: dict = None

    @property
    def n(self):
        return len(self.ranks)

    def qpn(self, peer, channel, index):
        """This host's QP number for its connection to `peer` (channel, QP index)."""
        return self.qpn_base + (peer * self.channels + channel) * self.qps_per_connection + index


_TOP_KEYS = {"name", "pattern", "sizes", "size", "iterations", "warmup", "channels", "qps_per_connection",
             "qp_spread", "chunk_bytes", "slicing", "cts", "dcqcn", "classes", "nic", "timeout_s", "control_port",
             "qpn_base", "gateway_mac", "ranks", "placement", "comment", "alltoallv_weights",
             "preset"}
_NIC_KEYS = {"line_rate_mbps", "mtu", "ack_every", "ack_delay_s", "lat_timeout_s", "retry_count",
             "max_outstanding", "cnp_interval_s", "burst_bytes", "check_icrc", "slow_rx_mbps",
             "pfc_xoff_bytes", "pfc_xon_bytes", "pfc_quanta"}


MAX_INT = 1 << 40     # no count, size or port in a job comes near this; larger is a typo or an attack
MAX_NUMBER = 1e12


def _int(data, key, default, lo=1, hi=None, where="job"):
    value = data.get(key, default)
    hi = MAX_INT if hi is None else hi
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise JobError(f"{where}.{key}: expected an integer {rng}, got {_shown(value)}")
    return value


def _num(data, key, default, where="job", positive=True, hi=MAX_NUMBER):
    value = data.get(key, default)
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or (positive and value == 0) or (hi is not None and value > hi)):
        bound = f" up to {hi:g}" if hi is not None else ""
        raise JobError(f"{where}.{key}: expected a finite {'positive' if positive else 'non-negative'} "
                       f"number{bound}, got {_shown(value)}")
    return value


def _shown(value):
    """`value` for an error message, shortened when long."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _mac(value, where):
    parts = str(value).split(":")
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts):
        raise JobError(f"{where}: {_shown(value)} is not a MAC address like 02:00:00:00:00:01")
    return str(value).lower()


def parse_job(data):
    """Validate a job dict and return a :class:`Job`; JobError names what is wrong.

    The checks below name the key at fault; a value of a type none of them foresaw still
    ends as a JobError (never a traceback), naming the kind of fault."""
    try:
        return _parse_job(data)
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
        raise JobError(f"job: a value has the wrong type or size ({type(exc).__name__}: {str(exc)[:80]})") from None


def _parse_job(data):
    if not isinstance(data, dict):
        raise JobError("job: expected a JSON object at the top level")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise JobError(f"job: unknown key(s) {sorted(unknown)}")
    pattern = data.get("pattern")
    if not isinstance(pattern, str) or pattern not in PATTERNS:
        raise JobError(f"job.pattern: {_shown(pattern)} is not one of {', '.join(PATTERNS)}")
    if "sizes" in data and "size" in data:
        raise JobError("job: give either 'size' or 'sizes', not both")
    sizes = data.get("sizes", [data.get("size", 1 << 20)])
    if not isinstance(sizes, list) or not sizes:
        raise JobError("job.sizes: expected a non-empty list of byte counts")
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, int) or not 4 <= s <= MAX_SIZE:
            raise JobError(f"job.sizes[{i}]: expected an integer from 4 to {MAX_SIZE} bytes, got {_shown(s)}")
    ranks_data = data.get("ranks")
    if not isinstance(ranks_data, list) or not 2 <= len(ranks_data) <= MAX_RANKS:
        raise JobError(f"job.ranks: expected a list of at least 2 hosts, at most {MAX_RANKS} (rank i is entry i)")
    ranks = []
    seen_ips = set()
    for i, r in enumerate(ranks_data):
        where = f"job.ranks[{i}]"
        if not isinstance(r, dict):
            raise JobError(f"{where}: expected an object with host, ip, mac, iface")
        extra = set(r) - {"host", "ip", "mac", "iface", "gateway_mac", "leaf", "rank"}
        if extra:
            raise JobError(f"{where}: unknown key(s) {sorted(extra)}")
        for key in ("ip", "mac", "iface"):
            if key not in r:
                raise JobError(f"{where}: missing {key!r}")
        try:
            ip = str(ipaddress.IPv4Address(r["ip"]))
        except ValueError:
            raise JobError(f"{where}.ip: {_shown(r['ip'])} is not an IPv4 address") from None
        if ip in seen_ips:
            raise JobError(f"{where}.ip: {ip} is used by two ranks (one rank per host address)")
        seen_ips.add(ip)
        if "rank" in r and r["rank"] != i:
            raise JobError(f"{where}.rank: is {_shown(r['rank'])} but ranks are listed in order (expected {i})")
        if not isinstance(r["iface"], str) or not 0 < len(r["iface"]) <= 15:
            raise JobError(f"{where}.iface: expected an interface name of 1..15 characters")
        ranks.append(RankHost(i, str(r.get("host", f"rank{i}")), ip, _mac(r["mac"], f"{where}.mac"), r["iface"],
                              _mac(r["gateway_mac"], f"{where}.gateway_mac") if r.get("gateway_mac") else None))

    nic_data = data.get("nic", {})
    if not isinstance(nic_data, dict):
        raise JobError("job.nic: expected an object")
    unknown = set(nic_data) - _NIC_KEYS
    if unknown:
        raise JobError(f"job.nic: unknown key(s) {sorted(unknown)}; known: {sorted(_NIC_KEYS)}")
    w = "job.nic"
    nic = NicConfig(
        line_rate_bps=_num(nic_data, "line_rate_mbps", 100, w, hi=MAX_RATE_MBPS) * 1e6,
        mtu=_int(nic_data, "mtu", 1024, 256, 4096, w),
        ack_every=_int(nic_data, "ack_every", 16, 1, None, w),
        ack_delay_s=_num(nic_data, "ack_delay_s", 0.0005, w),
        lat_timeout_s=_num(nic_data, "lat_timeout_s", None, w) if nic_data.get("lat_timeout_s") is not None else None,
        retry_count=_int(nic_data, "retry_count", 7, 1, None, w),
        max_outstanding=_int(nic_data, "max_outstanding", 512, 1, None, w),
        cnp_interval_s=_num(nic_data, "cnp_interval_s", 0.0005, w, positive=False),
        burst_bytes=_int(nic_data, "burst_bytes", 16384, 1, None, w),
        check_icrc=bool(nic_data.get("check_icrc", True)),
        slow_rx_bps=_num(nic_data, "slow_rx_mbps", 0, w, positive=False, hi=MAX_RATE_MBPS) * 1e6,
        pfc_xoff_bytes=_int(nic_data, "pfc_xoff_bytes", 65536, 1, None, w),
        pfc_xon_bytes=_int(nic_data, "pfc_xon_bytes", 16384, 0, None, w),
        pfc_quanta=_int(nic_data, "pfc_quanta", 0xFFFF, 1, 0xFFFF, w),
    )
    dcqcn = data.get("dcqcn", {"enabled": False})
    if not isinstance(dcqcn, dict):
        raise JobError("job.dcqcn: expected an object like {\"enabled\": true, ...parameters}")
    if dcqcn.get("enabled", True):
        try:
            nic.dcqcn = DcqcnParams.from_dict(dcqcn, "job.dcqcn")
        except (TypeError, ValueError) as exc:
            raise JobError(str(exc)) from None
    classes = data.get("classes", {})
    if not isinstance(classes, dict) or set(classes) - set(DEFAULT_CLASSES):
        raise JobError(f"job.classes: expected an object with keys among {sorted(DEFAULT_CLASSES)}")
    try:
        nic.classes = {name: TrafficClass.from_dict(classes.get(name), default, f"job.classes.{name}")
                       for name, default in DEFAULT_CLASSES.items()}
        nic.validate("job.nic")
    except ValueError as exc:
        raise JobError(str(exc)) from None

    cts = data.get("cts", {"enabled": True})
    if isinstance(cts, bool):
        cts = {"enabled": cts}
    if not isinstance(cts, dict) or set(cts) - {"enabled", "buffer_bytes", "refresh_s", "budget_bytes"}:
        raise JobError("job.cts: expected true/false or {\"enabled\", \"buffer_bytes\", \"refresh_s\", "
                       "\"budget_bytes\"}")
    chunk = _int(data, "chunk_bytes", 65536, 4)
    spread = data.get("qp_spread", "round_robin")
    if not isinstance(spread, str) or spread not in ("round_robin", "split"):
        raise JobError(f"job.qp_spread: {_shown(spread)} is not 'round_robin' or 'split'")
    slicing = data.get("slicing", False)
    if not isinstance(slicing, bool):
        raise JobError(f"job.slicing: expected true or false, got {_shown(slicing)}")
    job = Job(
        name=str(data.get("name", pattern)), pattern=pattern, sizes=sizes, ranks=ranks,
        iterations=_int(data, "iterations", 1), warmup=_int(data, "warmup", 0, 0),
        channels=_int(data, "channels", 1, 1, 64), qps_per_connection=_int(data, "qps_per_connection", 1, 1, 64),
        qp_spread=spread, chunk_bytes=chunk, slicing=slicing, cts=bool(cts.get("enabled", True)),
        cts_buffer_bytes=_int(cts, "buffer_bytes", max(4 * chunk, 262144), 4, None, "job.cts"),
        cts_refresh_s=_num(cts, "refresh_s", 0.02, "job.cts"),
        cts_budget_bytes=(_int(cts, "budget_bytes", None, 4, None, "job.cts")
                          if cts.get("budget_bytes") is not None else None),
        nic=nic, timeout_s=_num(data, "timeout_s", 60, hi=MAX_TIMEOUT_S), control_port=_int(data, "control_port", 18515, 1, 65535),
        qpn_base=_int(data, "qpn_base", 0x100, 2, 0xFFFFFF),
        gateway_mac=_mac(data["gateway_mac"], "job.gateway_mac") if data.get("gateway_mac") else None,
        raw=data,
    )
    job.alltoallv_weights = _weights(data.get("alltoallv_weights"), job.n)
    if "preset" in data:
        from traffic.workload import PRESETS
        if pattern != "workload":
            raise JobError(f"job.preset: only the workload pattern takes a preset, not {pattern}")
        if data["preset"] not in PRESETS:
            raise JobError(f"job.preset: {_shown(data['preset'])} is not one of {', '.join(PRESETS)}")
        job.preset = data["preset"]
    if job.alltoallv_weights and pattern != "alltoallv":
        raise JobError(f"job.alltoallv_weights: only the alltoallv pattern takes weights, not {pattern}")
    if job.cts and job.cts_buffer_bytes < job.chunk_bytes:
        raise JobError(f"job.cts.buffer_bytes: {job.cts_buffer_bytes} is smaller than one chunk "
                       f"({job.chunk_bytes} bytes): no WRITE could ever be granted")
    if job.cts and job.cts_budget_bytes is not None and job.cts_budget_bytes < job.chunk_bytes:
        raise JobError(f"job.cts.budget_bytes: {job.cts_budget_bytes} is smaller than one chunk "
                       f"({job.chunk_bytes} bytes): no sender could ever be admitted")
    top = job.qpn(job.n - 1, job.channels - 1, job.qps_per_connection - 1)
    if top > 0xFFFFFF:
        raise JobError(f"job.qpn_base: QP numbers would exceed 24 bits (highest {top:#x})")
    from traffic.nic import CTS_QPN
    if job.qpn_base <= CTS_QPN <= top:
        raise JobError(f"job.qpn_base: QP numbers {job.qpn_base:#x}..{top:#x} would include the CTS QP "
                       f"{CTS_QPN:#x}; choose a base above it")
    return job


def _weights(matrix, n):
    if matrix is None:
        return None
    where = "job.alltoallv_weights"
    if not isinstance(matrix, list) or len(matrix) != n:
        raise JobError(f"{where}: expected {n} rows (one per rank)")
    for r, row in enumerate(matrix):
        if not isinstance(row, list) or len(row) != n:
            raise JobError(f"{where}[{r}]: expected {n} numbers (one per rank)")
        for p, w in enumerate(row):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0:
                raise JobError(f"{where}[{r}][{p}]: expected a non-negative number, got {_shown(w)}")
    scaled = [[round(w * 1000) for w in row] for row in matrix]   # integer proportions, exact splits
    for r, row in enumerate(scaled):
        if not sum(row):
            raise JobError(f"{where}[{r}]: all (near) zero; rank {r}'s buffer has to go somewhere")
    return scaled


def _refuse_constant(name):
    raise JobError(f"{name} is not a number in JSON (jobs take finite numbers only)")


def loads_job(text, where="job"):
    """The JSON object of a job file's text (bytes or str), with a JobError naming what is wrong."""
    if isinstance(text, bytes):
        if len(text) > MAX_JOB_BYTES:
            raise JobError(f"{where}: {len(text)} bytes is larger than a job file may be ({MAX_JOB_BYTES})")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JobError(f"{where}: not a text (UTF-8) file: undecodable byte at offset {exc.start}") from None
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise JobError(f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise JobError(f"{where}: JSON nested too deeply (a job nests at most {MAX_NESTING} levels)") from None
    except JobError as exc:
        raise JobError(f"{where}: {exc}") from None
    except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
        raise JobError(f"{where}: not usable JSON: {str(exc)[:100]}") from None
    if nests_deeper(data, MAX_NESTING):
        raise JobError(f"{where}: JSON nested too deeply (a job nests at most {MAX_NESTING} levels)")
    return data


def load_job(path):
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_JOB_BYTES + 1)
    except OSError as exc:
        raise JobError(f"cannot read job file {path}: {exc.strerror}") from None
    data = loads_job(text, str(path))
    try:
        return parse_job(data)
    except JobError as exc:
        raise JobError(f"{path}: {exc}") from None


def place(hosts, nranks=None, mode="topology", seed=0):
    """Order hosts into ranks: 'topology' keeps ring neighbours under the same leaf, 'random' shuffles.

    `hosts` are dicts with ip, mac, iface (and optionally host, leaf); returns the
    first `nranks` of them in rank order, ready for a job's "ranks".
    """
    hosts = list(hosts)
    nranks = len(hosts) if nranks is None else nranks
    if nranks > len(hosts):
        raise JobError(f"placement: {nranks} ranks but only {len(hosts)} hosts")
    if mode == "topology":
        hosts.sort(key=lambda h: (str(h.get("leaf", "")), _natural(str(h.get("host", h.get("ip", ""))))))
    elif mode == "random":
        random.Random(seed).shuffle(hosts)
    else:
        raise JobError(f"placement: mode {mode!r} is not 'topology' or 'random'")
    return hosts[:nranks]


def _natural(name):
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
