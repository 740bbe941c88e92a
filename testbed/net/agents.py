"""Handing PortModels (rate, queue depth, delay, jitter, loss) to a running switch.

The switch side owns the mechanism (testbed/switch: its agent for the engine, BMv2's
runtime queue-rate API for bmv2); this module only translates a fabric's PortModels
into those calls, so the Mininet side does not depend on how a target applies them.
"""
import sys

_warned = set()


def apply_port_models(node, models):
    """models: {port: PortModel}. Applies all of them to `node`'s switch."""
    try:
        from testbed.switch import agent
    except ImportError:
        if node.target not in _warned:
            _warned.add(node.target)
            print(f"warning: port models not applied on the {node.target} target "
                  "(testbed.switch.agent is not available yet)", file=sys.stderr)
        return
    agent.apply_port_models(node, models)
