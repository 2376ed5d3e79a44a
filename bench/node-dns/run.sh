#!/usr/bin/env bash
# Node-local DNS figures in one run (docs/benchmarks.md records them):
#  1. lookup latency from a pod of the file-fed lab (nftables mode), glibc's getaddrinfo (A and
#     AAAA at once), 2,000 lookups one after another: through its node's listener; through the
#     kube-dns Service to the DNS pod, on another node and on the same node (the node's agent
#     stopped, which is what a node without the listener does);
#  2. conntrack entries made per 1,000 lookups, each way;
#  3. the agent's RSS (and its peak) with and without the listener, at each of SCALES Services
#     (a file source, in a network namespace of its own), 15 s after its first sync;
#  4. queries answered per CPU-second at a fixed rate (dnsperf, RATE queries a second for
#     DURATION seconds, A records of the Services): the listener inside the agent, and
#     `tideway dns` on the same cluster with one UDP worker, as the listener has; both the
#     answering threads' CPU (`dns-udp-*`) and the whole process's (the agent's holds its
#     own work too: its periodic check of the kernel's rules at 100,000 Services).
# Usage: bench/node-dns/run.sh   (about 5 minutes plus a release build)
#   TIDEWAY_BIN=...  measure this binary instead of building one
#   SCALES="10000 100000"  RATE=20000  DURATION=10  SKIP_LAB=1 (parts 3-4 only)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SCALES=${SCALES:-"10000 100000"}
RATE=${RATE:-20000}
DURATION=${DURATION:-10}
B=$(mktemp -d /tmp/tideway-node-dns-bench.XXXXXX)
LAB=nldbench
NS=twnd-bench
command -v dnsperf >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsperf >/dev/null; }
if [ -n "${TIDEWAY_BIN:-}" ]; then
  TIDEWAY=$(realpath "$TIDEWAY_BIN")
else
  echo "building tideway (release)..." >&2
  (cd "$ROOT" && cargo build --release --locked -p tideway >&2)
  TIDEWAY=${CARGO_TARGET_DIR:-$ROOT/target}/release/tideway
fi
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$TIDEWAY" lab down --name "$LAB" >/dev/null 2>&1 || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$B"
}
trap cleanup EXIT
cc -O2 -o "$B/latency" "$HERE/latency.c"

if [ -z "${SKIP_LAB:-}" ]; then
echo "## 1-2. A pod's lookups (svc1.default.svc.cluster.local., 2,000 one after another)"
{ cat "$ROOT/examples/demo.yaml"
  printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: client0}\nspec:\n  nodeName: myk8s-control-plane\n  containers: [{name: c, image: client}]\n'
} > "$B/lab.yaml"
"$TIDEWAY" lab up --detach --name "$LAB" --mode nftables -f "$B/lab.yaml" >/dev/null
lx() { "$TIDEWAY" lab exec --name "$LAB" "$@"; }
listening() { lx "$1" -- ss -lunH src 169.254.20.10:53 | grep -q .; }
wait_listening() { for _ in $(seq 100); do listening "$1" && return 0; sleep 0.1; done; echo "no listener on $1" >&2; exit 1; }
# measure POD NODE WAY: latency and conntrack entries per 1,000 lookups
measure() {
  lx "$2" -- conntrack -F >/dev/null 2>&1 || true
  local before after line
  before=$(lx "$2" -- conntrack -C)
  line=$(lx "$1" -- "$B/latency" svc1.default.svc.cluster.local. 2000)
  after=$(lx "$2" -- conntrack -C)
  echo "| $1 on $2 | $3 | $line | conntrack $(( (after - before) / 2 )) per 1,000 |"
}
for pn in "webpod1 myk8s-worker another" "client0 myk8s-control-plane the-same"; do
  set -- $pn
  wait_listening "$2"
  lx "$1" -- "$B/latency" svc1.default.svc.cluster.local. 200 >/dev/null
  measure "$1" "$2" "node-local listener"
  "$TIDEWAY" lab kill agent "$2" --name "$LAB" >/dev/null
  sleep 1
  lx "$1" -- "$B/latency" svc1.default.svc.cluster.local. 200 >/dev/null
  measure "$1" "$2" "kube-dns Service -> DNS pod on $3 node"
  "$TIDEWAY" lab start agent "$2" --name "$LAB" >/dev/null
