//! What a trace finds: the rules each path matched, where it ended, and the verdict over
//! all paths.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::packet::Packet;
use crate::program::Hook;

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
