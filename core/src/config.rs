//! Proxy configuration: the mode and its settings, and which `ProxyConfig` applies to a node.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::net::IpNet;

/// The dataplane backend a node programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// nftables (the default).
    #[default]
    Nftables,
    /// iptables, with kube-proxy's chain layout.
    Iptables,
    /// IPVS virtual servers plus a few iptables rules.
    Ipvs,
}

impl ProxyMode {
    /// Every mode.
    pub const ALL: [ProxyMode; 3] = [ProxyMode::Nftables, ProxyMode::Iptables, ProxyMode::Ipvs];

    /// Lower-case name (`nftables`, `iptables`, `ipvs`), as served on `/proxyMode`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Nftables => "nftables",
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
        }
    }

    /// True when the mode writes iptables tables (IPVS mode's classification rules are
    /// iptables rules too): what a retired backend must leave of them is counted.
    pub fn writes_iptables(self) -> bool {
        self != ProxyMode::Nftables
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown proxy mode or scheduler name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?} (expected one of: {expected})")]
pub struct UnknownName {
    /// What was being parsed.
    pub what: &'static str,
    /// The rejected value.
    pub value: String,
    /// The accepted values.
    pub expected: &'static str,
}

impl FromStr for ProxyMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "nftables" => Ok(ProxyMode::Nftables),
            "iptables" => Ok(ProxyMode::Iptables),
            "ipvs" => Ok(ProxyMode::Ipvs),
            _ => {
                Err(UnknownName { what: "proxy mode", value: s.into(), expected: "nftables, iptables, ipvs" })
            }
        }
    }
}

/// IPVS schedulers kube-proxy accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Scheduler {
    #[default]
    Rr,
    Wrr,
    Lc,
    Wlc,
    Lblc,
    Lblcr,
    Sh,
    Dh,
    Sed,
    Nq,
    Mh,
}

impl Scheduler {
    /// The kernel's scheduler name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Lblc => "lblc",
            Scheduler::Lblcr => "lblcr",
            Scheduler::Sh => "sh",
            Scheduler::Dh => "dh",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Mh => "mh",
        }
    }
}

impl FromStr for Scheduler {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "" | "rr" => Scheduler::Rr,
            "wrr" => Scheduler::Wrr,
            "lc" => Scheduler::Lc,
            "wlc" => Scheduler::Wlc,
            "lblc" => Scheduler::Lblc,
            "lblcr" => Scheduler::Lblcr,
            "sh" => Scheduler::Sh,
            "dh" => Scheduler::Dh,
            "sed" => Scheduler::Sed,
            "nq" => Scheduler::Nq,
            "mh" => Scheduler::Mh,
            _ => {
                return Err(UnknownName {
                    what: "IPVS scheduler",
                    value: s.into(),
                    expected: "rr, wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq, mh",
                });
            }
        })
    }
}

/// How a Service's new connections are spread over its endpoints (the
/// `tideway.io/load-balancing` annotation, or a `ProxyConfig`'s default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LoadBalancing {
    /// A uniformly random endpoint per connection (kube-proxy's iptables and nftables modes).
    Random,
    /// Maglev consistent hashing of the client's address and port: every node picks the same
    /// endpoint for a flow, and an endpoint change moves few flows (IPVS's `mh`).
    Maglev,
    /// An IPVS scheduler (IPVS mode only; `mh` is Maglev).
    Scheduler(Scheduler),
}

impl LoadBalancing {
    /// The annotation's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadBalancing::Random => "random",
            LoadBalancing::Maglev => "maglev",
            LoadBalancing::Scheduler(s) => s.as_str(),
        }
    }
}

impl fmt::Display for LoadBalancing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LoadBalancing {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "random" => Ok(LoadBalancing::Random),
            "maglev" | "mh" => Ok(LoadBalancing::Maglev),
            "" => {
                Err(UnknownName { what: "load-balancing algorithm", value: s.into(), expected: EXPECTED_LB })
            }
            other => other.parse::<Scheduler>().map(LoadBalancing::Scheduler).map_err(|_| UnknownName {
                what: "load-balancing algorithm",
                value: s.into(),
                expected: EXPECTED_LB,
            }),
        }
    }
}

const EXPECTED_LB: &str =
    "random, maglev, or an IPVS scheduler: rr, wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq, mh";

/// IPVS-specific settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IpvsSettings {
    /// Scheduler for every virtual server.
    pub scheduler: Scheduler,
    /// Set `arp_ignore=1`/`arp_announce=2` so nodes do not answer ARP for service IPs.
    pub strict_arp: bool,
    /// TCP timeout (0 = keep the kernel's).
    pub tcp_timeout: Duration,
    /// TCP FIN timeout (0 = keep the kernel's).
    pub tcp_fin_timeout: Duration,
    /// UDP timeout (0 = keep the kernel's).
    pub udp_timeout: Duration,
}

/// Which node addresses accept NodePort traffic (`nodePortAddresses`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NodePortAddresses {
    /// Not set: kube-proxy's default for the mode ([`NodePortAddresses::for_mode`]).
    #[default]
    Unset,
    /// The node's primary IP of each family (kube-proxy's nftables default).
    Primary,
    /// Every local address (kube-proxy iptables default), loopback excluded.
    All,
    /// Node addresses inside these CIDRs.
    Cidrs(Vec<IpNet>),
}

