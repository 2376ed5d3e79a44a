//! Which nodes may receive a LoadBalancer Service's external traffic, and which one of them
//! answers ARP / neighbour solicitations for an address (MetalLB layer 2, made sticky).
//!
//! ```text
//!  nodes (ready, agent liveness, labels, local endpoints of the Service)  +  pool's L2 node selectors
//!        | eligible_nodes: Cluster -> ready nodes with a live agent the selectors admit, if any
//!        |                            endpoint serves
//!        |                 Local   -> those with a serving endpoint of their own
//!        v
//!  eligible (sorted)  +  current announcer
//!        | choose_announcer: keep the current one while eligible, else the eligible node with
//!        |                   the smallest sha256(node + "#" + ip), MetalLB's hash
//!        v
//!  announcer (None: nobody may)  +  Change (why it moved: Events, metrics)
//! ```
//!
//! MetalLB re-hashes on every change, so a node joining can steal an address from a healthy
//! announcer and break its clients' connections for a gratuitous-ARP round. Here an address
//! moves only when its announcer stops being eligible; the hash only decides where it goes.
//! A node announces only while its Node is Ready *and* its agent is alive: kubelet keeps a
//! Node Ready when only the agent died, and turns it NotReady only after the node monitor's
//! grace period when the whole node died. Agent liveness comes from the agents' failure
//! detector through [`crate::cluster::ClusterState::set_agent_liveness`]; `Unknown` (no
//! information yet, e.g. right after an operator restart) counts as alive, so it moves nothing.
//!
//! MetalLB's and KEP-3836's node rules hold for every Service: a node labelled
//! `node.kubernetes.io/exclude-from-external-load-balancers`, one whose `NetworkUnavailable`
//! condition is true, and one tainted `ToBeDeletedByClusterAutoscaler` never announce.
//!
//! Every Service sharing one address must be given the same eligible set (the intersection
//! of theirs), so that they agree on the announcer.

use std::collections::BTreeMap;
use std::net::IpAddr;

use sha2::{Digest, Sha256};

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
/// function of its arguments; the order of `eligible` does not matter.
pub fn choose_announcer(ip: IpAddr, eligible: &[String], current: Option<&str>) -> Option<String> {
    if let Some(current) = current.filter(|c| eligible.iter().any(|e| e == c)) {
        return Some(current.to_string());
    }
    let ip = ip.to_string();
    eligible.iter().min_by_key(|n| (rank(n, &ip), n.as_str())).cloned()
}

/// Why the announcer of an address changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Change {
    /// There was no announcer; now there is.
    #[error("first announcer")]
    FirstChoice,
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
mod tests {
    use super::*;
    use crate::testing::ip;

    fn node(name: &str, ready: bool, zone: &str, local: LocalEndpoints) -> NodeInfo {
        let labels = [("zone".to_string(), zone.to_string())].into();
        let agent = AgentLiveness::Unknown;
        NodeInfo {
            name: name.into(),
            ready,
            agent,
            network_unavailable: false,
            to_be_deleted: false,
            labels,
            local,
        }
    }

    fn zone(z: &str) -> LabelSelector {
        LabelSelector {
            match_labels: [("zone".to_string(), z.to_string())].into(),
            match_expressions: vec![],
        }
    }

    const CLUSTER: ServiceTraffic =
        ServiceTraffic { policy: TrafficPolicy::Cluster, serving_endpoints: true };
    const LOCAL: ServiceTraffic = ServiceTraffic { policy: TrafficPolicy::Local, serving_endpoints: true };
    const IDLE: ServiceTraffic = ServiceTraffic { policy: TrafficPolicy::Cluster, serving_endpoints: false };

    #[test]
    fn local_endpoints_fall_back_to_serving_terminating() {
        assert_eq!(LocalEndpoints::of([]), LocalEndpoints::Absent);
        assert_eq!(LocalEndpoints::of([(false, false)]), LocalEndpoints::Absent);
        assert_eq!(LocalEndpoints::of([(false, true), (false, false)]), LocalEndpoints::ServingTerminating);
        assert_eq!(LocalEndpoints::of([(false, true), (true, true)]), LocalEndpoints::Ready);
        assert_eq!(LocalEndpoints::of([(true, true), (false, true)]), LocalEndpoints::Ready);
    }

