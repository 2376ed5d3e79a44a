//! The agents' node-local DNS listener on the real control plane (the chart's
//! `agent.nodeLocalDNS.enabled`, which the kube lab sets): a pod asks its node at 169.254.20.10
//! and gets the DNS Deployment's answers; glibc and musl lookup loops through the kube-dns
//! ClusterIP the pod's resolv.conf names lose no lookup and wait out no timeout while
//! `kubectl rollout restart` replaces the DNS Pods; and with that Deployment scaled to zero
//! (the controller-manager deletes its Pods, the EndpointSlice controller empties the kube-dns
//! Service's slices) the pod still resolves cluster names: its node answers them.

use std::time::Duration;

use serde_json::Value;

use super::{kubectl, kubectl_json};
use crate::lab_support::lookups::{count, lookups_while};
use crate::lab_support::{TestLab, eventually, patience};

/// The node-local listener's address (the chart's default).
const LISTENER: &str = "169.254.20.10";
const POD: &str = "webpod1";
/// How long the lookup loops may run (seconds): the DNS rollout must end within it; they stop
/// 2 s after it.
const ROLLOUT_LOOKUPS: u32 = 110;

fn dig(lab: &TestLab, args: &[&str]) -> String {
    let mut cmd = vec!["dig", "+time=2", "+tries=1"];
    cmd.extend(args);
    String::from_utf8_lossy(&lab.exec(POD, &cmd).stdout).into_owned()
}

/// `dig` of `name` at `server`: its status and its answer's addresses, sorted.
fn answer(lab: &TestLab, server: &str, name: &str) -> String {
    let text = dig(lab, &[&format!("@{server}"), "+noall", "+comments", "+answer", name]);
    let status = text.lines().find_map(|l| l.split("status: ").nth(1)?.split(',').next()).unwrap_or("none");
    let mut addresses: Vec<&str> =
        text.lines().filter(|l| !l.starts_with(';')).filter_map(|l| l.split_whitespace().nth(4)).collect();
    addresses.sort();
    format!("{status} {}", addresses.join(","))
}

fn cluster_ip(lab: &TestLab, name: &str) -> String {
    let s = lab.status();
    let svc = s["services"].as_array().unwrap().iter().find(|x| x["name"] == name).cloned();
    svc.and_then(|s| s["clusterIP"].as_str().map(str::to_string)).unwrap_or_else(|| panic!("{name}: {s}"))
}

/// The DNS Pods' addresses, and whether each is Ready.
fn dns_pods(lab: &TestLab, ns: &str) -> Vec<(String, bool)> {
    let pods = kubectl_json(lab, &["-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=dns"]);
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let ready = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    items.iter().map(|p| (p["status"]["podIP"].as_str().unwrap_or_default().to_string(), ready(p))).collect()
}

/// The addresses of namespace `ns`'s EndpointSlices' endpoints that terminate and no longer
/// serve.
fn not_serving(lab: &TestLab, ns: &str) -> Vec<String> {
    let slices = kubectl_json(lab, &["-n", ns, "get", "endpointslices"]);
    let endpoints = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default());
    let draining = |e: &Value| e["conditions"]["terminating"] == true && e["conditions"]["serving"] == false;
    endpoints.filter(draining).filter_map(|e| e["addresses"][0].as_str().map(str::to_string)).collect()
}

/// A Ready DNS Pod's address (they may still be starting: the node answers meanwhile).
fn ready_dns_pod(lab: &TestLab, ns: &str) -> String {
    let server = eventually(patience(120.0), || {
        let pods = dns_pods(lab, ns);
        let ready = pods.iter().find(|(ip, ready)| *ready && !ip.is_empty());
        ready.map(|(ip, _)| ip.clone()).ok_or(format!("no Ready DNS Pod: {pods:?}"))
    });
    server.unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()))
}

