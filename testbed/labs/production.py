"""What the virtual-time labs share: production port settings, ring jobs at 400G, and the
realistic RoCE flows the ECMP figures hash.

Units are the paper's (testbed/sim/profile.py): 400 Gb/s host links, RoCE MTU 4096, egress
queues of 4096 full-size frames (~17 MB), ECN at 5 MB, PFC XOFF at ~4.3 MB.
"""
from testbed.labs import metrics
from testbed.sim import profile

PORTS = {"queue_depth": profile.QUEUE_PACKETS}
RING_CHUNK_BYTES = 65536       # NCCL-like slices: a ring step forwards 64 KB messages as they arrive


def ring_job(clos, size, seed=0, qps=1, name=None, dcqcn=False, chunk_bytes=RING_CHUNK_BYTES):
    """A ring AllReduce on every host at production units, ring neighbours on different leaves
    (every hop crosses the spines), hosts within a leaf shuffled by `seed`, pipelined in slices."""
    from testbed.net.experiment import job_for
    job = job_for(clos, "ring_allreduce", [size], qps_per_connection=qps, name=name, chunk_bytes=chunk_bytes,
                  mtu=profile.NIC_MTU, dcqcn=dcqcn)
    job["ranks"] = metrics.interleaved(job["ranks"], seed)
    job["slicing"] = True
    return job


def roce_flows(clos, leaf, count, qps_per_connection=4, qpn_base=0x100):
    """`count` RoCE WRITE frames, one per flow, as the NICs under `leaf` send them to hosts on
    other leaves: each connection (source host, destination host) has `qps_per_connection` QPs,
    numbered and given UDP source ports as traffic/ runs them. Returns [(ingress port, frame)]."""
    from traffic import packets as P
    from traffic.nic import udp_source_port
    hosts = list(clos.hosts.values())
    index = {h.name: i for i, h in enumerate(hosts)}
    local = [h for h in hosts if h.nics[0].leaf == leaf]
    remote = [h for h in hosts if h.nics[0].leaf != leaf]
    flows = []
    for q in range(qps_per_connection):
        for src in local:
            for dst in remote:
                if len(flows) == count:
                    return flows
                s, d = index[src.name], index[dst.name]
                local_qpn = qpn_base + d * qps_per_connection + q
                remote_qpn = qpn_base + s * qps_per_connection + q
                bth = P.write_bth(P.RC_WRITE_ONLY, remote_qpn, 0, payload=b"\0" * 64)
                frame = P.roce(src.nics[0].mac, src.nics[0].gateway_mac, src.nics[0].ip, dst.nics[0].ip,
                               udp_source_port(local_qpn, remote_qpn), bth)
                flows.append((src.nics[0].leaf_port, bytes(frame)))
    if len(flows) < count:
        raise ValueError(f"{leaf}: only {len(flows)} flows with {qps_per_connection} QPs per connection; "
                         f"{count} asked for")
    return flows


def flow_counts(switch, flows):
    """{egress port: flows} when `switch` (an engine Switch with its pipeline) forwards one frame
    of each flow: the P4 program's own hash decides, as it does for the traffic."""
    counts = {}
    for port, frame in flows:
        for job in switch.pipeline.ingress(port, frame, 0):
            counts[job.egress_port] = counts.get(job.egress_port, 0) + 1
    return counts
