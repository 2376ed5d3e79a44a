//! What each node's agent reports programmed (its `NodeProxyState`), indexed for
//! `--require-programmed`: a pod gets a Service's ClusterIP only once the rules behind it
//! exist on the pod's own node. A report says how far its agent has come in one number, the
//! Service `resourceVersion` programmed up to; a Service is programmed on the node once that
//! reaches the version at which the Service's generation last changed.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;

use tideway_core::model::programmed;

use crate::view::ClusterView;

/// Pod addresses to their node's report.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProgrammedIndex {
    /// A pod address to its node's report; only pods on reporting nodes.
    pod_nodes: HashMap<IpAddr, NodeReport>,
}

/// One node's report.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NodeReport {
    /// Every Service change up to this version is programmed (`None`: versions that do not
    /// compare).
    programmed_version: Option<u64>,
}

impl NodeReport {
    /// True when a Service whose generation last changed at `spec_version` is programmed (or
    /// the versions cannot tell: that never holds an answer back).
    pub(crate) fn has(self, spec_version: Option<u64>) -> bool {
        programmed(spec_version, self.programmed_version).unwrap_or(true)
    }
}

impl ProgrammedIndex {
    /// The reports in `view`, by the addresses of the pods on their nodes.
    pub(crate) fn build(view: &ClusterView) -> Self {
        let by_node: HashMap<&str, NodeReport> =
            view.reports().map(|(node, v)| (node, NodeReport { programmed_version: v })).collect();
        let mut pod_nodes = HashMap::new();
        let pods = view.namespaces().flat_map(|(_, n)| n.pods.iter());
        for pod in pods {
            if let Some(&report) = pod.node.as_deref().and_then(|n| by_node.get(n)) {
                pod_nodes.extend(pod.ips.iter().map(|ip| (*ip, report)));
            }
        }
        ProgrammedIndex { pod_nodes }
    }

    /// The report of the node running the pod at `client`: `None` when `client` is no pod
    /// (a node, an outside client) or its node's agent reports nothing (not a Tideway node).
    pub(crate) fn report_for(&self, client: IpAddr) -> Option<NodeReport> {
        self.pod_nodes.get(&client.to_canonical()).copied()
    }
}

/// A fingerprint of what the gate reads from the reports (each node's programmed version): a
/// report that only refreshes its sync time does not rebuild the index.
pub fn programmed_fingerprint(view: &ClusterView) -> u64 {
    let mut h = DefaultHasher::new();
    for report in view.reports() {
        report.hash(&mut h);
    }
    h.finish()
}
