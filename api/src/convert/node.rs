//! `v1/Node`, `v1/Pod` and `v1/Namespace` -> [`Node`], [`Pod`], [`Namespace`].

use k8s_openapi::api::core::v1 as k8s;
use tideway_core::model::{Namespace, Node, Pod};

use crate::error::{ConvertError, Ctx};

/// Converts a Node: InternalIP addresses first, then ExternalIP.
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
        ready: n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_none_or(|c| c.status == "True"),
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
