//! The packet a trace follows, where it comes from, and the node it meets.

use std::net::IpAddr;

use serde::Serialize;

use crate::net::{IpFamily, IpNet, Protocol};
use crate::plan::NodePlan;

/// Where a packet comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Origin {
    /// A pod on this node (arrives on a pod interface).
    Pod,
    /// The node itself (a host-network process).
    Node,
    /// Outside the node (arrives on the node's network interface).
    External,
}

/// An origin the tracer does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown origin {0:?} (expected pod, node or external)")]
pub struct UnknownOrigin(pub String);

impl std::str::FromStr for Origin {
    type Err = UnknownOrigin;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pod" => Ok(Origin::Pod),
            "node" => Ok(Origin::Node),
            "external" => Ok(Origin::External),
            other => Err(UnknownOrigin(other.to_string())),
        }
    }
}

/// The first packet of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol.
    pub protocol: Protocol,
    /// Destination port.
    pub dport: u16,
    /// Source port, when known: a Maglev Service's endpoint is then exactly the one the
    /// kernel's hash picks; unknown, every endpoint the table holds is a possible path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// Where it comes from.
    pub origin: Origin,
}

/// Facts about the node the program runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEnv {
    /// Addresses that are local to the node (node IPs, loopback).
    pub local: Vec<IpNet>,
    /// The interface a pod's packets arrive on.
    pub pod_interface: String,
    /// The interface packets from outside the node arrive on.
    pub node_interface: String,
    /// The mark bit whose packets policy routing delivers to the node itself (the node-local
    /// DNS listener's); the listener is taken to be up.
    pub local_route_mark: Option<u32>,
}

/// The interface pods' packets arrive on when the detector does not name one (a bridge, as
/// kube-proxy's own tests and kubenet call it).
const POD_INTERFACE: &str = "cbr0";

/// The node's network interface in traces.
const NODE_INTERFACE: &str = "eth0";

impl Default for TraceEnv {
    fn default() -> Self {
        TraceEnv {
            local: Vec::new(),
            pod_interface: POD_INTERFACE.into(),
            node_interface: NODE_INTERFACE.into(),
            local_route_mark: None,
        }
    }
}

impl TraceEnv {
    /// The node's addresses of the plan's family plus loopback; pods' packets arrive on the
    /// interface the node's detector names.
    pub fn for_node(np: &NodePlan) -> TraceEnv {
        let mut local: Vec<IpNet> = np.node_ips.iter().map(|ip| IpNet::from(*ip)).collect();
        local.push(np.family.loopback_net());
        let pod_interface = np.local.pod_interface().unwrap_or_else(|| POD_INTERFACE.into());
        if let Some(dns) = &np.node_dns {
            local.extend(dns.local.iter().map(|ip| IpNet::from(*ip)));
        }
        let local_route_mark = np.node_dns.as_ref().map(|dns| dns.mark);
        TraceEnv { local, pod_interface, local_route_mark, ..TraceEnv::default() }
    }

    /// The interface a packet from `origin` arrives on (none for the node's own).
    pub(super) fn input_interface(&self, origin: Origin) -> &str {
        match origin {
            Origin::Pod => &self.pod_interface,
            Origin::External => &self.node_interface,
            Origin::Node => "",
        }
    }

    pub(super) fn is_local(&self, ip: &IpAddr) -> bool {
        self.local.iter().any(|n| n.contains(ip))
    }

    /// True when policy routing delivers a packet with `mark` to the node itself.
    pub(super) fn routes_local(&self, mark: u32) -> bool {
        self.local_route_mark.is_some_and(|m| mark & m == m)
    }
}

/// The family of a packet (of its destination).
pub fn packet_family(p: &Packet) -> IpFamily {
    IpFamily::of(&p.dst)
}
