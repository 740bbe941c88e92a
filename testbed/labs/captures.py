"""What a virtual-time run's captures say about each phase, packet by packet.

The per-port captures (OUT/pcap/<iface>_in.pcap and _out.pcap, nanosecond timestamps on the
simulated clock, headers only) hold every phase of a run, one file per port and direction;
each phase's summary.json says where its traffic lies on that clock (sim_start_s, sim_end_s).
A phase owns the frames from its start to the next phase's start (stragglers included). For
the RoCE packets of each phase (UDP 4791), read at the leaves:

- one-way delay: from entering the sending host's leaf (its host port's _in capture) to
  leaving the receiving host's leaf (the receiver's host port's _out capture), for data
  (RDMA WRITE) packets and, the other way, their ACKs; cross-leaf packets only (the paths
  through a spine); the data's queueing is that delay beyond the two fabric wires'
  serialization and propagation (and the ports' --delay-us);
- per flow (5-tuple + destination QP), cross-leaf: the longest pause between two of its data
  packets entering the leaf (what a flowlet timer sees), and how often it changed uplink
  (spine) inside the phase (the sending leaf's uplink _out captures);
- OOS: each destination QP's data packets, in the order they left the receiver's leaf (the
  order its NIC got them), replayed through a go-back-N receiver as traffic/nic.py's
  Nic._on_roce counts them: a packet at the expected PSN moves it on, one ahead of it is
  out of sequence (OOS), one behind it a duplicate; a QP expects PSN 0 at the phase's start.

A packet is followed across ports by its IPv4 identification (each NIC counts its frames),
addresses, UDP source port, destination QP and PSN: a resent copy has a new identification.

    rocelab captures runs/lab-flowlet/seed1       # a lab's seed (the first seed has captures)
    rocelab captures runs/x --markdown            # a `rocelab run --clock virtual` output

Exit status: 0; 1 when the captures cannot be read as a virtual-time run's (one line names
the file: none there, a truncated or foreign pcap, a summary without sim_start_s); 2 when DIR
is not a directory (a usage error, as in every rocelab command).
"""
import json
import mmap
import os
import struct
from pathlib import Path
from statistics import median

from testbed.labs.base import Column, aligned
from testbed.switch.pcap import MAGIC_NSEC, MAGIC_USEC

_FILE_HEADER = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_ROCE_PORT = (4791).to_bytes(2, "big")     # RoCEv2's UDP destination port

# The table `rocelab captures` prints, and the flowlet lab's captures table.
COLUMNS = [Column("phase", "phase"), Column("half_rtt_us", "half the measured RTT (us)", "{:.1f}"),
           Column("data_oneway_median_us", "data one-way median (us)", "{:.2f}"),
           Column("data_queueing_peak_us", "peak one-way queueing of data (us)", "{:.1f}"),
           Column("ack_oneway_median_us", "ACK one-way median (us)", "{:.2f}"),
           Column("pause_max_us", "longest pause inside a flow (us)", "{:.1f}"),
           Column("path_changes", "path changes inside a flow"),
           Column("oos", "OOS (go-back-N replay)"), Column("oos_resent", "of which resent copies"),
           Column("ranks_oos", "OOS (ranks)")]


class CaptureError(ValueError):
    """Captures that cannot be read as a run's; the message names the file."""


# --- pcap records -------------------------------------------------------------------------

