//! Which nodes may receive a LoadBalancer Service's external traffic, and which one of them
//! answers ARP / neighbour solicitations for an address (MetalLB layer 2, made sticky).
//!
//! ```text
//!  nodes (ready, agent liveness, labels, local endpoints of the Service)  +  pool's L2 node selectors
//!        | eligible_nodes: Cluster -> ready nodes with a live agent the selectors admit, if any
//!        |                            endpoint serves
//!        |                 Local   -> those with a serving endpoint of their own
//!        v
//!  eligible (sorted)  +  current announcer  +  Load (addresses per node, all Services)
//!        | choose_balanced: keep the current one while eligible, else the eligible node
//!        |                  announcing the fewest other addresses, ties broken by the
//!        |                  smallest sha256(node + "#" + ip), MetalLB's hash
//!        v
//!  announcer (None: nobody may)  +  Change (why it moved: Events, metrics)
//! ```
//!
//! MetalLB re-hashes on every change, so a node joining can steal an address from a healthy
//! announcer and break its clients' connections for a gratuitous-ARP round; and hashing alone
//! can pile many addresses on one node (metallb#2284). Here an address moves only when its
//! announcer stops being eligible, never only to rebalance; where it goes (and where a new
//! one goes) is the eligible node announcing the fewest, the hash breaking ties. So while the
//! node set stays the same, addresses every node may announce spread evenly: placed one by
//! one on the least loaded node, no node holds more than its share plus one. A node that
//! joins takes the next new or moving addresses until it catches up.
//! A node announces only while its Node is Ready *and* its agent is alive: kubelet keeps a
//! Node Ready when only the agent died, and turns it NotReady only after the node monitor's
//! grace period when the whole node died. Agent liveness comes from the agents' failure
//! detector through [`crate::cluster::ClusterState::set_agent_liveness`]; `Unknown` (no
//! information yet, e.g. right after an operator restart) counts as alive, so it moves nothing.
//!
//! MetalLB's and KEP-3836's node rules hold for every Service: a node labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers`, one whose `NetworkUnavailable`
//! condition is true, and one tainted `ToBeDeletedByClusterAutoscaler` never announce. Nor
//! does a node on which none of the pool's `l2.interfaces` exists (its agent names the listed
//! interfaces it lacks in its NodeProxyState), as MetalLB leaves such nodes out of its election.
//!
//! Every Service sharing one address must be given the same eligible set (the intersection
//! of theirs), so that they agree on the announcer.

use std::collections::BTreeMap;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

mod load;

pub use load::Load;

use crate::config::LabelSelector;
use crate::model::{AgentLiveness, LABEL_EXCLUDE_FROM_EXTERNAL_LB, Node, TAINT_TO_BE_DELETED, TrafficPolicy};

/// The endpoints a Service has on one node, by kube-proxy's rule for `Local` policy: ready
/// ones, or serving-terminating ones when none is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum LocalEndpoints {
    /// None that serves.
    #[default]
    Absent,
    /// At least one ready endpoint.
    Ready,
    /// No ready endpoint, but a serving one that is terminating (kube-proxy still sends
    /// traffic there rather than dropping it).
    ServingTerminating,
}

impl LocalEndpoints {
    /// Classifies the (ready, serving) conditions of the Service's endpoints on a node.
    pub fn of(conditions: impl IntoIterator<Item = (bool, bool)>) -> LocalEndpoints {
        conditions.into_iter().fold(LocalEndpoints::Absent, |acc, (ready, serving)| {
            match (acc, ready, serving) {
                (_, true, _) | (LocalEndpoints::Ready, _, _) => LocalEndpoints::Ready,
                (_, false, true) => LocalEndpoints::ServingTerminating,
                (acc, false, false) => acc,
            }
        })
    }

    /// True when traffic arriving on the node can be served there.
    pub fn usable(self) -> bool {
        self != LocalEndpoints::Absent
    }
}

/// One node, as seen for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// `Ready` condition true and not being deleted.
    pub ready: bool,
    /// Whether the node's agent is alive (`Unknown` counts as alive).
    pub agent: AgentLiveness,
    /// `NetworkUnavailable` condition true.
    pub network_unavailable: bool,
    /// Tainted `ToBeDeletedByClusterAutoscaler`.
    pub to_be_deleted: bool,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The Service's endpoints on this node.
    pub local: LocalEndpoints,
    /// None of the interfaces the Service's pool announces on (`l2.interfaces`) exists on the
    /// node, as its agent reports (false when the pool lists none, or nothing is reported).
    pub lacks_interfaces: bool,
}

