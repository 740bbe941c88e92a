"""Links whose rate, queue depth, delay, jitter and loss are properties of the switch port.

The kernels here have no netem or red qdisc, and queues must build where the P4 program
sees them (``enq_qdepth``), so nothing is configured with `tc`: a link is a plain veth
pair and its :class:`PortModel` is handed to the switch at each end, whose traffic
manager shapes, queues, delays and drops. A host end has no switch; the emulated NIC
(traffic/) paces itself at the link rate.
"""
from mininet.link import Intf, Link

from testbed.net.port_model import DEFAULT_QUEUE_DEPTH, PortModel  # noqa: F401  (re-exported)


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
