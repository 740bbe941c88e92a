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

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
apt_updated=
apt_update() { [ -n "$apt_updated" ] || { apt-get update -q; apt_updated=1; }; }
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    apt_update
    apt-get install -y -q --no-install-recommends "$@"
}

# --- apt: install only what is missing, so a second run does no network work ---
# A name ending in "?" is installed where the distribution has it (Ubuntu has no chromium).
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/apt-packages.txt")
missing=()
optional=()
for pkg in "${wanted[@]}"; do
    name=${pkg%\?}
    installed "$name" && continue
    if [ "$name" = "$pkg" ]; then missing+=("$name"); else optional+=("$name"); fi
done
in_archive() { apt-cache show "$1" >/dev/null 2>&1; }
unknown=()
for name in "${optional[@]}"; do
    if in_archive "$name"; then missing+=("$name"); else unknown+=("$name"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
    # tshark asks whether non-root users may capture; answer once, non-interactively.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt_update
    still=()
    for name in "${unknown[@]}"; do      # the package lists may have been empty before
        if in_archive "$name"; then missing+=("$name"); else still+=("$name"); fi
    done
    unknown=("${still[@]}")
    echo "setup: apt-get install ${missing[*]}"
    apt_install "${missing[@]}"
fi
for name in "${unknown[@]}"; do
    echo "setup: $name is not in this distribution's archive: skipped (the tests that need it skip)"
done

# --- a Python the pins support: 3.11 or newer (numpy, matplotlib and dask need it) ---
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if ! new_enough "$python"; then
    [ -z "${PYTHON:-}" ] || die "PYTHON=$python is not Python 3.11 or newer"
    # Ubuntu 22.04: python3 is 3.10; its archive has python3.11
    if ! new_enough python3.11 && in_archive python3.11-venv; then
        echo "setup: $("$python" -V 2>&1) is too old for the pins; apt-get install python3.11"
        apt_install python3.11 python3.11-venv python3.11-dev
    fi
    new_enough python3.11 || die "$("$python" -V 2>&1) is too old: the pinned packages need Python 3.11 or newer"
    echo "setup: $python is $("$python" -V 2>&1 | cut -d' ' -f2): the venv uses python3.11"
    python=python3.11
fi

# --- the venv ---
if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv"
    "$python" -m venv "$venv"
elif ! new_enough "$venv/bin/python"; then
    echo "setup: $venv has $("$venv/bin/python" -V 2>&1); made again with $("$python" -V 2>&1)"
    "$python" -m venv --clear "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
bindings_load() { "$venv/bin/python" -c 'from p4.v1 import p4runtime_pb2' 2>/dev/null; }

# Re-install only when the pins or the project metadata change.
stamp="$venv/.rocelab-setup"
digest=$(cat "$here/requirements.lock" "$repo/pyproject.toml" | sha256sum | cut -d' ' -f1)
# A p4runtime reinstalled by hand brings back bindings protobuf cannot load: that re-runs it too.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && "$venv/bin/rocelab" --version >/dev/null 2>&1 \
        && bindings_load; then
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
bindings_load || die "the p4runtime bindings do not load under protobuf $("$venv/bin/python" -c 'import google.protobuf as p; print(p.__version__)')"
"${pip[@]}" install --no-deps --no-build-isolation -e "$repo"
"$venv/bin/rocelab" --version >/dev/null || die "the rocelab command does not run after install"
echo "$digest" > "$stamp"
echo "setup: done ($("$venv/bin/python" --version), $venv)"