done
"$TIDEWAY" lab down --name "$LAB" >/dev/null
fi

echo "## 3-4. One agent, a file source, SCALES Services"
ip netns add "$NS"
ip -n "$NS" link set lo up
rss() { awk '/VmRSS/ {r = int($2 / 1024)} /VmHWM/ {h = int($2 / 1024)} END {print r, h}' "/proc/$1/status"; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The answering threads' CPU ticks.
udp_cpu() { cat /proc/"$1"/task/*/stat | awk '$2 ~ /dns-udp/ {s += $14 + $15} END {print s + 0}'; }
tick=$(getconf CLK_TCK)
# agent N EXTRA...: starts an agent, waits for its first sync and 5 s more; sets APID
agent() {
  local n=$1; shift
  ip netns exec "$NS" "$TIDEWAY" agent --source "file:$B/cluster-$n.yaml" --node node-a --no-gossip \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 \
    --api-anonymous-reads "$@" > "$B/agent.log" 2>&1 &
  APID=$!
  PIDS+=("$APID")
  for _ in $(seq 600); do
    ip netns exec "$NS" curl -sf -o /dev/null 127.0.0.1:10256/healthz && break
    sleep 0.5
  done
  ip netns exec "$NS" curl -sf -o /dev/null 127.0.0.1:10256/healthz || { tail "$B/agent.log" >&2; exit 1; }
  sleep 15
}
stop() { kill "$1"; wait "$1" 2>/dev/null || true; }
# qps SERVER PID: dnsperf at RATE for DURATION; answers per CPU-second of PID
qps() {
  local c0 c1 u0 u1 done
  c0=$(cpu "$2"); u0=$(udp_cpu "$2")
  done=$(ip netns exec "$NS" dnsperf -s "$1" -p "${3:-53}" -d "$B/queries-$N.txt" -l "$DURATION" -Q "$RATE" -c 8 2>/dev/null |
    awk '/Queries completed/ {print $3}')
  c1=$(cpu "$2"); u1=$(udp_cpu "$2")
  echo "$done $((u1 - u0)) $((c1 - c0))" | awk -v t="$tick" '{printf "%d answered; answering threads %.2f CPU-s, %.0f per CPU-second; whole process %.2f CPU-s, %.0f per CPU-second", $1, $2 / t, $1 / ($2 / t), $3 / t, $1 / ($3 / t)}'
}
for N in $SCALES; do
  python3 "$HERE/gen_cluster.py" "$N" "$B/cluster-$N.yaml"
  python3 -c "import sys; n=int(sys.argv[1]); [print(f'svc-{i}.ns-{i % 100}.svc.cluster.local A') for i in range(0, n, max(1, n // 10000))]" "$N" > "$B/queries-$N.txt"
  agent "$N"
  read -r without without_peak < <(rss "$APID")
  stop "$APID"
  agent "$N" --node-local-dns
  read -r with with_peak < <(rss "$APID")
  echo "| $N Services | agent RSS $without MiB (peak $without_peak) without the listener, $with MiB (peak $with_peak) with it: +$((with - without)) MiB, peak +$((with_peak - without_peak)) MiB |"
  echo "| $N Services | node-local listener: $(qps 169.254.20.10 "$APID") |"
  stop "$APID"
  ip netns exec "$NS" "$TIDEWAY" dns --source "file:$B/cluster-$N.yaml" --listen 127.0.0.1:35353 --workers 1 \
    --upstream 127.0.0.1:5399 --no-loop-probe --health-listen none --ready-listen none --metrics-listen none \
    --api-listen none > "$B/dns.log" 2>&1 &
  DPID=$!
  PIDS+=("$DPID")
  for _ in $(seq 600); do grep -q "cluster zone indexed" "$B/dns.log" && break; sleep 0.5; done
  sleep 2
  echo "| $N Services | tideway dns, 1 worker: $(qps 127.0.0.1 "$DPID" 35353) |"
  stop "$DPID"
done
