#!/usr/bin/env bash
# Build the reference BMv2 toolchain from p4lang's public sources on Debian 12 (bookworm):
# p4c with only the BMv2 backend (p4c-bm2-ss), PI (P4Runtime for BMv2) and BMv2 with PI,
# i.e. simple_switch_grpc and simple_switch_CLI. For whoever wants `--target bmv2` and the
# bmv2-marked tests locally; CI and `make test` never need it (they skip with a reason).
#
#   sudo testbed/install/build-bmv2.sh              # sources in ~/p4lang-src, installs in /usr/local
#   SRC_DIR=/data/p4 PREFIX=/opt/p4 JOBS=4 testbed/install/build-bmv2.sh
#
# Everything is built outside this repository, niced, one step at a time; a step whose
# binary is already installed is skipped, so the script can be re-run after a failure.
# Takes about an hour and ~10 GB on two cores (p4c is most of it). Debian's own packages
# provide gRPC, protobuf, Thrift and nanomsg; p4c fetches the protobuf/abseil it pins.
set -euo pipefail

SRC_DIR=${SRC_DIR:-$HOME/p4lang-src}
PREFIX=${PREFIX:-/usr/local}
JOBS=${JOBS:-$(nproc)}
P4C_REF=${P4C_REF:-v1.2.5.16}
BMV2_REF=${BMV2_REF:-1.15.5}
PI_REF=${PI_REF:-f96af95e090619491e3abf2df69df340c2c9cb46}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { echo "build-bmv2: $*"; }
die() { echo "build-bmv2: $*" >&2; exit 1; }
niced() { nice -n 19 "$@"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
installer() { if [ -w "$PREFIX" ]; then "$@"; else as_root "$@"; fi; }

case "$SRC_DIR/" in
    "$repo_root"/*) die "SRC_DIR ($SRC_DIR) is inside the repository; choose a directory outside it" ;;
esac
# shellcheck disable=SC1091
. /etc/os-release
if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
    say "warning: written for Debian 12, this is ${PRETTY_NAME:-unknown}"
fi

apt_packages=(
    # common
    git ca-certificates build-essential g++ cmake pkg-config autoconf automake libtool libtool-bin
    bison flex libfl-dev python3 python3-dev python3-pip
    # p4c
    libgc-dev libgmp-dev libboost-dev libboost-iostreams-dev libboost-graph-dev
    # PI and BMv2 (gRPC/protobuf for P4Runtime, Thrift for simple_switch_CLI)
    libgrpc++-dev libgrpc-dev libprotobuf-dev libprotoc-dev protobuf-compiler protobuf-compiler-grpc
    libthrift-dev thrift-compiler python3-thrift libnanomsg-dev libpcap-dev libevent-dev libssl-dev
    libboost-program-options-dev libboost-system-dev libboost-filesystem-dev libboost-thread-dev
    libjsoncpp-dev libreadline-dev libffi-dev libxxhash-dev
)
say "installing build dependencies from Debian"
as_root apt-get update -q
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_packages[@]}"

mkdir -p "$SRC_DIR"

fetch() {   # fetch NAME REF: a clone of github.com/p4lang/NAME at REF with its submodules
    local name=$1 ref=$2 dir="$SRC_DIR/$1"
    if [ ! -d "$dir/.git" ]; then
        git clone -q "https://github.com/p4lang/$name.git" "$dir"
    fi
    git -C "$dir" fetch -q --tags origin
    git -C "$dir" checkout -q "$ref"
    git -C "$dir" submodule update -q --init --recursive
}

installed() { [ -x "$PREFIX/bin/$1" ]; }

# --- PI: the P4Runtime server library simple_switch_grpc links -------------------------------
if [ -f "$PREFIX/lib/libpiprotogrpc.so" ]; then
    say "PI already installed in $PREFIX"
else
    say "PI $PI_REF"
    fetch PI "$PI_REF"
    (cd "$SRC_DIR/PI" && ./autogen.sh \
        && ./configure --prefix="$PREFIX" --with-proto --without-internal-rpc --without-cli --without-bmv2 \
        && niced make -j"$JOBS" && installer make install)
    as_root ldconfig
fi

# --- BMv2 with PI: simple_switch_grpc, simple_switch_CLI --------------------------------------
if installed simple_switch_grpc && installed simple_switch_CLI; then
    say "BMv2 already installed in $PREFIX"
else
    say "BMv2 $BMV2_REF"
    fetch behavioral-model "$BMV2_REF"
    (cd "$SRC_DIR/behavioral-model" && ./autogen.sh \
        && ./configure --prefix="$PREFIX" --with-pi --with-thrift \
               CPPFLAGS="-I$PREFIX/include" LDFLAGS="-L$PREFIX/lib" \
        && niced make -j"$JOBS" && installer make install)
    as_root ldconfig
fi

# --- p4c, BMv2 backend only ------------------------------------------------------------------
if installed p4c-bm2-ss; then
    say "p4c-bm2-ss already installed in $PREFIX"
else
    say "p4c $P4C_REF (BMv2 backend only)"
    fetch p4c "$P4C_REF"
    mkdir -p "$SRC_DIR/p4c/build"
    (cd "$SRC_DIR/p4c/build" && niced cmake .. -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
        -DENABLE_BMV2=ON -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF -DENABLE_TOFINO=OFF \
        -DENABLE_P4TC=OFF -DENABLE_P4FMT=OFF -DENABLE_P4TEST=OFF -DENABLE_TEST_TOOLS=OFF \
        -DENABLE_P4C_GRAPHS=OFF -DENABLE_GTESTS=OFF -DENABLE_DOCS=OFF -DENABLE_LTO=OFF \
        && niced make -j"$JOBS" && installer make install)
fi

for tool in p4c-bm2-ss simple_switch_grpc simple_switch_CLI; do
    installed "$tool" || die "$tool missing in $PREFIX/bin after the build"
done
say "done: $("$PREFIX/bin/p4c-bm2-ss" --version | head -1); simple_switch_grpc in $PREFIX/bin"
say "check the fabric program with it: p4c-bm2-ss --arch v1model -o /tmp/fabric.json $repo_root/p4/fabric.p4"
say "then the bmv2 tests (as root, $PREFIX/bin on PATH): .venv/bin/python -m pytest -m bmv2"
say "and the engine against p4c's own record of BMv2: .venv/bin/rocelab p4 conformance $SRC_DIR/p4c"
