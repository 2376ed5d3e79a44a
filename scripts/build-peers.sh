#!/usr/bin/env bash
# `make peers`: the peers Tideway is measured and compared against, built from their own Go
# modules at pinned versions, into a cache outside the clone keyed by each module's go.mod,
# go.sum, Go files and build flags (a cache hit builds nothing):
#   TARGET/peers/kube-proxy          the control plane's kube-proxy (tideway-kube, `make kube`)
#   TARGET/peers/coredns             CoreDNS through its coremain (peers/coredns/)
#   TARGET/peers/metallb-controller  MetalLB's controller and speaker, their `package main`s
#   TARGET/peers/metallb-speaker     built from a module requiring MetalLB (peers/metallb/)
#   TARGET/peers/images/             their images and MetalLB's manifest (scripts/build-peer-images.sh)
# TARGET is CARGO_TARGET_DIR (target/ by default). Prints each peer's version: kube-proxy's and
# CoreDNS's own (`--version`, `-version`); MetalLB's binaries have no version flag, so theirs
# is the module version the Go build info records (`go version -m`).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
CACHE="${TIDEWAY_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/peers}"
OUT="${CARGO_TARGET_DIR:-$ROOT/target}/peers"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
FLAGS=(-trimpath -ldflags "-s -w")

# build MODULE_DIR NAME PACKAGE: NAME built from PACKAGE inside MODULE_DIR, linked into OUT.
build() {
  local dir=$1 name=$2 pkg=$3 key bin tmp
  key=$(cd "$dir" && {
    printf '%s\n' "$("$GO" env GOVERSION GOOS GOARCH CGO_ENABLED GOFLAGS)" "${FLAGS[@]}" "$pkg"
    for f in go.mod go.sum *.go; do printf '== %s\n' "$f"; cat "$f"; done
  } | sha256sum | cut -c1-32)
  bin="$CACHE/$key/$name"
  if [ -x "$bin" ]; then
    echo "build-peers: $name cached ($key)"
  else
    echo "build-peers: building $name ($key); minutes with a cold Go build cache"
    mkdir -p "$CACHE/$key"
    tmp=$(mktemp "$CACHE/$key/.$name.XXXXXX")
    (cd "$dir" && nice -n 15 "$GO" build "${FLAGS[@]}" -o "$tmp" "$pkg") || { rm -f "$tmp"; return 1; }
    chmod 0755 "$tmp"
    mv -f "$tmp" "$bin"
  fi
  ln -sfn "$bin" "$OUT/$name"
}

start=$SECONDS
mkdir -p "$OUT"
scripts/build-kube.sh >/dev/null
ln -sfn "$(readlink -f "${CARGO_TARGET_DIR:-$ROOT/target}/kube/tideway-kube")" "$OUT/tideway-kube"
ln -sfn tideway-kube "$OUT/kube-proxy"
build peers/coredns coredns .
build peers/metallb metallb-controller go.universe.tf/metallb/controller
build peers/metallb metallb-speaker go.universe.tf/metallb/speaker

echo "build-peers: $OUT ($((SECONDS - start)) s)"
# version NAME TEXT: prints it; a peer that does not say its version is a failed build.
version() { [ -n "$2" ] || { echo "build-peers: $1 gave no version" >&2; exit 1; }; echo "$1: $2"; }
version kube-proxy "$("$OUT/kube-proxy" --version 2>&1 | head -1)"
version coredns "$("$OUT/coredns" -version 2>&1 | head -1)"
for m in metallb-controller metallb-speaker; do
  version "$m" "$("$GO" version -m "$OUT/$m" | awk '($1 == "mod" || $1 == "dep") && $2 == "go.universe.tf/metallb" {print $2, $3}')"
done
# Their images and MetalLB's manifest, for a kube lab that runs them as Pods (`lab up --peers`).
scripts/build-peer-images.sh
