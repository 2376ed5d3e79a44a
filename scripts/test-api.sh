#!/usr/bin/env bash
# The REST APIs against their own OpenAPI documents: a lab is brought up and schemathesis
# (PyPI) sends generated requests to the operator's, an agent's and the DNS server's API, with
# the lab's token, over HTTPS verified with the lab's CA. Every check runs (no server errors,
# status codes, content types and response bodies as documented, bad input refused, ...) except
# positive_data_acceptance: some valid-looking input is refused on purpose (a Go duration that
# does not parse, a source and destination of different families, a name that is not a DNS
# name), which a JSON schema cannot say. The operator's PATCH changes the lab's ProxyConfig for real. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${TIDEWAY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/tools}"
VENV="$TOOLS/schemathesis-venv"
if [ ! -x "$VENV/bin/st" ]; then
  echo "installing schemathesis into $VENV"
  mkdir -p "$TOOLS"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q schemathesis
fi
BIN=${CARGO_TARGET_DIR:-./target}/debug/tideway
NAME=apitest
$BIN lab down --name "$NAME" >/dev/null 2>&1 || true
trap '$BIN lab down --name "$NAME" >/dev/null 2>&1 || true' EXIT
$BIN lab up --detach --name "$NAME" >/dev/null
status=$($BIN lab status --name "$NAME" --json)
field() { python3 -c "import json,sys; s=json.load(sys.stdin); print(s$1)" <<<"$status"; }
token=$(field "['apiToken']")
ca=$(field "['caFile']")
rc=0
for api in "agent/myk8s-worker" dns operator; do
  addr=$(field "['apis']['$api']")
  echo "schemathesis: $api at https://$addr/openapi.json"
  out=$(mktemp)
  if ! timeout 600 "$VENV/bin/st" run "https://$addr/openapi.json" --tls-verify "$ca" \
      --checks all --exclude-checks positive_data_acceptance \
      --max-examples 40 --seed 20261123 --workers 1 \
      -H "Authorization: Bearer $token" >"$out" 2>&1; then
    sed -n '/FAILURES/,$p' "$out"
    rc=1
  fi
  grep -E "^  [0-9]+ generated" "$out" | sed "s|^ *|  $api: |" || true
  rm -f "$out"
done
[ $rc -eq 0 ] && echo "REST APIs: every response as documented, no server errors"
exit $rc
