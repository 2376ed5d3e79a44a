//! The Node and its heartbeat: registration (labels the NodeRestriction admission plugin lets
//! a kubelet set, `spec.podCIDR(s)` from the lab file, addresses, capacity, nodeInfo, Ready and
//! the pressure conditions False), the Lease in `kube-node-lease` renewed every renew
//! interval, and the node's status patched when it differs from what the kubelet would report
//! (after the node lifecycle controller set Ready=Unknown, for one) or every five minutes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::config::KubeletConfig;
use super::timestamp::now;

/// The version the lab's kubelet reports (the control plane's).
pub const KUBELET_VERSION: &str = "v1.37.2";

/// kubelet's `nodeStatusReportFrequency`: the status is written at least this often.
const REPORT_EVERY: Duration = Duration::from_secs(300);

/// Whether NodeRestriction lets a kubelet set label `key` on its Node: labels outside the
/// kubernetes.io and k8s.io domains, and the few of theirs kubelets own.
pub fn kubelet_may_set(key: &str) -> bool {
    let Some((ns, _)) = key.split_once('/') else { return true };
    let within = |d: &str| ns == d || ns.ends_with(&format!(".{d}"));
    if within("node-restriction.kubernetes.io") {
        return false;
    }
    if !within("kubernetes.io") && !within("k8s.io") {
        return true;
    }
    const OWN: [&str; 11] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    OWN.contains(&key) || within("kubelet.kubernetes.io") || within("node.kubernetes.io")
}

/// Go's name for this machine's architecture.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The Node's labels: the lab file's that a kubelet may set, and the well-known ones; those
/// it may not set, to be set by the cluster's admin (as kubeadm sets the node-role labels).
pub fn labels(cfg: &KubeletConfig) -> (BTreeMap<String, String>, Vec<String>) {
    let (mut ok, refused): (BTreeMap<_, _>, BTreeMap<_, _>) =
        cfg.labels.clone().into_iter().partition(|(k, _)| kubelet_may_set(k));
    ok.insert("kubernetes.io/hostname".into(), cfg.node_name.clone());
    ok.insert("kubernetes.io/os".into(), "linux".into());
    ok.insert("kubernetes.io/arch".into(), go_arch().into());
    (ok, refused.into_keys().collect())
}

/// What the node has to offer (read once at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPUs.
    pub cpus: usize,
    /// Memory (KiB).
    pub memory_kib: u64,
    /// `uname -r`.
    pub kernel: String,
    /// `/etc/os-release`'s PRETTY_NAME.
    pub os_image: String,
}

impl Machine {
    /// This host's.
    pub fn read() -> Machine {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let kernel =
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let os_image = os
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| "Linux".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib,
            kernel,
            os_image,
        }
    }
}

/// The Node to register.
pub fn node_object(cfg: &KubeletConfig) -> Value {
    let (labels, _) = labels(cfg);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": cfg.node_name, "labels": labels},
        "spec": {"podCIDR": cfg.pod_cidr, "podCIDRs": [cfg.pod_cidr]},
    })
}

/// The conditions kubelet reports: Ready and the three pressures.
fn conditions(current: &[Value], now: &str) -> Vec<Value> {
    let wanted = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ];
    wanted
        .iter()
        .map(|(kind, status, reason, message)| {
            let prev = current.iter().find(|c| c["type"] == *kind);
            let since = match prev {
                Some(p) if p["status"] == *status => p["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                   "lastHeartbeatTime": now, "lastTransitionTime": since})
        })
        .collect()
}

/// The node status to write, given the Node's current status.
pub fn node_status(cfg: &KubeletConfig, m: &Machine, current: &Value, now: &str) -> Value {
    let existing = current["conditions"].as_array().cloned().unwrap_or_default();
    let resources = json!({
        "cpu": m.cpus.to_string(),
        "memory": format!("{}Ki", m.memory_kib),
        "pods": "110",
        "ephemeral-storage": "10Gi",
    });
    json!({
        "conditions": conditions(&existing, now),
        "addresses": cfg.addresses.iter().map(|a| json!({"type": a.kind, "address": a.address}))
            .chain(std::iter::once(json!({"type": "Hostname", "address": cfg.node_name})))
            .collect::<Vec<_>>(),
        "capacity": resources,
        "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": m.kernel,
            "osImage": m.os_image,
            "containerRuntimeVersion": "lab://0.1.0",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": go_arch(),
        },
    })
}

