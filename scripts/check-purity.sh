#!/usr/bin/env bash
# Two crates stay pure in their normal dependency trees:
# * tideway-core, the decisions: no async runtime, Kubernetes client, DNS library, HTTP stack
#   or netlink;
# * tideway-api, the contract (CRD types, conversions): no runtime, server, TLS or CLI — how
#   the components serve HTTP is tideway-serve's.
set -euo pipefail

check() { # crate, forbidden pattern, what it is
  local tree bad
  tree=$(cargo tree -p "$1" -e normal --prefix none --format '{p}' | sort -u)
  if bad=$(echo "$tree" | grep -E "$2"); then
    echo "$1 must stay $3, but depends on:" >&2
    echo "$bad" >&2
    exit 1
  fi
  echo "$1 purity: ok ($(echo "$tree" | wc -l) crates, none forbidden)"
}

check tideway-core \
  '^(tokio|kube|kube-client|kube-runtime|k8s-openapi|hickory-[a-z]+|axum|hyper|tower|netlink-[a-z-]+|rtnetlink|nix|reqwest) ' \
  "pure decisions"
check tideway-api \
  '^(tokio|tokio-rustls|axum|hyper|hyper-util|tower|rustls|clap|prometheus-client|kube-client|kube-runtime|reqwest) ' \
  "the contract"
