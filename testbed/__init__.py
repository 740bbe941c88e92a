"""rocelab: an emulated RoCE fabric testbed (P4 leaf/spine Clos, RoCEv2 collectives)."""
import os
from pathlib import Path

__version__ = "0.1.0"

#: Repository root (the package is installed editable by `make setup`).
REPO_ROOT = Path(__file__).resolve().parent.parent
P4_DIR = REPO_ROOT / "p4"

# gRPC (1.6x+, absl logging) prints INFO lines unless told a level: "fork_posix.cc ... skipping
# fork() handlers" in the Mininet CLI, "Got goaway" when a virtual fabric stops. Errors still
# print; a user's own GRPC_VERBOSITY wins. Set before any module here imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
