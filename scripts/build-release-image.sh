#!/usr/bin/env bash
# An earlier release's image and chart, for the chart's upgrade test: its tree checked out apart
# (a worktree at the release's commit, removed after) and built by its own `make image`, the
# archive kept in a cache outside the clone by commit (a cache hit takes a second). Leaves
#   target/releases/RELEASE/image.oci.tar   the image (its reference: the chart's default)
#   target/releases/RELEASE/chart/          the release's chart, as `git archive` gives it
#   scripts/build-release-image.sh v0.1.0
# Releases are named here with their commits, so a clone without tags builds the same tree.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A COMMITS=(
  # The first release: the first commit whose image runs the chart's Pods (the kube lab's
  # kubelet runs them from it), before the chart's lifecycle fixes.
  [v0.1.0]=027724a1401e1572590548128ffcb48bb712d23c
)
release=${1:?usage: $0 RELEASE (one of: ${!COMMITS[*]})}
commit=${COMMITS[$release]:-}
[ -n "$commit" ] || { echo "unknown release $release (known: ${!COMMITS[*]})" >&2; exit 2; }
if tag=$(git rev-parse -q --verify "refs/tags/$release^{commit}"); then
  [ "$tag" = "$commit" ] || { echo "tag $release is $tag, not $commit" >&2; exit 2; }
fi
CACHE="${TIDEWAY_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/images}"
archive="$CACHE/tideway-$release-$commit.oci.tar"
out="target/releases/$release"
git cat-file -e "$commit^{commit}" 2>/dev/null || { echo "commit $commit of $release is not in this clone" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out/chart"
git archive "$commit" helm/tideway | tar -x --strip-components=2 -C "$out/chart"
if [ -s "$archive" ]; then
  ln -sf "$archive" "$out/image.oci.tar"
  echo "$out: $release's chart and image (cached)"
  exit 0
fi
work=$(mktemp -d)
cleanup() { git worktree remove --force "$work/tree" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
git worktree add -q --detach "$work/tree" "$commit"
# Its dependencies are this tree's (same Cargo.lock), so the shared target dir builds only its
# own crates; its archive goes to the work dir, never over this tree's.
(cd "$work/tree" && IMAGE_OUT="$work/out" ./scripts/build-image.sh >&2)
# Cargo judges a workspace crate fresh by its sources' times against its build's, and the
# release's crates were built after this tree's files were written: left alone, this tree's
# next release build would take a crate whose dependencies did not change (one unchanged since
# the release, or changed only in its own files) from the release's tree. Forgetting the
# workspace crates' release builds makes it compile them from this tree, as a clean clone does.
rm -rf "${CARGO_TARGET_DIR:-target}"/release/.fingerprint/tideway*
mkdir -p "$CACHE"
src=$(ls "$work"/out/tideway-*.oci.tar)
cp "$src" "$archive.part"
mv "$archive.part" "$archive"
ln -sf "$archive" "$out/image.oci.tar"
echo "$out: $release's chart and image"
