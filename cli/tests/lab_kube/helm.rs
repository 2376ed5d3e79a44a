//! The chart's lifecycle with only helm and kubectl, as a platform team runs it: a kube lab
//! started without Tideway (`--no-components`), the chart README's install, an upgrade that
//! rolls every Pod while traffic runs through a LoadBalancer address, a rollback, an uninstall
//! that leaves no Tideway table or chain on any node and keeps `kube-dns`, and a second install
//! that adopts what the first kept.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{kubectl, kubectl_json};
use crate::lab_support::{TestLab, eventually, patience, wait_serving_within};
use crate::rollout::{Traffic, announcers};

/// The release as the chart README names it.
const RELEASE: &str = "tideway";
const NAMESPACE: &str = "tideway-system";

/// helm with the lab's admin kubeconfig; its output, or what it said.
fn helm(lab: &TestLab, args: &[&str]) -> Result<String, String> {
    let kubeconfig =
        PathBuf::from(lab.status()["kubeconfig"].as_str().expect("a kube lab names its kubeconfig"));
    let bin = tideway_lab::kube::chart::helm().expect("helm (make deps installs it)");
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("helm {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The chart in this repository.
fn chart() -> String {
    format!("{}/../helm/tideway", env!("CARGO_MANIFEST_DIR"))
}

/// `helm install` with only what nothing can discover, as the chart README says (the API
/// server's address is read from `kube-public/cluster-info`, which kubeadm publishes and the
/// lab's control plane too).
fn install(lab: &TestLab) {
    let st = lab.status();
    let pods = format!("proxyConfig.clusterCIDRs[0]={}", st["podCIDR"].as_str().unwrap());
    let timeout = format!("{}s", patience(300.0).as_secs());
    let args =
        ["install", RELEASE, &chart(), "-n", NAMESPACE, "--wait", "--timeout", &timeout, "--set", &pods];
    helm(lab, &args).unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}

/// Waits until every demo LoadBalancer Service has an address that answers from `mypc`.
fn demo_serves(lab: &TestLab) {
    for svc in ["svc1", "svc2", "svc3"] {
        let lb = eventually(patience(120.0), || {
            let s = lab.status();
            let svc = s["services"].as_array().into_iter().flatten().find(|x| x["name"] == svc).cloned();
            svc.and_then(|s| s["externalIPs"][0].as_str().map(str::to_string))
                .ok_or_else(|| "no address yet".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
        wait_serving_within(lab, "mypc", &lb, 1, patience(120.0));
    }
}

/// What Tideway left in a node's kernel: nftables tables and iptables chains of its names, in
/// both iptables backends.
fn leftovers(lab: &TestLab, node: &str) -> Vec<String> {
    let mut found = Vec::new();
    let out = lab.exec(node, &["nft", "list", "tables"]);
    found.extend(
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("tideway")).map(str::to_string),
    );
    for save in ["iptables-nft-save", "iptables-legacy-save"] {
        let out = lab.exec(node, &[save]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        found.extend(
            text.lines()
                .filter(|l| l.starts_with(':') && (l.contains("KUBE-") || l.contains("TIDEWAY")))
                .map(|l| format!("{save}: {l}")),
        );
    }
    found
}

/// The DaemonSet's pod template environment value `name` of the agent's container.
fn agent_env(lab: &TestLab, name: &str) -> String {
    let ds = kubectl_json(lab, &["-n", NAMESPACE, "get", "daemonset", "tideway-agent"]);
    let env = ds["spec"]["template"]["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    env.iter().find(|e| e["name"] == name).and_then(|e| e["value"].as_str()).unwrap_or_default().to_string()
}

pub(crate) fn the_chart_installs_upgrades_rolls_back_and_uninstalls_with_helm(lab: &TestLab) {
    let st = lab.status();
    assert_eq!(st["components"], false, "{st}");
    let held: Vec<&str> = st["heldBack"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(held.iter().any(|h| h.starts_with("LoadBalancerPool/")), "the pool waits for its CRD: {held:?}");
    assert!(
        kubectl(lab, &["-n", "kube-system", "get", "service", "kube-dns"]).is_err(),
        "no DNS before the chart"
    );

    // The chart README's install.
    kubectl(lab, &["create", "namespace", NAMESPACE]).unwrap();
    kubectl(lab, &["label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=privileged"])
        .unwrap();
    let started = std::time::Instant::now();
    install(lab);
    eprintln!("helm install --wait took {:?}", started.elapsed());
    demo_serves(lab);
    assert_eq!(
        lab.status()["heldBack"].as_array().map(Vec::len),
        Some(0),
        "the pool was applied once served"
    );

    // An upgrade that changes every Pod template, under traffic.
    let before = announcers(lab);
    let log_level = agent_env(lab, "RUST_LOG");
    let traffic = Traffic::start(lab, &lab.lb_ip("svc1"));
    let timeout = format!("{}s", patience(300.0).as_secs());
    let started = std::time::Instant::now();
    let upgraded = helm(
        lab,
        &[
            "upgrade",
            RELEASE,
            &chart(),
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "logLevel=debug",
            "--wait",
            "--timeout",
            &timeout,
        ],
    );
    let took = started.elapsed();
    let report = traffic.stop();
    upgraded.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    eprintln!("helm upgrade --wait took {took:?}: {report}");
    assert_eq!(agent_env(lab, "RUST_LOG"), "debug", "the upgrade changed the agents' Pods");
    assert_eq!(announcers(lab), before, "an address moved during the upgrade: {report}");
    assert_eq!((&report["failed"], &report["held"]), (&Value::from(0), &Value::from(true)), "{report}");

    // Back to the first revision.
    helm(lab, &["rollback", RELEASE, "1", "-n", NAMESPACE, "--wait", "--timeout", &timeout]).unwrap();
    assert_eq!(agent_env(lab, "RUST_LOG"), log_level, "the rollback restored the agents' Pods");
    demo_serves(lab);

    // Uninstall: every node cleaned by the hook, kube-dns kept.
    let started = std::time::Instant::now();
    helm(lab, &["uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", &timeout]).unwrap();
    eprintln!("helm uninstall --wait took {:?}", started.elapsed());
    for node in st["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()) {
        assert_eq!(leftovers(lab, node), Vec::<String>::new(), "{node} keeps Tideway's objects");
    }
    let dns = kubectl_json(lab, &["-n", "kube-system", "get", "service", "kube-dns"]);
    assert_eq!(dns["spec"]["clusterIP"], "10.96.0.10", "{dns}");
    assert_eq!(dns["metadata"]["annotations"]["helm.sh/resource-policy"], "keep", "{dns}");
    assert!(kubectl(lab, &["get", "proxyconfig", "tideway-cleanup"]).is_err(), "the request is gone");

    // A second install adopts what the first kept.
    install(lab);
    demo_serves(lab);
}