pub(crate) fn cluster_names_resolve_on_the_node_with_the_dns_deployment_scaled_to_zero(lab: &TestLab) {
    let deploys = kubectl_json(lab, &["get", "deployments", "-A", "-l", "app.kubernetes.io/component=dns"]);
    let deploy = deploys["items"][0].clone();
    let (ns, name) =
        (deploy["metadata"]["namespace"].as_str().unwrap(), deploy["metadata"]["name"].as_str().unwrap());
    let replicas = deploy["spec"]["replicas"].as_u64().expect("the DNS Deployment's replicas").to_string();
    let names: Vec<(String, String)> = ["svc1", "svc2", "svc3"]
        .iter()
        .map(|n| (format!("{n}.default.svc.cluster.local"), cluster_ip(lab, n)))
        .collect();

    // The node's answers are a DNS Pod's, a name that does not exist included.
    let server = ready_dns_pod(lab, ns);
    let asked: Vec<&str> =
        names.iter().map(|(n, _)| n.as_str()).chain(["nothing.default.svc.cluster.local"]).collect();
    for name in &asked {
        let (local, pod) = (answer(lab, LISTENER, name), answer(lab, &server, name));
        assert_eq!(local, pod, "{name}: the node's answer (left) is not the DNS Pod's");
        assert!(local.starts_with("NOERROR") || local.starts_with("NXDOMAIN"), "{name}: {local}");
    }

    // A rollout of the DNS Pods under the lookup loops.
    let deployment = format!("deployment/{name}");
    let mut rolled = String::new();
    let reports = lookups_while(lab, POD, "svc1", (ROLLOUT_LOOKUPS, Duration::from_secs(2)), || {
        kubectl(lab, &["-n", ns, "rollout", "restart", &deployment]).unwrap();
        let status = kubectl(lab, &["-n", ns, "rollout", "status", &deployment, "--timeout=100s"]);
        rolled = status.unwrap_or_else(|e| panic!("the DNS rollout: {e}\n{}", lab.diagnose()));
    });
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    for (which, text) in &reports {
        assert_eq!(
            (count(text, "failed"), count(text, "slow")),
            (0, 0),
            "{which}, the DNS Pods' rollout\n{text}"
        );
    }

    let server = ready_dns_pod(lab, ns);
    // Each DNS Pod drains: in its lameduck /ready fails, the kubelet probes readiness while the
    // Pod terminates (as kubelet has since v1.25), and its endpoint turns not serving before
    // the process exits, so the proxies delete the UDP flows to it first.
    let addresses: Vec<String> = dns_pods(lab, ns).into_iter().map(|(ip, _)| ip).collect();
    kubectl(lab, &["-n", ns, "scale", "deployment", name, "--replicas=0"]).unwrap();
    let mut drained = std::collections::BTreeSet::new();
    eventually(patience(90.0), || {
        drained.extend(not_serving(lab, ns).into_iter().filter(|ip| addresses.contains(ip)));
        let left = dns_pods(lab, ns);
        left.is_empty().then_some(()).ok_or(format!("DNS Pods left: {left:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
    assert!(!drained.is_empty(), "no DNS endpoint of {addresses:?} seen terminating and not serving");
    let gone = dig(lab, &["+short", &format!("@{server}"), "svc1.default.svc.cluster.local"]);
    assert!(gone.contains("no servers could be reached"), "the scaled-down DNS Pod still answers: {gone}");
    // Through the search path and the kube-dns ClusterIP the pod's resolv.conf names, and at
    // the node's address.
    for (name, ip) in &names {
        let short = name.split('.').next().unwrap();
        assert_eq!(dig(lab, &["+search", "+short", short]).trim(), ip, "{short} without DNS Pods");
        assert_eq!(answer(lab, LISTENER, name), format!("NOERROR {ip}"), "{name} at {LISTENER}");
    }

    kubectl(lab, &["-n", ns, "scale", "deployment", name, &format!("--replicas={replicas}")]).unwrap();
    eventually(patience(120.0), || {
        let pods = dns_pods(lab, ns);
        let ready = pods.iter().filter(|(_, r)| *r).count().to_string();
        (ready == replicas).then_some(()).ok_or(format!("DNS Pods: {pods:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.diagnose()));
}