    #[test]
    fn eligible_nodes_by_policy_readiness_and_selectors() {
        use LocalEndpoints::{Absent, Ready, ServingTerminating};
        let nodes = [
            node("d", true, "a", Absent),
            node("b", true, "b", ServingTerminating),
            node("c", false, "a", Ready),
            node("a", true, "a", Ready),
        ];
        let cases: [(&ServiceTraffic, Vec<LabelSelector>, &[&str]); 6] = [
            (&CLUSTER, vec![], &["a", "b", "d"]),
            (&CLUSTER, vec![zone("a")], &["a", "d"]),
            (&CLUSTER, vec![zone("b"), zone("a")], &["a", "b", "d"]),
            (&LOCAL, vec![], &["a", "b"]),
            (&LOCAL, vec![zone("b")], &["b"]),
            (&IDLE, vec![], &[]),
        ];
        for (traffic, selectors, want) in cases {
            assert_eq!(eligible_nodes(traffic, &nodes, &selectors), want, "{traffic:?} {selectors:?}");
        }
        assert_eq!(eligibility(&LOCAL, &nodes[0], &[]), Err(Ineligible::NoLocalEndpoint));
        assert_eq!(eligibility(&LOCAL, &nodes[2], &[]), Err(Ineligible::NotReady));
        assert_eq!(eligibility(&CLUSTER, &nodes[1], &[zone("a")]), Err(Ineligible::Selector));
        assert_eq!(eligibility(&IDLE, &nodes[3], &[]), Err(Ineligible::NoServingEndpoints));
    }

    #[test]
    fn a_dead_agent_bars_its_ready_node_and_unknown_counts_as_alive() {
        use AgentLiveness::{Alive, Dead, Unknown};
        let vip = ip("192.168.0.200");
        let with = |a: AgentLiveness, b: AgentLiveness| {
            let mut nodes =
                [node("a", true, "a", LocalEndpoints::Ready), node("b", true, "a", LocalEndpoints::Ready)];
            (nodes[0].agent, nodes[1].agent) = (a, b);
            nodes
        };
        for (a, b, want) in [
            (Unknown, Unknown, &["a", "b"][..]),
            (Alive, Unknown, &["a", "b"]),
            (Dead, Alive, &["b"]),
            (Unknown, Dead, &["a"]),
            (Dead, Dead, &[]),
        ] {
            assert_eq!(eligible_nodes(&CLUSTER, &with(a, b), &[]), want, "{a:?} {b:?}");
        }
        assert_eq!(eligibility(&CLUSTER, &with(Dead, Alive)[0], &[]), Err(Ineligible::AgentDown));
        let mut not_ready = with(Dead, Alive);
        not_ready[0].ready = false;
        assert_eq!(
            eligibility(&CLUSTER, &not_ready[0], &[]),
            Err(Ineligible::NotReady),
            "NotReady says more"
        );
        let d = decide(vip, &LOCAL, &with(Dead, Alive), &[], Some("a"));
        let why = Change::PreviousIneligible { previous: "a".into(), why: Ineligible::AgentDown };
        assert_eq!((d.announcer.as_deref(), d.change), (Some("b"), Some(why)));
        assert_eq!(
            decide(vip, &LOCAL, &with(Unknown, Alive), &[], Some("a")).change,
            None,
            "a restart moves nothing"
        );
    }

    #[test]
    fn node_rules_bar_excluded_unnetworked_and_departing_nodes() {
        let ok = node("a", true, "a", LocalEndpoints::Ready);
        let mut excluded = ok.clone();
        excluded.labels.insert(LABEL_EXCLUDE_FROM_EXTERNAL_LB.into(), String::new());
        let unnetworked = NodeInfo { network_unavailable: true, ..ok.clone() };
        let departing = NodeInfo { to_be_deleted: true, ..ok.clone() };
        let all_of_them = NodeInfo { network_unavailable: true, to_be_deleted: true, ..excluded.clone() };
        let cases = [
            (&ok, Ok(())),
            (&excluded, Err(Ineligible::Excluded)),
            (&unnetworked, Err(Ineligible::NetworkUnavailable)),
            (&departing, Err(Ineligible::ToBeDeleted)),
            (&all_of_them, Err(Ineligible::NetworkUnavailable)),
        ];
        for (n, want) in cases {
            for traffic in [&CLUSTER, &LOCAL] {
                assert_eq!(eligibility(traffic, n, &[]), want, "{n:?}");
                // A selector that admits the node does not override the rules.
                assert_eq!(eligibility(traffic, n, &[zone("a")]), want, "{n:?}");
            }
        }
        assert!(Ineligible::ToBeDeleted.to_string().contains("ToBeDeletedByClusterAutoscaler"));
        assert!(Ineligible::Excluded.to_string().contains("exclude-from-external-load-balancers"));
    }

