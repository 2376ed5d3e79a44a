//! ProxyConfig rollout: which nodes each config selects, how many of them report it
//! programmed, which fail, and the conditions a user reads (`Ready`, `Progressing`,
//! `Degraded`, `SysctlsSet`, and `Conflict` when two configs tie for a node).

use std::collections::BTreeMap;

use crate::config::{ProxyConfig, resolve_proxy_config};
use crate::model::{Node, NodeProxyState};

/// At most this many failing nodes are listed in a status.
pub const MAX_FAILURES: usize = 10;

/// One condition (the writer adds `lastTransitionTime` and `observedGeneration`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Condition {
    /// `Ready`, `Progressing`, `Degraded`, `Conflict`, `Valid`.
    pub kind: &'static str,
    /// True or False.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

impl Condition {
    /// A condition.
    pub fn new(kind: &'static str, status: bool, reason: &'static str, message: impl Into<String>) -> Self {
        Condition { kind, status, reason, message: message.into() }
    }
}

/// The status of one ProxyConfig.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ConfigStatus {
    /// Generation of the config the nodes run (the last valid one).
    pub observed_generation: i64,
    /// Nodes whose configuration this is.
    pub selected: u32,
    /// Of those, nodes whose agent reports this config's generation programmed and ready.
    pub programmed: u32,
    /// Of those, nodes whose agent reports an error or runs another mode.
    pub failing: u32,
    /// Up to [`MAX_FAILURES`] failing nodes and why.
    pub failures: Vec<(String, String)>,
    /// Conditions, in a fixed order.
    pub conditions: Vec<Condition>,
    /// Other configs tied with this one for some node, and one such node each.
    pub ties: BTreeMap<String, String>,
    /// Up to [`MAX_FAILURES`] kernel settings selected nodes need and could not set: the node
    /// and `name=value: why`.
    pub unset_sysctls: Vec<(String, String)>,
}

/// How one selected node stands.
enum NodeStanding {
    Programmed,
    Pending,
    Failing(String),
}

fn standing(config: &ProxyConfig, state: Option<&NodeProxyState>) -> NodeStanding {
    let Some(st) = state else { return NodeStanding::Pending };
    if let Some(e) = &st.last_error {
        return NodeStanding::Failing(e.clone());
    }
    let same = st.proxy_config.as_deref() == Some(config.name.as_str())
        && st.proxy_config_generation == Some(config.generation);
    match st.mode {
        Some(mode) if same && mode != config.settings.mode => NodeStanding::Failing(format!(
            "runs {mode}, not {} (overridden on the node)",
            config.settings.mode
        )),
        Some(_) if same && st.ready => NodeStanding::Programmed,
        _ => NodeStanding::Pending,
    }
}

/// Configs tied with `winner` for `labels`: same priority and selector specificity.
fn tied_with<'a>(
    configs: &'a [ProxyConfig],
    winner: &ProxyConfig,
    labels: &BTreeMap<String, String>,
) -> Vec<&'a str> {
    configs
        .iter()
        .filter(|c| c.name != winner.name && c.node_selector.matches(labels))
        .filter(|c| {
            c.priority == winner.priority
                && c.node_selector.specificity() == winner.node_selector.specificity()
        })
        .map(|c| c.name.as_str())
        .collect()
}

/// The status of every config: `configs` are the valid (or last valid) ones, `invalid` names
/// configs whose current version was rejected, with why (they may also be in `configs`, whose
/// version the nodes keep running).
pub fn rollout<'a>(
    configs: &[ProxyConfig],
    invalid: &BTreeMap<String, String>,
    nodes: impl IntoIterator<Item = &'a Node>,
    state_of: impl Fn(&str) -> Option<&'a NodeProxyState>,
) -> BTreeMap<String, ConfigStatus> {
    let mut out: BTreeMap<String, ConfigStatus> = configs
        .iter()
        .map(|c| (c.name.clone(), ConfigStatus { observed_generation: c.generation, ..Default::default() }))
        .collect();
    for name in invalid.keys() {
        out.entry(name.clone()).or_default();
    }
    for node in nodes {
        let Some(winner) = resolve_proxy_config(configs, &node.labels) else { continue };
        let st = out.get_mut(&winner.name).expect("every config has a status");
        st.selected += 1;
        let state = state_of(&node.name);
        for unset in state.map(|s| s.unset_sysctls.as_slice()).unwrap_or_default() {
            if st.unset_sysctls.len() < MAX_FAILURES {
                st.unset_sysctls.push((node.name.clone(), unset.clone()));
            }
        }
        match standing(winner, state) {
            NodeStanding::Programmed => st.programmed += 1,
            NodeStanding::Pending => {}
            NodeStanding::Failing(why) => {
                st.failing += 1;
                if st.failures.len() < MAX_FAILURES {
                    st.failures.push((node.name.clone(), why));
                }
            }
        }
        for other in tied_with(configs, winner, &node.labels) {
            for (a, b) in [(winner.name.as_str(), other), (other, winner.name.as_str())] {
                let st = out.get_mut(a).expect("every config has a status");
                st.ties.entry(b.to_string()).or_insert_with(|| node.name.clone());
            }
        }
    }
    for (name, st) in &mut out {
        st.conditions = conditions(name, st, invalid.get(name));
    }
    out
}

