/* The engine benchmark's program: what a fabric leaf does to a RoCEv2 packet, in small.
 *
 * Parse Ethernet/IPv4/UDP/BTH; a ternary ACL on DSCP/ECN/UDP port picks the traffic class;
 * an LPM route on the destination picks an ECMP group served by an action selector that
 * hashes the 5-tuple plus the destination QP; an exact table rewrites MACs per next hop;
 * a crc16 hash of the flow indexes a register holding the flow's last-seen timestamp
 * (a flowlet detector's state); the TTL drops and the IPv4 checksum is recomputed. */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<6> dscp; bit<2> ecn; bit<16> totalLen; bit<16> identification;
    bit<3> flags; bit<13> fragOffset; bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
header bth_t {
    bit<8> opcode; bit<1> se; bit<1> migreq; bit<2> padCount; bit<4> tver; bit<16> pkey;
    bit<1> fecn; bit<1> becn; bit<6> resv6; bit<24> dqpn; bit<1> ackreq; bit<7> resv7; bit<24> psn;
}
struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; bth_t bth; }
struct metadata_t { bit<16> nexthop; bit<16> flow_hash; bit<48> last_seen; }

parser FabricParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 0x0800: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) { 17: parse_udp; default: accept; }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) { 4791: parse_bth; default: accept; }
    }
    state parse_bth { packet.extract(hdr.bth); transition accept; }
}

control FabricVerify(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control FabricIngress(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    register<bit<48>>(4096) flow_last_seen;

    action drop() { mark_to_drop(standard_metadata); }
    action set_class(bit<3> prio) { standard_metadata.priority = prio; }
    action set_nexthop(bit<16> nexthop, bit<9> port) {
        meta.nexthop = nexthop;
        standard_metadata.egress_spec = port;
    }
    action rewrite_macs(bit<48> src, bit<48> dst) {
        hdr.ethernet.srcAddr = src;
        hdr.ethernet.dstAddr = dst;
    }

    table acl {
        key = { hdr.ipv4.dscp: ternary; hdr.ipv4.ecn: ternary; hdr.udp.dstPort: ternary; }
        actions = { set_class; drop; NoAction; }
        default_action = NoAction();
        size = 256;
    }
    table route {
        key = {
            hdr.ipv4.dstAddr: lpm;
            hdr.ipv4.srcAddr: selector;
            hdr.ipv4.dstAddr: selector;
            hdr.udp.srcPort: selector;
            hdr.bth.dqpn: selector;
        }
        actions = { set_nexthop; drop; }
        default_action = drop();
        implementation = action_selector(HashAlgorithm.crc16, 1024, 16);
        size = 1024;
    }
    table nexthop_macs {
        key = { meta.nexthop: exact; }
        actions = { rewrite_macs; drop; }
        default_action = drop();
        size = 1024;
    }

    apply {
        if (!hdr.ipv4.isValid()) { drop(); return; }
        acl.apply();
        route.apply();
        nexthop_macs.apply();
        hash(meta.flow_hash, HashAlgorithm.crc16, (bit<16>) 0,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.udp.srcPort, hdr.bth.dqpn }, (bit<32>) 4096);
        flow_last_seen.read(meta.last_seen, (bit<32>) meta.flow_hash);
        flow_last_seen.write((bit<32>) meta.flow_hash, standard_metadata.ingress_global_timestamp);
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
}

control FabricEgress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) { apply { } }

control FabricCompute(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.bth);
    }
}

V1Switch(FabricParser(), FabricVerify(), FabricIngress(), FabricEgress(), FabricCompute(),
         FabricDeparser()) main;
