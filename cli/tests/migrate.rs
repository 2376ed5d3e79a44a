//! `tideway migrate` as a user runs it: kubeadm's kube-proxy ConfigMap, kubeadm's Corefile and
//! MetalLB's objects as `kubectl get -o json` prints them, written out as Tideway objects and
//! chart values. The objects load through the same manifest loader the file source uses, and
//! the pools are the ones the operator makes of MetalLB's own objects.

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

/// `tideway migrate` with `args` and `--out dir`: the objects, the values and the table (the
/// output after the line naming the files).
fn migrate_to(dir: &Path, args: &[&std::ffi::OsStr]) -> (String, String, String, String) {
    let out = Command::new(BIN).arg("migrate").args(args).arg("--out").arg(dir).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("written");
    let table = stdout.split_once("\n\n").map_or(stdout.clone(), |(_, t)| t.to_string());
    (read("objects.yaml"), read("values.yaml"), table, stderr)
}

/// `--kubeconfig` reads the same inputs from a running cluster (kubeadm's ConfigMaps in
/// kube-system, MetalLB's objects in metallb-system, served as the API server serves them) and
/// writes exactly what the files give; a cluster without them is told so.
#[test]
fn a_running_cluster_migrates_as_its_files_do() {
    let server = tideway_tests::fake_api::BackgroundApi::start(None);
    let corefile = std::fs::read_to_string(fixture("tests/fixtures/Corefile")).expect("Corefile");
    let coredns = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coredns", "namespace": "kube-system"}, "data": {"Corefile": corefile}});
    let kube_proxy =
        std::fs::read_to_string(fixture("tests/fixtures/kube-proxy-configmap.yaml")).expect("fixture");
    server.preload_yaml(&kube_proxy);
    server.preload_yaml(&metallb_documents());
    server.api.preload([coredns]);
    let dir = out_dir("cluster");
    std::fs::create_dir_all(&dir).expect("test directory");
    let admin = tideway_tests::fake_api::Account::ClusterAdmin;
    let kubeconfig = server.api.kubeconfig(&dir, admin);
    let from_cluster = migrate_to(&dir.join("cluster"), &["--kubeconfig".as_ref(), kubeconfig.as_os_str()]);

    let files = [
        ("--kube-proxy-config", fixture("tests/fixtures/kube-proxy-configmap.yaml")),
        ("--corefile", fixture("tests/fixtures/Corefile")),
        ("--metallb", fixture("../operator/tests/fixtures/metallb-objects.json")),
    ];
    let args: Vec<&std::ffi::OsStr> = files.iter().flat_map(|(f, p)| [f.as_ref(), p.as_os_str()]).collect();
    let from_files = migrate_to(&dir.join("files"), &args);
    assert!(from_cluster.0.contains("kind: LoadBalancerPool"), "{}", from_cluster.0);
    assert_eq!(from_cluster.0, from_files.0, "objects.yaml");
    assert_eq!(from_cluster.1, from_files.1, "values.yaml");
    assert_eq!(from_cluster.2, from_files.2, "the table");
    assert_eq!(from_cluster.3, "", "everything was found");
    let asked: Vec<String> = server.api.requests().iter().map(|r| r.path.clone()).collect();
    assert!(asked.iter().any(|p| p == "/api/v1/namespaces/kube-system/configmaps/kube-proxy"), "{asked:?}");

    // A cluster without kube-proxy, CoreDNS or MetalLB: each is named, nothing is made up.
    let empty = tideway_tests::fake_api::BackgroundApi::start(None);
    let kubeconfig = empty.api.kubeconfig(&dir, admin);
    let (objects, values, _, stderr) = migrate_to(
        &dir.join("empty"),
        &["--from-cluster".as_ref(), "--kubeconfig".as_ref(), kubeconfig.as_os_str()],
    );
    assert_eq!((objects.as_str(), values.trim()), ("", "{}"));
    for absent in ["kube-system/kube-proxy", "kube-system/coredns", "IPAddressPools"] {
        assert!(stderr.contains(absent), "{absent} not named: {stderr}");
    }

    // MetalLB's CRDs not installed (the API server answers 404 for its kinds): named as
    // absent, not an error; the rest converts.
    empty.preload_yaml(&kube_proxy);
    for kind in ["IPAddressPool", "L2Advertisement"] {
        empty.api.unserve(kind);
    }
    let (objects, _, _, stderr) = migrate_to(
        &dir.join("no-metallb"),
        &["--from-cluster".as_ref(), "--kubeconfig".as_ref(), kubeconfig.as_os_str()],
    );
    assert!(objects.contains("kind: ProxyConfig"), "{objects}");
    assert!(stderr.contains("MetalLB not installed"), "{stderr}");

    // A user the API server does not let read kube-system's ConfigMaps: refused, saying which
    // object and why, and nothing is written.
    let denied = empty.api.kubeconfig(&dir, tideway_tests::fake_api::Account::Dns);
    let out = Command::new(BIN)
        .args(["migrate", "--from-cluster", "--kubeconfig"])
        .arg(&denied)
        .arg("--out")
        .arg(dir.join("denied"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a forbidden read passed: {stderr}");
    assert!(stderr.contains("ConfigMap kube-system/kube-proxy") && stderr.contains("forbidden"), "{stderr}");
    assert!(!dir.join("denied").join("objects.yaml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