fn conditions(name: &str, st: &ConfigStatus, invalid: Option<&String>) -> Vec<Condition> {
    let (sel, prog, fail) = (st.selected, st.programmed, st.failing);
    let ready = match (sel, prog == sel) {
        (0, _) => Condition::new("Ready", true, "NoNodesSelected", "no node selects this config"),
        (_, true) => {
            Condition::new("Ready", true, "AllNodesProgrammed", format!("{prog} of {sel} nodes programmed"))
        }
        _ => Condition::new(
            "Ready",
            false,
            "NotAllNodesProgrammed",
            format!("{prog} of {sel} nodes programmed"),
        ),
    };
    let progressing = if prog + fail < sel {
        Condition::new(
            "Progressing",
            true,
            "RollingOut",
            format!("{} of {sel} nodes still to program", sel - prog - fail),
        )
    } else {
        Condition::new("Progressing", false, "Complete", "every selected node has reported")
    };
    let degraded = match (invalid, fail) {
        (Some(why), _) => Condition::new(
            "Degraded",
            true,
            "InvalidSpec",
            format!("the current spec is invalid and nodes keep the last valid one: {why}"),
        ),
        (None, 0) => Condition::new("Degraded", false, "AsExpected", "no node reports an error"),
        (None, n) => {
            Condition::new("Degraded", true, "NodesFailing", format!("{n} of {sel} nodes report errors"))
        }
    };
    let sysctls = match st.unset_sysctls.first() {
        None => Condition::new(
            "SysctlsSet",
            true,
            "AllSet",
            "the selected nodes set every kernel setting they need",
        ),
        Some((node, why)) => Condition::new(
            "SysctlsSet",
            false,
            "SysctlRefused",
            format!(
                "node {node}: {why}{}; mount the host's /proc/sys/net as the chart does, or run the agent privileged",
                match st.unset_sysctls.len() - 1 {
                    0 => String::new(),
                    n => format!(" (and {n} more)"),
                }
            ),
        ),
    };
    let mut out = vec![ready, progressing, degraded, sysctls];
    if let Some((other, node)) = st.ties.iter().next() {
        let (winner, loser) =
            if name < other.as_str() { (name, other.as_str()) } else { (other.as_str(), name) };
        out.push(Condition::new(
            "Conflict",
            true,
            "TiedPrecedence",
            format!(
                "node {node} matches ProxyConfigs {winner} and {loser} with the same priority and selector \
                 specificity; {winner} wins by name (set priorities to choose)"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LabelSelector, ProxyMode, ProxySettings};
    use crate::testing::mk_node;

    fn cfg(name: &str, generation: i64, pool: Option<&str>, mode: ProxyMode) -> ProxyConfig {
        let match_labels = pool.iter().map(|p| ("pool".to_string(), p.to_string())).collect();
        ProxyConfig {
            node_selector: LabelSelector { match_labels, match_expressions: vec![] },
            ..ProxyConfig::every_node(name, generation, ProxySettings { mode, ..Default::default() })
        }
    }

    fn node(name: &str, pool: &str) -> Node {
        let mut n = mk_node(name, "192.168.0.10", "z");
        n.labels.insert("pool".into(), pool.into());
        n
    }

    fn report(
        node: &str,
        config: &str,
        generation: i64,
        mode: ProxyMode,
        error: Option<&str>,
    ) -> NodeProxyState {
        NodeProxyState {
            node: node.into(),
            mode: Some(mode),
            proxy_config: Some(config.into()),
            proxy_config_generation: Some(generation),
            ready: error.is_none(),
            last_error: error.map(str::to_string),
            ..Default::default()
        }
    }

    fn cond<'a>(st: &'a ConfigStatus, kind: &str) -> &'a Condition {
        st.conditions.iter().find(|c| c.kind == kind).unwrap_or_else(|| panic!("no {kind}"))
    }

    #[test]
    fn counts_selected_programmed_and_failing_nodes() {
        use ProxyMode::{Iptables, Nftables};
        let configs = [cfg("default", 3, None, Nftables), cfg("legacy", 1, Some("legacy"), Iptables)];
        let nodes = [node("a", "x"), node("b", "x"), node("c", "legacy"), node("d", "x"), node("e", "x")];
        let states: BTreeMap<&str, NodeProxyState> = [
            ("a", report("a", "default", 3, Nftables, None)),
            ("b", report("b", "default", 2, Nftables, None)),
            ("c", report("c", "legacy", 1, Iptables, None)),
            ("d", report("d", "default", 3, Nftables, Some("nft: Operation not permitted"))),
            ("e", report("e", "default", 3, Iptables, None)),
        ]
        .into();
        let out = rollout(&configs, &BTreeMap::new(), &nodes, |n| states.get(n));
        let d = &out["default"];
        assert_eq!((d.selected, d.programmed, d.failing), (4, 1, 2));
        assert_eq!(d.failures[0], ("d".to_string(), "nft: Operation not permitted".to_string()));
        assert!(d.failures[1].1.contains("runs iptables, not nftables"), "{:?}", d.failures);
        assert_eq!(d.observed_generation, 3);
        assert!(!cond(d, "Ready").status && cond(d, "Progressing").status && cond(d, "Degraded").status);
        assert_eq!(cond(d, "Degraded").reason, "NodesFailing");
        let l = &out["legacy"];
        assert_eq!((l.selected, l.programmed, l.failing), (1, 1, 0));
        assert!(cond(l, "Ready").status && !cond(l, "Progressing").status && !cond(l, "Degraded").status);
        assert!(l.ties.is_empty() && l.conditions.len() == 4);
        assert!(cond(l, "SysctlsSet").status);
    }

    #[test]
    fn a_sysctl_a_node_could_not_set_is_named_in_a_condition() {
        let configs = [cfg("default", 1, None, ProxyMode::Iptables)];
        let nodes = [node("a", "x"), node("b", "x")];
        let refused = "net.ipv4.conf.all.route_localnet=1: Read-only file system (os error 30)";
        let mut b = report("b", "default", 1, ProxyMode::Iptables, None);
        b.unset_sysctls = vec![refused.into()];
        let states: BTreeMap<&str, NodeProxyState> =
            [("a", report("a", "default", 1, ProxyMode::Iptables, None)), ("b", b)].into();
        let out = rollout(&configs, &BTreeMap::new(), &nodes, |n| states.get(n));
        let c = cond(&out["default"], "SysctlsSet");
        assert!(!c.status && c.reason == "SysctlRefused", "{c:?}");
        assert!(c.message.starts_with(&format!("node b: {refused}")), "{c:?}");
        assert_eq!(out["default"].programmed, 2, "the rules are programmed all the same");
    }

    #[test]
    fn ties_are_reported_on_both_configs() {
        let configs = [
            cfg("b-config", 1, Some("x"), ProxyMode::Iptables),
            cfg("a-config", 1, Some("x"), ProxyMode::Ipvs),
        ];
        let nodes = [node("n1", "x")];
        let out = rollout(&configs, &BTreeMap::new(), &nodes, |_| None);
        assert_eq!(out["a-config"].selected, 1, "the name breaks the tie");
        for name in ["a-config", "b-config"] {
            let c = cond(&out[name], "Conflict");
            assert!(
                c.status && c.message.contains("a-config wins by name") && c.message.contains("n1"),
                "{c:?}"
            );
        }
    }

    #[test]
    fn an_invalid_config_is_degraded_while_nodes_keep_its_last_valid_version() {
        let configs = [cfg("default", 2, None, ProxyMode::Nftables)];
        let invalid: BTreeMap<String, String> = [
            ("default".to_string(), "spec.mode: unknown proxy mode \"userspace\"".to_string()),
            ("never-valid".to_string(), "spec.mode: unknown".to_string()),
        ]
        .into();
        let nodes = [node("a", "x")];
        let states: BTreeMap<&str, NodeProxyState> =
            [("a", report("a", "default", 2, ProxyMode::Nftables, None))].into();
        let out = rollout(&configs, &invalid, &nodes, |n| states.get(n));
        let d = &out["default"];
        assert_eq!((d.selected, d.programmed), (1, 1), "the node keeps the last valid mode");
        assert!(cond(d, "Degraded").status && cond(d, "Degraded").reason == "InvalidSpec");
        assert!(cond(d, "Degraded").message.contains("userspace"));
        let n = &out["never-valid"];
        assert_eq!(n.selected, 0);
        assert_eq!(cond(n, "Degraded").reason, "InvalidSpec");
    }

    #[test]
    fn no_report_yet_is_progress_not_failure() {
        let configs = [cfg("default", 1, None, ProxyMode::Nftables)];
        let nodes = [node("a", "x"), node("b", "x")];
        let out = rollout(&configs, &BTreeMap::new(), &nodes, |_| None);
        let d = &out["default"];
        assert_eq!((d.selected, d.programmed, d.failing), (2, 0, 0));
        assert_eq!(cond(d, "Progressing").message, "2 of 2 nodes still to program");
        assert!(!cond(d, "Degraded").status);
        let empty = rollout(&configs, &BTreeMap::new(), [], |_| None);
        assert_eq!(cond(&empty["default"], "Ready").reason, "NoNodesSelected");
    }
}
