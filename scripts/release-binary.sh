#!/usr/bin/env bash
# Prints the path of Tideway's release binary for this checkout, built by
# `cargo build --release --locked -p tideway` or taken from a cache outside the clone.
#
# A clean clone's sources are newer than anything in the shared target directory, so Cargo
# rebuilds every workspace crate (about 10 minutes on 2 cores) even when the same sources were
# built an hour before. The cache is keyed by what the binary is built from: the blobs of every
# tracked file but those nothing is compiled from (the documentation, docs/ and *.md; the chart,
# helm/; the scripts, Makefile and CI entry; the image recipe, image/; the peers' Go modules,
# peers/; the integration tests and benchmarks, */tests and */benches, and the test support
# crate, tests/, a dev-dependency only), the toolchain's versions and RUSTFLAGS. A checkout whose tracked files differ
# from its commit builds as before and stores nothing, so an edit is never hidden by a hit.
#   TIDEWAY_BINARY_CACHE=DIR   where binaries are kept (default: ~/.cache/tideway/release-bin)
#   TIDEWAY_BINARY_CACHE=off   always build, keep nothing
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET_DIR=${CARGO_TARGET_DIR:-target}
CACHE=${TIDEWAY_BINARY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/release-bin}
inputs=(-- . ':!docs' ':!*.md' ':!helm' ':!scripts' ':!Makefile' ':!.ci' ':!image' ':!peers' ':!tests')
# The crates' integration tests and benchmarks (only `cargo test` and `cargo bench` compile them).
for d in */tests */benches; do inputs+=(":!$d"); done

build() { cargo build --release --locked -p tideway >&2; }

if [ "$CACHE" = off ] || ! git diff --quiet HEAD "${inputs[@]}"; then
  build
  echo "$TARGET_DIR/release/tideway"
  exit 0
fi
key=$({ rustc -vV; cargo -V; echo "RUSTFLAGS=${RUSTFLAGS:-}"; git ls-files -s "${inputs[@]}"; } | sha256sum | cut -c1-32)
cached="$CACHE/tideway-$key"
if [ -x "$cached" ]; then
  echo "release binary: cached ($key)" >&2
else
  build
  mkdir -p "$CACHE"
  cp "$TARGET_DIR/release/tideway" "$cached.part"
  mv "$cached.part" "$cached"
  # Keep the newest few: each is about 300 MB with its line tables.
  ls -1t "$CACHE"/tideway-* 2>/dev/null | tail -n +5 | xargs -r rm -f
fi
echo "$cached"
