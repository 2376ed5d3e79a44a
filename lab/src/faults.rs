//! The faults a cluster has, made on purpose (`tideway lab kill agent | start agent | node |
//! partition | heal | api`), and what each means for the rest of the lab (pure):
//!
//! ```text
//!  fault              network                            control plane           Node Ready
//!  kill agent NODE    -                                  -                       stays True (kubelet runs)
//!  node NODE down     its link to the node network down  its processes cut off   False after the grace period
//!  partition NODE     reaches only outside hosts         its processes cut off   False after the grace period
//!  api down           -                                  every process cut off   unchanged (nothing observes)
//! ```
//! In a kube lab (`lab up --kube`) two differ: `kill agent` SIGKILLs the agent's container and
//! its kubelet restarts it (there is no `start agent`), and `api down` has the real API server
//! refuse every node and pod ([`api_block_ruleset`]), its kubelets too, so Nodes turn NotReady
//! after the grace period, as the controller-manager, which keeps its way in, observes.
//!
//! Node `Ready` comes from kubelet's Lease, which a node cut off from the control plane cannot
//! renew: the node lifecycle controller turns it NotReady `node-monitor-grace-period` later
//! (50 s by default since Kubernetes 1.32; `lab up --node-monitor-grace-period`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Kubernetes' `node-monitor-grace-period` default since 1.32.
pub const NODE_MONITOR_GRACE: Duration = Duration::from_secs(50);

/// One fault made or undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "camelCase")]
pub enum Fault {
    /// SIGKILL a node's agent and keep it down (`start` undoes it).
    KillAgent {
        /// The node.
        node: String,
    },
    /// SIGKILL MetalLB's speaker on a node (a kube lab with MetalLB beside Tideway); its kubelet
    /// restarts it.
    KillSpeaker {
        /// The node.
        node: String,
    },
    /// Start a node's agent again.
    StartAgent {
        /// The node.
        node: String,
    },
    /// A node's link to the node network down (`up: false`) or up again.
    NodeLink {
        /// The node.
        node: String,
        /// Up again.
        up: bool,
    },
    /// Cut a node off from the other nodes and the control plane (`heal: true` undoes it).
    Partition {
        /// The node.
        node: String,
        /// Heal it.
        heal: bool,
    },
    /// The API server unreachable for every component, or back.
    Api {
        /// Back up.
        up: bool,
    },
}

impl Fault {
    /// The node the fault is about, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Fault::KillAgent { node }
            | Fault::KillSpeaker { node }
            | Fault::StartAgent { node }
            | Fault::NodeLink { node, .. }
            | Fault::Partition { node, .. } => Some(node),
            Fault::Api { .. } => None,
        }
    }
}

/// The faults in force.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Nodes whose link is down, since when.
    pub links_down: BTreeMap<String, Instant>,
    /// Partitioned nodes, since when.
    pub partitioned: BTreeMap<String, Instant>,
    /// The API server is unreachable.
    pub api_down: bool,
    /// How long a node cut off from the control plane stays Ready.
    pub grace: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            links_down: BTreeMap::new(),
            partitioned: BTreeMap::new(),
            api_down: false,
            grace: NODE_MONITOR_GRACE,
        }
    }
}

impl Faults {
    /// Records a network or control-plane fault (agent faults are the processes' business);
    /// true if something changed.
    pub fn apply(&mut self, fault: &Fault, now: Instant) -> bool {
        let set = |m: &mut BTreeMap<String, Instant>, node: &str, on: bool| {
            if on { m.insert(node.to_string(), now).is_none() } else { m.remove(node).is_some() }
        };
        match fault {
            Fault::KillAgent { .. } | Fault::KillSpeaker { .. } | Fault::StartAgent { .. } => false,
            Fault::NodeLink { node, up } => {
                if *up {
                    set(&mut self.links_down, node, false)
                } else {
                    !self.links_down.contains_key(node) && set(&mut self.links_down, node, true)
                }
            }
            Fault::Partition { node, heal } => {
                if *heal {
                    set(&mut self.partitioned, node, false)
                } else {
                    !self.partitioned.contains_key(node) && set(&mut self.partitioned, node, true)
                }
            }
            Fault::Api { up } => std::mem::replace(&mut self.api_down, !up) == *up,
        }
    }

    /// Since when node `node` has been cut off from the control plane, if it is.
    fn cut_off_since(&self, node: &str) -> Option<Instant> {
        [self.links_down.get(node), self.partitioned.get(node)].into_iter().flatten().min().copied()
    }

    /// Nodes whose processes do not reach the control plane.
    pub fn cut_off(&self) -> BTreeSet<String> {
        self.links_down.keys().chain(self.partitioned.keys()).cloned().collect()
    }

    /// Nodes the node lifecycle controller has turned NotReady by `now`.
    pub fn not_ready(&self, now: Instant) -> BTreeSet<String> {
        self.cut_off()
            .into_iter()
            .filter(|n| self.cut_off_since(n).is_some_and(|t| now.duration_since(t) >= self.grace))
            .collect()
    }

    /// What `lab status` says of node `node`'s network.
    pub fn network(&self, node: &str) -> &'static str {
        if self.links_down.contains_key(node) {
            "down"
        } else if self.partitioned.contains_key(node) {
            "partitioned"
        } else {
            "up"
        }
    }
}

