#!/usr/bin/env bash
# The operator's memory at scale: runs `tideway operator` on a generated file source (no API
# server: the same model, decisions and reconcile loop; writes go to the log) for each size,
# waits for /readyz, lets the reconcile loop settle for SETTLE seconds, and prints the RSS and
# the peak RSS (VmHWM) against the chart's limit.
# Usage: run.sh [SERVICES...]   (default 10000 100000; TIDEWAY_BIN picks the binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${TIDEWAY_BIN:-target/release/tideway}"
SETTLE="${SETTLE:-20}"
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in "${sizes[@]}"; do
  nodes=$(( n / 100 )); [ "$nodes" -ge 10 ] || nodes=10
  python3 bench/operator/gen_cluster.py "$n" "$nodes" "$dir/cluster.yaml"
  port=$(( 18000 + RANDOM % 1000 ))
  start=$(date +%s.%N)
  "$BIN" operator --source "file:$dir/cluster.yaml" --http-bind-address "127.0.0.1:$port" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "operator exited:"; tail -5 "$dir/log"; exit 1; }
    sleep 0.5
  done
  ready=$(echo "$(date +%s.%N) - $start" | bc)
  sleep "$SETTLE"
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  printf '%7d Services, %4d Nodes, %d LoadBalancer: ready after %.1f s, RSS %d MiB, peak RSS %d MiB (chart limit 256 MiB)\n' \
    "$n" "$nodes" $(( n / 10 )) "$ready" $(( rss / 1024 )) $(( hwm / 1024 ))
done
