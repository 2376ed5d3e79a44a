#!/usr/bin/env bash
# The core crate must stay pure: no async runtime, Kubernetes client, DNS library, HTTP stack
# or netlink in its normal dependency tree.
set -euo pipefail
forbidden='^(tokio|kube|kube-client|kube-runtime|k8s-openapi|hickory-[a-z]+|axum|hyper|tower|netlink-[a-z-]+|rtnetlink|nix|reqwest) '
tree=$(cargo tree -p tideway-core -e normal --prefix none --format '{p}' | sort -u)
if bad=$(echo "$tree" | grep -E "$forbidden"); then
  echo "tideway-core must stay pure, but depends on:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "core purity: ok ($(echo "$tree" | wc -l) crates, none forbidden)"
