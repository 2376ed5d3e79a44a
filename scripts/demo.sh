#!/usr/bin/env bash
# The demo: install what is missing, build tideway, start the lab (the built-in demo: seed 003's
# kind + MetalLB setup without either), and walk the tour: 100 curls from an outside client
# split across two pods, the cluster DNS from a pod, the rules kube-proxy users know, a packet
# traced through them, and a live switch of the proxy mode. The lab keeps running afterwards;
# `tideway lab down` removes it (`make demo` links the build into /usr/local/bin, unless another
# `tideway` is already on the PATH). Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "the demo builds network namespaces: run it as root (sudo make demo)" >&2
  exit 1
fi
./scripts/install-deps.sh
cargo build -p tideway
T=${CARGO_TARGET_DIR:-./target}/debug/tideway
# The tour writes `tideway ...`: make that name reach this build, unless another tideway
# already answers to it (then the tour's commands need the path printed at the end).
on_path=$(command -v tideway || true)
if [ -z "$on_path" ] || [ "$(readlink -f "$on_path")" = "$(readlink -f "$T")" ]; then
  ln -sf "$(realpath "${CARGO_TARGET_DIR:-$PWD/target}")/debug/tideway" /usr/local/bin/tideway
  T=tideway
fi
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
"$T" lab down --name demo >/dev/null 2>&1 || true
step "$T" lab up --detach
LB=$("$T" lab status --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print([x for x in s["services"] if x["name"]=="svc1"][0]["externalIPs"][0])')
step "$T" lab exec mypc -- curl -s "$LB"
printf '\n\033[1m$ for i in $(seq 100); do tideway lab exec mypc -- curl -s %s | grep Hostname; done | sort | uniq -c\033[0m\n' "$LB"
for i in $(seq 100); do "$T" lab exec mypc -- curl -s "$LB" | grep Hostname; done | sort | uniq -c
step "$T" lab exec mypc -- ip neigh show "$LB"
step "$T" lab exec webpod1 -- dig +search +short svc2
step "$T" lab exec myk8s-worker -- iptables -t nat -S KUBE-SERVICES
step "$T" trace -f /run/tideway-lab/demo/cluster.yaml --node myk8s-worker --src 172.18.0.100 --dst "$LB:80" --from external
sed 's/mode: iptables/mode: nftables/' examples/demo.yaml > /tmp/tideway-demo-nftables.yaml
step "$T" lab apply -f /tmp/tideway-demo-nftables.yaml
sleep 2
step "$T" lab status
step "$T" lab exec myk8s-worker -- nft list chain ip tideway cluster-dispatch
printf '\nThe lab keeps running: try the commands above, `%s lab status`, and `%s lab down` to remove it.\n' "$T" "$T"
[ "$T" = tideway ] || printf '(`tideway` on your PATH is %s, not this build: use %s)\n' "$on_path" "$(realpath "${CARGO_TARGET_DIR:-$PWD/target}")/debug/tideway"
