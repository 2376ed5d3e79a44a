//! MetalLB's own CustomResourceDefinitions, from its Go module (`go.universe.tf/metallb`, which
//! carries `config/crd/bases`), for tests that apply them to the real API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// MetalLB's release whose CRDs are applied.
pub const MODULE: &str = "go.universe.tf/metallb@v0.16.2";

/// The YAML documents of MetalLB's CRDs, the module downloaded into Go's module cache (from a
/// scratch directory: `go mod download` outside a module).
pub fn crds(scratch: &Path) -> Vec<Value> {
    std::fs::create_dir_all(scratch).unwrap();
    let out = Command::new("go")
        .args(["mod", "download", "-json", MODULE])
        .current_dir(scratch)
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("go (the Go toolchain) runs");
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("go mod download {MODULE}: {e}: {}", String::from_utf8_lossy(&out.stderr))
    });
    let bases = Path::new(info["Dir"].as_str().expect("a module directory")).join("config/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&bases).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let crds: Vec<Value> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    assert!(crds.iter().any(|c| c["metadata"]["name"] == "ipaddresspools.metallb.io"), "{bases:?}");
    crds
}

/// MetalLB's documented example objects (`IPAddressPool`s, `L2Advertisement`s and the rest in
/// `metallb-system`), as the operator's fixture holds them.
pub fn example_objects() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/tests/fixtures/metallb-objects.json");
    let list: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the fixture")).expect("JSON");
    list["items"].as_array().expect("items").clone()
}