class _Capture:
    """One capture file's RoCE records, read phase by phase (files are in time order)."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else b""
        except OSError as exc:
            raise CaptureError(f"{path}: {exc.strerror or exc}") from None
        if len(self.data) < _FILE_HEADER.size:
            raise CaptureError(f"{path}: not a pcap file (shorter than a pcap header)")
        magic, *_ = _FILE_HEADER.unpack_from(self.data)
        if magic not in (MAGIC_NSEC, MAGIC_USEC):
            raise CaptureError(f"{path}: not a little-endian pcap file")
        self.to_ns = 1 if magic == MAGIC_NSEC else 1000
        self.offset = _FILE_HEADER.size
        self.records = 0

    def close(self):
        if isinstance(self.data, mmap.mmap):
            self.data.close()

    def until(self, end_ns):
        """Yield (t_ns, frame, wire_len, key, opcode, dst QP, PSN) of the RoCE frames before
        end_ns (None: to the end), leaving the file at the first record at or after it."""
        data, size, to_ns = self.data, len(self.data), self.to_ns
        while self.offset < size:
            if self.offset + _RECORD.size > size:
                raise CaptureError(f"{self.path}: truncated after {self.records} records (a record header "
                                   f"cut at byte {self.offset})")
            sec, frac, caplen, wire_len = _RECORD.unpack_from(data, self.offset)
            t_ns = sec * 1_000_000_000 + frac * to_ns
            if end_ns is not None and t_ns >= end_ns:
                return
            start = self.offset + _RECORD.size
            if start + caplen > size:
                raise CaptureError(f"{self.path}: truncated after {self.records} records (a {caplen}-byte frame "
                                   f"cut at byte {start})")
            self.offset = start + caplen
            self.records += 1
            frame = data[start:start + min(caplen, 128)]
            if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
                continue
            udp = 14 + (frame[14] & 0x0F) * 4
            bth = udp + 8
            if frame[udp + 2:udp + 4] != _ROCE_PORT or len(frame) < bth + 12:
                continue
            # who sent it (IP id, addresses, UDP source port) and which packet (dest QP, PSN):
            # none of it is rewritten by a switch
            key = frame[18:20] + frame[26:34] + frame[udp:udp + 2] + frame[bth + 5:bth + 12]
            yield (t_ns, frame, wire_len, key, frame[bth], int.from_bytes(frame[bth + 5:bth + 8], "big"),
                   int.from_bytes(frame[bth + 9:bth + 12], "big"))


# --- a run: its phases, its fabric, its capture files -------------------------------------

def phases_of(run_dir):
    """[(summary path, summary)] of RUN_DIR's phases with captures, in the order they ran:
    RUN_DIR/summary.json (`rocelab run`) or RUN_DIR/*/summary.json (a lab's seed)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CaptureError(f"{run_dir}: not a directory")
    found = []
    for path in [run_dir / "summary.json", *sorted(run_dir.glob("*/summary.json"))]:
        if not path.is_file():
            continue
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CaptureError(f"{path}: not a summary ({exc})") from None
        if summary.get("pcap_dir"):
            found.append((path, summary))
    if not found:
        raise CaptureError(f"{run_dir}: no summary.json with captures here or one level down (a lab's captures "
                           "are in OUT/seedN/ for its first seed; runs with --no-pcap have none)")
    for path, summary in found:
        if summary.get("clock") != "virtual":
            raise CaptureError(f"{path}: a {summary.get('clock')}-time run; phases are placed on the captures' "
                               "clock in virtual time only")
        if summary.get("sim_start_s") is None:
            raise CaptureError(f"{path}: no sim_start_s (written before summaries recorded it): run it again")
    dirs = {(p.parent / s["pcap_dir"]).resolve() for p, s in found}
    if len(dirs) > 1:
        raise CaptureError(f"{run_dir}: phases of {len(dirs)} runs (captures in {', '.join(map(str, sorted(dirs)))}); "
                           "give one run's directory")
    return sorted(found, key=lambda ps: ps[1]["sim_start_s"])


def _fabric(pcap_dir):
    from testbed.clos import Clos, TopologyError
    path = pcap_dir.parent / "fabric.json"
    try:
        return Clos.load(path)
    except (OSError, TopologyError, ValueError) as exc:
        raise CaptureError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None


