#!/usr/bin/env bash
# Installs the system packages the test suite needs. Idempotent: installs only what is
# missing, and runs `apt-get update` at most once.
set -euo pipefail

# Packages the tests use at run time:
#   nftables, iptables, ipset, conntrack, iproute2: the node agent's dataplanes and netns harness
#   dnsutils: dig, for DNS tests
PACKAGES=(nftables iptables ipset conntrack iproute2 dnsutils procps)

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

missing=()
for p in "${PACKAGES[@]}" ${EXTRA_PACKAGES:-}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
