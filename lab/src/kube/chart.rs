//! Tideway itself in the kube lab: the chart rendered by `helm template` with the values a lab
//! must give (the API server's address, the Service and pod networks), applied as the chart's
//! own objects (CRDs, RBAC, the agent DaemonSet, the operator and DNS Deployments, the kube-dns
//! Service), so each component runs under exactly the chart's ServiceAccount and RBAC.
//!
//! The release namespace is labelled for Pod Security as the chart's README says (the agent
//! needs `privileged`; the API server enforces `baseline` everywhere else).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::control::Plan;

/// The release name and namespace the lab installs the chart as.
pub const RELEASE: &str = "tideway";
/// The release namespace.
pub const NAMESPACE: &str = "tideway-system";
/// The field manager of the chart's objects (the lab file's are [`super::MANAGER`]'s).
pub const MANAGER: &str = "tideway-lab-chart";

/// Why the chart could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// No helm binary.
    #[error(
        "helm is needed for a kube lab and was not found (set TIDEWAY_HELM, put helm on the PATH, or run `make deps`)"
    )]
    NoHelm,
    /// helm failed.
    #[error("helm template {chart}: {message}")]
    Helm {
        /// The chart.
        chart: String,
        /// What helm said.
        message: String,
    },
    /// Its output was not YAML.
    #[error("helm template's output: {0}")]
    Output(String),
}

/// The helm binary: `TIDEWAY_HELM`, else `helm` on the PATH, else the one `make deps` installs.
pub fn helm() -> Result<PathBuf, ChartError> {
    if let Some(h) = std::env::var_os("TIDEWAY_HELM") {
        return Ok(PathBuf::from(h));
    }
    if let Some(paths) = std::env::var_os("PATH")
        && let Some(found) = std::env::split_paths(&paths).map(|p| p.join("helm")).find(|p| p.is_file())
    {
        return Ok(found);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|c| c.join("tideway/tools/helm"));
    cache.filter(|p| p.is_file()).ok_or(ChartError::NoHelm)
}

/// The values the lab sets (pure): what no chart default can know about this cluster, the
/// gossip key the lab made (`helm template` cannot look one up), and the node-local DNS
/// listener on.
pub fn values(plan: &Plan, api_server: &str, gossip_key: &str) -> Vec<(String, String)> {
    let net = |(ip, len): (std::net::Ipv4Addr, u8)| format!("{ip}/{len}");
    vec![
        ("apiServer.address".into(), api_server.to_string()),
        ("gossip.key".into(), gossip_key.to_string()),
        ("dns.service.clusterIP".into(), plan.dns_ip.to_string()),
        ("proxyConfig.clusterCIDRs[0]".into(), net(plan.pod_net)),
        // As in the file-fed lab: pods' lookups answered on their node.
        ("agent.nodeLocalDNS.enabled".into(), "true".into()),
    ]
}

/// `helm template` of `chart` with `values`: the objects, in helm's order. Without the hooks:
/// the lab applies objects as `kubectl apply` would, and a hook is Helm's to run at its event
/// (the uninstall's clean-up Job, applied as an object, would clean every node at once).
pub fn render(chart: &Path, values: &[(String, String)]) -> Result<Vec<Value>, ChartError> {
    let mut cmd = Command::new(helm()?);
    cmd.args(["template", RELEASE]).arg(chart).args([
        "--namespace",
        NAMESPACE,
        "--include-crds",
        "--no-hooks",
    ]);
    for (k, v) in values {
        cmd.arg("--set").arg(format!("{k}={v}"));
    }
    let out = cmd
        .output()
        .map_err(|e| ChartError::Helm { chart: chart.display().to_string(), message: e.to_string() })?;
    if !out.status.success() {
        return Err(ChartError::Helm {
            chart: chart.display().to_string(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    documents(&String::from_utf8_lossy(&out.stdout))
}

/// The objects of a multi-document YAML stream (empty documents skipped).
fn documents(text: &str) -> Result<Vec<Value>, ChartError> {
    let mut out = Vec::new();
    for doc in text.split("\n---").map(|d| d.trim_start_matches("---")) {
        if !doc.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
            continue;
        }
        let v: Value = serde_saphyr::from_str(doc).map_err(|e| ChartError::Output(e.to_string()))?;
        if v.is_object() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The release namespace, labelled for Pod Security as the chart's README asks.
pub fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/warn": "privileged",
    }}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_gives_the_api_server_the_dns_address_and_the_pod_network() {
        let v = values(&Plan::default(), "172.18.0.2:6443", "k");
        assert!(v.contains(&("gossip.key".into(), "k".into())));
        assert!(v.contains(&("apiServer.address".into(), "172.18.0.2:6443".into())));
        assert!(v.contains(&("dns.service.clusterIP".into(), "10.200.1.10".into())));
        assert!(v.contains(&("proxyConfig.clusterCIDRs[0]".into(), "10.10.0.0/16".into())));
        assert!(v.contains(&("agent.nodeLocalDNS.enabled".into(), "true".into())));
    }

    #[test]
    fn a_stream_splits_into_objects() {
        let objs = documents("---\n# Source: x\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n---\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "ClusterRole");
    }
}
