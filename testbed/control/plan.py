"""The whole wanted state of one switch: routing entries, knob entries, clone sessions.

    plan_switch(clos, name, routes, knobs) -> SwitchPlan

Pure: the controller diffs a plan against what the switch holds and writes the
difference (inserts first, then modifications, then deletions: make before break).
"""
from dataclasses import dataclass
import ipaddress
from typing import Dict

from testbed.control import program_names as N
from testbed.control.entries import CloneSession, Entry, exact, lpm, mac_to_int, params
from testbed.control.knobs import KNOB_TABLES, knob_entries

ROUTING_TABLES = (N.IPV4_LPM, N.ECMP_MEMBER)
#: Tables a plan owns completely (TE overrides are managed one by one, never planned).
PLANNED_TABLES = ROUTING_TABLES + KNOB_TABLES


@dataclass
class SwitchPlan:
    switch: str
    entries: Dict[tuple, Entry]
    clone_sessions: Dict[int, CloneSession]


def route_entry(route):
    net = ipaddress.ip_network(route.prefix)
    match = (lpm(int(net.network_address), net.prefixlen),)
    if route.group:
        return Entry(N.IPV4_LPM, match, N.ROUTE_TO_GROUP,
                     params(route_id=route.route_id, group=route.group, size=len(route.next_hops)))
    hop = route.next_hops[0]
    return Entry(N.IPV4_LPM, match, N.ROUTE_TO_PORT,
                 params(route_id=route.route_id, port=hop.port, smac=mac_to_int(hop.smac),
                        dmac=mac_to_int(hop.dmac)))


def forward_params(hop):
    return params(port=hop.port, smac=mac_to_int(hop.smac), dmac=mac_to_int(hop.dmac))


def routing_entries(switch_routes):
    out = [route_entry(r) for r in switch_routes.routes]
    for group, hops in sorted(switch_routes.groups.items()):
        for member, hop in enumerate(hops):
            out.append(Entry(N.ECMP_MEMBER, (exact(group), exact(member)), N.FORWARD, forward_params(hop)))
    return out


def pfc_clone_sessions():
    """The clone session of the PFC frames the program generates: their first egress pass is on
    the CPU port (nothing else queues there), which recirculates them to leave by the paused
    port from its priority-7 queue (see fabric.p4's header comment)."""
    return {N.PFC_SESSION: CloneSession(N.PFC_SESSION, ((N.CPU_PORT, 0),))}


def plan_switch(clos, name, switch_routes, knobs):
    switch = clos.switches[name]
    entries = routing_entries(switch_routes) + knob_entries(knobs, switch)
    return SwitchPlan(name, {e.key: e for e in entries}, pfc_clone_sessions())


def te_override_entry(ingress_port, route_id, hop):
    return Entry(N.TE_OVERRIDE, (exact(ingress_port), exact(route_id)), N.FORWARD, forward_params(hop))


def diff(wanted, installed, tables):
    """(inserts, modifies, deletes) turning `installed` into `wanted` within `tables`."""
    wanted = {k: e for k, e in wanted.items() if e.table in tables}
    current = {k: e for k, e in installed.items() if e.table in tables}
    inserts, modifies, deletes = [], [], []
    for key, entry in wanted.items():
        if entry.default:
            if current.get(key) != entry:
                modifies.append(entry)
        elif key not in current:
            inserts.append(entry)
        elif current[key] != entry:
            modifies.append(entry)
    for key, entry in current.items():
        if key not in wanted and not entry.default:
            deletes.append(entry)
    return inserts, modifies, deletes
