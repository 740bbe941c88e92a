/* fabric.p4 -- the one program every leaf, spine and aggregation switch runs.
 *
 * The lossless-Ethernet toolkit of an AI fabric (Meta, SIGCOMM 2024), in P4_16 for
 * v1model (BMv2 simple_switch_grpc and the rocelab engine):
 *
 *   parser    Ethernet, 802.1Q, MAC control / PFC (0x8808, opcode 0x0101), IPv4, UDP,
 *             TCP ports, RoCEv2 BTH on UDP 4791 with RETH/AETH where the opcode has
 *             them (CNP is BTH opcode 0x81), packet-out header from the CPU port
 *   ingress   DSCP -> priority; IPv4 LPM -> one next hop or an ECMP group;
 *             TE overrides exact on <ingress port, destination prefix> beat ECMP;
 *             ECMP by 5-tuple, 5-tuple + BTH destination QP, or flowlets;
 *             TTL/checksum checks with drop counters; bytes held per ingress priority
 *             group (PG), PFC XOFF to the upstream when its PG passes XOFF; received
 *             PFC counted and punted
 *   egress    RED-style ECN marking from enq_qdepth; the packet leaves its PG: PFC XON
 *             once the PG has drained to XON, XOFF refreshed while it stays above XOFF;
 *             clones turned into 802.1Qbb frames out of the port traffic came in on
 *
 * How a PFC frame gets out ahead of the data it pauses (a MAC inserts PFC frames ahead of
 * its queues; v1model has no such path, and a clone is queued at priority 0, behind the
 * very lossless traffic it should stop). Three passes, the same on BMv2 and the engine:
 *   1. ingress or egress clones the packet to PFC_SESSION (the CPU port, whose queue holds
 *      nothing else), carrying kind, priority and the port to pause in field list 1;
 *   2. egress of that copy recirculates it; ingress of the recirculated copy sends it to
 *      the port to pause at priority 7 (strict priority: served before any data queue);
 *   3. egress there rewrites it into the 60-byte 802.1Qbb frame and counts it.
 *
 * Runtime knobs (all P4Runtime-writable, see testbed/control/ for the controller):
 *   FabricIngress.ecmp_config       keyless table; its default action carries hash mode,
 *                                   QP-aware hashing, flowlet gap (us), flowlet choice
 *                                   (random / least loaded) and a per-switch hash seed
 *   FabricIngress.dscp_to_priority  DSCP -> priority (= egress queue)
 *   FabricIngress.pfc_ingress_config
 *                                   per priority: PFC on (entry present), the PG profile
 *                                   in bytes (XOFF, XON, headroom, reserved) and the XOFF
 *                                   refresh interval (us). The engine's traffic manager
 *                                   takes its lossless PG profiles from these entries
 *                                   (testbed/switch/buffers.py PG_PROFILE_TABLE).
 *   FabricEgress.pfc_port           per port: source MAC and pause quanta of PFC frames
 *   FabricEgress.ecn_config         per priority: Kmin/Kmax (packets), Pmax (x/65536)
 *   clone session PFC_SESSION: one replica to CPU_PORT (the first hop of PFC frames)
 *
 * Port/priority counters and registers are indexed (port << 3) | priority.
 */
#define V1MODEL_VERSION 20200408
#include <core.p4>
#include <v1model.p4>

/* ---------------------------------------------------------------- constants */

const bit<9>  CPU_PORT = 510;             /* testbed.clos.CPU_PORT */

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_VLAN = 0x8100;
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;
const bit<16> MAC_CONTROL_OPCODE_PFC = 0x0101;
const bit<48> PFC_DEST_MAC = 0x0180C2000001;
const bit<32> PFC_FRAME_BYTES = 60;       /* minimum Ethernet frame without FCS */

const bit<8>  IP_PROTO_TCP = 6;
const bit<8>  IP_PROTO_UDP = 17;
const bit<16> UDP_PORT_ROCEV2 = 4791;

/* packet_in.reason */
const bit<8>  PUNT_PFC = 1;
const bit<8>  PUNT_MAC_CONTROL = 2;

/* meta.drop_reason (index of FabricIngress.drop_reason_counter) */
const bit<8>  DROP_NONE = 0;
const bit<8>  DROP_PARSER_ERROR = 1;
const bit<8>  DROP_NOT_IPV4 = 2;
const bit<8>  DROP_BAD_CHECKSUM = 3;
const bit<8>  DROP_TTL_EXPIRED = 4;
const bit<8>  DROP_NO_ROUTE = 5;
const bit<8>  DROP_NO_ECMP_MEMBER = 6;

