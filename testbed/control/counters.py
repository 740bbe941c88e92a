"""Counter reads: which cells to ask a switch for, and the plain dicts they become.

read_counters() answers, per switch:

    {"switch": "leaf1", "role": "leaf",
     "ports": {port: {priority: {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes",
                                 "drop_packets", "drop_bytes", "ecn_marks", "pfc_tx", "pfc_rx"}}},
     "port_totals": {port: {same keys, summed over priorities}},
     "drops": {"no_route": n, "ttl_expired": n, ...},
     "ecmp_members": [{"group", "member", "port", "packets", "bytes"}],
     "te_overrides": [{"ingress_port", "dst_prefix", "egress_port", "packets", "bytes"}],
     "demands": [{"ingress_port", "dst_prefix", "route_id", "packets", "bytes"}],  # non-zero only
     "punted": {"pfc": n, "mac_control": n}}     # packet-ins this controller received

Ports are the switch's front-panel ports plus the CPU port (510). Only the cells that
can be non-zero are read (ports x 8 priorities), never whole 4096-cell arrays.
"""
from p4.v1 import p4runtime_pb2

from testbed.control import program_names as N

# counter name, its packets field, its bytes field (None: a packets-only counter)
PORT_PRIO_COUNTERS = (
    (N.RX_PORT_PRIO, "rx_packets", "rx_bytes"),
    (N.TX_PORT_PRIO, "tx_packets", "tx_bytes"),
    (N.DROP_PORT_PRIO, "drop_packets", "drop_bytes"),
    (N.ECN_MARK_PORT_PRIO, "ecn_marks", None),
    (N.PFC_TX_PORT_PRIO, "pfc_tx", None),
    (N.PFC_RX_PORT_PRIO, "pfc_rx", None),
)
FIELDS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drop_packets", "drop_bytes",
          "ecn_marks", "pfc_tx", "pfc_rx")


def _counter_entity(counter_id, index):
    entity = p4runtime_pb2.Entity()
    entity.counter_entry.counter_id = counter_id
    entity.counter_entry.index.index = index
    return entity


def _direct_entity(table_id):
    entity = p4runtime_pb2.Entity()
    entity.direct_counter_entry.table_entry.table_id = table_id
    return entity


def _table_entity(table_id):
    entity = p4runtime_pb2.Entity()
    entity.table_entry.table_id = table_id
    return entity


class ReadPlan:
    """One switch's counter read: the Read request and how its answers map back to ports,
    priorities and routes. Thousands of entities, the same ones every time for a pipeline
    and a set of routes: built once and sent as bytes (building them cost more than the read
    itself)."""

    def __init__(self, conn, switch, routes):
        self.conn = conn
        self.info = info = conn.info()
        self.route_ids = frozenset(routes)
        self.ports = sorted(switch.ports) + [N.CPU_PORT]
        ids = {name: info.get("counters", name).preamble.id for name, _, _ in PORT_PRIO_COUNTERS}
        self.by_id = {ids[name]: (name, pkts, nbytes) for name, pkts, nbytes in PORT_PRIO_COUNTERS}
        self.drop_id = info.get("counters", N.DROP_REASON_COUNTER).preamble.id
        self.demand_id = info.get("counters", N.DEMAND_BYTES).preamble.id
        entities = [_counter_entity(cid, N.port_prio(p, q)) for cid in ids.values() for p in self.ports
                    for q in range(8)]
        entities += [_counter_entity(self.drop_id, reason) for reason in N.DROP_REASONS]
        self.demand_cells = {N.demand_index(p, rid): (p, rid) for p in sorted(switch.ports) if p <= N.MAX_PORT
                             for rid in routes}
        entities += [_counter_entity(self.demand_id, index) for index in self.demand_cells]
        entities.append(_direct_entity(info.get("tables", N.ECMP_MEMBER).preamble.id))
        entities.append(_direct_entity(info.get("tables", N.TE_OVERRIDE).preamble.id))
        # A direct counter's entry comes back with its key only (P4Runtime): the port is the
        # action's, read from the tables themselves in the same RPC.
        entities.append(_table_entity(info.get("tables", N.ECMP_MEMBER).preamble.id))
        entities.append(_table_entity(info.get("tables", N.TE_OVERRIDE).preamble.id))
        self.request = conn.read_request(entities)

    def fits(self, conn, routes):
        """Still the plan for this connection, its pipeline and these routes."""
        return self.conn is conn and self.info is conn.info() and self.route_ids == routes.keys()