def analyse(run_dir):
    """{"dir", "pcap_dir", "unloaded": {...}, "phases": [one dict per phase: COLUMNS' keys and
    more]} from RUN_DIR's captures (see the module's doc). Raises CaptureError."""
    from testbed.labs import metrics
    from testbed.sim import profile

    phases = phases_of(run_dir)
    first = phases[0]
    pcap_dir = (first[0].parent / first[1]["pcap_dir"]).resolve()
    clos = _fabric(pcap_dir)
    cable_ns = profile.FABRIC_CABLE_M * profile.NS_PER_METER
    delay_ns = 1000 * (first[1]["config"]["fabric"].get("delay_us") or 0)

    def unloaded_ns(length, uplink, to_leaf):
        """A frame's time on the two fabric wires of its path (leaf -> spine -> leaf) and in the
        three ports' --delay-us, idle; None for a path through more tiers."""
        leaf, number = uplink
        up = clos.switches[leaf].ports[number]
        down = [p for p in clos.switches[up.peer].ports.values() if p.peer == to_leaf]
        if not down:
            return None
        # rate_mbps is bits per microsecond: length * 8000 / rate is nanoseconds
        return length * 8000 / up.rate_mbps + length * 8000 / down[0].rate_mbps + 2 * cable_ns + 3 * delay_ns

    # capture -> the leaf whose host port it is (in, out), or (leaf, port number) of an uplink (out)
    host_in, host_out, uplink_out = {}, {}, {}
    try:
        for leaf in clos.by_role("leaf"):
            for number, port in sorted(leaf.ports.items()):
                name = pcap_dir / leaf.intf(number)
                if port.kind == "host":
                    host_in[_Capture(Path(f"{name}_in.pcap"))] = leaf.name
                    host_out[_Capture(Path(f"{name}_out.pcap"))] = leaf.name
                elif port.kind == "uplink":
                    uplink_out[_Capture(Path(f"{name}_out.pcap"))] = (leaf.name, number)
        rows = _phases(phases, host_in, host_out, uplink_out, unloaded_ns)
    finally:
        for capture in (*host_in, *host_out, *uplink_out):
            capture.close()
    out = []
    for row, (path, summary) in zip(rows, phases):
        rtt, _ = metrics.ack_rtt_us(summary)
        fabric = summary["config"]["fabric"]
        row.update({"phase": summary["name"], "dir": str(path.parent.relative_to(Path(run_dir))),
                    "hash": fabric.get("hash"), "flowlet_gap_us": fabric.get("flowlet_gap_us"),
                    "sim_start_s": summary["sim_start_s"], "sim_end_s": summary["sim_end_s"],
                    "half_rtt_us": rtt / 2 if rtt else None, "ranks_oos": metrics.host_total(summary, "oos")})
        out.append(row)
    spec = clos.spec
    full = first[1]["config"]["job"]["mtu"] + MIDDLE_OVERHEAD
    return {"dir": str(run_dir), "pcap_dir": str(pcap_dir), "phases": out,
            "unloaded": {"data_oneway_us": round(2 * (full * 8 / spec.uplink_rate_mbps + cable_ns / 1000), 3),
                         "ack_oneway_us": round(2 * (ACK_BYTES * 8 / spec.uplink_rate_mbps + cable_ns / 1000), 3),
                         "frame_bytes": full}}


# A full RDMA WRITE MIDDLE frame's headers (Ethernet/IPv4/UDP/BTH/ICRC) and an ACK (BTH/AETH)
MIDDLE_OVERHEAD = 14 + 20 + 8 + 12 + 4
ACK_BYTES = 14 + 20 + 8 + 12 + 4 + 4


def _phases(phases, host_in, host_out, uplink_out, unloaded_ns):
    """Each phase's figures, reading the captures from one phase's start to the next's."""
    starts = [round(s["sim_start_s"] * 1e9) for _, s in phases]
    for capture in (*host_in, *host_out, *uplink_out):   # before the first phase: the boot
        for _ in capture.until(starts[0]):
            pass
    return [_phase(host_in, host_out, uplink_out, end, unloaded_ns) for end in starts[1:] + [None]]


