#!/usr/bin/env python3
"""Boot a rail-optimised Clos: every host has one NIC per rail, each on a different leaf.

    sudo python3 topologies/rail_optimized.py --rails 2 --leaves 4 --hosts-per-leaf 2 --test pingall

Leaves come in rail groups of --rails; host h of a group puts NIC r on leaf r of the
group (port h), so rank-to-rank traffic of the same rail stays one leaf apart, as in
GPU training clusters where NIC i of every server meets on rail i. Hosts route each
leaf subnet through the NIC of that leaf's rail. Same options as clos.py.
"""
import sys

from _bootstrap import shell_for

shell = shell_for(__file__)

if __name__ == "__main__":
    sys.exit(shell.script(prog="rail_optimized.py", description=__doc__, rails=2, leaves=4, hosts_per_leaf=2))