/// Whether `current` differs from what the kubelet reports, ignoring heartbeat times.
pub fn status_changed(current: &Value, wanted: &Value) -> bool {
    let key = |s: &Value| {
        let conds: BTreeMap<String, (Value, Value)> = s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or_default().to_string(),
                    (c["status"].clone(), c["reason"].clone()),
                )
            })
            .collect();
        let wanted_types: Vec<&str> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"].to_vec();
        let conds: Vec<_> = wanted_types.iter().map(|t| conds.get(*t).cloned()).collect();
        (conds, s["addresses"].clone(), s["capacity"].clone(), s["nodeInfo"]["kubeletVersion"].clone())
    };
    key(current) != key(wanted)
}

/// Registers the Node (or takes over the one there) and writes its status.
pub async fn register(client: &kube::Client, cfg: &KubeletConfig, m: &Machine) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let (_, refused) = labels(cfg);
    if !refused.is_empty() {
        tracing::warn!(labels = ?refused, "labels a kubelet may not set (NodeRestriction); the cluster's admin sets them");
    }
    let node: Node = serde_json::from_value(node_object(cfg)).expect("a Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => tracing::info!(node = %cfg.node_name, "node registered"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let patch = json!({"metadata": {"labels": labels(cfg).0}});
            nodes.patch(&cfg.node_name, &PatchParams::default(), &Patch::Strategic(&patch)).await?;
            tracing::info!(node = %cfg.node_name, "node already registered; labels brought up to date");
        }
        Err(e) => return Err(e),
    }
    let current = nodes.get(&cfg.node_name).await?;
    write_status(&nodes, cfg, m, &current).await
}

async fn write_status(
    nodes: &Api<Node>,
    cfg: &KubeletConfig,
    m: &Machine,
    current: &Node,
) -> Result<(), kube::Error> {
    let cur = serde_json::to_value(&current.status).unwrap_or_default();
    let status = node_status(cfg, m, &cur, &now());
    nodes
        .patch_status(&cfg.node_name, &PatchParams::default(), &Patch::Strategic(&json!({"status": status})))
        .await?;
    Ok(())
}

