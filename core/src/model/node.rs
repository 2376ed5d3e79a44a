//! Nodes, Pods and Namespaces: what the planner needs about the node it runs on, and what DNS and
//! the allocator need about pods and namespaces.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, IpNet};

/// Node label carrying the topology zone.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

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
}

impl Node {
    /// The node's zone label, if any.
    pub fn zone(&self) -> Option<&str> {
        self.labels.get(LABEL_ZONE).map(String::as_str)
    }

    /// The node's primary IP of `family` (first address of that family).
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
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
