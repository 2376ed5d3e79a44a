//! The packet tracer: walks a [`Program`](crate::program::Program) with one new connection and reports every path it can
//! take (random endpoint choices are all explored) and where it ends up.
//!
//! Hooks are visited as the kernel does for a first packet: prerouting, then input (local
//! destination) or forward, then postrouting; node-originated packets start at output. Rules
//! that depend on history (affinity lists, conntrack other than NEW) do not match.

mod interp;
mod report;

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

pub use interp::trace;
pub use report::render_trace;

use crate::net::{IpFamily, IpNet, Protocol};
use crate::plan::NodePlan;
use crate::program::Hook;

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
        TraceEnv { local, pod_interface, ..TraceEnv::default() }
    }

    /// The interface a packet from `origin` arrives on (none for the node's own).
    fn input_interface(&self, origin: Origin) -> &str {
        match origin {
            Origin::Pod => &self.pod_interface,
            Origin::External => &self.node_interface,
            Origin::Node => "",
        }
    }

    fn is_local(&self, ip: &IpAddr) -> bool {
        self.local.iter().any(|n| n.contains(ip))
    }
}

/// One rule that matched on the way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The hook being traversed.
    pub hook: Hook,
    /// `table/chain`.
    pub chain: String,
    /// The rule, in the backend's own syntax.
    pub rule: String,
    /// What the rule did (map element found, endpoint chosen, ...).
    pub note: Option<String>,
}

/// How one path ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Outcome {
    /// Destination rewritten to an endpoint.
    Dnat {
        /// Endpoint address.
        ip: IpAddr,
        /// Endpoint port.
        port: u16,
        /// Source rewritten to the node's address.
        masquerade: bool,
    },
    /// Delivered to a local socket unchanged.
    Local,
    /// Routed on unchanged.
    Forward {
        /// Source rewritten.
        masquerade: bool,
    },
    /// Dropped.
    Drop,
    /// Rejected (ICMP error / reset).
    Reject,
}

/// One possible path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TracePath {
    /// Matched rules in order.
    pub steps: Vec<Step>,
    /// The end.
    pub outcome: Outcome,
}

/// Every path a packet can take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// The packet.
    pub packet: Packet,
    /// The interface it arrives on (none for the node's own packets): what an interface-based
    /// local-traffic detector (`detectLocalMode: BridgeInterface`) reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_interface: Option<String>,
    /// Paths, one per random choice.
    pub paths: Vec<TracePath>,
}

/// The verdict summarised over all paths, for assertions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// DNAT to one of these endpoints.
    Dnat {
        /// `ip:port` of every reachable endpoint, sorted.
        endpoints: Vec<String>,
        /// Whether the source is masqueraded (same on every path).
        masquerade: bool,
    },
    /// Delivered locally.
    Local,
    /// Forwarded unchanged.
    Forward {
        /// Source rewritten.
        masquerade: bool,
    },
    /// Dropped.
    Drop,
    /// Rejected.
    Reject,
    /// Paths disagree.
    Mixed(Vec<Outcome>),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Dnat { endpoints, masquerade } => {
                write!(f, "DNAT to {}", endpoints.join(" | "))?;
                f.write_str(if *masquerade { " (masqueraded)" } else { " (source kept)" })
            }
            Verdict::Local => f.write_str("delivered to the node"),
            Verdict::Forward { masquerade: false } => f.write_str("forwarded unchanged"),
            Verdict::Forward { masquerade: true } => f.write_str("forwarded (masqueraded)"),
            Verdict::Drop => f.write_str("DROP"),
            Verdict::Reject => f.write_str("REJECT"),
            Verdict::Mixed(o) => {
                let each: Vec<String> = o.iter().map(Outcome::to_string).collect();
                write!(f, "depends on the path: {}", each.join(" | "))
            }
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masq = |m: bool| if m { " (masqueraded)" } else { " (source kept)" };
        match self {
            Outcome::Dnat { ip, port, masquerade } => {
                write!(f, "DNAT to {}{}", crate::net::join_host_port(ip, *port), masq(*masquerade))
            }
            Outcome::Local => f.write_str("delivered to the node"),
            Outcome::Forward { masquerade } => write!(f, "forwarded{}", masq(*masquerade)),
            Outcome::Drop => f.write_str("DROP"),
            Outcome::Reject => f.write_str("REJECT"),
        }
    }
}

impl Trace {
    /// Summarises the outcomes.
    pub fn verdict(&self) -> Verdict {
        let outcomes: BTreeSet<Outcome> = self.paths.iter().map(|p| p.outcome).collect();
        if outcomes.iter().all(|o| matches!(o, Outcome::Dnat { .. })) && !outcomes.is_empty() {
            let masq: BTreeSet<bool> =
                outcomes.iter().map(|o| matches!(o, Outcome::Dnat { masquerade: true, .. })).collect();
            if masq.len() == 1 {
                let mut endpoints: Vec<String> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        Outcome::Dnat { ip, port, .. } => Some(crate::net::join_host_port(ip, *port)),
                        _ => None,
                    })
                    .collect();
                endpoints.sort();
                endpoints.dedup();
                return Verdict::Dnat { endpoints, masquerade: masq.contains(&true) };
            }
        }
        match outcomes.iter().collect::<Vec<_>>().as_slice() {
            [Outcome::Local] => Verdict::Local,
            [Outcome::Forward { masquerade }] => Verdict::Forward { masquerade: *masquerade },
            [Outcome::Drop] => Verdict::Drop,
            [Outcome::Reject] => Verdict::Reject,
            _ => Verdict::Mixed(outcomes.into_iter().collect()),
        }
    }
}

/// The family of a packet (of its destination).
pub fn packet_family(p: &Packet) -> IpFamily {
    IpFamily::of(&p.dst)
}