/* meta.route_kind */
const bit<8>  ROUTE_NONE = 0;
const bit<8>  ROUTE_PORT = 1;
const bit<8>  ROUTE_ECMP = 2;

/* ecmp_config mode */
const bit<8>  HASH_MODE_HASH = 0;         /* 5-tuple, plus the BTH dest QP if qp_aware */
const bit<8>  HASH_MODE_FLOWLET = 1;

/* meta.pfc_clone_kind */
const bit<8>  PFC_CLONE_NONE = 0;
const bit<8>  PFC_CLONE_XOFF = 1;
const bit<8>  PFC_CLONE_XON = 2;

/* v1model instance_type values (BMv2 simple_switch) */
const bit<32> INSTANCE_INGRESS_CLONE = 1;
const bit<32> INSTANCE_EGRESS_CLONE = 2;
const bit<32> INSTANCE_RECIRC = 4;

const bit<32> PFC_SESSION = 100;          /* clone session of PFC frames: one replica to CPU_PORT */
const bit<3>  PFC_FRAME_PRIORITY = 7;     /* the queue PFC frames leave from: served first */
const bit<32> PORT_PRIO_SLOTS = 4096;     /* 512 ports x 8 priorities */
const bit<32> FLOWLET_SLOTS = 4096;
const bit<32> ECMP_MEMBER_SLOTS = 4096;   /* 64 groups x 64 members: (group << 6) | member */
const bit<32> DEMAND_SLOTS = 65536;       /* 256 ingress ports x 256 route ids */
const bit<32> DROP_REASONS = 16;

/* ---------------------------------------------------------------- headers */

@controller_header("packet_in")
header packet_in_t {
    bit<9>  ingress_port;
    bit<8>  reason;
    bit<7>  _pad;
}

@controller_header("packet_out")
header packet_out_t {
    bit<9>  egress_port;
    bit<7>  _pad;
}

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header vlan_t {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> etherType;
}

header mac_control_t {
    bit<16> opcode;
}

/* 802.1Qbb: class-enable vector, then one pause time (quanta) per priority. */
header pfc_t {
    bit<16> class_enable;
    bit<16> time0;
    bit<16> time1;
    bit<16> time2;
    bit<16> time3;
    bit<16> time4;
    bit<16> time5;
    bit<16> time6;
    bit<16> time7;
}

