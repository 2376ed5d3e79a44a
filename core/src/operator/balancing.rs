//! Which load-balancing algorithm the nodes program for a Service, seen from the cluster: the
//! planner's own choice ([`crate::plan::choose_balancing`]) for each distinct node configuration, so the
//! operator can say (an Event, `explain service`) where a Service cannot get what it asks for.
//!
//! ```text
//! nodes -> their ProxyConfig's settings (the mode the agent reports, when it reports one)
//!       -> groups of nodes deciding alike
//! Service annotation x group -> BalancingChoice -> per algorithm: the nodes, the fallback
//! ```

use std::collections::BTreeSet;

use crate::cluster::ClusterState;
use crate::config::{ProxyMode, ProxySettings, resolve_proxy_config};
use crate::model::Service;
use crate::plan::{Balancing, BalancingChoice, choose_balancing as choose};

/// Nodes whose settings decide a Service's algorithm alike.
#[derive(Debug, Clone)]
pub struct NodeGroup {
    settings: ProxySettings,
    nodes: Vec<String>,
}

/// What some nodes program for a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesBalancing {
    /// The algorithm, for people: `random`, `maglev (4093 buckets)`, `IPVS lc`.
    pub algorithm: String,
    /// Why it is not what the Service asked for (None when it is).
    pub fallback: Option<String>,
    /// The nodes, sorted.
    pub nodes: Vec<String>,
}

/// The cluster's nodes grouped by what decides an algorithm: the mode (the one the agent
/// reports, else its config's), the config's default algorithm, table size and scheduler.
pub fn node_groups(state: &ClusterState) -> Vec<NodeGroup> {
    let configs: Vec<_> = state.proxy_configs().collect();
    let mut groups: Vec<NodeGroup> = Vec::new();
    for node in state.nodes() {
        let mut settings = resolve_proxy_config(configs.iter().copied(), &node.labels)
            .map(|c| c.settings.clone())
            .unwrap_or_default();
        if let Some(mode) = state.node_state(&node.name).and_then(|s| s.mode) {
            settings.mode = mode;
        }
        let alike = |g: &&mut NodeGroup| {
            let s = &g.settings;
            (s.mode, s.load_balancing, s.maglev_table_size, s.ipvs.scheduler)
                == (
                    settings.mode,
                    settings.load_balancing,
                    settings.maglev_table_size,
                    settings.ipvs.scheduler,
                )
        };
        match groups.iter_mut().find(alike) {
            Some(g) => g.nodes.push(node.name.clone()),
            None => groups.push(NodeGroup { settings, nodes: vec![node.name.clone()] }),
        }
    }
    groups
}

/// What each group of nodes programs for `svc` (with `backends` endpoints), groups deciding
/// the same merged; in the groups' order.
pub fn service_balancing(svc: &Service, backends: usize, groups: &[NodeGroup]) -> Vec<NodesBalancing> {
    let mut out: Vec<(BalancingChoice, NodesBalancing)> = Vec::new();
    for g in groups {
        let choice = choose(svc.load_balancing.as_deref(), backends, &g.settings);
        match out.iter_mut().find(|(c, _)| *c == choice) {
            Some((_, nb)) => nb.nodes.extend(g.nodes.iter().cloned()),
            None => {
                let nb = NodesBalancing {
                    algorithm: describe(choice.balancing, &g.settings),
                    fallback: choice.fallback.clone(),
                    nodes: g.nodes.clone(),
                };
                out.push((choice, nb));
            }
        }
    }
    out.into_iter()
        .map(|(_, mut nb)| {
            nb.nodes.sort();
            nb
        })
        .collect()
}

/// The fallbacks of `svc` on the cluster's nodes: each message, and the nodes it holds on.
pub fn fallbacks(svc: &Service, groups: &[NodeGroup]) -> Vec<(String, Vec<String>)> {
    if svc.load_balancing.is_none() && groups.iter().all(|g| g.settings.load_balancing.is_none()) {
        return Vec::new(); // the mode's own algorithm: nothing asked, nothing refused
    }
    service_balancing(svc, 0, groups).into_iter().filter_map(|nb| Some((nb.fallback?, nb.nodes))).collect()
}

