#!/usr/bin/env bash
# The demo: compile the example cluster for a node, show the rules, and explain where packets go.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/debug/tideway
file=examples/cluster.yaml
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step $bin plan -f $file --node node-a --mode nftables
step $bin trace -f $file --node node-a --src 192.168.0.100 --dst 192.168.0.200:80 --from external
step $bin trace -f $file --node node-a --src 10.244.1.9 --dst 192.168.0.200:80 --from pod
step $bin trace -f $file --node node-b --src 10.244.2.9 --dst 10.96.0.30:80 --from pod
step $bin plan -f $file --node node-b --mode iptables
