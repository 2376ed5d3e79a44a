#!/usr/bin/env python3
"""Writes an OCI image layout (https://github.com/opencontainers/image-spec) holding one image of
one layer: LAYER (an uncompressed tar) compressed with `gzip -9 -n`, its config and manifest,
and an index naming it REFERENCE in both `org.opencontainers.image.ref.name` (what skopeo and
podman read) and `io.containerd.image.name` (what `ctr import` and `kind load` read). JSON is
written with sorted keys and no spaces: the same inputs give the same bytes."""
import argparse
import hashlib
import json
import os
import subprocess


def blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest.split(":")[1])
    with open(path, "wb") as f:
        f.write(data)
    return digest, len(data)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main():
    a = argparse.ArgumentParser(description=__doc__)
    a.add_argument("layout")
    a.add_argument("layer")
    a.add_argument("--reference", required=True)
    a.add_argument("--created", required=True)
    a.add_argument("--architecture", required=True)
    a.add_argument("--user", required=True)
    a.add_argument("--entrypoint", required=True)
    a.add_argument("--cmd", action="append", default=[])
    a.add_argument("--env", action="append", default=[])
    a.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    a.add_argument("--created-by", required=True)
    args = a.parse_args()

    os.makedirs(os.path.join(args.layout, "blobs", "sha256"), exist_ok=True)
    with open(args.layer, "rb") as f:
        diff_id = "sha256:" + hashlib.sha256(f.read()).hexdigest()
    compressed = subprocess.run(["gzip", "-9", "-n", "-c", args.layer], check=True, capture_output=True).stdout
    layer_digest, layer_size = blob(args.layout, compressed)

    config = {
        "created": args.created,
        "architecture": args.architecture,
        "os": "linux",
        "config": {
            "User": args.user,
            "Entrypoint": [args.entrypoint],
            "Cmd": args.cmd,
            "Env": args.env,
            "WorkingDir": "/",
            "Labels": dict(label.split("=", 1) for label in args.label),
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": args.created, "created_by": args.created_by}],
    }
    config_digest, config_size = blob(args.layout, canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    }
    manifest_digest, manifest_size = blob(args.layout, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": args.architecture, "os": "linux"},
            "annotations": {"io.containerd.image.name": args.reference, "org.opencontainers.image.ref.name": args.reference},
        }],
    }
    with open(os.path.join(args.layout, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.layout, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    print(manifest_digest)


if __name__ == "__main__":
    main()
