//! What the planner needs to know about the node it plans for.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::config::{DetectLocal, NodePortAddresses, ProxySettings};
use crate::model::Node;
use crate::net::{IpFamily, IpNet};

/// The node a ruleset is compiled for, plus the proxy settings that apply to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeContext {
    /// Node name (compared with `endpoints[].nodeName`).
    pub name: String,
    /// Topology zone (label `topology.kubernetes.io/zone`).
    pub zone: Option<String>,
    /// Node addresses, primary first per family.
    pub ips: Vec<IpAddr>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<IpNet>,
    /// Proxy settings resolved for this node.
    pub settings: ProxySettings,
}

/// Where NodePorts are captured for one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodePortDestinations {
    /// Any local address except loopback.
    AllLocal,
    /// Only these addresses.
    Ips(Vec<IpAddr>),
}

impl NodeContext {
    /// Builds the context from a Node object and the settings that apply to it.
    pub fn from_node(node: &Node, settings: ProxySettings) -> Self {
        NodeContext {
            name: node.name.clone(),
            zone: node.zone().map(str::to_string),
            ips: node.ips.clone(),
            pod_cidrs: node.pod_cidrs.clone(),
            settings,
        }
    }

    /// The node's primary address of `family`.
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }

    /// Node addresses of `family`.
    pub fn ips_of(&self, family: IpFamily) -> Vec<IpAddr> {
        self.ips.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect()
    }

    /// The networks whose sources count as "local" (pod) traffic; empty when undetectable.
    pub fn local_cidrs(&self, family: IpFamily) -> Vec<IpNet> {
        let nets = match self.settings.detect_local {
            DetectLocal::ClusterCidr => &self.settings.cluster_cidrs,
            DetectLocal::NodeCidr => &self.pod_cidrs,
        };
        nets.iter().copied().filter(|n| IpFamily::of_net(n) == family).collect()
    }

    /// Where NodePorts of `family` are served.
    pub fn node_port_destinations(&self, family: IpFamily) -> NodePortDestinations {
        match &self.settings.node_port_addresses {
            NodePortAddresses::All => NodePortDestinations::AllLocal,
            NodePortAddresses::Primary => {
                NodePortDestinations::Ips(self.primary_ip(family).into_iter().collect())
            }
            NodePortAddresses::Cidrs(cidrs) => NodePortDestinations::Ips(
                self.ips_of(family).into_iter().filter(|ip| cidrs.iter().any(|c| c.contains(ip))).collect(),
            ),
        }
    }
}
