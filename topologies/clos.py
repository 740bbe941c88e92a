#!/usr/bin/env python3
"""Boot a two-tier leaf/spine Clos of P4 switches in Mininet.

    sudo python3 topologies/clos.py --spines 2 --leaves 4 --hosts-per-leaf 2 --test pingall
    sudo python3 topologies/clos.py --spines 2 --leaves 2 --hosts-per-leaf 2 --cli

Programs the fabric through the controller; --test pingall exits 0 only with 0% loss;
--cli opens the Mininet CLI with fabric commands (`help`). Run with the machine's python3
and it re-executes itself with the repository's .venv.
"""
import sys

from _bootstrap import shell_for

shell = shell_for(__file__)

if __name__ == "__main__":
    sys.exit(shell.script(prog="clos.py", description=__doc__))
