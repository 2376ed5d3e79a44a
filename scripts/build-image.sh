#!/usr/bin/env bash
# `make image`: Tideway's OCI image, built from Debian's packages and the release binary,
# without a container registry or a container engine:
#   target/image/tideway-VERSION.oci.tar     an OCI image layout as one tar (one layer)
#   target/image/tideway-VERSION.spdx.json   its SBOM: the Debian packages and the crates
# VERSION is the chart's appVersion; the archive names the image as the chart's default
# reference (image.repository:VERSION). With SOURCE_DATE_EPOCH (default: the last commit's
# time), the same checkout path and the same mirror, two builds are byte-identical.
# Needs root and mmdebstrap (scripts/install-deps.sh installs it); no container tooling: the
# layout is written by image/layout.py.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${IMAGE_OUT:-target/image}
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export LC_ALL=C TZ=UTC

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/tideway/Chart.yaml)
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *\(.*\)$/\1/p' helm/tideway/values.yaml)
[ -n "$version" ] && [ -n "$repository" ] || { echo "no appVersion or image.repository in the chart" >&2; exit 1; }
ref="$repository:$version"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
arch=$(dpkg --print-architecture)

echo "== tideway (release build)"
binary=$(scripts/release-binary.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== root filesystem (Debian bookworm, $MIRROR)"
image/rootfs.sh "$work/rootfs" "$work/packages.txt" "$arch" "$MIRROR"
# Stripped (symbols and line tables: 294 MB -> 52 MB); a panic still says where it happened.
install -D -m 0755 "$binary" "$work/rootfs/usr/bin/tideway"
strip --strip-all "$work/rootfs/usr/bin/tideway"
tar --sort=name --format=posix --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$work/rootfs" -cf "$work/layer.tar" .

echo "== OCI layout ($ref)"
layout="$work/layout"
manifest=$(python3 image/layout.py "$layout" "$work/layer.tar" --reference="$ref" --created="$created" \
    --architecture="$arch" --user=65532:65532 --entrypoint=/usr/bin/tideway --cmd=--help \
    --env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --created-by="image/rootfs.sh (image/packages), and the tideway binary" \
    --label=org.opencontainers.image.title=tideway \
    --label=org.opencontainers.image.version="$version" \
    --label=org.opencontainers.image.revision="$(git rev-parse HEAD)" \
    --label=org.opencontainers.image.created="$created" \
    --label=org.opencontainers.image.licenses=Apache-2.0)

mkdir -p "$OUT"
archive="$OUT/tideway-$version.oci.tar"
tar --sort=name --format=posix --numeric-owner --owner=0 --group=0 --mode=a+rX,u+w,go-w \
    --mtime="@$SOURCE_DATE_EPOCH" --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$layout" -cf "$archive.part" oci-layout index.json blobs
mv "$archive.part" "$archive"

echo "== SBOM"
cargo metadata --locked --format-version 1 --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" >"$work/metadata.json"
python3 image/sbom.py --packages "$work/packages.txt" --metadata "$work/metadata.json" \
    --name tideway --version "$version" --reference "$ref" --digest "$manifest" --created "$created" \
    >"$OUT/tideway-$version.spdx.json"

size=$(stat -c %s "$archive")
echo "image: $archive ($((size / 1000)) kB, manifest $manifest)"
echo "sbom: $OUT/tideway-$version.spdx.json ($(wc -l <"$work/packages.txt") Debian packages)"