/// The LAN's bridge filter for partitioned nodes: frames between a partitioned node's port and
/// any port but an outside host's are dropped (a flooded frame passes the forward hook once per
/// port, so ARP broadcasts are cut too). The gateway (the bridge itself) is not forwarded to and
/// stays reachable. `ports` maps each partitioned node to its port; `hosts` are the outside
/// hosts' ports.
pub fn partition_ruleset(ports: &[String], hosts: &[String]) -> String {
    let mut rules = String::new();
    let allowed = if hosts.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        format!(" != {{ {} }}", names.join(", "))
    };
    for p in ports {
        if allowed.is_empty() {
            rules.push_str(&format!("    iifname \"{p}\" drop\n    oifname \"{p}\" drop\n"));
        } else {
            rules.push_str(&format!(
                "    iifname \"{p}\" oifname{allowed} drop\n    oifname \"{p}\" iifname{allowed} drop\n"
            ));
        }
    }
    format!(
        "table bridge tideway_lab\ndelete table bridge tideway_lab\ntable bridge tideway_lab {{\n  chain forward {{\n    type filter hook forward priority 0; policy accept;\n{rules}  }}\n}}\n"
    )
}

/// The kube lab's `api down`, in the control-plane node's namespace: every connection to the
/// API server's `address:port` refused (a TCP reset, as from a stopped server), whether it comes
/// from another node, a pod, or a process of the node itself (the output hook, after the
/// `kubernetes` Service's DNAT). Only the loopback address stays open: the controller-manager,
/// the scheduler and the host's forward use it, as the control plane's own components keep
/// their server. The kubelets lose it too, so Nodes turn NotReady after the grace period.
/// Without `block`, the table is removed.
pub fn api_block_ruleset(address: std::net::Ipv4Addr, port: u16, block: bool) -> String {
    let reset = format!("ip daddr {address} tcp dport {port} reject with tcp reset");
    let body = if block {
        format!(
            "table inet tideway_lab_api {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    iif != \"lo\" {reset}\n  }}\n  chain output {{\n    type filter hook output priority 0; policy accept;\n    {reset}\n  }}\n}}\n"
        )
    } else {
        String::new()
    };
    format!("table inet tideway_lab_api\ndelete table inet tideway_lab_api\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_cut_off_turns_not_ready_only_after_the_grace_period() {
        let t0 = Instant::now();
        let mut f = Faults { grace: Duration::from_secs(50), ..Default::default() };
        assert!(f.apply(&Fault::NodeLink { node: "w1".into(), up: false }, t0));
        assert!(!f.apply(&Fault::NodeLink { node: "w1".into(), up: false }, t0 + Duration::from_secs(10)));
        assert!(f.apply(&Fault::Partition { node: "w2".into(), heal: false }, t0 + Duration::from_secs(20)));
        assert_eq!(f.cut_off(), ["w1".to_string(), "w2".to_string()].into());
        assert!(f.not_ready(t0 + Duration::from_secs(49)).is_empty());
        assert_eq!(f.not_ready(t0 + Duration::from_secs(50)), ["w1".to_string()].into());
        assert_eq!(f.not_ready(t0 + Duration::from_secs(70)).len(), 2);
        assert!(f.apply(&Fault::NodeLink { node: "w1".into(), up: true }, t0 + Duration::from_secs(71)));
        assert_eq!(f.not_ready(t0 + Duration::from_secs(71)), ["w2".to_string()].into());
        assert_eq!((f.network("w1"), f.network("w2")), ("up", "partitioned"));
    }

    #[test]
    fn killing_an_agent_or_losing_the_api_leaves_every_node_ready() {
        let t0 = Instant::now();
        let mut f = Faults::default();
        assert!(!f.apply(&Fault::KillAgent { node: "w1".into() }, t0));
        assert!(f.apply(&Fault::Api { up: false }, t0));
        assert!(!f.apply(&Fault::Api { up: false }, t0));
        assert!(f.api_down);
        assert!(f.not_ready(t0 + Duration::from_secs(3600)).is_empty());
        assert!(f.apply(&Fault::Api { up: true }, t0));
    }

    #[test]
    fn a_partitioned_port_reaches_only_the_outside_hosts() {
        let rules = partition_ruleset(&["n1".into()], &["h1".into(), "h2".into()]);
        assert!(rules.contains("iifname \"n1\" oifname != { \"h1\", \"h2\" } drop"), "{rules}");
        assert!(rules.contains("oifname \"n1\" iifname != { \"h1\", \"h2\" } drop"), "{rules}");
        assert!(partition_ruleset(&["n1".into()], &[]).contains("iifname \"n1\" drop"));
        assert!(!partition_ruleset(&[], &["h1".into()]).contains("drop"));
    }

    #[test]
    fn the_api_down_refuses_every_way_in_but_loopback_and_up_removes_the_table() {
        let down = api_block_ruleset(std::net::Ipv4Addr::new(172, 18, 0, 2), 6443, true);
        let reset = "ip daddr 172.18.0.2 tcp dport 6443 reject with tcp reset";
        assert!(down.contains(&format!("iif != \"lo\" {reset}")), "{down}");
        assert!(down.contains("hook output") && down.matches(reset).count() == 2, "{down}");
        assert!(!down.contains("127.0.0.1"), "{down}");
        let up = api_block_ruleset(std::net::Ipv4Addr::new(172, 18, 0, 2), 6443, false);
        assert_eq!(up, "table inet tideway_lab_api\ndelete table inet tideway_lab_api\n");
    }
}
