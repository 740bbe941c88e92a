"""Links whose rate, queue depth, delay, jitter and loss are properties of the switch port.

The kernels here have no netem or red qdisc, and queues must build where the P4 program
sees them (``enq_qdepth``), so nothing is configured with `tc`: a link is a plain veth
pair and its :class:`PortModel` is handed to the switch at each end, whose traffic
manager shapes, queues, delays and drops. A host end has no switch; the emulated NIC
(traffic/) paces itself at the link rate.
"""
import math
from dataclasses import asdict, dataclass, replace

from mininet.link import Intf, Link

DEFAULT_QUEUE_DEPTH = 64  # packets per priority queue, BMv2's default


@dataclass(frozen=True)
class PortModel:
    rate_mbps: float  # egress rate the port drains at (0 = unshaped)
    queue_depth: int = DEFAULT_QUEUE_DEPTH  # packets per priority queue
    delay_us: float = 0.0  # one-way propagation delay
    jitter_us: float = 0.0  # uniform extra delay 0..jitter
    loss: float = 0.0  # probability a frame is lost on the wire

    def __post_init__(self):
        problems = []
        numbers = (self.rate_mbps, self.queue_depth, self.delay_us, self.jitter_us, self.loss)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers):
            raise ValueError(f"port model: every value must be a finite number (got {numbers})")
        if self.rate_mbps < 0:
            problems.append(f"rate {self.rate_mbps} Mb/s is negative")
        if int(self.queue_depth) != self.queue_depth or self.queue_depth < 1:
            problems.append(f"queue depth {self.queue_depth} must be a whole number of packets >= 1")
        if self.delay_us < 0 or self.jitter_us < 0:
            problems.append("delay and jitter must not be negative")
        if not 0.0 <= self.loss <= 1.0:
            problems.append(f"loss {self.loss} is not a probability between 0 and 1")
        if problems:
            raise ValueError("port model: " + "; ".join(problems))

    def with_rate(self, rate_mbps):
        return replace(self, rate_mbps=rate_mbps)

    def as_dict(self):
        return asdict(self)


class FabricIntf(Intf):
    """A veth end configured in batches by its node, not one shell command at a time.

    Mininet's Intf runs `ifconfig` for the MAC and for `up` per interface; the MAC is
    already set when the pair is created and nodes bring their ports up together,
    which keeps boot time flat as the fabric grows."""

    def __init__(self, name, node=None, port=None, link=None, mac=None, port_model=None, **params):
        self.port_model = port_model
        super().__init__(name, node=node, port=port, link=link, mac=mac, **params)

    def config(self, mac=None, ip=None, **_params):
        if ip:
            self.ip, _, plen = ip.partition("/")
            self.prefixLen = int(plen or 32)
        return {}

    def delete(self):
        # Teardown removes interfaces by the ledger (or with their namespace); a node's
        # shell may be gone already, so never go through it here.
        self.node.delIntf(self)
        self.link = None


class FabricLink(Link):
    """A veth pair between two fabric nodes carrying a PortModel for each end."""

    def __init__(self, node1, node2, port1, port2, intfName1, intfName2, addr1, addr2,
                 model1=None, model2=None, intf=None):
        super().__init__(node1, node2, port1=port1, port2=port2,
                         intfName1=intfName1, intfName2=intfName2, addr1=addr1, addr2=addr2,
                         intf=FabricIntf, fast=True,
                         params1={"port_model": model1}, params2={"port_model": model2})

    def stop(self):
        pass  # see FabricIntf.delete

    def delete(self):
        pass