/// The node's heartbeat, forever: the Lease every renew interval, the status when it differs
/// or every five minutes. Failures (the API unreachable, a partition) are logged and retried
/// at the next beat.
pub async fn heartbeat(client: kube::Client, cfg: KubeletConfig, m: Machine) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut registered = false;
    let mut reported = Instant::now();
    let mut tick = tokio::time::interval(cfg.renew_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !registered {
            match register(&client, &cfg, &m).await {
                Ok(()) => {
                    registered = true;
                    reported = Instant::now();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not register the node");
                    continue;
                }
            }
        }
        if let Err(e) = renew(&leases, &nodes, &cfg).await {
            tracing::warn!(error = %e, "could not renew the node's lease");
            continue;
        }
        match nodes.get(&cfg.node_name).await {
            Ok(current) => {
                let cur = serde_json::to_value(&current.status).unwrap_or_default();
                let wanted = node_status(&cfg, &m, &cur, &now());
                if status_changed(&cur, &wanted) || reported.elapsed() >= REPORT_EVERY {
                    match write_status(&nodes, &cfg, &m, &current).await {
                        Ok(()) => {
                            reported = Instant::now();
                            tracing::info!("node status written");
                        }
                        Err(e) => tracing::warn!(error = %e, "could not write the node's status"),
                    }
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => registered = false,
            Err(e) => tracing::warn!(error = %e, "could not read the node"),
        }
    }
}

/// Creates or renews the node's Lease (owned by the Node, as kubelet's is).
async fn renew(leases: &Api<Lease>, nodes: &Api<Node>, cfg: &KubeletConfig) -> Result<(), kube::Error> {
    let renew_time = MicroTime(k8s_openapi::jiff::Timestamp::now());
    match leases.get_opt(&cfg.node_name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(renew_time);
            spec.holder_identity = Some(cfg.node_name.clone());
            spec.lease_duration_seconds = Some(cfg.lease_duration_seconds as i32);
            leases.replace(&cfg.node_name, &PostParams::default(), &lease).await?;
        }
        None => {
            let node = nodes.get(&cfg.node_name).await?;
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {
                    "name": cfg.node_name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": cfg.node_name,
                                         "uid": node.metadata.uid.unwrap_or_default()}],
                },
                "spec": {"holderIdentity": cfg.node_name, "leaseDurationSeconds": cfg.lease_duration_seconds},
            }))
            .expect("a Lease");
            let mut lease = lease;
            lease.spec.get_or_insert_with(Default::default).renew_time = Some(renew_time);
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> KubeletConfig {
        serde_json::from_value(json!({
            "lab": "t", "nodeName": "w1", "kubeconfig": "/k",
            "labels": {"mynode": "worker1", "topology.kubernetes.io/zone": "a",
                       "node-role.kubernetes.io/control-plane": "", "node.kubernetes.io/pool": "x"},
            "addresses": [{"type": "InternalIP", "address": "172.18.0.4"}],
            "podCIDR": "10.10.1.0/24", "clusterDNS": ["10.96.0.10"], "leaseDurationSeconds": 40,
            "renewIntervalMs": 10000, "tidewayBinary": "/b/tideway", "stateDir": "/s",
        }))
        .unwrap()
    }

    #[test]
    fn only_labels_a_kubelet_may_set_are_registered() {
        for (k, may) in [
            ("mynode", true),
            ("example.com/team", true),
            ("kubernetes.io/hostname", true),
            ("topology.kubernetes.io/zone", true),
            ("node.kubernetes.io/pool", true),
            ("kubelet.kubernetes.io/x", true),
            ("node-role.kubernetes.io/control-plane", false),
            ("node-restriction.kubernetes.io/x", false),
            ("k8s.io/x", false),
            ("sub.k8s.io/x", false),
        ] {
            assert_eq!(kubelet_may_set(k), may, "{k}");
        }
        let (ok, refused) = labels(&cfg());
        assert_eq!(refused, ["node-role.kubernetes.io/control-plane"]);
        assert_eq!(ok["kubernetes.io/hostname"], "w1");
        assert_eq!(ok["kubernetes.io/os"], "linux");
        assert_eq!(ok["mynode"], "worker1");
        let node = node_object(&cfg());
        assert_eq!(node["spec"]["podCIDR"], "10.10.1.0/24");
        assert_eq!(node["spec"]["podCIDRs"], json!(["10.10.1.0/24"]));
    }

    #[test]
    fn the_status_is_ready_and_rewritten_when_the_controller_marked_it_unknown() {
        let m = Machine { cpus: 2, memory_kib: 1024, kernel: "6.1".into(), os_image: "Debian".into() };
        let s = node_status(&cfg(), &m, &Value::Null, "t1");
        let ready =
            s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("True"), Some("KubeletReady"))
        );
        assert_eq!(
            s["capacity"],
            json!({"cpu": "2", "memory": "1024Ki", "pods": "110", "ephemeral-storage": "10Gi"})
        );
        assert_eq!(s["nodeInfo"]["kubeletVersion"], "v1.37.2");
        assert_eq!(s["addresses"][0], json!({"type": "InternalIP", "address": "172.18.0.4"}));
        let later = node_status(&cfg(), &m, &s, "t2");
        assert!(!status_changed(&s, &later), "only the heartbeat times moved");
        let r =
            later["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
        assert_eq!(r["lastTransitionTime"], "t1");
        let mut unknown = s.clone();
        for c in unknown["conditions"].as_array_mut().unwrap() {
            if c["type"] == "Ready" {
                c["status"] = json!("Unknown");
                c["reason"] = json!("NodeStatusUnknown");
            }
        }
        assert!(status_changed(&unknown, &node_status(&cfg(), &m, &unknown, "t3")));
    }
}
