"""The switch agent of a fabric node, and handing it the node's PortModels.

The switch side owns the mechanism (testbed/switch/agent.py: the engine's agent over
TCP, BMv2's Thrift CLI); this module only picks the right agent for a Mininet switch
node and translates a fabric's PortModels and PFC setting into agent calls, so the
Mininet side does not depend on how a target applies them.
"""

#: The lossless priority of the fabric (RoCE data, DSCP 26): its PFC frames pause a port.
LOSSLESS_PRIORITIES = (3,)


def agent_port(target, clos_switch):
    """The TCP port of a switch's agent: BMv2's Thrift port as the Clos gives it; the engine's
    agent at `rocelab switch`'s default, a fixed offset above its P4Runtime port."""
    if target == "bmv2":
        return clos_switch.thrift_port
    from testbed.switch.cli import AGENT_PORT_OFFSET
    return clos_switch.grpc_port + AGENT_PORT_OFFSET


def agent_for(node):
    """A SwitchAgent for a running P4Switch node."""
    port = agent_port(node.target, node.clos_switch)
    if node.target == "bmv2":
        from testbed.switch.bmv2 import Bmv2Agent
        return Bmv2Agent(port, ports=list(node.port_interfaces()))
    from testbed.switch.agent import RemoteEngineAgent
    return RemoteEngineAgent(f"127.0.0.1:{port}")


#: Packets a lossless queue may hold on a target whose queues only know packet limits (BMv2):
#: more than the buffer's lossless share ever puts in one queue (16 MB of 64-byte frames), so
#: the lossless class is paused by PFC before it could be tail-dropped. The engine ignores
#: packet limits on lossless queues (its buffer decides at ingress).
LOSSLESS_QUEUE_PACKETS = 262_144


def apply_port_models(agent, models, pfc_priorities=LOSSLESS_PRIORITIES, watchdog_s=None):
    """models: {port: PortModel}. Rate, queue depth (lossy queues; lossless ones get
    LOSSLESS_QUEUE_PACKETS), impairments and which received PFC priorities pause the port
    (empty: PFC frames are ignored, as with PFC off); the PFC watchdog's detection time
    (seconds, 0 off; None: the switch's own) where the target has one (the engine)."""
    if watchdog_s is not None:
        try:
            agent.set_watchdog(detect_ms=watchdog_s * 1000.0)
        except NotImplementedError:
            pass   # BMv2: no PFC watchdog
    for port, model in sorted(models.items()):
        agent.set_port_rate(port, int(model.rate_mbps * 1e6))
        agent.set_queue_depth(port, int(model.queue_depth))
        for prio in pfc_priorities:
            agent.set_queue_depth(port, LOSSLESS_QUEUE_PACKETS, prio)
        agent.set_impairments(port, model.delay_us, model.jitter_us, model.loss)
        agent.set_pfc(port, list(pfc_priorities))


def pfc_punt_handler(agents_by_switch):
    """A controller packet-in handler for BMv2: PFC frames the program punts (reason PUNT_PFC)
    go to the punting switch's agent, which pauses that port's queue."""
    from testbed.control.program_names import PUNT_PFC

    def handle(switch, payload, meta):
        agent = agents_by_switch.get(switch)
        if agent is not None and meta.get("reason") == PUNT_PFC:
            agent.handle_pfc_frame(meta["ingress_port"], payload)
    return handle