    #[test]
    fn node_info_reads_the_rules_off_the_node() {
        let mut n = crate::testing::mk_node("a", "192.168.0.10", "z");
        let info = |n: &Node| NodeInfo::of(n, AgentLiveness::Unknown, LocalEndpoints::Absent);
        assert!(!info(&n).network_unavailable && !info(&n).to_be_deleted);
        n.network_unavailable = true;
        n.taints.push(crate::model::Taint {
            key: TAINT_TO_BE_DELETED.into(),
            value: "1700000000".into(),
            effect: "NoSchedule".into(),
        });
        assert!(info(&n).network_unavailable && info(&n).to_be_deleted);
    }

    #[test]
    fn the_announcer_sticks_until_it_is_ineligible() {
        let vip = ip("192.168.0.200");
        let names: Vec<String> = (0..8).map(|i| format!("node-{i}")).collect();
        let first = choose_announcer(vip, &names[..4], None).unwrap();
        let newcomer = names[4..].iter().find(|n| announcer_hash(n, vip) < announcer_hash(&first, vip));
        let newcomer = newcomer.expect("some later node hashes first");
        let grown: Vec<String> = names[..4].iter().chain([newcomer]).cloned().collect();
        assert_eq!(choose_announcer(vip, &grown, Some(&first)), Some(first.clone()), "no flap");
        assert_eq!(choose_announcer(vip, &grown, None), Some(newcomer.clone()), "hash order otherwise");
        let without: Vec<String> = grown.iter().filter(|n| **n != first).cloned().collect();
        assert_eq!(choose_announcer(vip, &without, Some(&first)), Some(newcomer.clone()));
        assert_eq!(choose_announcer(vip, &[], Some(&first)), None);
    }

    #[test]
    fn decisions_say_why_the_announcer_moved() {
        use LocalEndpoints::{Absent, Ready};
        let vip = ip("fd00:192::200");
        let nodes = [node("a", true, "a", Ready), node("b", true, "a", Absent), node("c", false, "a", Ready)];
        let d = decide(vip, &LOCAL, &nodes, &[], None);
        assert_eq!((d.announcer.as_deref(), d.change), (Some("a"), Some(Change::FirstChoice)));
        assert_eq!(decide(vip, &LOCAL, &nodes, &[], Some("a")).change, None);
        let moved = |current, nodes: &[NodeInfo]| decide(vip, &LOCAL, nodes, &[], Some(current)).change;
        let why = |previous: &str, why| Some(Change::PreviousIneligible { previous: previous.into(), why });
        assert_eq!(moved("b", &nodes), why("b", Ineligible::NoLocalEndpoint));
        assert_eq!(moved("c", &nodes), why("c", Ineligible::NotReady));
        assert_eq!(moved("z", &nodes), why("z", Ineligible::Gone));
        let d = decide(vip, &CLUSTER, &nodes, &[zone("b")], Some("a"));
        assert_eq!(d.change, Some(Change::NoneEligible { previous: "a".into(), why: Ineligible::Selector }));
        assert_eq!(decide(vip, &IDLE, &nodes, &[], None).change, None, "nobody before, nobody now");
    }

    #[test]
    fn addresses_spread_over_nodes() {
        let names: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..2000u32 {
            let vip = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
            *per_node.entry(choose_announcer(vip, &names, None).unwrap()).or_default() += 1;
        }
        assert_eq!(per_node.len(), 10);
        assert!(per_node.values().all(|n| (120..=280).contains(n)), "{per_node:?}");
    }
}