def read_switch(conn, switch, switch_routes, punted=None, plan=None):
    """Everything read_counters() reports for one switch, in one Read RPC; `plan` (a ReadPlan
    from an earlier call) is reused when it still fits. Returns (counters, the plan used)."""
    routes = switch_routes.by_route_id()
    if plan is None or not plan.fits(conn, routes):
        plan = ReadPlan(conn, switch, routes)
    info = plan.info
    ports_of = {}        # (table, match) -> the port its action forwards to
    needs_port = []      # (row, field, (table, match)) filled from ports_of once all is read

    result = {"switch": switch.name, "role": switch.role,
              "ports": {p: {q: dict.fromkeys(FIELDS, 0) for q in range(8)} for p in plan.ports},
              "drops": {name: 0 for name in N.DROP_REASONS.values()},
              "ecmp_members": [], "te_overrides": [], "demands": [],
              "punted": dict(punted or {"pfc": 0, "mac_control": 0})}
    for entity in conn.read(plan.request):
        kind = entity.WhichOneof("entity")
        if kind == "counter_entry":
            c = entity.counter_entry
            index, data = c.index.index, c.data
            if c.counter_id in plan.by_id:
                _, pkts, nbytes = plan.by_id[c.counter_id]
                cell = result["ports"].get(index >> 3, {}).get(index & 7)
                if cell is not None:
                    cell[pkts] = data.packet_count
                    if nbytes:
                        cell[nbytes] = data.byte_count
            elif c.counter_id == plan.drop_id:
                result["drops"][N.DROP_REASONS.get(index, str(index))] = data.packet_count
            elif (c.counter_id == plan.demand_id and index in plan.demand_cells
                  and (data.packet_count or data.byte_count)):
                port, rid = plan.demand_cells[index]
                result["demands"].append({"ingress_port": port, "dst_prefix": routes[rid].prefix, "route_id": rid,
                                          "packets": data.packet_count, "bytes": data.byte_count})
        elif kind == "table_entry":
            entry = info.entry_from(entity.table_entry)
            ports_of[(entry.table, tuple(entry.match))] = dict(entry.params).get("port")
        elif kind == "direct_counter_entry":
            d = entity.direct_counter_entry
            entry = info.entry_from(d.table_entry)
            key = (entry.table, tuple(entry.match))
            if entry.table == info.canonical("tables", N.ECMP_MEMBER):
                row = {"group": entry.match[0][1], "member": entry.match[1][1], "port": None,
                       "packets": d.data.packet_count, "bytes": d.data.byte_count}
                result["ecmp_members"].append(row)
                needs_port.append((row, "port", key))
            else:
                rid = entry.match[1][1]
                route = routes.get(rid)
                row = {"ingress_port": entry.match[0][1], "dst_prefix": route.prefix if route else f"route {rid}",
                       "route_id": rid, "egress_port": None,
                       "packets": d.data.packet_count, "bytes": d.data.byte_count}
                result["te_overrides"].append(row)
                needs_port.append((row, "egress_port", key))
    for row, field, key in needs_port:
        row[field] = ports_of.get(key)
    result["ecmp_members"].sort(key=lambda m: (m["group"], m["member"]))
    result["te_overrides"].sort(key=lambda t: (t["ingress_port"], t["route_id"]))
    result["port_totals"] = {p: {f: sum(prios[q][f] for q in prios) for f in FIELDS}
                             for p, prios in result["ports"].items()}
    return result, plan

