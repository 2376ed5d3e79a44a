//! Prometheus metrics with kube-proxy's names (dashboards and e2e tests read them), plus a few
//! of Tideway's own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// `traffic_policy` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    /// `internal` or `external`.
    pub traffic_policy: String,
}

/// `kind` label: what differed (`chain_rules`, `set_elements`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// [`tideway_core::drift::DriftKind::label`].
    pub kind: String,
}

/// `code` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// HTTP status code.
    pub code: String,
}

/// kube-proxy's buckets for network programming latency: 0.25 s and 0.5 s, every second to a
/// minute, every 5 s to two minutes, every 30 s to five.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..60).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// 1, 2 and 5 of each power of ten from 1 ms to 50 s, and 100 s.
fn fine_buckets() -> Vec<f64> {
    let mut b: Vec<f64> = (-3..2).flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e))).collect();
    b.push(100.0);
    b
}

/// The agent's metrics.
pub struct Metrics {
    /// Every sync.
    pub sync_duration: Histogram,
    /// Full syncs.
    pub full_sync_duration: Histogram,
    /// Incremental syncs.
    pub partial_sync_duration: Histogram,
    /// Unix time of the last successful sync.
    pub last_sync: Gauge<f64, AtomicU64>,
    /// Service objects added, changed or removed.
    pub service_changes: Counter,
    /// EndpointSlices added, changed or removed.
    pub endpoint_changes: Counter,
    /// Unix time a relevant change was last queued for a sync.
    pub last_queued: Gauge<f64, AtomicU64>,
    /// 1 while the agent is fenced (answers for none of its addresses).
    pub fenced: Gauge,
    /// From an EndpointSlice change (its trigger-time annotation) to the sync that programmed it.
    pub network_programming: Histogram,
    /// The same, in buckets fine enough for a sync period below a second (1, 2 and 5 ms to
    /// 100 s): kube-proxy's start at 0.25 s.
    pub network_programming_fine: Histogram,
    /// Service changes not programmed yet.
    pub service_changes_pending: Gauge,
    /// EndpointSlice changes not programmed yet.
    pub endpoint_changes_pending: Gauge,
    /// Failed nftables transactions.
    pub nftables_failures: Counter,
    /// Failed iptables restores (iptables and IPVS modes).
    pub iptables_failures: Counter,
    /// Services whose Local policy has no local endpoint.
    pub no_local_endpoints: Family<PolicyLabel, Gauge>,
    /// Stale UDP conntrack entries deleted.
    pub conntrack_deleted: Counter,
    /// Drift checks run.
    pub drift_checks: Counter,
    /// Objects found to differ from the applied rules and repaired, by what differed.
    pub drift_repairs: Family<KindLabel, Counter>,
    /// Proxy mode changes performed.
    pub mode_switches: Counter,
    /// `/healthz` answers by code.
    pub healthz: Family<CodeLabel, Counter>,
    /// `/livez` answers by code.
    pub livez: Family<CodeLabel, Counter>,
    /// BGP sessions in the applied FRR configuration.
    pub bgp_sessions: Gauge,
    /// Prefixes advertised to some peer in the applied FRR configuration.
    pub bgp_prefixes: Gauge,
    /// FRR configurations FRR refused or could not be given.
    pub bgp_apply_failures: Counter,
    /// BGP sessions established, as FRR last said.
    pub bgp_established: Gauge,
    /// BFD sessions up, as FRR last said.
    pub bfd_up: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn new(registry: &mut Registry) -> Metrics {
        let buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let m = Metrics {
            sync_duration: buckets(),
            full_sync_duration: buckets(),
            partial_sync_duration: buckets(),
            last_sync: Gauge::default(),
            service_changes: Counter::default(),
            endpoint_changes: Counter::default(),
            last_queued: Gauge::default(),
            fenced: Gauge::default(),
            network_programming: Histogram::new(programming_buckets()),
            network_programming_fine: Histogram::new(fine_buckets()),
            service_changes_pending: Gauge::default(),
            endpoint_changes_pending: Gauge::default(),
            nftables_failures: Counter::default(),
            iptables_failures: Counter::default(),
            no_local_endpoints: Family::default(),
            conntrack_deleted: Counter::default(),
            drift_checks: Counter::default(),
            drift_repairs: Family::default(),
            mode_switches: Counter::default(),
            healthz: Family::default(),
            livez: Family::default(),
            bgp_sessions: Gauge::default(),
            bgp_prefixes: Gauge::default(),
            bgp_apply_failures: Counter::default(),
            bgp_established: Gauge::default(),
            bfd_up: Gauge::default(),
        };
        let r = registry;
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            m.sync_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "Full sync latency in seconds",
            m.full_sync_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "Partial sync latency in seconds",
            m.partial_sync_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            m.last_sync.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            m.service_changes.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Failed nftables transactions",
            m.nftables_failures.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Failed iptables restores",
            m.iptables_failures.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Services with Local policy and no local endpoints",
            m.no_local_endpoints.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_deleted_entries",
            "Stale UDP conntrack entries deleted",
            m.conntrack_deleted.clone(),
        );
        r.register(
            "tideway_drift_checks",
            "Comparisons of the kernel with the applied rules",
            m.drift_checks.clone(),
        );
        r.register(
            "tideway_drift_repairs",
            "Objects that differed from the applied rules, repaired, by what differed",
            m.drift_repairs.clone(),
        );
        r.register("tideway_proxy_mode_switches", "Proxy mode changes performed", m.mode_switches.clone());
        r.register("kubeproxy_proxy_healthz", "Proxy health checks by HTTP status", m.healthz.clone());
        r.register("kubeproxy_proxy_livez", "Proxy liveness checks by HTTP status", m.livez.clone());
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "EndpointSlices added, changed or removed",
            m.endpoint_changes.clone(),
        );
        r.register(
            "tideway_agent_fenced",
            "1 while this agent reaches neither a majority of the nodes nor the API server and answers for none of its addresses",
            m.fenced.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "Unix time a change was last queued for a sync",
            m.last_queued.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            m.network_programming.clone(),
        );
        r.register(
            "tideway_network_programming_duration_seconds",
            "From an EndpointSlice change to the sync that programmed it, in buckets from 1 ms",
            m.network_programming_fine.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            m.service_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            m.endpoint_changes_pending.clone(),
        );
        r.register(
            "tideway_bgp_sessions",
            "BGP sessions in the applied FRR configuration",
            m.bgp_sessions.clone(),
        );
        r.register(
            "tideway_bgp_prefixes_advertised",
            "Prefixes advertised to some peer in the applied FRR configuration",
            m.bgp_prefixes.clone(),
        );
        r.register(
            "tideway_bgp_apply_failures",
            "FRR configurations FRR refused or could not be given",
            m.bgp_apply_failures.clone(),
        );
        r.register(
            "tideway_bgp_sessions_established",
            "BGP sessions established, as FRR last said",
            m.bgp_established.clone(),
        );
        r.register("tideway_bfd_sessions_up", "BFD sessions up, as FRR last said", m.bfd_up.clone());
        m
    }
}