def _phase(host_in, host_out, uplink_out, end, unloaded_ns):
    """One phase's figures, reading every capture up to `end` (ns)."""
    from traffic import packets as P
    from traffic.nic import PSN_MASK, psn_diff

    writes = frozenset(P.WRITE_OPCODES)
    sent = {}           # key -> [(t_ns, leaf, flow, resent, length)]: a key repeats only if an IP id wrapped
    flows = {}          # flow -> {"keys": [its data packets in order], "last", "pause", "psns": {psn: copies}}
    for capture, leaf in host_in.items():
        for t, frame, length, key, opcode, dqpn, psn in capture.until(end):
            data = opcode in writes
            if not data and opcode != P.RC_ACK:
                continue            # CNPs, CTS grants
            flow = (frame[26:34], frame[34:36], dqpn) if data else None   # 5-tuple (UDP 4791) + dest QP
            resent = False
            if data:
                f = flows.setdefault(flow, {"keys": [], "last": None, "pause": 0, "psns": {}})
                if f["last"] is not None:
                    f["pause"] = max(f["pause"], t - f["last"])
                f["last"] = t
                f["keys"].append(key)
                copies = f["psns"].get(psn, 0)
                f["psns"][psn] = copies + 1
                resent = copies > 0
            sent.setdefault(key, []).append((t, leaf, flow, resent, length))
    uplink = {}         # key -> (leaf, port) it left its leaf by
    for capture, where in uplink_out.items():
        for _t, _frame, _length, key, _opcode, _dqpn, _psn in capture.until(end):
            uplink[key] = where
    data_delay, ack_delay, queueing = [], [], []
    expected, oos, oos_resent, duplicates, unmatched = {}, 0, 0, 0, 0
    cross_flows = set()
    for capture, leaf in host_out.items():
        for t, frame, _length, key, opcode, dqpn, psn in capture.until(end):
            data = opcode in writes
            if not data and opcode != P.RC_ACK:
                continue
            entries = sent.get(key)
            entry = entries.pop(0) if entries else None
            if entry is None:
                unmatched += 1
            elif entry[1] != leaf and not data:      # an ACK through a spine
                ack_delay.append(t - entry[0])
            elif entry[1] != leaf:
                data_delay.append(t - entry[0])
                cross_flows.add(entry[2])
                wires = unloaded_ns(entry[4], uplink[key], leaf) if key in uplink else None
                if wires is not None:
                    queueing.append(t - entry[0] - wires)
            if not data:
                continue
            # the receiving NIC's go-back-N check (traffic/nic.py Nic._on_roce)
            qp = (frame[30:34], dqpn)
            d = psn_diff(psn, expected.get(qp, 0))
            if d == 0:
                expected[qp] = (expected.get(qp, 0) + 1) & PSN_MASK
            elif d > 0:
                oos += 1
                oos_resent += bool(entry and entry[3])
            else:
                duplicates += 1
    undelivered = sum(len(v) for v in sent.values())
    pauses, changes, moved = [], 0, 0
    for flow in cross_flows:
        f = flows[flow]
        pauses.append(f["pause"])
        ports = [uplink[k] for k in f["keys"] if k in uplink]
        n = sum(1 for a, b in zip(ports, ports[1:]) if a != b)
        changes += n
        moved += n > 0
    resent = sum(sum(f["psns"].values()) - len(f["psns"]) for f in flows.values())
    return {"data_packets": sum(len(f["keys"]) for f in flows.values()), "resent": resent,
            "cross_leaf_flows": len(cross_flows),
            "data_oneway_median_us": _us(median(data_delay)) if data_delay else None,
            "data_oneway_peak_us": _us(max(data_delay, default=None)),
            "data_queueing_peak_us": _us(max(queueing, default=None)),
            "ack_oneway_median_us": _us(median(ack_delay)) if ack_delay else None,
            "ack_oneway_peak_us": _us(max(ack_delay, default=None)),
            "pause_max_us": _us(max(pauses, default=None)), "path_changes": changes, "flows_moved": moved,
            "oos": oos, "oos_resent": oos_resent, "duplicates": duplicates,
            "undelivered": undelivered, "unmatched": unmatched}


def _us(ns):
    return None if ns is None else round(ns / 1000, 3)


# --- the table, and `rocelab captures` ------------------------------------------------------

def text_table(result, columns=COLUMNS):
    """The phases as aligned text (what `rocelab captures` prints)."""
    return _heading(result) + "\n" + aligned(columns, result["phases"])


def markdown_table(result, columns=COLUMNS):
    lines = ["| " + " | ".join(c.header for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(c.cell(r) for c in columns) + " |" for r in result["phases"]]
    return "\n".join([_heading(result), ""] + lines)


def _heading(result):
    u = result["unloaded"]
    return (f"# captures of {result['dir']}: one-way delays leaf to leaf through a spine (unloaded: "
            f"{u['data_oneway_us']:.2f} us for a {u['frame_bytes']} B data frame, {u['ack_oneway_us']:.2f} us "
            "for an ACK); OOS replayed from the order packets left the receiver's leaf")


def register(sub, name, help_text):
    import argparse
    p = sub.add_parser(name, help=help_text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="DIR", help="a virtual-time run's directory (`rocelab run --out DIR`) or a lab "
                                              "seed's (OUT/seed1)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--markdown", action="store_true", help="a Markdown table (as the lab guides paste)")
    shown.add_argument("--json", action="store_true", help="every figure of every phase as JSON")
    p.set_defaults(func=run)


def run(args):
    import sys
    if not os.path.isdir(args.run):
        print(f"rocelab captures: error: {args.run!r} is not a directory (see rocelab captures --help)",
              file=sys.stderr)
        return 2
    try:
        result = analyse(args.run)
    except CaptureError as exc:
        print(f"rocelab captures: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(markdown_table(result) if args.markdown else text_table(result))
    return 0
