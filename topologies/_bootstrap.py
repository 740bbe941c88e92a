"""Shared start of the topology scripts: run under the project's venv, import testbed.net.shell.

A user types `sudo python3 topologies/clos.py ...` with the system Python; the script re-executes
itself with .venv's Python (where Mininet's module, Scapy and the project live) when that exists.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")


def shell_for(script):
    """testbed.net.shell for `script` (its __file__), after re-executing it under the venv."""
    if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(REPO, ".venv")):
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(script)] + sys.argv[1:])
    sys.path.insert(0, REPO)
    try:
        from testbed.net import shell
    except ImportError as exc:
        sys.exit(f"{os.path.basename(script)}: {exc}; run `sudo make setup` first")
    return shell