/* Zero padding of a generated PFC frame up to 60 bytes (14 + 2 + 18 + 26). */
header pfc_pad_t {
    bit<208> zeros;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

header tcp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<32> seqNo;
    bit<32> ackNo;
    bit<4>  dataOffset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

/* InfiniBand Base Transport Header (RoCEv2). */
header bth_t {
    bit<8>  opcode;
    bit<1>  se;
    bit<1>  migreq;
    bit<2>  padcnt;
    bit<4>  tver;
    bit<16> pkey;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  resv6;
    bit<24> dqpn;
    bit<1>  ackreq;
    bit<7>  resv7;
    bit<24> psn;
}

/* RDMA Extended Transport Header (WRITE first/only, READ request). */
header reth_t {
    bit<64> va;
    bit<32> rkey;
    bit<32> dmalen;
}

/* ACK Extended Transport Header (ACK, READ responses). */
header aeth_t {
    bit<8>  syndrome;
    bit<24> msn;
}

struct headers_t {
    packet_out_t  packet_out;
    packet_in_t   packet_in;
    ethernet_t    ethernet;
    vlan_t        vlan;
    mac_control_t mac_control;
    pfc_t         pfc;
    pfc_pad_t     pfc_pad;
    ipv4_t        ipv4;
    udp_t         udp;
    tcp_t         tcp;
    bth_t         bth;
    reth_t        reth;
    aeth_t        aeth;
}

struct fabric_metadata_t {
    /* carried into the PFC clone (clone_preserving_field_list index 1) */
    @field_list(1)
    bit<8>  pfc_clone_kind;
    @field_list(1)
    bit<8>  pfc_clone_prio;
    @field_list(1)
    bit<9>  pfc_port;           /* the port the PFC frame leaves by (the paused upstream) */
    bit<1>  pfc_frame_out;      /* this packet is a PFC frame on its way out (pass 3) */

    bit<32> l3_offset;          /* bytes in front of the IPv4 header (packet_out, Ethernet, VLAN) */
    bit<3>  prio;
    bit<32> port_prio;          /* (ingress_port << 3) | prio: the ingress priority group */
    bit<32> pg_charge;          /* bytes charged to pg_bytes[port_prio] at ingress (0: none) */
    bit<8>  drop_reason;

    bit<8>  route_kind;
    bit<16> route_id;           /* the destination prefix the LPM matched, numbered */
    bit<16> ecmp_group;
    bit<16> ecmp_size;
    bit<16> ecmp_member;

    bit<8>  hash_mode;
    bit<1>  qp_aware;
    bit<1>  least_loaded;
    bit<48> flowlet_gap_us;
    bit<16> hash_seed;
    bit<16> l4_sport;
    bit<16> l4_dport;
    bit<24> hash_qpn;

    bit<32> pfc_xoff;
    bit<32> pfc_xon;
    bit<48> pfc_refresh_us;
    bit<48> pfc_src_mac;
    bit<16> pfc_quanta;

    bit<32> ecn_kmin;
    bit<32> ecn_kmax;
    bit<32> ecn_pmax;           /* marking probability at Kmax, in 1/65536 */
}

error {
    IPv4OptionsNotSupported,
    IPv4IncorrectVersion,
    IPv4BadTotalLength
}

/* ------------------------------------------- state shared by ingress and egress */

/* 1 while the upstream of (ingress port, priority) is paused by an XOFF we sent. */
register<bit<1>, bit<32>>(PORT_PRIO_SLOTS) pfc_paused;
/* When that XOFF was last sent (us): XOFF refreshes are rate-limited by it. */
register<bit<48>, bit<32>>(PORT_PRIO_SLOTS) pfc_last_xoff_us;
/* Bytes held per ingress priority group (ingress port, priority) of the lossless
 * priorities: + the packet's length at ingress, - the same at egress. PFC follows it, as
 * production switches account buffer per ingress PG: XOFF to the upstream when its PG
 * passes XOFF, XON when it has drained to XON (the PG's own last packets carry it, so
 * every paused upstream gets its XON). */
register<bit<32>, bit<32>>(PORT_PRIO_SLOTS) pg_bytes;

/* ---------------------------------------------------------------- parser */

parser FabricParser(packet_in packet,
                    out headers_t hdr,
                    inout fabric_metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        meta.l3_offset = 2;
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        meta.l3_offset = meta.l3_offset + 14;
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_VLAN: parse_vlan;
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_MAC_CONTROL: parse_mac_control;
            default: accept;
        }
    }

    state parse_vlan {
        packet.extract(hdr.vlan);
        meta.l3_offset = meta.l3_offset + 4;
        transition select(hdr.vlan.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_mac_control {
        packet.extract(hdr.mac_control);
        transition select(hdr.mac_control.opcode) {
            MAC_CONTROL_OPCODE_PFC: parse_pfc;
            default: accept;
        }
    }

    state parse_pfc {
        packet.extract(hdr.pfc);
        transition accept;
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* Neither BMv2 nor the engine looks inside a header: a wrong version or a total
           length the frame cannot hold would be routed as if valid, so the program checks. */
        verify(hdr.ipv4.version == 4, error.IPv4IncorrectVersion);
        verify(hdr.ipv4.ihl == 5, error.IPv4OptionsNotSupported);
        verify(hdr.ipv4.totalLen >= 20
               && meta.l3_offset + (bit<32>) hdr.ipv4.totalLen <= standard_metadata.packet_length,
               error.IPv4BadTotalLength);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_TCP: parse_tcp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            UDP_PORT_ROCEV2: parse_bth;
            default: accept;
        }
    }

    state parse_bth {
        packet.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            0x06: parse_reth;   /* RC RDMA WRITE First */
            0x0A: parse_reth;   /* RC RDMA WRITE Only */
            0x0B: parse_reth;   /* RC RDMA WRITE Only with Immediate */
            0x0C: parse_reth;   /* RC RDMA READ Request */
            0x26: parse_reth;   /* UC RDMA WRITE First */
            0x2A: parse_reth;   /* UC RDMA WRITE Only */
            0x2B: parse_reth;   /* UC RDMA WRITE Only with Immediate */
            0x0D: parse_aeth;   /* RC RDMA READ Response First */
            0x0F: parse_aeth;   /* RC RDMA READ Response Last */
            0x10: parse_aeth;   /* RC RDMA READ Response Only */
            0x11: parse_aeth;   /* RC Acknowledge */
            0x12: parse_aeth;   /* RC Atomic Acknowledge */
            default: accept;    /* incl. CNP (0x81): BTH + 16 reserved bytes */
        }
    }

    state parse_reth {
        packet.extract(hdr.reth);
        transition accept;
    }

    state parse_aeth {
        packet.extract(hdr.aeth);
        transition accept;
    }
}

