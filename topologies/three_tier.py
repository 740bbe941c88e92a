#!/usr/bin/env python3
"""Boot a three-tier fabric: two-tier zones joined by oversubscribed aggregation switches.

    sudo python3 topologies/three_tier.py --zones 2 --aggs 2 --agg-oversubscription 2 --test pingall

Each zone is a leaf/spine Clos; spine s of every zone has one uplink to each
aggregation switch. --agg-oversubscription sets spine down : up capacity (Meta's
aggregation stage is oversubscribed while the AI zone below is 1:1). Same options as
clos.py.
"""
import sys

from _bootstrap import shell_for

shell = shell_for(__file__)

if __name__ == "__main__":
    sys.exit(shell.script(prog="three_tier.py", description=__doc__, zones=2, aggs=2, leaves=2, hosts_per_leaf=1))
