#!/usr/bin/env bash
# Runs the IPVS dataplane tests in a VM: the Debian kernel from linux-image-amd64, booted by
# virtme-ng under software emulation, sees this checkout and runs the test binary as root.
# Usage: scripts/test-ipvs.sh [test-name-filter]   (default: every test naming ipvs)
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-ipvs}"
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || { echo "no kernel in /boot (install linux-image-amd64)" >&2; exit 1; }
VNG_VENV="${TIDEWAY_VNG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/virtme-ng}"
if [ -x "$VNG_VENV/bin/vng" ]; then export PATH="$VNG_VENV/bin:$PATH"; fi
command -v vng >/dev/null || { echo "vng not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

bin=$(cargo test --locked -p tideway --test dataplane --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "dataplane" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "could not build the dataplane tests" >&2; exit 1; }

mkdir -p target/vm && status="$PWD/target/vm/status" && rm -f "$status"
echo "booting $kernel for: $bin $filter"
# The VM's exit status is not the command's: the command writes it to a file on the host.
# QEMU reopens its standard output by path and would truncate a log file the caller
# redirected it to, so the output goes through a pipe.
vng --run "$kernel" --user root --disable-kvm --memory 2G --cpus 2 --rwdir "$PWD/target/vm" --cwd "$PWD/cli" --exec \
  "TIDEWAY_REQUIRE_IPVS=1 TIDEWAY_TEST_TIME_SCALE=10 $bin $filter --test-threads 1; echo \$? > $status" 2>&1 | cat
rc=$(cat "$status" 2>/dev/null || echo 1)
rm -f "$status"
exit "$rc"
