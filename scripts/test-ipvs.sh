#!/usr/bin/env bash
# Runs the IPVS tests in a VM: the Debian kernel from linux-image-amd64, booted by virtme-ng
# under software emulation, sees this checkout and runs, as root, the dataplane battery's IPVS
# tests and the lab's IPVS scenario (`/etc` is an overlay in the VM: the lab writes
# /etc/netns/<namespace>/resolv.conf there; the binaries the tests start most are read into the
# VM's memory first: scripts/vm-hot-binaries.sh says why).
# Usage: scripts/test-ipvs.sh [test-name-filter]   (default: every test naming ipvs)
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-ipvs}"
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || { echo "no kernel in /boot (install linux-image-amd64)" >&2; exit 1; }
VNG_VENV="${TIDEWAY_VNG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/virtme-ng}"
if [ -x "$VNG_VENV/bin/vng" ]; then export PATH="$VNG_VENV/bin:$PATH"; fi
command -v vng >/dev/null || { echo "vng not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

artifacts=$(cargo test --locked -p tideway --test dataplane --test lab --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        name, kinds = m["target"]["name"], m["target"]["kind"]
        if name in ("dataplane", "lab") and "test" in kinds:
            print("test", m["executable"])
        elif name == "tideway" and "bin" in kinds:
            print("bin", m["executable"])')
bins=$(echo "$artifacts" | awk '$1 == "test" {print $2}')
tideway=$(echo "$artifacts" | awk '$1 == "bin" {print $2}')
[ "$(echo "$bins" | wc -w)" -eq 2 ] && [ -n "$tideway" ] ||
  { echo "could not build the dataplane and lab tests" >&2; exit 1; }
# Two tests at a time on the VM's two CPUs: a test spends most of its time waiting for agents
# and kernels, and every wait is scaled for the emulated machine.
run=""
for bin in $bins; do
  run="$run TIDEWAY_TEST_TIME_SCALE=10 $bin $filter --test-threads 2 || rc=1;"
done

mkdir -p target/vm && status="$PWD/target/vm/status" && rm -f "$status"
echo "booting $kernel for: $(echo $bins) ($filter)"
# The VM's exit status is not the command's: the command writes it to a file on the host.
# QEMU reopens its standard output by path and would truncate a log file the caller
# redirected it to, so the output goes through a pipe.
# Each virtio-serial device vng adds for the command's stdin, stdout and stderr has 31 ports by
# default, 64 queues with an event descriptor each, and QEMU's main loop polls all of them
# (443 descriptors) every turn: under software emulation on two cores that loop took a whole
# core from the guest. Two ports each (one is used) leave 76: 200 process starts in the guest
# 15.4 s -> 10.7-11.9 s, a Python loop 2.2 s -> 1.6-1.9 s.
vng --run "$kernel" --user root --disable-kvm --memory 3G --cpus 2 --rwdir "$PWD/target/vm" --overlay-rwdir /etc \
  --qemu-opts="-global virtio-serial-device.max_ports=2" \
  --cwd "$PWD/cli" --exec "$PWD/scripts/vm-netfilter-modules.sh; $PWD/scripts/vm-hot-binaries.sh $tideway; rc=0; $run echo \$rc > $status" 2>&1 | cat
rc=$(cat "$status" 2>/dev/null || echo 1)
rm -f "$status"
exit "$rc"
