//! Nodes, Pods and Namespaces: what the planner needs about the node it runs on, and what DNS and
//! the allocator need about pods and namespaces.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, IpNet};

/// Node label carrying the topology zone.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Node label that keeps a node out of external load balancers (KEP-1143; MetalLB honours it).
pub const LABEL_EXCLUDE_FROM_EXTERNAL_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Taint the cluster autoscaler puts on a node it is about to delete (KEP-3836: load
/// balancers stop sending to it, kube-proxy's `/healthz` fails there).
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// One `spec.taints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    /// `key`.
    pub key: String,
    /// `value` (empty when absent).
    #[serde(default)]
    pub value: String,
    /// `effect`: `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A Node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `status.addresses` of type InternalIP, then ExternalIP, in API order.
    pub ips: Vec<IpAddr>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<IpNet>,
    /// True when `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// False when the node's `Ready` condition is present and not `True`.
    pub ready: bool,
    /// True when the node's `NetworkUnavailable` condition is `True` (its network is not
    /// configured: it must not announce).
    #[serde(default)]
    pub network_unavailable: bool,
    /// `spec.taints`.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

impl Node {
    /// The node's zone label, if any.
    pub fn zone(&self) -> Option<&str> {
        self.labels.get(LABEL_ZONE).map(String::as_str)
    }

    /// True when labelled `node.kubernetes.io/exclude-from-external-load-balancers` (any value,
    /// as MetalLB and the service controller read it).
    pub fn excluded_from_external_lb(&self) -> bool {
        self.labels.contains_key(LABEL_EXCLUDE_FROM_EXTERNAL_LB)
    }

    /// True when tainted `ToBeDeletedByClusterAutoscaler`: the autoscaler is draining it.
    pub fn to_be_deleted(&self) -> bool {
        self.taints.iter().any(|t| t.key == TAINT_TO_BE_DELETED)
    }

    /// The node's primary IP of `family` (first address of that family).
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }
}

/// Whether a node's Tideway agent is alive, as the operator learns it apart from the Node's
/// `Ready` condition (kubelet keeps a Node Ready when only the agent died: OOM kill, crash
/// loop, a bad rollout). Set through [`crate::cluster::ClusterState::set_agent_liveness`].
///
/// `Unknown` counts as alive: nothing is known yet (the operator just started, or no agent
/// runs liveness detection), and a restart of the operator must move no address. Only `Dead`
/// bars a node from announcing (`Restarting` is an agent gone on purpose and coming back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub enum AgentLiveness {
    /// No liveness information about the node's agent: treated as alive.
    #[default]
    Unknown,
    /// The agent is known to be alive.
    Alive,
    /// The agent is known to be dead or unreachable: the node may not announce.
    Dead,
    /// The agent left the gossip after a graceful stop (a rollout restarting it), less than the
    /// hand-over time ago, its rules still programmed: the node keeps its addresses meanwhile.
    Restarting,
}

impl AgentLiveness {
    /// True unless the agent is known to be dead (`Unknown` counts as alive).
    pub fn counts_as_alive(self) -> bool {
        self != AgentLiveness::Dead
    }
}

/// A Pod, reduced to what DNS (pod records, hostname/subdomain) and the lab need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.podIPs`.
    pub ips: Vec<IpAddr>,
    /// `spec.hostname`.
    pub hostname: Option<String>,
    /// `spec.subdomain`.
    pub subdomain: Option<String>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

/// A Namespace (DNS tells an empty namespace from a missing one; pool selectors match its labels).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    /// Name.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}
