#!/usr/bin/env python3
"""Writes the SPDX 2.3 (JSON) SBOM of Tideway's image to stdout: the image, the Debian packages
unpacked into it and the crates compiled into its tideway binary (Cargo.lock's normal
dependencies of the tideway package, for the build's platform). Deterministic: the same inputs
give the same bytes."""
import argparse
import json
import re
import sys


def spdx_id(kind, name, version):
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{kind}-{name}-{version}")


def debian_packages(path):
    for line in open(path):
        name, version, arch, source = line.split()
        yield {
            "SPDXID": spdx_id("deb", name, version),
            "name": name,
            "versionInfo": version,
            "supplier": "Organization: Debian",
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": f"see /usr/share/doc/{name}/copyright in the image",
            "sourceInfo": f"Debian source package {source}",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:deb/debian/{name}@{version}?arch={arch}&distro=debian-12",
            }],
        }


def crates(metadata, root_name):
    """Crates reachable from root_name over normal (not dev, not build) dependencies."""
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next(p["id"] for p in metadata["packages"] if p["name"] == root_name and p["source"] is None)
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    for pid in sorted(seen, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        local = p["source"] is None
        licence = (p.get("license") or "NOASSERTION").replace("/", " OR ")
        yield {
            "SPDXID": spdx_id("crate", p["name"], p["version"]),
            "name": p["name"],
            "versionInfo": p["version"],
            "supplier": "Organization: Tideway" if local else "NOASSERTION",
            "downloadLocation": "NOASSERTION" if local else f"https://crates.io/crates/{p['name']}/{p['version']}",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": licence,
            "copyrightText": "NOASSERTION",
            "externalRefs": [] if local else [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{p['name']}@{p['version']}",
            }],
        }


def main():
    a = argparse.ArgumentParser(description=__doc__)
    for flag in ("packages", "metadata", "name", "version", "reference", "digest", "created"):
        a.add_argument("--" + flag, required=True)
    args = a.parse_args()
    repository = args.reference.rsplit(":", 1)[0]
    image = {
        "SPDXID": "SPDXRef-image",
        "name": args.name,
        "versionInfo": args.version,
        "supplier": "Organization: Tideway",
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "Apache-2.0",
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": "CONTAINER",
        "externalRefs": [{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": f"pkg:oci/{args.name}@{args.digest.replace(':', '%3A')}?repository_url={repository}&tag={args.version}",
        }],
    }
    debs = list(debian_packages(args.packages))
    rust = list(crates(json.load(open(args.metadata)), args.name))
    document = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{args.reference}",
        "documentNamespace": f"https://tideway.io/spdx/{args.name}-{args.version}-{args.digest.split(':')[-1]}",
        "creationInfo": {"created": args.created, "creators": ["Tool: image/sbom.py"]},
        "documentDescribes": ["SPDXRef-image"],
        "packages": [image] + debs + rust,
        "relationships": [
            {"spdxElementId": "SPDXRef-image", "relationshipType": "CONTAINS", "relatedSpdxElement": p["SPDXID"]}
            for p in debs + rust
        ],
    }
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
