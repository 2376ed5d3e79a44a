#!/usr/bin/env bash
# Half-open HTTP requests against `tideway dns`'s metrics port (every HTTP listener runs the
# same accept loop): 2,000 connections that send half a request line, held 45 s; prints how
# many the server still holds then, and its memory and descriptors (bench/half_open.py).
#
# Usage: bench/half_open.sh
#   TIDEWAY_BIN=...  measure this tideway binary instead of building one (another build)
#   COUNT=2000 HOLD=45
# Loopback only (ports 45353 for DNS, 49153 for metrics).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [ -n "${TIDEWAY_BIN:-}" ]; then
  TIDEWAY=$(realpath "$TIDEWAY_BIN")
else
  (cd "$ROOT" && cargo build -p tideway >&2)
  TIDEWAY=${CARGO_TARGET_DIR:-$ROOT/target}/debug/tideway
fi
B=$(mktemp -d /tmp/tideway-half-open.XXXXXX)
: > "$B/empty-resolv.conf"
# The server gets room for every connection, so the figure is its own limit, not the shell's.
ulimit -n 8192
"$TIDEWAY" dns --source "file:$ROOT/examples/cluster.yaml" --listen 127.0.0.1:45353 \
  --upstream-resolv-conf "$B/empty-resolv.conf" --metrics-listen 127.0.0.1:49153 \
  --health-listen 127.0.0.1:48080 --ready-listen 127.0.0.1:48181 --lameduck 0s --no-loop-probe \
  > "$B/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$B"' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:49153/metrics >/dev/null && break
  sleep 0.2
done
python3 "$HERE/half_open.py" 127.0.0.1:49153 --count "${COUNT:-2000}" --hold "${HOLD:-45}" --pid "$PID"
