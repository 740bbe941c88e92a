#!/usr/bin/env python3
"""Boot a two-tier leaf/spine Clos of P4 switches in Mininet.

    sudo python3 topologies/clos.py --spines 2 --leaves 4 --hosts-per-leaf 2 --test pingall
    sudo python3 topologies/clos.py --spines 2 --leaves 2 --hosts-per-leaf 2 --cli

Programs the fabric through the controller; --test pingall exits 0 only with 0% loss;
--cli opens the Mininet CLI with fabric commands (`help`). Run with the machine's python3
and it re-executes itself with the repository's .venv.
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
    sys.exit(shell.script(prog="clos.py", description=__doc__))
