//! `tideway migrate` as a user runs it: kubeadm's kube-proxy ConfigMap, kubeadm's Corefile and
//! MetalLB's objects as `kubectl get -o json` prints them, written out as Tideway objects and
//! chart values. The objects load through the same manifest loader the file source uses, and
//! the pools are the ones the operator makes of MetalLB's own objects. `migrate_cluster.rs`
//! reads the same kinds from a real API server set up by kubeadm.

use std::path::{Path, PathBuf};
use std::process::Command;

use tideway_api::manifest::load_str;
use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;

const BIN: &str = env!("CARGO_BIN_EXE_tideway");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn out_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tideway-migrate-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// MetalLB's objects of the fixture (a `List`), as one YAML document each.
fn metallb_documents() -> String {
    let list: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("../operator/tests/fixtures/metallb-objects.json"))
            .expect("fixture"),
    )
    .expect("json");
    list["items"].as_array().expect("items").iter().map(|o| format!("---\n{o}\n")).collect()
}

#[test]
fn kubeadms_defaults_and_metallbs_objects_migrate() {
    let dir = out_dir("defaults");
    let out = Command::new(BIN)
        .args(["migrate", "--kube-proxy-config"])
        .arg(fixture("tests/fixtures/kube-proxy-configmap.yaml"))
        .arg("--corefile")
        .arg(fixture("tests/fixtures/Corefile"))
        .arg("--metallb")
        .arg(fixture("../operator/tests/fixtures/metallb-objects.json"))
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    // The objects load cleanly; the ProxyConfig keeps kube-proxy's mode and pod CIDR.
    let objects = std::fs::read_to_string(dir.join("objects.yaml")).expect("objects.yaml");
    let m = load_str("objects.yaml", &objects);
    assert!(m.errors.is_empty() && m.ignored.is_empty(), "{:?} {:?}\n{objects}", m.errors, m.ignored);
    let state = ClusterState::from_snapshot(m.snapshot);
    let configs: Vec<_> = state.proxy_configs().collect();
    assert_eq!(configs.len(), 1, "{objects}");
    assert_eq!((configs[0].name.as_str(), configs[0].settings.mode), ("default", ProxyMode::Iptables));
    assert_eq!(configs[0].settings.cluster_cidrs, ["10.244.0.0/16".parse().unwrap()]);

    // Every MetalLB pool, as the operator reads MetalLB's own objects.
    let metallb = ClusterState::from_snapshot(load_str("metallb.yaml", &metallb_documents()).snapshot);
    let want: Vec<_> = metallb.pools().map(|p| (p.pool.clone(), p.l2.clone())).collect();
    let got: Vec<_> = state.pools().map(|p| (p.pool.clone(), p.l2.clone())).collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);

    // The values turn the chart's own ProxyConfig off and carry the Corefile's TTL.
    let values: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("values.yaml")).expect("values"))
            .expect("yaml");
    assert_eq!(values["proxyConfig"]["create"], false);
    assert_eq!(values["dns"]["clusterDomain"], "cluster.local");
    assert_eq!(values["dns"]["pods"], "insecure");
    assert_eq!(values["dns"]["ttl"], 30);
    assert_eq!(values["dns"].get("extraArgs"), None);

    // The table names what kube-proxy's and CoreDNS's defaults do that Tideway does not.
    for row in [
        "| kube-proxy | clientConnection.kubeconfig |",
        "| kube-proxy | conntrack (unset) |",
        "| CoreDNS | cache (line 16) | cache 30 |",
    ] {
        assert!(stdout.contains(row), "{row}\n{stdout}");
    }
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("| kube-proxy") || l.starts_with("| CoreDNS")).count(),
        3,
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_named_and_nothing_is_written() {
    let dir = out_dir("bad");
    std::fs::create_dir_all(&dir).expect("dir");
    let corefile = dir.join("Corefile");
    std::fs::write(&corefile, ".:53 {\n  errors\n").expect("write");
    let out = Command::new(BIN)
        .args(["migrate", "--corefile"])
        .arg(&corefile)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Corefile line 2: a block is not closed"), "{stderr}");
    assert!(!dir.join("out").exists());
    let out = Command::new(BIN).arg("migrate").output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to migrate"));
    let _ = std::fs::remove_dir_all(&dir);
}
