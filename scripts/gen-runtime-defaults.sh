#!/usr/bin/env bash
# Writes lab/src/kubelet/runtime-defaults.json from containerd's own packages (lab/seccomp pins
# the containerd release): the OCI spec containerd's CRI plugin starts a container from, and its
# RuntimeDefault seccomp profile. Usage: scripts/gen-runtime-defaults.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS=-mod=mod
out=lab/src/kubelet/runtime-defaults.json
new=$(cd lab/seccomp && go run .)
if [ "${1:-}" = "--check" ]; then
  if [ "$new" != "$(cat "$out")" ]; then
    echo "$out is stale: run scripts/gen-runtime-defaults.sh" >&2
    exit 1
  fi
else
  printf '%s\n' "$new" > "$out"
fi