impl NodeInfo {
    /// The view of `node`, whose agent's liveness is `agent`, for a Service with `local`
    /// endpoints there.
    pub fn of(node: &Node, agent: AgentLiveness, local: LocalEndpoints) -> NodeInfo {
        NodeInfo {
            name: node.name.clone(),
            ready: node.ready && !node.deleting,
            agent,
            network_unavailable: node.network_unavailable,
            to_be_deleted: node.to_be_deleted(),
            labels: node.labels.clone(),
            local,
            lacks_interfaces: false,
        }
    }
}

/// What the Service's external traffic needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceTraffic {
    /// `spec.externalTrafficPolicy`.
    pub policy: TrafficPolicy,
    /// The Service has a serving endpoint somewhere (on any node, listed or not).
    pub serving_endpoints: bool,
}

/// Why a node may not announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
pub enum Ineligible {
    /// The node is gone.
    #[error("node is gone")]
    Gone,
    /// The node is not ready, or being deleted.
    #[error("node is not ready")]
    NotReady,
    /// The node's agent is dead or unreachable (its Node may still be Ready).
    #[error("the node's agent is down (its Node may still be Ready)")]
    AgentDown,
    /// The node's `NetworkUnavailable` condition is true.
    #[error("node network is unavailable (NetworkUnavailable condition)")]
    NetworkUnavailable,
    /// The cluster autoscaler is about to delete the node.
    #[error("node is tainted {TAINT_TO_BE_DELETED} (the cluster autoscaler is removing it)")]
    ToBeDeleted,
    /// The node is labelled out of external load balancers.
    #[error("node is labelled {LABEL_EXCLUDE_FROM_EXTERNAL_LB}")]
    Excluded,
    /// None of the pool's L2 interfaces exists on the node.
    #[error("none of the pool's L2 interfaces exists on the node (its agent reports them missing)")]
    NoInterface,
    /// No L2 node selector of the pool matches the node.
    #[error("node does not match the pool's L2 node selectors")]
    Selector,
    /// `externalTrafficPolicy: Local` and no serving endpoint on the node.
    #[error("no local serving endpoint (externalTrafficPolicy Local)")]
    NoLocalEndpoint,
    /// The Service has no serving endpoint at all.
    #[error("the Service has no serving endpoint")]
    NoServingEndpoints,
}

/// Whether `node` may receive the Service's external traffic.
pub fn eligibility(
    traffic: &ServiceTraffic,
    node: &NodeInfo,
    node_selectors: &[LabelSelector],
) -> Result<(), Ineligible> {
    if !node.ready {
        return Err(Ineligible::NotReady);
    }
    if !node.agent.counts_as_alive() {
        return Err(Ineligible::AgentDown);
    }
    if node.network_unavailable {
        return Err(Ineligible::NetworkUnavailable);
    }
    if node.to_be_deleted {
        return Err(Ineligible::ToBeDeleted);
    }
    if node.labels.contains_key(LABEL_EXCLUDE_FROM_EXTERNAL_LB) {
        return Err(Ineligible::Excluded);
    }
    if node.lacks_interfaces {
        return Err(Ineligible::NoInterface);
    }
    if !node_selectors.is_empty() && !node_selectors.iter().any(|s| s.matches(&node.labels)) {
        return Err(Ineligible::Selector);
    }
    match traffic.policy {
        TrafficPolicy::Local if !node.local.usable() => Err(Ineligible::NoLocalEndpoint),
        TrafficPolicy::Cluster if !traffic.serving_endpoints => Err(Ineligible::NoServingEndpoints),
        _ => Ok(()),
    }
}

