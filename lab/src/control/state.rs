//! What the lab's control plane decided of each node and pod: the rows the topology, the
//! EndpointSlices and the pods' status are built from.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The label the cluster DNS pod carries (and its Service selects).
pub const DNS_LABEL: (&str, &str) = ("k8s-app", "kube-dns");
/// The cluster DNS pod, `kube-system/tideway-dns`.
pub const DNS_POD: &str = "tideway-dns";

/// A node as the topology builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Name.
    pub name: String,
    /// Address on the node network.
    pub ip: Ipv4Addr,
    /// Index (pod CIDR `10.10.N.0/24`).
    pub index: u8,
    /// Pod CIDR.
    pub pod_cidr: (Ipv4Addr, u8),
}

/// A declared container port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPortState {
    /// Its name.
    pub name: Option<String>,
    /// Number.
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// A pod as the topology builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node it runs on.
    pub node: String,
    /// Address.
    pub ip: Ipv4Addr,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Ready (its `status.conditions` do not say otherwise).
    pub ready: bool,
    /// Ports it serves.
    pub ports: Vec<ContainerPortState>,
    /// `spec.hostname`.
    pub hostname: Option<String>,
    /// `spec.subdomain`.
    pub subdomain: Option<String>,
}

impl PodState {
    /// True for the cluster DNS pod (it runs `tideway dns`, not the whoami server).
    pub fn is_dns(&self) -> bool {
        self.namespace == "kube-system" && self.name == DNS_POD
    }
}
