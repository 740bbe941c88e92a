"""rocelab: an emulated RoCE fabric testbed (P4 leaf/spine Clos, RoCEv2 collectives)."""
from pathlib import Path

__version__ = "0.1.0"

#: Repository root (the package is installed editable by `make setup`).
REPO_ROOT = Path(__file__).resolve().parent.parent
P4_DIR = REPO_ROOT / "p4"
