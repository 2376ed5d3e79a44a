//! What the agent reports about itself.

use std::time::Duration;

use serde::Serialize;
use tideway_core::config::ProxyMode;

/// What the agent reports about itself (`/api/v1/status`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStatus {
    /// Node name.
    pub node: String,
    /// The previous agent's graceful stop, reported as `stoppedAt` until this one has joined
    /// the liveness gossip (see [`crate::report::joined`]).
    #[serde(skip)]
    pub joining_since: Option<std::time::SystemTime>,
    /// Mode programmed.
    pub mode: Option<ProxyMode>,
    /// The first sync completed.
    pub synced: bool,
    /// What the agent waits for before it can program this node (the source's first lists,
    /// its Node); empty when it programs.
    pub waiting_for: Vec<String>,
    /// Unix time of the last successful sync.
    pub last_sync: Option<f64>,
    /// Unix time of the last full sync.
    pub last_full_sync: Option<f64>,
    /// Duration of the last sync, milliseconds.
    pub last_sync_ms: f64,
    /// Successful syncs.
    pub syncs: u64,
    /// Of which full.
    pub full_syncs: u64,
    /// Failed syncs.
    pub failures: u64,
    /// Times the kernel differed from what was applied and a full sync repaired it.
    pub drift_repairs: u64,
    /// What differed the last time.
    pub last_drift: Vec<String>,
    /// Mode switches performed.
    pub mode_switches: u64,
    /// Backends of earlier modes still being removed, and what they wait for.
    pub retiring: Vec<String>,
    /// The last error, if the last sync failed.
    pub last_error: Option<String>,
    /// Service ports programmed.
    pub service_ports: usize,
    /// Planner warnings (frontend conflicts).
    pub warnings: Vec<String>,
    /// Objects the source skipped as invalid.
    pub invalid_objects: Vec<String>,
    /// Health-check NodePorts served.
    pub health_check_ports: Vec<u16>,
    /// Stale UDP conntrack entries deleted.
    pub conntrack_deleted: u64,
    /// The ProxyConfig in force and its generation (None: no config matched, defaults).
    pub proxy_config: Option<(String, i64)>,
    /// Endpoints programmed, over every Service port.
    pub endpoints: usize,
    /// Kernel objects programmed (both families).
    pub rules: usize,
    /// Duration of the last sync.
    #[serde(skip)]
    pub last_sync_duration: Option<Duration>,
    /// Every Service change up to this `resourceVersion` is programmed (see
    /// [`tideway_core::model::NodeProxyState::programmed_version`]).
    pub programmed_version: Option<u64>,
    /// LoadBalancer IPs this node answers ARP or neighbour solicitations for.
    pub announcing: Vec<std::net::IpAddr>,
    /// Why the layer-2 announcer cannot run, if it cannot.
    pub announcer_error: Option<String>,
    /// Interfaces a pool's `l2.interfaces` lists that this node lacks (never announced on;
    /// the operator leaves the node out of that pool's announcers while it lacks them all).
    pub missing_interfaces: Vec<String>,
    /// Interfaces answering for IPv4 addresses whose kernel drops the traffic that follows
    /// (no IPv4 address of their own while reverse-path filtering is on), and what to do.
    pub interface_warnings: Vec<String>,
    /// True while this agent reaches neither a strict majority of the nodes nor the API
    /// server: it answers for none of its addresses until it is back.
    pub fenced: bool,
    /// What this node says over BGP (None: the agent speaks no BGP).
    pub bgp: Option<BgpStatus>,
    /// Kernel settings the programmed rules need and the agent could not set (`name=value:
    /// why`): a container whose `/proc/sys` is read-only, say.
    pub unset_sysctls: Vec<String>,
    /// Listeners the agent cannot bind yet (`0.0.0.0:10256: Address in use`), retried every few
    /// seconds: another process holds the port (kube-proxy, while both run in a migration).
    pub listener_conflicts: Vec<String>,
    /// The uninstall clean-up done, by its request's name: nothing is programmed any more.
    pub cleaned_up: Option<String>,
}

/// What the agent's BGP speaker applied, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BgpStatus {
    /// The ASN the node speaks (None: no peer selects it).
    pub asn: Option<u32>,
    /// Each session's peer and the prefixes it is sent, as applied.
    pub sessions: Vec<BgpSessionStatus>,
    /// What in the BGP objects cannot be done as written.
    pub conflicts: Vec<String>,
    /// Why the last configuration was not applied (kept until one is).
    pub last_error: Option<String>,
    /// Configurations applied to FRR.
    pub applied: u64,
}

/// One session as applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BgpSessionStatus {
    /// The `BGPPeer`.
    pub peer: String,
    /// Its address.
    pub address: String,
    /// The prefixes sent to it.
    pub prefixes: Vec<String>,
    /// The session is established, as FRR last said.
    pub established: bool,
    /// Its BFD session's state, as FRR last said (None: no BFD, or not known yet).
    pub bfd: Option<String>,
}
