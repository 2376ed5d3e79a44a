//! `tideway migrate --from-cluster` against a real API server (root; needs `make kube` and Go):
//! the lab's control plane, kube-proxy's and CoreDNS's ConfigMaps written by the real kubeadm
//! (`kubeadm init phase addon kube-proxy|coredns`), MetalLB's own CRDs (from its Go module,
//! `go.universe.tf/metallb` v0.16.2) with MetalLB's objects applied there. What the cluster
//! gives is what the same objects give as files; a cluster without them, a cluster without
//! MetalLB's CRDs and a user who may not read them are each told so. (`migrate.rs` checks
//! the conversion itself from files.)

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::Value;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::pki::{self};
use tideway_lab::kube::standalone::Standalone;

const BIN: &str = env!("CARGO_BIN_EXE_tideway");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// `tideway migrate ARGS --out DIR`: (objects.yaml, values.yaml, the table, stderr).
fn migrate_to(dir: &Path, args: &[&std::ffi::OsStr]) -> (String, String, String, String) {
    let out = Command::new(BIN).arg("migrate").args(args).arg("--out").arg(dir).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("written");
    let table = stdout.split_once("\n\n").map_or(stdout.clone(), |(_, t)| t.to_string());
    (read("objects.yaml"), read("values.yaml"), table, stderr)
}

/// Runs `argv`, failing the test with its output if it fails; its stdout.
fn run(argv: &[String]) -> String {
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{argv:?}: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_set_up_by_kubeadm_migrates_as_its_objects_do_as_files() {
    let standalone = Standalone::start("mig", |config| {
        config.service_cidr = "10.96.0.0/16".into();
        config.pod_cidr = "10.244.0.0/16".into();
    })
    .await
    .expect("a control plane (root; make kube)");
    let dir = standalone.dir.clone();
    let cp = &standalone.cp;
    let admin = dir.join("admin.conf");
    cp.write_host_kubeconfig(&admin).unwrap();
    let client = cp.client(&cp.admin_kubeconfig()).await.unwrap();
    let from_cluster = |out: &str| {
        migrate_to(&dir.join(out), &["--from-cluster".as_ref(), "--kubeconfig".as_ref(), admin.as_os_str()])
    };

    // A cluster without kube-proxy, CoreDNS or MetalLB: each is named, nothing is made up.
    let (objects, values, _, stderr) = from_cluster("empty");
    assert_eq!((objects.as_str(), values.trim()), ("", "{}"));
    for absent in ["kube-system/kube-proxy", "kube-system/coredns", "MetalLB not installed"] {
        assert!(stderr.contains(absent), "{absent} not named: {stderr}");
    }

    // A user the API server does not let read kube-system's ConfigMaps (a client certificate
    // kubeadm signs, with no role bound): refused, naming the object, and nothing is written.
    let nobody = standalone.kubeconfig_for("tideway-nobody", &[], &cp.host_url()).unwrap();
    let out = Command::new(BIN)
        .args(["migrate", "--from-cluster", "--kubeconfig"])
        .arg(&nobody)
        .arg("--out")
        .arg(dir.join("denied"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a forbidden read passed: {stderr}");
    assert!(stderr.contains("ConfigMap kube-system/kube-proxy") && stderr.contains("forbidden"), "{stderr}");
    assert!(!dir.join("denied").join("objects.yaml").exists());

    // kubeadm's addons, as `kubeadm init` installs them.
    let kubeadm = pki::kubeadm(&tideway_lab::kube::binary().unwrap());
    for addon in ["kube-proxy", "coredns"] {
        let mut argv = kubeadm.clone();
        argv.extend(["init", "phase", "addon", addon, "--config"].map(String::from));
        argv.push(cp.layout().kubeadm_config().display().to_string());
        argv.extend(["--kubeconfig".into(), admin.display().to_string()]);
        run(&argv);
    }
    // kube-proxy's ConfigMap alone, MetalLB's CRDs not installed yet: named, not an error.
    let (objects, _, _, stderr) = from_cluster("no-metallb");
    assert!(objects.contains("kind: ProxyConfig"), "{objects}");
    assert!(stderr.contains("MetalLB not installed"), "{stderr}");

    // MetalLB's CRDs and objects.
    let mut applier = Applier::new(client.clone(), "tideway-migrate-test");
    for crd in tideway_tests::metallb::crds(&dir.join("go")) {
        applier.apply(&crd).await.unwrap_or_else(|e| panic!("{}: {e}", crd["metadata"]["name"]));
    }
    let metallb_json = fixture("../operator/tests/fixtures/metallb-objects.json");
    let list: Value = serde_json::from_str(&std::fs::read_to_string(&metallb_json).unwrap()).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut made = std::collections::BTreeSet::new();
    for object in list["items"].as_array().unwrap() {
        let name = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        if name != "default" && made.insert(name.clone()) {
            let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            namespaces.create(&PostParams::default(), &namespace).await.unwrap();
        }
    }
    for object in list["items"].as_array().unwrap() {
        let mut object = object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.retain(|k, _| ["name", "namespace", "labels", "annotations"].contains(&k.as_str()));
        }
        applier.apply(&object).await.unwrap_or_else(|e| panic!("{}: {e}", object["metadata"]["name"]));
    }

    // What the cluster gives is what the same objects give as files: kubeadm's ConfigMaps as
    // the server holds them, MetalLB's objects as the fixture has them.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let kube_proxy = config_maps.get("kube-proxy").await.unwrap();
    let corefile = config_maps.get("coredns").await.unwrap().data.unwrap()["Corefile"].clone();
    std::fs::write(dir.join("kube-proxy.json"), serde_json::to_string(&kube_proxy).unwrap()).unwrap();
    std::fs::write(dir.join("Corefile"), &corefile).unwrap();
    let files = [
        ("--kube-proxy-config", dir.join("kube-proxy.json")),
        ("--corefile", dir.join("Corefile")),
        ("--metallb", metallb_json),
    ];
    let args: Vec<&std::ffi::OsStr> = files.iter().flat_map(|(f, p)| [f.as_ref(), p.as_os_str()]).collect();
    let from_files = migrate_to(&dir.join("files"), &args);
    let cluster = from_cluster("cluster");
    assert_eq!(cluster.0, from_files.0, "objects.yaml");
    assert_eq!(cluster.1, from_files.1, "values.yaml");
    assert_eq!(cluster.2, from_files.2, "the table");
    assert_eq!(cluster.3, "", "everything was found");
    // kubeadm's settings came through: the pod network, the DNS domain, the pools.
    assert!(cluster.0.contains("10.244.0.0/16"), "{}", cluster.0);
    assert!(cluster.0.contains("kind: LoadBalancerPool"), "{}", cluster.0);
    assert!(cluster.1.contains("cluster.local"), "{}", cluster.1);
    eprintln!("migrated from the cluster:\n{}\n{}", cluster.2, cluster.1);
}
