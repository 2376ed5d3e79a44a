#!/usr/bin/env bash
# The peers' images, as `make image` builds Tideway's (no registry, no container engine), from
# the binaries `scripts/build-peers.sh` left in TARGET/peers, named as their own manifests name
# them, so a lab that loads them runs kubeadm's and MetalLB's manifests unchanged:
#   TARGET/peers/images/kube-proxy.oci.tar          registry.k8s.io/kube-proxy:VERSION
#   TARGET/peers/images/coredns.oci.tar             registry.k8s.io/coredns/coredns:vVERSION
#   TARGET/peers/images/metallb-controller.oci.tar  quay.io/metallb/controller:vVERSION
#   TARGET/peers/images/metallb-speaker.oci.tar     quay.io/metallb/speaker:vVERSION
#   TARGET/peers/images/metallb-native.yaml         MetalLB's manifest (L2), from its module
# kube-proxy's image is Debian's iptables, ipset, nftables and conntrack (Tideway's own root
# filesystem, image/rootfs.sh, with the same iptables wrapper the upstream image has) and the
# binary at /usr/local/bin/kube-proxy, where kubeadm's DaemonSet runs it. CoreDNS's and
# MetalLB's are their static binaries alone at the paths their upstream images use (/coredns,
# /controller, /speaker). Each image is cached outside the clone by its inputs' hash.
# Upstream's CoreDNS image runs as 65532 with a file capability to bind port 53; these layers
# carry no extended attributes, so this one runs as root: kubeadm's Deployment drops every
# capability but NET_BIND_SERVICE either way.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEERS="${CARGO_TARGET_DIR:-$ROOT/target}/peers"
CACHE="${TIDEWAY_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/peers}/images"
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0} LC_ALL=C TZ=UTC
arch=$(dpkg --print-architecture)
mkdir -p "$PEERS/images"

# version NAME: the version each peer's own image is tagged with.
kube_version=$("$PEERS/kube-proxy" --version | awk '{print $2}')
coredns_version=v$("$PEERS/coredns" -version | sed -n 's/^CoreDNS-//p' | head -1)
metallb_version=$(go version -m "$PEERS/metallb-speaker" | awk '($1 == "mod" || $1 == "dep") && $2 == "go.universe.tf/metallb" {print $3}')
[ -n "$kube_version" ] && [ "$coredns_version" != v ] && [ -n "$metallb_version" ] ||
  { echo "build-peer-images: a peer gave no version (make peers)" >&2; exit 1; }

# image NAME REFERENCE USER ENTRYPOINT ROOTFS_KIND SRC DEST: the OCI archive of SRC at DEST in a
# root filesystem of ROOTFS_KIND (`debian`: image/rootfs.sh; `static`: nothing else).
image() {
  local name=$1 ref=$2 user=$3 entrypoint=$4 kind=$5 src=$6 dest=$7 key dir work
  key=$({
    printf '%s\n' "$ref" "$user" "$entrypoint" "$kind" "$dest" "$MIRROR" "$SOURCE_DATE_EPOCH"
    sha256sum "$src" scripts/build-peer-images.sh image/layout.py
    [ "$kind" = static ] || cat image/rootfs.sh image/packages image/overlay/usr/sbin/iptables-wrapper
  } | sha256sum | cut -c1-32)
  dir="$CACHE/$key"
  if [ -f "$dir/$name.oci.tar" ]; then
    echo "build-peer-images: $name cached ($ref)"
  else
    echo "build-peer-images: building $name ($ref)"
    work=$(mktemp -d)
    mkdir -p "$work/rootfs"
    if [ "$kind" = debian ]; then
      image/rootfs.sh "$work/rootfs" "$work/packages.txt" "$arch" "$MIRROR"
    fi
    install -D -m 0755 "$src" "$work/rootfs$dest"
    tar --sort=name --format=posix --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -C "$work/rootfs" -cf "$work/layer.tar" .
    python3 image/layout.py "$work/layout" "$work/layer.tar" --reference="$ref" \
      --created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" --architecture="$arch" \
      --user="$user" --entrypoint="$entrypoint" \
      --env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --created-by="scripts/build-peer-images.sh from make peers' $name" \
      --label=org.opencontainers.image.title="$name" >/dev/null
    mkdir -p "$dir"
    tar --sort=name --format=posix --numeric-owner --owner=0 --group=0 --mode=a+rX,u+w,go-w \
      --mtime="@$SOURCE_DATE_EPOCH" -C "$work/layout" -cf "$dir/.$name.part" oci-layout index.json blobs
    mv "$dir/.$name.part" "$dir/$name.oci.tar"
    rm -rf "$work"
  fi
  ln -sfn "$dir/$name.oci.tar" "$PEERS/images/$name.oci.tar"
}

image kube-proxy "registry.k8s.io/kube-proxy:$kube_version" 0:0 /usr/local/bin/kube-proxy debian \
  "$(readlink -f "$PEERS/kube-proxy")" /usr/local/bin/kube-proxy
image coredns "registry.k8s.io/coredns/coredns:$coredns_version" 0:0 /coredns static \
  "$(readlink -f "$PEERS/coredns")" /coredns
image metallb-controller "quay.io/metallb/controller:$metallb_version" 65534:65534 /controller static \
  "$(readlink -f "$PEERS/metallb-controller")" /controller
image metallb-speaker "quay.io/metallb/speaker:$metallb_version" 0:0 /speaker static \
  "$(readlink -f "$PEERS/metallb-speaker")" /speaker
# MetalLB's own manifest for L2 mode, from the module the binaries were built from.
module=$(cd peers/metallb && go mod download -json go.universe.tf/metallb | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
install -m 0644 "$module/config/manifests/metallb-native.yaml" "$PEERS/images/metallb-native.yaml"
echo "build-peer-images: $PEERS/images (the images and MetalLB's metallb-native.yaml)"
