"""The names and numbers of p4/fabric.p4 that the controller programs against.

One place for them, so a rename in the program is a one-line change here. Names are
P4Info preamble names (fully qualified); lookups also accept the short alias.
"""

# --- tables ---
ECMP_CONFIG = "FabricIngress.ecmp_config"            # keyless: default action = the hash knobs
DSCP_TO_PRIORITY = "FabricIngress.dscp_to_priority"
PFC_INGRESS_CONFIG = "FabricIngress.pfc_ingress_config"
IPV4_LPM = "FabricIngress.ipv4_lpm"
TE_OVERRIDE = "FabricIngress.te_override"
ECMP_MEMBER = "FabricIngress.ecmp_member"
PFC_PORT = "FabricEgress.pfc_port"
ECN_CONFIG = "FabricEgress.ecn_config"

# --- actions ---
SET_ECMP_CONFIG = "FabricIngress.set_ecmp_config"
SET_PRIORITY = "FabricIngress.set_priority"
SET_PFC_INGRESS = "FabricIngress.set_pfc_ingress"
FORWARD = "FabricIngress.forward"
ROUTE_TO_PORT = "FabricIngress.route_to_port"
ROUTE_TO_GROUP = "FabricIngress.route_to_group"
SET_PFC_PORT = "FabricEgress.set_pfc_port"
SET_ECN_THRESHOLDS = "FabricEgress.set_ecn_thresholds"

# --- counters (indexed (port << 3) | priority unless said otherwise) ---
RX_PORT_PRIO = "FabricIngress.rx_port_prio"
DROP_PORT_PRIO = "FabricIngress.drop_port_prio"
DROP_REASON_COUNTER = "FabricIngress.drop_reason_counter"   # index = DROP_REASONS key
PFC_RX_PORT_PRIO = "FabricIngress.pfc_rx_port_prio"
DEMAND_BYTES = "FabricIngress.demand_bytes"                  # (ingress port << 8) | route id
TX_PORT_PRIO = "FabricEgress.tx_port_prio"
ECN_MARK_PORT_PRIO = "FabricEgress.ecn_mark_port_prio"
PFC_TX_PORT_PRIO = "FabricEgress.pfc_tx_port_prio"

# --- numbers fixed by the program ---
CPU_PORT = 510
PFC_SESSION = 100               # clone session of PFC frames: one replica to CPU_PORT, recirculated from there
MAX_ECMP_GROUPS = 64            # (group << 6) | member indexes the per-member load register
MAX_ECMP_MEMBERS = 64
MAX_ROUTE_ID = 255              # the demand counter keeps 8 bits of the route id
MAX_PORT = 255                  # demand counter: 8 bits of ingress port
HASH_MODE_HASH = 0
HASH_MODE_FLOWLET = 1
PUNT_PFC = 1
PUNT_MAC_CONTROL = 2

DROP_REASONS = {
    1: "parser_error",
    2: "not_ipv4",
    3: "bad_checksum",
    4: "ttl_expired",
    5: "no_route",
    6: "no_ecmp_member",
}


def port_prio(port, priority):
    """Index of the (port, priority) cell of a per-port-and-priority counter or register."""
    return (port << 3) | priority


def demand_index(ingress_port, route_id):
    return (ingress_port << 8) | (route_id & 0xFF)
