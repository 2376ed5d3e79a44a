//! `v1/Node`, `v1/Pod` and `v1/Namespace` -> [`Node`], [`Pod`], [`Namespace`].

use k8s_openapi::api::core::v1 as k8s;
use tideway_core::model::{Namespace, Node, Pod, Taint};

use crate::error::{ConvertError, Ctx};

/// Converts a Node: InternalIP addresses first, then ExternalIP; the `Ready` and
/// `NetworkUnavailable` conditions and the taints (the announcer's node rules read them).
pub fn node(n: &k8s::Node) -> Result<Node, ConvertError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("Node", None, &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let addrs = n.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default();
    let mut ips = Vec::new();
    for kind in ["InternalIP", "ExternalIP"] {
        for (i, a) in addrs.iter().enumerate().filter(|(_, a)| a.type_ == kind) {
            let ip = cx.ip(format!("status.addresses[{i}].address"), &a.address)?;
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    let spec = n.spec.clone().unwrap_or_default();
    let taints = spec.taints.iter().flatten().map(|t| Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone(),
    });
    let taints = taints.collect();
    let conditions = n.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let condition = |kind: &str| conditions.iter().find(|c| c.type_ == kind).map(|c| c.status == "True");
    let raw: Vec<String> = match (spec.pod_cidrs, spec.pod_cidr) {
        (Some(c), _) if !c.is_empty() => c,
        (_, Some(c)) => vec![c],
        _ => vec![],
    };
    let mut pod_cidrs = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        pod_cidrs.push(cx.cidr(format!("spec.podCIDRs[{i}]"), c)?);
    }
    Ok(Node {
        name,
        labels: n.metadata.labels.clone().unwrap_or_default(),
        ips,
        pod_cidrs,
        deleting: n.metadata.deletion_timestamp.is_some(),
        ready: condition("Ready").unwrap_or(true),
        network_unavailable: condition("NetworkUnavailable").unwrap_or(false),
        taints,
    })
}

/// Converts a Pod (addresses, hostname and subdomain, for DNS and the lab).
pub fn pod(p: &k8s::Pod) -> Result<Pod, ConvertError> {
    let name = p.metadata.name.clone().unwrap_or_default();
    let namespace = p.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = Ctx::new("Pod", Some(&namespace), &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let status = p.status.clone().unwrap_or_default();
    let raw: Vec<String> = match (status.pod_ips, status.pod_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.into_iter().map(|i| i.ip).collect(),
        (_, Some(ip)) if !ip.is_empty() => vec![ip],
        _ => vec![],
    };
    let mut ips = Vec::new();
    for (i, ip) in raw.iter().enumerate() {
        ips.push(cx.ip(format!("status.podIPs[{i}].ip"), ip)?);
    }
    let spec = p.spec.clone().unwrap_or_default();
    Ok(Pod {
        namespace,
        name,
        ips,
        hostname: spec.hostname,
        subdomain: spec.subdomain,
        node_name: spec.node_name,
        labels: p.metadata.labels.clone().unwrap_or_default(),
    })
}

/// Converts a Namespace.
pub fn namespace(n: &k8s::Namespace) -> Result<Namespace, ConvertError> {
    let name = n.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Ctx::new("Namespace", None, &name).err("metadata.name", "is required"));
    }
    Ok(Namespace { name, labels: n.metadata.labels.clone().unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn from(v: serde_json::Value) -> Node {
        node(&serde_json::from_value(v).expect("a v1 Node")).expect("converts")
    }

    #[test]
    fn conditions_and_taints_the_node_rules_read_are_carried() {
        let n = from(json!({
            "metadata": {"name": "n1", "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": ""}},
            "spec": {"taints": [
                {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"},
                {"key": "dedicated", "effect": "NoExecute"},
            ]},
            "status": {"conditions": [
                {"type": "NetworkUnavailable", "status": "True"},
                {"type": "Ready", "status": "True"},
            ]},
        }));
        assert!(n.ready && n.network_unavailable && n.to_be_deleted() && n.excluded_from_external_lb());
        assert_eq!(
            n.taints[1],
            Taint { key: "dedicated".into(), value: String::new(), effect: "NoExecute".into() }
        );

        let plain = from(json!({"metadata": {"name": "n2"}}));
        assert!(plain.ready && !plain.network_unavailable && !plain.to_be_deleted());
        assert!(!plain.excluded_from_external_lb() && plain.taints.is_empty());
        let routed = from(json!({
            "metadata": {"name": "n3"},
            "status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}, {"type": "Ready", "status": "Unknown"}]},
        }));
        assert!(!routed.ready && !routed.network_unavailable);
    }
}
