#!/usr/bin/env bash
# Runs the query-path fuzz target for a bounded time (default 60 s).
# Usage: dns/fuzz/run.sh [SECONDS]
# Installs cargo-fuzz when missing. Uses the nightly toolchain (AddressSanitizer) when it is
# installed, else stable without a sanitizer (`-s none`). Corpus and crashes stay under
# dns/fuzz/corpus and dns/fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_TO_RUN=${1:-60}
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  TOOLCHAIN=(+nightly); SANITIZER=()
else
  TOOLCHAIN=(+stable); SANITIZER=(-s none)
fi
mkdir -p corpus/query
cargo "${TOOLCHAIN[@]}" fuzz run "${SANITIZER[@]}" --fuzz-dir . query corpus/query -- \
  -max_total_time="$SECONDS_TO_RUN" -max_len=1500 -print_final_stats=1
