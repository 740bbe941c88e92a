"""Base ports for the tests' booted fabrics.

A fabric's switches listen on base+device (P4Runtime) and base+AGENT_PORT_OFFSET+device (the
engine's agent). Bases here lie below the kernel's ephemeral range (32768 up): a port in that range
can be the source port of any outgoing connection on the machine, and a switch that finds its
port taken exits. `slot` keeps one test process's modules apart, the pid concurrent runs."""
import os

from testbed.net.fabric import _port_free
from testbed.switch.cli import AGENT_PORT_OFFSET

LOW, HIGH = 10000, 32500            # ip_local_port_range starts at 32768
BLOCK = 250                         # P4Runtime and agent ports of up to 99 switches
SLOTS = 8
BLOCKS = (HIGH - LOW) // BLOCK


def grpc_base(slot, devices=40):
    """A base port whose P4Runtime and agent ports for devices 1..`devices` are free now."""
    assert 0 <= slot < SLOTS and devices < 100
    first = (os.getpid() % (BLOCKS // SLOTS)) * SLOTS + slot
    for i in range(BLOCKS):
        base = LOW + ((first + i) % BLOCKS) * BLOCK
        if all(_port_free(base + d) and _port_free(base + AGENT_PORT_OFFSET + d) for d in range(1, devices + 1)):
            return base
    raise RuntimeError(f"no block of free ports in {LOW}..{HIGH}")