/* ---------------------------------------------------------------- checksums */

control FabricVerifyChecksum(inout headers_t hdr, inout fabric_metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout fabric_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

/* ---------------------------------------------------------------- ingress */

control FabricIngress(inout headers_t hdr,
                      inout fabric_metadata_t meta,
                      inout standard_metadata_t standard_metadata) {

    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets_and_bytes) rx_port_prio;
    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets_and_bytes) drop_port_prio;
    counter<bit<32>>(DROP_REASONS, CounterType.packets) drop_reason_counter;
    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets) pfc_rx_port_prio;
    /* traffic matrix for TE: bytes per (ingress port << 8) | route id */
    counter<bit<32>>(DEMAND_SLOTS, CounterType.packets_and_bytes) demand_bytes;
    direct_counter(CounterType.packets_and_bytes) ecmp_member_counter;
    direct_counter(CounterType.packets_and_bytes) te_override_counter;

    /* flowlets: per flow hash, when it was last seen and its member + 1 (0 = none) */
    register<bit<48>, bit<32>>(FLOWLET_SLOTS) flowlet_last_seen;
    register<bit<16>, bit<32>>(FLOWLET_SLOTS) flowlet_member;
    /* bytes sent through each ECMP member, for least-loaded flowlet placement */
    register<bit<48>, bit<32>>(ECMP_MEMBER_SLOTS) ecmp_member_load;

    /* --- knobs --- */
    action set_ecmp_config(bit<8> mode, bit<1> qp_aware, bit<48> flowlet_gap_us,
                           bit<1> least_loaded, bit<16> seed) {
        meta.hash_mode = mode;
        meta.qp_aware = qp_aware;
        meta.flowlet_gap_us = flowlet_gap_us;
        meta.least_loaded = least_loaded;
        meta.hash_seed = seed;
    }

    table ecmp_config {
        actions = { set_ecmp_config; }
        default_action = set_ecmp_config(HASH_MODE_HASH, 0, 100, 0, 0);
        size = 1;
    }

    action set_priority(bit<3> priority) {
        meta.prio = priority;
    }

    table dscp_to_priority {
        key = { hdr.ipv4.dscp : exact; }
        actions = { set_priority; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    /* headroom and reserved are the traffic manager's (the bytes a PG may still take after
     * XOFF, and its guaranteed share); the program only carries them. */
    action set_pfc_ingress(bit<32> xoff, bit<32> xon, bit<32> headroom, bit<32> reserved,
                           bit<48> refresh_us) {
        meta.pfc_xoff = xoff;
        meta.pfc_xon = xon;
        meta.pfc_refresh_us = refresh_us;
    }

    table pfc_ingress_config {
        key = { meta.prio : exact; }
        actions = { set_pfc_ingress; NoAction; }
        default_action = NoAction();
        size = 8;
    }

    /* --- forwarding --- */
    action forward(bit<9> port, bit<48> smac, bit<48> dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
    }

    action route_to_port(bit<16> route_id, bit<9> port, bit<48> smac, bit<48> dmac) {
        meta.route_kind = ROUTE_PORT;
        meta.route_id = route_id;
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
    }

    action route_to_group(bit<16> route_id, bit<16> group, bit<16> size) {
        meta.route_kind = ROUTE_ECMP;
        meta.route_id = route_id;
        meta.ecmp_group = group;
        meta.ecmp_size = size;
    }

    action no_route() {
        meta.route_kind = ROUTE_NONE;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { route_to_port; route_to_group; no_route; }
        default_action = no_route();
        size = 1024;
    }

    /* Meta's TE: an override for <ingress port, destination prefix> wins over ECMP. */
    table te_override {
        key = {
            standard_metadata.ingress_port : exact;
            meta.route_id : exact;
        }
        actions = { forward; NoAction; }
        default_action = NoAction();
        counters = te_override_counter;
        size = 1024;
    }

    table ecmp_member {
        key = {
            meta.ecmp_group : exact;
            meta.ecmp_member : exact;
        }
        actions = { forward; NoAction; }
        default_action = NoAction();
        counters = ecmp_member_counter;
        size = 4096;
    }

    apply {
        if (standard_metadata.instance_type == INSTANCE_RECIRC && meta.pfc_clone_kind != PFC_CLONE_NONE) {
            /* A PFC copy back from its first egress pass: to the port it pauses, ahead of data. */
            standard_metadata.egress_spec = meta.pfc_port;
            standard_metadata.priority = PFC_FRAME_PRIORITY;
            meta.pfc_frame_out = 1;
            exit;
        }

        if (hdr.packet_out.isValid()) {
            /* From the controller: out of the port it names, as control traffic. */
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            meta.prio = 7;
            standard_metadata.priority = 7;
            exit;
        }

        if (hdr.mac_control.isValid()) {
            /* Only targets without a MAC model (BMv2) get here: count, punt to the
             * switch agent, which pauses the port through the target's queue API. */
            bit<32> base = (bit<32>)standard_metadata.ingress_port << 3;
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in.reason = PUNT_MAC_CONTROL;
            hdr.packet_in._pad = 0;
            if (hdr.pfc.isValid()) {
                hdr.packet_in.reason = PUNT_PFC;
                if (hdr.pfc.class_enable[0:0] == 1) { pfc_rx_port_prio.count(base | 0); }
                if (hdr.pfc.class_enable[1:1] == 1) { pfc_rx_port_prio.count(base | 1); }
                if (hdr.pfc.class_enable[2:2] == 1) { pfc_rx_port_prio.count(base | 2); }
                if (hdr.pfc.class_enable[3:3] == 1) { pfc_rx_port_prio.count(base | 3); }
                if (hdr.pfc.class_enable[4:4] == 1) { pfc_rx_port_prio.count(base | 4); }
                if (hdr.pfc.class_enable[5:5] == 1) { pfc_rx_port_prio.count(base | 5); }
                if (hdr.pfc.class_enable[6:6] == 1) { pfc_rx_port_prio.count(base | 6); }
                if (hdr.pfc.class_enable[7:7] == 1) { pfc_rx_port_prio.count(base | 7); }
            }
            meta.prio = 7;
            standard_metadata.priority = 7;
            standard_metadata.egress_spec = CPU_PORT;
            exit;
        }

        /* --- classification: DSCP (or the VLAN PCP) selects the queue --- */
        meta.prio = 0;
        if (hdr.vlan.isValid()) {
            meta.prio = hdr.vlan.pcp;
        }
        if (hdr.ipv4.isValid()) {
            dscp_to_priority.apply();
        }
        standard_metadata.priority = meta.prio;
        meta.port_prio = ((bit<32>)standard_metadata.ingress_port << 3) | (bit<32>)meta.prio;
        rx_port_prio.count(meta.port_prio);

        /* --- sanity checks --- */
        meta.drop_reason = DROP_NONE;
        if (standard_metadata.parser_error != error.NoError) {
            meta.drop_reason = DROP_PARSER_ERROR;
        } else if (!hdr.ipv4.isValid()) {
            meta.drop_reason = DROP_NOT_IPV4;
        } else if (standard_metadata.checksum_error == 1) {
            meta.drop_reason = DROP_BAD_CHECKSUM;
        } else if (hdr.ipv4.ttl <= 1) {
            meta.drop_reason = DROP_TTL_EXPIRED;
        }

        /* --- routing --- */
        if (meta.drop_reason == DROP_NONE) {
            meta.route_kind = ROUTE_NONE;
            ipv4_lpm.apply();
            if (meta.route_kind == ROUTE_NONE) {
                meta.drop_reason = DROP_NO_ROUTE;
            }
        }

        if (meta.drop_reason == DROP_NONE) {
            demand_bytes.count(((bit<32>)standard_metadata.ingress_port << 8) | (bit<32>)meta.route_id[7:0]);
            if (!te_override.apply().hit) {
              if (meta.route_kind == ROUTE_ECMP) {
                /* --- ECMP member selection --- */
                ecmp_config.apply();
                meta.l4_sport = 0;
                meta.l4_dport = 0;
                if (hdr.udp.isValid()) {
                    meta.l4_sport = hdr.udp.srcPort;
                    meta.l4_dport = hdr.udp.dstPort;
                } else if (hdr.tcp.isValid()) {
                    meta.l4_sport = hdr.tcp.srcPort;
                    meta.l4_dport = hdr.tcp.dstPort;
                }
                meta.hash_qpn = 0;
                if (meta.qp_aware == 1 && hdr.bth.isValid()) {
                    meta.hash_qpn = hdr.bth.dqpn;
                }

                if (meta.hash_mode == HASH_MODE_FLOWLET) {
                    bit<32> slot;
                    hash(slot, HashAlgorithm.crc32, (bit<32>)0,
                         { meta.hash_seed, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol,
                           meta.l4_sport, meta.l4_dport, meta.hash_qpn },
                         FLOWLET_SLOTS);
                    bit<48> now = standard_metadata.ingress_global_timestamp;
                    bit<48> last_seen;
                    bit<16> stored;
                    flowlet_last_seen.read(last_seen, slot);
                    flowlet_member.read(stored, slot);
                    if (stored == 0 || stored > meta.ecmp_size || now - last_seen > meta.flowlet_gap_us) {
                        /* a new flowlet: free to take another path */
                        random(meta.ecmp_member, (bit<16>)0, meta.ecmp_size - 1);
                        if (meta.least_loaded == 1 && meta.ecmp_size > 1) {
                            /* power of two choices: a second, different member; keep the
                             * one that has carried fewer bytes */
                            bit<16> offset;
                            random(offset, (bit<16>)1, meta.ecmp_size - 1);
                            bit<16> other = meta.ecmp_member + offset;
                            if (other >= meta.ecmp_size) {
                                other = other - meta.ecmp_size;
                            }
                            bit<48> load_a;
                            bit<48> load_b;
                            ecmp_member_load.read(load_a, ((bit<32>)meta.ecmp_group << 6) | (bit<32>)meta.ecmp_member);
                            ecmp_member_load.read(load_b, ((bit<32>)meta.ecmp_group << 6) | (bit<32>)other);
                            if (load_b < load_a) {
                                meta.ecmp_member = other;
                            }
                        }
                        flowlet_member.write(slot, meta.ecmp_member + 1);
                    } else {
                        meta.ecmp_member = stored - 1;
                    }
                    flowlet_last_seen.write(slot, now);
                } else {
                    /* crc32, not crc16: BMv2's crc16 polynomial has an (x + 1) factor, and its
                     * low bits take only two values when just the QPN varies, so QPs would
                     * use 2 of 4 members.
                     * The seed multiplies the CRC instead of entering it: a CRC is linear, so
                     * a seed among its inputs only XORs a constant into the result, and with
                     * 2^k members every seed would group the same flows together (relabelled).
                     * The high half of an odd multiple depends on every bit of the CRC, a
                     * different mix per seed, as switches' hash seeds do. */
                    bit<32> flow_hash;
                    hash(flow_hash, HashAlgorithm.crc32, (bit<32>)0,
                         { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol,
                           meta.l4_sport, meta.l4_dport, meta.hash_qpn },
                         (bit<64>)0x100000000);
                    bit<32> mixed = flow_hash * (((bit<32>)meta.hash_seed * 32w0x9E3779B1) | 1);
                    hash(meta.ecmp_member, HashAlgorithm.identity, (bit<16>)0, { mixed[31:16] },
                         meta.ecmp_size);
                }

                if (ecmp_member.apply().hit) {
                    bit<32> member_slot = ((bit<32>)meta.ecmp_group << 6) | (bit<32>)meta.ecmp_member;
                    bit<48> load;
                    ecmp_member_load.read(load, member_slot);
                    ecmp_member_load.write(member_slot, load + (bit<48>)standard_metadata.packet_length);
                } else {
                    meta.drop_reason = DROP_NO_ECMP_MEMBER;
                }
              }
            }
        }

        if (meta.drop_reason != DROP_NONE) {
            mark_to_drop(standard_metadata);
            drop_port_prio.count(meta.port_prio);
            drop_reason_counter.count((bit<32>)meta.drop_reason);
        } else {
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;

            /* --- PFC: charge the ingress PG; XOFF to the upstream once it passes XOFF --- */
            if (pfc_ingress_config.apply().hit) {
                bit<32> held;
                pg_bytes.read(held, meta.port_prio);
                held = held + standard_metadata.packet_length;
                pg_bytes.write(meta.port_prio, held);
                meta.pg_charge = standard_metadata.packet_length;
                if (held >= meta.pfc_xoff) {
                    bit<1> paused;
                    bit<48> last_xoff;
                    bit<48> now_us = standard_metadata.ingress_global_timestamp;
                    pfc_paused.read(paused, meta.port_prio);
                    pfc_last_xoff_us.read(last_xoff, meta.port_prio);
                    if (paused == 0 || now_us - last_xoff >= meta.pfc_refresh_us) {
                        pfc_paused.write(meta.port_prio, 1);
                        pfc_last_xoff_us.write(meta.port_prio, now_us);
                        meta.pfc_clone_kind = PFC_CLONE_XOFF;
                        meta.pfc_clone_prio = (bit<8>)meta.prio;
                        meta.pfc_port = standard_metadata.ingress_port;
                        clone_preserving_field_list(CloneType.I2E, PFC_SESSION, 1);
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- egress */

control FabricEgress(inout headers_t hdr,
                     inout fabric_metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets_and_bytes) tx_port_prio;
    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets) ecn_mark_port_prio;
    counter<bit<32>>(PORT_PRIO_SLOTS, CounterType.packets) pfc_tx_port_prio;

    action set_pfc_port(bit<48> smac, bit<16> quanta) {
        meta.pfc_src_mac = smac;
        meta.pfc_quanta = quanta;
    }

    table pfc_port {
        key = { standard_metadata.egress_port : exact; }
        actions = { set_pfc_port; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    action set_ecn_thresholds(bit<32> kmin, bit<32> kmax, bit<32> pmax) {
        meta.ecn_kmin = kmin;
        meta.ecn_kmax = kmax;
        meta.ecn_pmax = pmax;
    }

    table ecn_config {
        key = { meta.prio : exact; }
        actions = { set_ecn_thresholds; NoAction; }
        default_action = NoAction();
        size = 8;
    }

    apply {
        if (standard_metadata.instance_type == INSTANCE_INGRESS_CLONE ||
            standard_metadata.instance_type == INSTANCE_EGRESS_CLONE) {
            /* The only clones this program makes are PFC copies: back to ingress (pass 2). */
            if (meta.pfc_clone_kind != PFC_CLONE_NONE) {
                recirculate_preserving_field_list(1);
            } else {
                mark_to_drop(standard_metadata);
            }
            exit;
        }

        if (meta.pfc_frame_out == 1) {
            /* Pass 3: leaving from queue 7 of the paused port; rewrite into the PFC frame. */
            bool built = false;
            if (pfc_port.apply().hit) {
                built = true;
                bit<16> quanta = 0;
                if (meta.pfc_clone_kind == PFC_CLONE_XOFF) {
                    quanta = meta.pfc_quanta;
                }
                hdr.packet_in.setInvalid();
                hdr.vlan.setInvalid();
                hdr.ipv4.setInvalid();
                hdr.udp.setInvalid();
                hdr.tcp.setInvalid();
                hdr.bth.setInvalid();
                hdr.reth.setInvalid();
                hdr.aeth.setInvalid();
                hdr.ethernet.setValid();
                hdr.ethernet.dstAddr = PFC_DEST_MAC;
                hdr.ethernet.srcAddr = meta.pfc_src_mac;
                hdr.ethernet.etherType = ETHERTYPE_MAC_CONTROL;
                hdr.mac_control.setValid();
                hdr.mac_control.opcode = MAC_CONTROL_OPCODE_PFC;
                hdr.pfc.setValid();
                hdr.pfc.class_enable = (bit<16>)1 << (bit<8>)meta.pfc_clone_prio;
                hdr.pfc.time0 = 0;
                hdr.pfc.time1 = 0;
                hdr.pfc.time2 = 0;
                hdr.pfc.time3 = 0;
                hdr.pfc.time4 = 0;
                hdr.pfc.time5 = 0;
                hdr.pfc.time6 = 0;
                hdr.pfc.time7 = 0;
                if (meta.pfc_clone_prio == 0) { hdr.pfc.time0 = quanta; }
                if (meta.pfc_clone_prio == 1) { hdr.pfc.time1 = quanta; }
                if (meta.pfc_clone_prio == 2) { hdr.pfc.time2 = quanta; }
                if (meta.pfc_clone_prio == 3) { hdr.pfc.time3 = quanta; }
                if (meta.pfc_clone_prio == 4) { hdr.pfc.time4 = quanta; }
                if (meta.pfc_clone_prio == 5) { hdr.pfc.time5 = quanta; }
                if (meta.pfc_clone_prio == 6) { hdr.pfc.time6 = quanta; }
                if (meta.pfc_clone_prio == 7) { hdr.pfc.time7 = quanta; }
                hdr.pfc_pad.setValid();
                hdr.pfc_pad.zeros = 0;
                truncate(PFC_FRAME_BYTES);
                pfc_tx_port_prio.count(((bit<32>)standard_metadata.egress_port << 3) |
                                       (bit<32>)meta.pfc_clone_prio);
            }
            if (!built) {
                mark_to_drop(standard_metadata);
            }
            exit;
        }

        bit<32> queue_slot = ((bit<32>)standard_metadata.egress_port << 3) | (bit<32>)meta.prio;

        if (standard_metadata.egress_port != CPU_PORT) {
            /* --- ECN: RED between Kmin and Kmax, always above Kmax; ECT packets only --- */
            if (hdr.ipv4.isValid() && (hdr.ipv4.ecn == 1 || hdr.ipv4.ecn == 2)) {
                if (ecn_config.apply().hit) {
                    bit<32> depth = (bit<32>)standard_metadata.enq_qdepth;
                    bool mark = false;
                    if (depth > meta.ecn_kmax) {
                        mark = true;
                    } else if (depth > meta.ecn_kmin) {
                        /* mark with probability pmax * (depth - kmin) / (kmax - kmin):
                         * Pmax at Kmax itself, every packet above it */
                        bit<32> dice;
                        random(dice, (bit<32>)0, (bit<32>)65535);
                        bit<64> lhs = (bit<64>)dice * (bit<64>)(meta.ecn_kmax - meta.ecn_kmin);
                        bit<64> rhs = (bit<64>)meta.ecn_pmax * (bit<64>)(depth - meta.ecn_kmin);
                        if (lhs < rhs) {
                            mark = true;
                        }
                    }
                    if (mark) {
                        hdr.ipv4.ecn = 3;
                        ecn_mark_port_prio.count(queue_slot);
                    }
                }
            }
        }

        /* --- PFC: the packet leaves its ingress PG (XOFF/XON/refresh came from ingress) --- */
        if (meta.pg_charge != 0) {
            bit<32> held;
            pg_bytes.read(held, meta.port_prio);
            if (held > meta.pg_charge) {
                held = held - meta.pg_charge;
            } else {
                held = 0;
            }
            pg_bytes.write(meta.port_prio, held);
            bit<1> paused;
            bit<48> last_xoff;
            bit<48> now_us = standard_metadata.egress_global_timestamp;
            pfc_paused.read(paused, meta.port_prio);
            pfc_last_xoff_us.read(last_xoff, meta.port_prio);
            if (paused == 1) {
                if (held >= meta.pfc_xoff) {
                    /* still full: refresh the pause before it runs out */
                    if (now_us - last_xoff >= meta.pfc_refresh_us) {
                        pfc_last_xoff_us.write(meta.port_prio, now_us);
                        meta.pfc_clone_kind = PFC_CLONE_XOFF;
                        meta.pfc_clone_prio = (bit<8>)meta.prio;
                        meta.pfc_port = standard_metadata.ingress_port;
                        clone_preserving_field_list(CloneType.E2E, PFC_SESSION, 1);
                    }
                } else if (held <= meta.pfc_xon) {
                    pfc_paused.write(meta.port_prio, 0);
                    meta.pfc_clone_kind = PFC_CLONE_XON;
                    meta.pfc_clone_prio = (bit<8>)meta.prio;
                    meta.pfc_port = standard_metadata.ingress_port;
                    clone_preserving_field_list(CloneType.E2E, PFC_SESSION, 1);
                }
            }
        }

        tx_port_prio.count(queue_slot);
    }
}

/* ---------------------------------------------------------------- deparser */

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.vlan);
        packet.emit(hdr.mac_control);
        packet.emit(hdr.pfc);
        packet.emit(hdr.pfc_pad);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
        packet.emit(hdr.bth);
        packet.emit(hdr.reth);
        packet.emit(hdr.aeth);
    }
}

V1Switch(FabricParser(),
         FabricVerifyChecksum(),
         FabricIngress(),
         FabricEgress(),
         FabricComputeChecksum(),
         FabricDeparser()) main;
