#!/usr/bin/env bash
# Vagrant provisioning (runs as root inside the Ubuntu LTS guest): p4lang's upstream
# packages for p4c, BMv2 (simple_switch_grpc) and PI, then the project's own
# `make setup`, so that `sudo make demo TARGET=bmv2` uses real BMv2 in the VM.
set -euo pipefail

repo=${1:-/vagrant}
export DEBIAN_FRONTEND=noninteractive

# shellcheck disable=SC1091
. /etc/lsb-release   # DISTRIB_RELEASE, e.g. 22.04
obs="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${DISTRIB_RELEASE}"

apt-get update -q
apt-get install -y -q curl gnupg ca-certificates make

# p4lang publishes its Ubuntu packages in an openSUSE Build Service project.
if [ ! -f /etc/apt/sources.list.d/home-p4lang.list ]; then
    curl -fsSL "$obs/Release.key" | gpg --dearmor > /etc/apt/trusted.gpg.d/home-p4lang.gpg
    echo "deb $obs/ /" > /etc/apt/sources.list.d/home-p4lang.list
    apt-get update -q
fi
apt-get install -y -q p4lang-p4c p4lang-bmv2 p4lang-pi

for tool in p4c-bm2-ss simple_switch_grpc simple_switch_CLI; do
    command -v "$tool" >/dev/null || { echo "provision: $tool missing after install" >&2; exit 1; }
done

make -C "$repo" setup
echo "provision: done. Try: cd $repo && sudo make demo TARGET=bmv2"
