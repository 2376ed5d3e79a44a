#!/bin/sh
# Copies the binaries the IPVS VM's tests start most often, and their libraries, into the
# guest's memory and binds each copy over its path, inside the VM only.
#
# The VM's root is the host's, shared over 9p without a cache: every process start reads its
# executable and libraries from the host again. Under software emulation that costs seconds a
# start (`tideway --version` 2.3 s, `curl --version` 1.3 s, `nft list ruleset` 0.85 s; from
# memory 0.3 s, 0.3 s, 0.1 s), and the lab's tests start thousands of processes.
# Usage: vm-hot-binaries.sh FILE...   (plus the tools below, found on PATH)
set -eu
hot=/run/hot-binaries
mkdir -p "$hot"
start=$(date +%s)
tools="curl nft ip iptables iptables-nft iptables-legacy iptables-restore iptables-save ipvsadm ipset conntrack sysctl sh bash"
files=$(for f in "$@" $(for t in $tools; do command -v "$t" || true; done); do
  echo "$f"
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u)
n=0
for f in $files; do
  real=$(readlink -f "$f")
  copy="$hot/$(echo "$real" | tr / _)"
  [ -f "$real" ] && [ ! -e "$copy" ] || continue
  cp "$real" "$copy" && mount --bind "$copy" "$real" && n=$((n + 1))
done
echo "hot binaries: $n files in memory in $(( $(date +%s) - start )) s"
