#!/usr/bin/env bash
# `make test-image`: the image `make image` writes, checked as its users take it.
#  1. Two builds give the same bytes (archive and SBOM): `make image`'s in target/image and
#     one more here; the archive is at most 30 MB.
#  2. skopeo reads it (name, user, entrypoint); podman loads it under the chart's default
#     reference; runc runs it from the bundle umoci unpacks (tideway, its user, iptables
#     through the image's wrapper); containerd imports it as `kind load image-archive` does
#     (ctr import into the k8s.io namespace).
#  3. The SBOM lists every Debian package unpacked into it and the crates of Cargo.lock the
#     binary is built from.
# Needs root (podman's and containerd's stores, mmdebstrap).
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_BYTES=30000000
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/tideway/Chart.yaml)
repository=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *\(.*\)$/\1/p' helm/tideway/values.yaml)
ref="$repository:$version"
t=$(mktemp -d)
containerd_pid=""
cleanup() {
    [ -z "$containerd_pid" ] || kill "$containerd_pid" 2>/dev/null || true
    [ -z "$containerd_pid" ] || wait "$containerd_pid" 2>/dev/null || true
    podman "${PODMAN[@]}" system reset --force >/dev/null 2>&1 || true
    umount -R "$t" 2>/dev/null || true
    rm -rf "$t"
}
PODMAN=(--root "$t/podman/root" --runroot "$t/podman/run" --storage-driver vfs --cgroup-manager cgroupfs --events-backend none)
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== two builds"
one=${IMAGE_OUT:-target/image}
[ -f "$one/tideway-$version.oci.tar" ] || fail "$one/tideway-$version.oci.tar: build it first with make image"
IMAGE_OUT="$t/two" ./scripts/build-image.sh >/dev/null
archive="$one/tideway-$version.oci.tar" sbom="$one/tideway-$version.spdx.json"
for f in "tideway-$version.oci.tar" "tideway-$version.spdx.json"; do
    a=$(sha256sum <"$one/$f") b=$(sha256sum <"$t/two/$f")
    [ "$a" = "$b" ] || fail "$f differs between two builds: ${a%% *} ${b%% *}"
    echo "same bytes twice: $f ${a%% *}"
done
size=$(stat -c %s "$archive")
[ "$size" -le "$MAX_BYTES" ] || fail "the image is $size bytes, more than $MAX_BYTES"
echo "size: $size bytes (at most $MAX_BYTES)"

echo "== skopeo"
config=$(skopeo inspect --config "oci-archive:$archive")
python3 - "$config" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["config"]
assert c["User"] == "65532:65532", c["User"]
assert c["Entrypoint"] == ["/usr/bin/tideway"], c["Entrypoint"]
print("user", c["User"], "entrypoint", c["Entrypoint"])
PY
names=$(tar -xOf "$archive" index.json | python3 -c 'import json,sys; a=json.load(sys.stdin)["manifests"][0]["annotations"]; print(a["org.opencontainers.image.ref.name"], a["io.containerd.image.name"])')
[ "$names" = "$ref $ref" ] || fail "the archive names '$names', not $ref"
skopeo copy --quiet "oci-archive:$archive" "dir:$t/copy"
echo "skopeo copied it: $(ls "$t/copy" | wc -l) files"

echo "== podman load"
podman "${PODMAN[@]}" load --quiet -i "$archive"
podman "${PODMAN[@]}" image exists "$ref" || fail "podman load did not name the image $ref"
echo "podman holds $ref"

