//! Objects Tideway components write for each other: what an agent reports about its node
//! (`NodeProxyState`) and which node the operator chose to announce a LoadBalancer IP
//! (`L2Announcement`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::ServiceName;
use crate::config::ProxyMode;

/// What a node's agent has programmed, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeProxyState {
    /// The node (also the object's name).
    pub node: String,
    /// The mode programmed.
    pub mode: Option<ProxyMode>,
    /// The `ProxyConfig` in force (None: defaults, no config matched).
    pub proxy_config: Option<String>,
    /// Its `metadata.generation` when it was programmed.
    pub proxy_config_generation: Option<i64>,
    /// The first sync completed and the last one succeeded.
    pub ready: bool,
    /// When the last successful sync finished.
    pub last_sync: Option<SystemTime>,
    /// How long it took.
    pub last_sync_duration: Option<Duration>,
    /// Service ports programmed.
    pub service_ports: u64,
    /// Endpoints programmed (over every Service port).
    pub endpoints: u64,
    /// Kernel objects (rules, map elements, virtual servers) programmed.
    pub rules: u64,
    /// Drift repairs since the agent started.
    pub drift_repairs: u64,
    /// The last error, while it lasts.
    pub last_error: Option<String>,
    /// Per Service, the `metadata.generation` last applied and verified.
    pub programmed: BTreeMap<ServiceName, i64>,
    /// True when `programmed` was cut to the report's size limit.
    pub programmed_truncated: bool,
    /// LoadBalancer IPs this node answers ARP / neighbour solicitations for.
    pub announcing: Vec<IpAddr>,
}

impl NodeProxyState {
    /// True when `other` reports the same content, timestamps and durations aside (a sync that
    /// changed nothing does not need a write).
    pub fn same_content(&self, other: &NodeProxyState) -> bool {
        let strip =
            |s: &NodeProxyState| NodeProxyState { last_sync: None, last_sync_duration: None, ..s.clone() };
        strip(self) == strip(other)
    }
}

/// When an agent writes its report: at once after a content change (but at most once per
/// `min_interval`), and every `refresh` otherwise so the sync time stays current.
pub fn report_due(
    last: Option<(&NodeProxyState, Duration)>,
    current: &NodeProxyState,
    min_interval: Duration,
    refresh: Duration,
) -> bool {
    match last {
        None => true,
        Some((prev, age)) if !prev.same_content(current) => age >= min_interval,
        Some((_, age)) => age >= refresh,
    }
}

/// The operator's decision for one LoadBalancer Service: who announces its IPs on the node
/// network (layer 2), and who could.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct L2Announcement {
    /// The Service.
    pub service: ServiceName,
    /// Its LoadBalancer IPs.
    pub ips: Vec<IpAddr>,
    /// The announcing node (None: no node is eligible).
    pub node: Option<String>,
    /// Nodes that may receive the Service's external traffic, sorted.
    pub eligible: Vec<String>,
    /// Interfaces to announce on (empty: the node-network interface).
    pub interfaces: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_written_on_change_rate_limited_and_refreshed() {
        let s = Duration::from_secs;
        let a = NodeProxyState { node: "n".into(), service_ports: 1, ..Default::default() };
        let later = NodeProxyState { last_sync: Some(SystemTime::UNIX_EPOCH + s(9)), ..a.clone() };
        let changed = NodeProxyState { service_ports: 2, ..a.clone() };
        let (min, refresh) = (s(5), s(60));
        assert!(report_due(None, &a, min, refresh), "first report");
        assert!(!report_due(Some((&a, s(10))), &later, min, refresh), "only the time moved");
        assert!(report_due(Some((&a, s(61))), &later, min, refresh), "refresh");
        assert!(!report_due(Some((&a, s(1))), &changed, min, refresh), "rate limit");
        assert!(report_due(Some((&a, s(5))), &changed, min, refresh), "change after the interval");
    }
}
