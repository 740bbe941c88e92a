#!/usr/bin/env bash
# One-command setup, idempotent: apt packages, .venv, pinned Python dependencies,
# the project itself (editable). Run as root from the repository root (make setup).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VENV:-$repo/.venv}
python=${PYTHON:-python3}

die() { echo "setup: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (Mininet needs namespaces and veths): sudo make setup"
command -v apt-get >/dev/null || die "apt-get not found: this setup supports Debian/Ubuntu only"

# --- apt: install only what is missing, so a second run does no network work ---
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/apt-packages.txt")
missing=()
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer once, non-interactively.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- venv with the machine's python3 ---
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' \
    || die "$python is older than 3.9"
if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# Re-install only when the pins or the project metadata change.
stamp="$venv/.rocelab-setup"
digest=$(cat "$here/requirements.lock" "$repo/pyproject.toml" | sha256sum | cut -d' ' -f1)
# A p4runtime reinstalled by hand brings back bindings protobuf cannot load: that re-runs it too.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && "$venv/bin/rocelab" --version >/dev/null 2>&1 \
        && "$venv/bin/python" -c 'from p4.v1 import p4runtime_pb2' 2>/dev/null; then
    echo "setup: $venv is up to date"
    exit 0
fi

echo "setup: installing pinned dependencies into $venv"
# ryu 4.34 builds only with setuptools<68 and without build isolation.
"${pip[@]}" install 'setuptools<68' wheel
# The lock names every package at its version (see its header): installed as it is.
"${pip[@]}" install --no-deps -r "$here/requirements.lock"
"${pip[@]}" install --no-deps --no-build-isolation 'ryu==4.34'
"$venv/bin/python" "$here/p4runtime_bindings.py"
"$venv/bin/python" -c 'from p4.v1 import p4runtime_pb2' \
    || die "the p4runtime bindings do not load under protobuf $("$venv/bin/python" -c 'import google.protobuf as p; print(p.__version__)')"
"${pip[@]}" install --no-deps --no-build-isolation -e "$repo"
"$venv/bin/rocelab" --version >/dev/null || die "the rocelab command does not run after install"
echo "$digest" > "$stamp"
echo "setup: done ($("$venv/bin/python" --version), $venv)"
