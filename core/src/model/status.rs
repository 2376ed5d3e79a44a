//! Objects Tideway components write for each other: what an agent reports about its node
//! (`NodeProxyState`) and which node the operator chose to announce a LoadBalancer IP
//! (`L2Announcement`).

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::service::{Service, ServiceName};
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
    /// The highest Service `resourceVersion` the agent had seen when it last programmed
    /// everything it had seen: every Service change up to it is programmed (`None`: the
    /// agent's API server gives versions that do not compare).
    pub programmed_version: Option<u64>,
    /// LoadBalancer IPs this node answers ARP / neighbour solicitations for.
    pub announcing: Vec<IpAddr>,
    /// Objects the agent refused as invalid, each with the field and why (`ProxyConfig default:
    /// spec.syncPeriod: ...`): it runs their last valid version, or without them.
    pub invalid_objects: Vec<String>,
    /// Interfaces a pool's `l2.interfaces` lists that do not exist on this node: the operator
    /// chooses it to announce none of that pool's addresses while it lacks them all.
    pub missing_interfaces: Vec<String>,
    /// What the node says over BGP (None: its agent speaks no BGP).
    pub bgp: Option<BgpReport>,
    /// Kernel settings the node's rules need and its agent could not set (`name=value: why`).
    pub unset_sysctls: Vec<String>,
    /// Listeners the node's agent cannot bind, and why (another process holds the port).
    pub listener_conflicts: Vec<String>,
    /// When the agent stopped gracefully (SIGTERM), leaving its rules programmed: written as
    /// it leaves, cleared by the next agent's first report (see
    /// [`crate::liveness::agent_liveness`]).
    pub stopped_at: Option<SystemTime>,
    /// The uninstall clean-up the node's agent has done, by its request's name (see
    /// [`crate::config::cleanup_requested`]).
    pub cleaned_up: Option<String>,
    /// The agent's release (`0.2.0`). Agents before 0.2.0 reported none, nor their graceful
    /// stops (see [`crate::liveness::reported_stop`]).
    pub agent_version: Option<String>,
}

/// What a node's agent says over BGP, as it reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BgpReport {
    /// Sessions configured.
    pub sessions: u32,
    /// Of which established.
    pub established: u32,
    /// Prefixes advertised to some peer.
    pub prefixes: u32,
    /// Why FRR does not run the node's decision, while it lasts.
    pub last_error: Option<String>,
    /// What in the BGP objects cannot be done as written, for this node.
    pub conflicts: Vec<String>,
}

impl NodeProxyState {
    /// True when `other` says the same to whoever reads the report: mode, config and generation
    /// programmed, readiness, the error, drift repairs, what is programmed and what is announced,
    /// the objects refused, the interfaces missing.
    /// Counts and sync times move with every endpoint change anywhere in the cluster; they are
    /// carried by the next write, not a reason for one.
    pub fn same_for_readers(&self, other: &NodeProxyState) -> bool {
        let strip = |s: &NodeProxyState| NodeProxyState {
            last_sync: None,
            last_sync_duration: None,
            service_ports: 0,
            endpoints: 0,
            rules: 0,
            bgp: s.bgp.clone().map(|b| BgpReport { prefixes: 0, ..b }),
            ..s.clone()
        };
        strip(self) == strip(other)
    }

    /// Whether this node has programmed `svc` as it is now (see [`programmed`]).
    pub fn has_programmed(&self, svc: &Service) -> Option<bool> {
        programmed(svc.spec_version, self.programmed_version)
    }
}

/// Whether a Service whose generation last changed at `spec_version` is programmed on a node
/// that programmed every change up to `programmed_version`: `None` when either is unknown.
pub fn programmed(spec_version: Option<u64>, programmed_version: Option<u64>) -> Option<bool> {
    Some(spec_version? <= programmed_version?)
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
