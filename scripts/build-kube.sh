#!/usr/bin/env bash
# Builds tideway-kube (kube/: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy and kubeadm in one binary) into a cache outside the clone, keyed by the sha256 of
# kube/go.mod, kube/go.sum, kube/*.go and the build flags, then links CARGO_TARGET_DIR/kube/tideway-kube (target/ by default)
# to it with one symlink per command beside it. A cache hit builds nothing. Uses the default Go
# build and module caches; modules come from the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
CACHE="${TIDEWAY_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/kube}"
OUT="${CARGO_TARGET_DIR:-$ROOT/target}/kube"
COMMANDS=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubeadm)

cd kube
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# The version stamp follows go.mod: Kubernetes' release version, and its release time on the
# module proxy as the build date (fixed, so the same sources give the same binary).
read -r K8S_VERSION K8S_TIME < <("$GO" list -m -f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
if [[ ! $K8S_VERSION =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  echo "build-kube: unexpected k8s.io/kubernetes version '$K8S_VERSION' in kube/go.mod" >&2
  exit 1
fi
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=${BASH_REMATCH[1]} -X $pkg.gitMinor=${BASH_REMATCH[2]}"
  LDFLAGS+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$K8S_TIME"
done
FLAGS=(-trimpath -ldflags "$LDFLAGS")

KEY=$({
  printf '%s\n' "$("$GO" env GOVERSION GOOS GOARCH CGO_ENABLED GOFLAGS)" "${FLAGS[@]}"
  for f in go.mod go.sum *.go; do printf '== %s\n' "$f"; cat "$f"; done
} | sha256sum | cut -d' ' -f1)
BIN="$CACHE/$KEY/tideway-kube"

start=$SECONDS
if [ -x "$BIN" ]; then
  echo "build-kube: cached ($KEY)"
else
  echo "build-kube: building tideway-kube $K8S_VERSION ($KEY); minutes, more with a cold Go build cache"
  mkdir -p "$CACHE/$KEY"
  tmp=$(mktemp "$CACHE/$KEY/.tideway-kube.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  nice -n 15 "$GO" build "${FLAGS[@]}" -o "$tmp" .
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BIN"
  trap - EXIT
fi

mkdir -p "$OUT"
ln -sfn "$BIN" "$OUT/tideway-kube"
for c in "${COMMANDS[@]}"; do ln -sfn tideway-kube "$OUT/$c"; done
echo "build-kube: $OUT/tideway-kube -> $BIN ($((SECONDS - start)) s)"