echo "== runc runs it (bundle by umoci unpack from the image's config)"
# podman run is not used: it always asks the runtime for rlimits, which a host without
# CAP_SYS_RESOURCE (a sandboxed CI machine) refuses to set; the bundle below leaves them out.
skopeo copy --quiet "oci-archive:$archive" "oci:$t/oci:image"
umoci unpack --image "$t/oci:image" "$t/bundle" >/dev/null
cp "$t/bundle/config.json" "$t/image-config.json"
n=0
run() { # run USER CAPABILITIES ARGS...: the image's process as USER with CAPABILITIES added
    local user=$1 caps=$2
    shift 2
    n=$((n + 1))
    python3 - "$t/image-config.json" "$t/bundle/config.json" "$user" "$caps" "$@" <<'PY2'
import json, sys
image, path, user, caps, *args = sys.argv[1:]
spec = json.load(open(image))  # each run starts from the spec umoci made of the image
process = spec["process"]
process.pop("rlimits", None)
process["terminal"] = False
if user:
    process["user"] = {"uid": int(user), "gid": int(user)}
if args:
    process["args"] = args
for kind in ("bounding", "effective", "permitted"):
    process["capabilities"][kind] = sorted(set(process["capabilities"][kind]) | {c for c in caps.split(",") if c})
json.dump(spec, open(path, "w"))
PY2
    runc --root "$t/runc" run --bundle "$t/bundle" "tideway-image-test-$$-$n" </dev/null
}
out=$(run "" "" /usr/bin/tideway --version)
echo "tideway in the image: $out"
[[ "$out" == tideway* ]] || fail "tideway --version printed '$out'"
uid=$(run "" "" /bin/sh -c 'while read -r k v _; do [ "$k" = Uid: ] && echo "$v"; done </proc/self/status; :')
[ "$uid" = 65532 ] || fail "the image's default user is $uid, not 65532"
echo "runs as uid $uid unless the pod says otherwise"
out=$(run 0 CAP_NET_ADMIN,CAP_NET_RAW /usr/sbin/iptables --version)
echo "iptables in the image: $out"
[[ "$out" == "iptables v1.8.9 (nf_tables)" ]] || fail "iptables --version printed '$out'"
out=$(run 0 CAP_NET_ADMIN,CAP_NET_RAW /bin/sh -c \
    'iptables-legacy -t nat -N KUBE-SERVICES && iptables -V && ip6tables-save >/dev/null && iptables-restore -V')
echo "with KUBE- rules in legacy: $(echo $out)"
[[ "$out" == *"iptables v1.8.9 (legacy)"*"iptables-restore v1.8.9 (legacy)"* ]] || fail "the wrapper chose '$out'"

echo "== containerd (ctr import, as kind load image-archive)"
mkdir -p "$t/containerd"
cat >"$t/containerd/config.toml" <<TOML
version = 2
root = "$t/containerd/root"
state = "$t/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$t/containerd/sock"
[ttrpc]
  address = "$t/containerd/ttrpc.sock"
TOML
containerd --config "$t/containerd/config.toml" >"$t/containerd/log" 2>&1 &
containerd_pid=$!
for _ in $(seq 100); do [ -S "$t/containerd/sock" ] && break; sleep 0.1; done
[ -S "$t/containerd/sock" ] || { cat "$t/containerd/log"; fail "containerd did not start"; }
ctr=(ctr --address "$t/containerd/sock" --namespace k8s.io)
"${ctr[@]}" images import --all-platforms --digests "$archive"
# Listed first, then searched: `ctr images ls | grep -q` under pipefail fails whenever grep has
# matched and left before ctr wrote its next line (ctr then dies of SIGPIPE).
listed=$("${ctr[@]}" images ls -q)
grep -qx "$ref" <<<"$listed" || fail "ctr import did not name the image $ref: $listed"
echo "containerd holds $ref"

echo "== SBOM"
python3 - "$sbom" "$t/copy" <<'PY'
import json, os, sys, tarfile
sbom = json.load(open(sys.argv[1]))
debs = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-deb-")]
crates = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-crate-")]
names = {p["name"] for p in sbom["packages"]}
# Every Debian package whose copyright file is in the image's layer is listed.
manifest = json.load(open(os.path.join(sys.argv[2], "manifest.json")))
(layer,) = manifest["layers"]
with tarfile.open(os.path.join(sys.argv[2], layer["digest"].split(":")[1])) as t:
    shipped = {m.name.split("/")[4] for m in t if m.name.startswith("./usr/share/doc/") and m.name.endswith("/copyright")}
missing = shipped - {p["name"] for p in debs}
assert not missing, f"in the image, not in the SBOM: {sorted(missing)}"
for need in ("iptables", "ipset", "nftables", "iproute2", "kmod", "libc6", "kube", "hickory-server", "axum", "tokio", "tideway-core"):
    assert need in names, f"{need} is not in the SBOM"
assert len(sbom["relationships"]) == len(debs) + len(crates)
print(f"SBOM: {len(debs)} Debian packages, {len(crates)} crates, SPDX {sbom['spdxVersion']}")
PY
echo "image tests passed"
