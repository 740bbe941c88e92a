#!/usr/bin/env python3
"""Boot a rail-optimised Clos: every host has one NIC per rail, each on a different leaf.

    sudo python3 topologies/rail_optimized.py --rails 2 --leaves 4 --hosts-per-leaf 2 --test pingall

Leaves come in rail groups of --rails; host h of a group puts NIC r on leaf r of the
group (port h), so rank-to-rank traffic of the same rail stays one leaf apart, as in
GPU training clusters where NIC i of every server meets on rail i. Hosts route each
leaf subnet through the NIC of that leaf's rail. Same options as clos.py.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")

if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(REPO, ".venv")):
    os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
sys.path.insert(0, REPO)
try:
    from testbed.net import shell
except ImportError as exc:
    sys.exit(f"{os.path.basename(__file__)}: {exc}; run `sudo make setup` first")

if __name__ == "__main__":
    sys.exit(shell.script(prog="rail_optimized.py", description=__doc__, rails=2, leaves=4, hosts_per_leaf=2))
