"""Fault events at simulated times, counted from the start of the traffic.

    link:leaf1-spine1:down@100us    the cable between two switches fails (both directions; what
                                     is on it is lost) and the controller reroutes around it
    link:leaf1-spine1:up@300us      it comes back and the controller routes over it again
    switch:spine1:down@50us         the switch stops: its queues are lost, its links go dark,
                                     the controller routes around every one of them
    nic:h3:slow=25%@0               a slow receiver: the host drains its NIC at 25% of line
                                     rate (the NIC's receive buffer fills and it sends PFC)
    nic:h3:stop@1ms                 the host stops draining at all: a NIC that storms PFC
    nic:h3:resume@300ms             the host drains at line rate again (what it held goes first)

Times take ns, us, ms or s (a bare number is seconds).
"""
import copy
import re
from dataclasses import dataclass

UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}
_SPEC = re.compile(r"^(link|switch|nic):([^:@]+):([^@]+)@([0-9.eE+-]+)(ns|us|ms|s)?$")
STOPPED_RX_BPS = 1.0        # "stop": a host that takes one bit a second is as good as stopped


class FaultError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str          # link | switch | nic
    target: tuple      # (a, b) for links, (name,) otherwise
    action: str        # down | up | slow | stop | resume
    value: float = 0.0 # slow: fraction of line rate

    def __str__(self):
        what = "-".join(self.target)
        act = f"slow={self.value:.0%}" if self.action == "slow" else self.action
        us = f"{round(self.at_s * 1e6, 3):f}".rstrip("0").rstrip(".")     # 10000000, not 1e+07
        return f"{self.kind}:{what}:{act}@{us}us"


def _listed(names, most=8):
    """The fabric's names for an error message: all of a few, the ends of many."""
    names = list(names)
    return ", ".join(names) if len(names) <= most else f"{names[0]}, {names[1]}, ..., {names[-1]}"


def _check_switch(text, name, clos):
    if name not in clos.switches:
        raise FaultError(f"--fault {text!r}: no switch {name!r} (the fabric has {_listed(clos.switches)})")


def parse_fault(text, clos):
    """One --fault argument -> Fault, checked against the fabric; FaultError names what is wrong."""
    m = _SPEC.match(text.strip())
    if not m:
        raise FaultError(f"--fault {text!r}: expected KIND:TARGET:ACTION@TIME, e.g. link:leaf1-spine1:down@100us, "
                         "switch:spine1:down@50us, nic:h3:slow=25%@0")
    kind, target, action, number, unit = m.groups()
    try:
        at = float(number) * UNITS[unit or ""]
    except ValueError:
        raise FaultError(f"--fault {text!r}: {number!r} is not a time") from None
    if not (at >= 0 and at < float("inf")):
        raise FaultError(f"--fault {text!r}: the time must be a finite number >= 0")
    value = 0.0
    if kind == "link":
        ends = tuple(target.split("-"))
        if len(ends) != 2:
            raise FaultError(f"--fault {text!r}: a link is SWITCH-SWITCH, e.g. leaf1-spine1")
        for end in ends:
            _check_switch(text, end, clos)
        if not any(p.peer == ends[1] for p in clos.switches[ends[0]].ports.values()):
            raise FaultError(f"--fault {text!r}: there is no link between {ends[0]} and {ends[1]}")
        if action not in ("down", "up"):
            raise FaultError(f"--fault {text!r}: a link goes down or up")
    elif kind == "switch":
        ends = (target,)
        _check_switch(text, target, clos)
        if action != "down":
            raise FaultError(f"--fault {text!r}: a switch can only go down")
    else:
        ends = (target,)
        if target not in clos.hosts:
            raise FaultError(f"--fault {text!r}: no host {target!r} (the fabric has {_listed(clos.hosts)})")
        if action in ("stop", "resume"):
            pass
        elif action.startswith("slow="):
            share = action[5:].rstrip("%")
            try:
                value = float(share) / (100.0 if action.endswith("%") else 1.0)
            except ValueError:
                raise FaultError(f"--fault {text!r}: slow=PERCENT%, e.g. slow=25%") from None
            if not 0 < value < 1:
                raise FaultError(f"--fault {text!r}: a slow receiver drains at between 0% and 100% of line rate")
            action = "slow"
        else:
            raise FaultError(f"--fault {text!r}: a NIC can be slow=PERCENT%, stop or resume")
    return Fault(at, kind, ends, action, value)


def schedule(fabric, faults, start, runners_by_host):
    """Put every fault on the fabric's clock, `start` + its time; returns their timers (the
    run cancels those it did not reach: a fault belongs to its own phase)."""
    return [fabric.scheduler.at(start + fault.at_s, apply, fabric, fault, runners_by_host) for fault in faults]


def apply(fabric, fault, runners_by_host):
    fabric.fault_log.append({"t_s": round(fabric.clock(), 9), "fault": str(fault)})
    if fault.kind == "link":
        fabric.link_status(*fault.target, up=fault.action == "up")
    elif fault.kind == "switch":
        fabric.switch_down(fault.target[0])
    else:
        runner = runners_by_host.get(fault.target[0])
        nic = runner.nic if runner is not None else None
        if nic is None:
            return
        nic.cfg = copy.copy(nic.cfg)          # ranks share the job's NicConfig: this NIC alone
        line = nic.cfg.line_rate_bps
        nic._rx_drain_at = fabric.clock()
        # resume: drain at line rate (not "no receive buffer"), so what the buffer holds goes first
        nic.cfg.slow_rx_bps = {"stop": STOPPED_RX_BPS, "resume": line}.get(fault.action, line * fault.value)