impl NodePortAddresses {
    /// What the setting means in `mode`. Unset, it is kube-proxy's default for that mode:
    /// the primary IPs in nftables mode, every local address in iptables and IPVS modes
    /// (where iptables mode also serves 127.0.0.1, see `localhost_node_ports`).
    pub fn for_mode(&self, mode: ProxyMode) -> &NodePortAddresses {
        match (self, mode) {
            (NodePortAddresses::Unset, ProxyMode::Nftables) => &NodePortAddresses::Primary,
            (NodePortAddresses::Unset, ProxyMode::Iptables | ProxyMode::Ipvs) => &NodePortAddresses::All,
            (set, _) => set,
        }
    }
}

/// How to tell pod-originated traffic from off-cluster traffic (`detectLocalMode`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DetectLocal {
    /// Sources inside the cluster CIDRs are local.
    #[default]
    ClusterCidr,
    /// Sources inside this node's pod CIDRs are local.
    NodeCidr,
    /// Packets that arrive through this bridge are local (`BridgeInterface`,
    /// `detectLocal.bridgeInterface`).
    BridgeInterface(String),
    /// Packets that arrive through an interface whose name starts with this are local
    /// (`InterfaceNamePrefix`, `detectLocal.interfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

impl DetectLocal {
    /// kube-proxy's spelling of the mode (`detectLocalMode`).
    pub fn mode(&self) -> &'static str {
        match self {
            DetectLocal::ClusterCidr => "ClusterCIDR",
            DetectLocal::NodeCidr => "NodeCIDR",
            DetectLocal::BridgeInterface(_) => "BridgeInterface",
            DetectLocal::InterfaceNamePrefix(_) => "InterfaceNamePrefix",
        }
    }
}

/// Every setting that shapes the rules a node programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySettings {
    /// Dataplane backend.
    pub mode: ProxyMode,
    /// Pod network CIDRs of the cluster (one per family at most, usually).
    pub cluster_cidrs: Vec<IpNet>,
    /// Local-traffic detection.
    pub detect_local: DetectLocal,
    /// Masquerade all traffic to ClusterIPs.
    pub masquerade_all: bool,
    /// The packet-mark bit used to request masquerade (default 14, mark 0x4000).
    pub masquerade_bit: u8,
    /// Where NodePorts are served.
    pub node_port_addresses: NodePortAddresses,
    /// Accept NodePort connections on 127.0.0.1 as kube-proxy's iptables mode does
    /// (`--iptables-localhost-nodeports`, default on): iptables mode and IPv4 only, and only
    /// when `node_port_addresses` takes loopback in (`All`, or a CIDR holding 127.0.0.1).
    pub localhost_node_ports: bool,
    /// Only program Services whose `service-proxy-name` label equals this.
    pub service_proxy_name: Option<String>,
    /// Full resync interval.
    pub sync_period: Duration,
    /// Minimum time between syncs.
    pub min_sync_period: Duration,
    /// IPVS settings.
    pub ipvs: IpvsSettings,
    /// The algorithm of Services without the `tideway.io/load-balancing` annotation (None:
    /// the mode's own: random, or `ipvs.scheduler` in IPVS mode).
    #[serde(default)]
    pub load_balancing: Option<LoadBalancing>,
    /// Buckets of a Maglev lookup table per Service port (a prime; grows only when the
    /// endpoints outgrow it).
    #[serde(default = "default_maglev_table_size")]
    pub maglev_table_size: u32,
}

fn default_maglev_table_size() -> u32 {
    crate::maglev::DEFAULT_TABLE_SIZE
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            mode: ProxyMode::default(),
            cluster_cidrs: Vec::new(),
            detect_local: DetectLocal::default(),
            masquerade_all: false,
            masquerade_bit: 14,
            node_port_addresses: NodePortAddresses::default(),
            localhost_node_ports: true,
            service_proxy_name: None,
            sync_period: Duration::from_secs(30),
            min_sync_period: Duration::from_secs(1),
            ipvs: IpvsSettings::default(),
            load_balancing: None,
            maglev_table_size: crate::maglev::DEFAULT_TABLE_SIZE,
        }
    }
}

impl ProxySettings {
    /// The masquerade mark value (`1 << masquerade_bit`).
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }
}

/// A label-selector requirement operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOp {
    /// Value in the set.
    In,
    /// Value not in the set (or key absent).
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
}

/// One `matchExpressions[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: SelectorOp,
    /// Values (In/NotIn).
    pub values: Vec<String>,
}

/// A Kubernetes label selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LabelSelector {
    /// `matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions`.
    pub match_expressions: Vec<SelectorRequirement>,
}

impl LabelSelector {
    /// True when `labels` satisfy every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.op {
                    SelectorOp::In => value.is_some_and(|v| r.values.contains(v)),
                    SelectorOp::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    SelectorOp::Exists => value.is_some(),
                    SelectorOp::DoesNotExist => value.is_none(),
                }
            })
    }

    /// Number of terms, used to prefer more specific selectors.
    pub fn specificity(&self) -> usize {
        self.match_labels.len() + self.match_expressions.len()
    }
}