/// The nodes that may receive the Service's external traffic, sorted by name. Cluster:
/// every ready node with a live agent that the node rules and the pool's L2 node selectors
/// admit (no selector: every node), provided
/// some endpoint serves; Local: those of them with a serving endpoint of their own.
pub fn eligible_nodes(
    traffic: &ServiceTraffic,
    nodes: &[NodeInfo],
    node_selectors: &[LabelSelector],
) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .iter()
        .filter(|n| eligibility(traffic, n, node_selectors).is_ok())
        .map(|n| n.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// MetalLB's layer-2 ranking key of `node` for `ip`: `sha256(node + "#" + ip)`.
pub fn announcer_hash(node: &str, ip: IpAddr) -> [u8; 32] {
    rank(node, &ip.to_string())
}

fn rank(node: &str, ip: &str) -> [u8; 32] {
    let digest = Sha256::new().chain_update(node).chain_update("#").chain_update(ip).finalize();
    let mut key = [0; 32];
    key.copy_from_slice(&digest);
    key
}

/// The node that announces `ip`: `current` while it is eligible, else the eligible node
/// ranking first by [`announcer_hash`] (then by name), None when no node is eligible. A pure
/// function of its arguments; the order of `eligible` does not matter. This is
/// [`choose_balanced`] with every node equally loaded.
pub fn choose_announcer(ip: IpAddr, eligible: &[String], current: Option<&str>) -> Option<String> {
    choose_balanced(ip, eligible, current, |_| 0)
}

/// The node that announces `ip`: `current` while it is eligible (an address never moves only
/// to rebalance), else the eligible node with the smallest `load` (the addresses it announces
/// besides `ip`: [`Load::besides`]), ties broken by [`announcer_hash`], then by name.
pub fn choose_balanced(
    ip: IpAddr,
    eligible: &[String],
    current: Option<&str>,
    load: impl Fn(&str) -> usize,
) -> Option<String> {
    if let Some(current) = current.filter(|c| eligible.iter().any(|e| e == c)) {
        return Some(current.to_string());
    }
    let ip = ip.to_string();
    eligible.iter().min_by_key(|n| (load(n), rank(n, &ip), n.as_str())).cloned()
}

/// Why the announcer of an address changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Change {
    /// There was no announcer; now there is.
    #[error("first announcer")]
    FirstChoice,
    /// There was no announcer of Tideway's: MetalLB's announcing node (its `ServiceL2Status`)
    /// is eligible and kept, so clients' ARP caches and connections stay where they are.
    #[error("first announcer: MetalLB's announcing node, kept")]
    KeptFromMetalLb,
    /// There was no announcer of Tideway's nor a `ServiceL2Status` of MetalLB's for an address
    /// MetalLB gave out: the node MetalLB's own election picks (the eligible node of the
    /// smallest `sha256(node#ip)`), where its speakers announced it from when they saw the
    /// same nodes.
    #[error("first announcer: the node MetalLB's election picks")]
    MetalLbElection,
    /// There was no announcer of Tideway's, and MetalLB's announcing node may not announce:
    /// another node was chosen.
    #[error("first announcer: MetalLB's announcing node {metallb} is not eligible: {why}")]
    MetalLbIneligible {
        /// MetalLB's announcing node.
        metallb: String,
        /// Why it may not announce.
        why: Ineligible,
    },
    /// The announcer stopped being eligible and another node took over.
    #[error("previous announcer {previous} stepped down: {why}")]
    PreviousIneligible {
        /// The previous announcer.
        previous: String,
        /// Why it may not announce any more.
        why: Ineligible,
    },
    /// The announcer stopped being eligible and no node is.
    #[error("no node is eligible; previous announcer {previous}: {why}")]
    NoneEligible {
        /// The previous announcer.
        previous: String,
        /// Why it may not announce any more.
        why: Ineligible,
    },
}

/// The outcome for one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Nodes that may receive the Service's external traffic, sorted.
    pub eligible: Vec<String>,
    /// The announcer (None: nobody may).
    pub announcer: Option<String>,
    /// Why it changed from `current` (None: it did not).
    pub change: Option<Change>,
}

/// Eligible nodes, announcer and the reason for any change, for `ip` of a Service.
pub fn decide(
    ip: IpAddr,
    traffic: &ServiceTraffic,
    nodes: &[NodeInfo],
    node_selectors: &[LabelSelector],
    current: Option<&str>,
) -> Decision {
    let eligible = eligible_nodes(traffic, nodes, node_selectors);
    let announcer = choose_announcer(ip, &eligible, current);
    let change = match (current, &announcer) {
        (None, Some(_)) => Some(Change::FirstChoice),
        (Some(prev), next) if next.as_deref() != Some(prev) => {
            let why = nodes
                .iter()
                .find(|n| n.name == prev)
                .map_or(Err(Ineligible::Gone), |n| eligibility(traffic, n, node_selectors))
                .expect_err("an eligible announcer is kept");
            let previous = prev.to_string();
            Some(match next {
                Some(_) => Change::PreviousIneligible { previous, why },
                None => Change::NoneEligible { previous, why },
            })
        }
        _ => None,
    };
    Decision { eligible, announcer, change }
}

#[cfg(test)]
mod tests;