/// The messages of [`fallbacks`], for remembering which were already said.
pub fn messages(fallbacks: &[(String, Vec<String>)]) -> BTreeSet<String> {
    fallbacks.iter().map(|(m, _)| m.clone()).collect()
}

/// `nodes` for a message: the first few, and how many more.
pub fn node_list(nodes: &[String]) -> String {
    const SHOWN: usize = 5;
    match nodes.len() {
        n if n <= SHOWN => nodes.join(", "),
        n => format!("{} and {} more", nodes[..SHOWN].join(", "), n - SHOWN),
    }
}

fn describe(balancing: Balancing, settings: &ProxySettings) -> String {
    match (balancing, settings.mode) {
        (Balancing::Random, ProxyMode::Ipvs) => format!("IPVS {}", settings.ipvs.scheduler.as_str()),
        (Balancing::Random, _) => "random".into(),
        (Balancing::Maglev { table_size }, _) => format!("maglev ({table_size} buckets)"),
        (Balancing::Scheduler(s), _) => format!("IPVS {}", s.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LabelSelector, LoadBalancing, ProxyConfig};
    use crate::model::NodeProxyState;
    use crate::testing::{mk_node, mk_service};

    fn config(
        name: &str,
        pool: Option<&str>,
        mode: ProxyMode,
        default: Option<LoadBalancing>,
    ) -> ProxyConfig {
        let mut node_selector = LabelSelector::default();
        if let Some(p) = pool {
            node_selector.match_labels.insert("pool".into(), p.into());
        }
        let settings = ProxySettings { mode, load_balancing: default, ..Default::default() };
        ProxyConfig { node_selector, ..ProxyConfig::every_node(name, 1, settings) }
    }

    fn cluster() -> ClusterState {
        let mut state = ClusterState::new();
        for (name, addr, pool) in
            [("n1", "192.168.0.10", "new"), ("n2", "192.168.0.11", "new"), ("n3", "192.168.0.12", "legacy")]
        {
            let mut node = mk_node(name, addr, "z");
            node.labels.insert("pool".into(), pool.into());
            state.apply(node);
        }
        state.apply(config("default", None, ProxyMode::Nftables, None));
        state.apply(config("legacy", Some("legacy"), ProxyMode::Iptables, None));
        state
    }

    fn annotated(value: Option<&str>) -> Service {
        let mut svc = mk_service("ns", "web").cluster_ip("10.96.0.10").build();
        svc.load_balancing = value.map(Into::into);
        svc
    }

    #[test]
    fn each_node_configuration_gets_what_its_mode_can_do() {
        let state = cluster();
        let groups = node_groups(&state);
        let got = service_balancing(&annotated(Some("maglev")), 4, &groups);
        assert_eq!(
            got,
            [
                NodesBalancing {
                    algorithm: "maglev (4093 buckets)".into(),
                    fallback: None,
                    nodes: vec!["n1".into(), "n2".into()],
                },
                NodesBalancing {
                    algorithm: "random".into(),
                    fallback: Some(
                        "load-balancing maglev is not available in iptables mode; using random".into()
                    ),
                    nodes: vec!["n3".into()],
                },
            ]
        );
        let fb = fallbacks(&annotated(Some("maglev")), &groups);
        assert_eq!(fb.len(), 1);
        assert_eq!(fb[0].1, ["n3"]);
        assert!(fallbacks(&annotated(None), &groups).is_empty());
        assert!(fallbacks(&annotated(Some("random")), &groups).is_empty());
    }

    #[test]
    fn the_mode_an_agent_reports_wins_over_its_config() {
        let mut state = cluster();
        let report = NodeProxyState { node: "n1".into(), mode: Some(ProxyMode::Ipvs), ..Default::default() };
        state.apply(report);
        let groups = node_groups(&state);
        let got = service_balancing(&annotated(Some("lc")), 4, &groups);
        let said: Vec<_> = got.iter().map(|nb| (nb.algorithm.as_str(), nb.nodes.join(","))).collect();
        assert_eq!(said, [("IPVS lc", "n1".into()), ("random", "n2".into()), ("random", "n3".into())]);
        let fb = fallbacks(&annotated(Some("lc")), &groups);
        assert_eq!(fb.len(), 2, "nftables and iptables each say why: {fb:?}");
    }
}
