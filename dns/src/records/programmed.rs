//! What each node's agent reports programmed (its `NodeProxyState`), indexed for
//! `--require-programmed`: a pod gets a Service's ClusterIP only once the rules behind it
//! exist on the pod's own node.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;

use tideway_core::cluster::ClusterState;
use tideway_core::model::ServiceName;

/// Pod addresses to their node's report.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProgrammedIndex {
    /// A pod address to its node (an index into `nodes`); only pods on reporting nodes.
    pod_nodes: HashMap<IpAddr, u32>,
    nodes: Vec<NodeReport>,
}

/// One node's report: Service (index in the record index) to the generation programmed.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeReport {
    /// The report lists only part of what is programmed: nothing can be told from it.
    truncated: bool,
    programmed: HashMap<u32, i64>,
}

impl NodeReport {
    /// True when Service `id` is programmed at `generation` or later (or the report cannot
    /// tell: a truncated report never holds an answer back).
    pub(crate) fn has(&self, id: u32, generation: i64) -> bool {
        self.truncated || self.programmed.get(&id).is_some_and(|g| *g >= generation)
    }
}

impl ProgrammedIndex {
    /// The reports in `state`, their Services resolved with `service_id`.
    pub(crate) fn build(state: &ClusterState, service_id: impl Fn(&ServiceName) -> Option<u32>) -> Self {
        let mut by_node: HashMap<&str, u32> = HashMap::new();
        let mut nodes = Vec::new();
        for report in state.node_states() {
            by_node.insert(report.node.as_str(), u32::try_from(nodes.len()).unwrap_or(u32::MAX));
            let programmed =
                report.programmed.iter().filter_map(|(svc, g)| Some((service_id(svc)?, *g))).collect();
            nodes.push(NodeReport { truncated: report.programmed_truncated, programmed });
        }
        let mut pod_nodes = HashMap::new();
        for pod in state.pods() {
            if let Some(&node) = pod.node_name.as_deref().and_then(|n| by_node.get(n)) {
                pod_nodes.extend(pod.ips.iter().map(|ip| (*ip, node)));
            }
        }
        ProgrammedIndex { pod_nodes, nodes }
    }

    /// The report of the node running the pod at `client`: `None` when `client` is no pod
    /// (a node, an outside client) or its node's agent reports nothing (not a Tideway node).
    pub(crate) fn report_for(&self, client: IpAddr) -> Option<&NodeReport> {
        let node = *self.pod_nodes.get(&client.to_canonical())?;
        self.nodes.get(node as usize)
    }
}

/// A fingerprint of what the gate reads from the reports (programmed Services and whether the
/// lists are whole): a report that only refreshes its sync time does not rebuild the index.
pub fn programmed_fingerprint(state: &ClusterState) -> u64 {
    let mut h = DefaultHasher::new();
    for report in state.node_states() {
        (&report.node, &report.programmed, report.programmed_truncated).hash(&mut h);
    }
    h.finish()
}