/// A `ProxyConfig`: settings for the nodes its selector matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyConfig {
    /// Object name.
    pub name: String,
    /// `metadata.generation` (0 when the source has none).
    pub generation: i64,
    /// Nodes this config applies to.
    pub node_selector: LabelSelector,
    /// Higher wins when several configs match a node.
    pub priority: i32,
    /// The settings.
    pub settings: ProxySettings,
    /// Set on a config by an uninstall (annotation `tideway.io/cleanup`): every agent removes
    /// what it programmed and programs nothing more (see [`cleanup_requested`]); the value
    /// names the request, which the agents report back as done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<String>,
}

impl ProxyConfig {
    /// A config for every node (no selector, priority 0) at `generation`.
    pub fn every_node(name: &str, generation: i64, settings: ProxySettings) -> ProxyConfig {
        ProxyConfig {
            name: name.into(),
            generation,
            node_selector: LabelSelector::default(),
            priority: 0,
            settings,
            cleanup: None,
        }
    }
}

/// The clean-up an uninstall asked every node for, if any: the smallest request name among
/// the configs carrying one, whatever their selectors (the uninstall's own config selects no
/// node, so that no node's settings change while it is asked).
pub fn cleanup_requested<'a>(configs: impl IntoIterator<Item = &'a ProxyConfig>) -> Option<&'a str> {
    configs.into_iter().filter_map(|c| c.cleanup.as_deref()).min()
}

/// Picks the config a node must run: among configs whose selector matches the node's labels,
/// the highest priority, then the most specific selector, then the smallest name.
pub fn resolve_proxy_config<'a>(
    configs: impl IntoIterator<Item = &'a ProxyConfig>,
    node_labels: &BTreeMap<String, String>,
) -> Option<&'a ProxyConfig> {
    configs.into_iter().filter(|c| c.node_selector.matches(node_labels)).min_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(b.node_selector.specificity().cmp(&a.node_selector.specificity()))
            .then(a.name.cmp(&b.name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn cfg(name: &str, priority: i32, sel: &[(&str, &str)], mode: ProxyMode) -> ProxyConfig {
        ProxyConfig {
            name: name.into(),
            generation: 1,
            node_selector: LabelSelector { match_labels: labels(sel), match_expressions: vec![] },
            priority,
            settings: ProxySettings { mode, ..Default::default() },
            cleanup: None,
        }
    }

    #[test]
    fn a_cleanup_asked_on_any_config_is_asked_of_every_node() {
        let mut configs = vec![
            cfg("default", 0, &[], ProxyMode::Nftables),
            cfg("b", 0, &[("x", "y")], ProxyMode::Iptables),
        ];
        assert_eq!(cleanup_requested(&configs), None);
        configs[1].cleanup = Some("2".into());
        assert_eq!(cleanup_requested(&configs), Some("2"));
        configs[0].cleanup = Some("1".into());
        assert_eq!(cleanup_requested(&configs), Some("1"), "the smallest, whichever config carries it");
    }

    #[test]
    fn most_specific_then_priority_wins() {
        let configs = [
            cfg("default", 0, &[], ProxyMode::Nftables),
            cfg("legacy", 0, &[("pool", "legacy")], ProxyMode::Iptables),
            cfg("urgent", 10, &[("pool", "legacy"), ("rack", "r1")], ProxyMode::Ipvs),
        ];
        let pick = |l: &[(&str, &str)]| resolve_proxy_config(&configs, &labels(l)).map(|c| c.name.as_str());
        assert_eq!(pick(&[]), Some("default"));
        assert_eq!(pick(&[("pool", "legacy")]), Some("legacy"));
        assert_eq!(pick(&[("pool", "legacy"), ("rack", "r1")]), Some("urgent"));
        assert_eq!(resolve_proxy_config(&configs[1..2], &labels(&[])), None);
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let sel = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![
                SelectorRequirement { key: "zone".into(), op: SelectorOp::In, values: vec!["a".into()] },
                SelectorRequirement { key: "gpu".into(), op: SelectorOp::DoesNotExist, values: vec![] },
                SelectorRequirement { key: "tier".into(), op: SelectorOp::NotIn, values: vec!["db".into()] },
            ],
        };
        assert!(sel.matches(&labels(&[("zone", "a")])));
        assert!(!sel.matches(&labels(&[("zone", "b")])));
        assert!(!sel.matches(&labels(&[("zone", "a"), ("gpu", "1")])));
        assert!(!sel.matches(&labels(&[("zone", "a"), ("tier", "db")])));
    }

    #[test]
    fn modes_parse_and_reject_unknown() {
        assert_eq!("IPVS".parse::<ProxyMode>().unwrap(), ProxyMode::Ipvs);
        let err = "userspace".parse::<ProxyMode>().unwrap_err();
        assert!(err.to_string().contains("userspace"));
        assert_eq!(ProxySettings::default().masquerade_mark(), 0x4000);
    }
}
