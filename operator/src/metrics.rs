//! The operator's metrics: `tideway_reconcile_*`, `tideway_ipam_*`, leadership.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `kind` of write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    /// `ingress`, `announcement`, `withdrawal`, `proxyconfig_status`, `pool_status`, `event`.
    pub kind: String,
}

/// `pool`, `family`, `state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    /// The pool.
    pub pool: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// `assigned` or `available`.
    pub state: String,
}

/// `reason` of an Event.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The Event's reason.
    pub reason: String,
}

/// The operator's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// `tideway_reconcile_duration_seconds`: deciding (not writing).
    pub reconcile_duration: Histogram,
    /// `tideway_reconcile_writes_total`.
    pub writes: Family<WriteLabel, Counter>,
    /// `tideway_reconcile_write_errors_total`: writes that failed after their retries.
    pub write_errors: Family<WriteLabel, Counter>,
    /// `tideway_reconcile_events_total`, by reason.
    pub events: Family<ReasonLabel, Counter>,
    /// `tideway_ipam_addresses`: per pool and family, assigned and available.
    pub pool_addresses: Family<PoolLabel, Gauge>,
    /// `tideway_ipam_allocation_failures_total`.
    pub allocation_failures: Counter,
    /// `tideway_announcer_changes_total`.
    pub announcer_changes: Counter,
    /// `tideway_operator_leader`: 1 while this replica leads.
    pub leader: Gauge,
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            reconcile_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            writes: Family::default(),
            write_errors: Family::default(),
            events: Family::default(),
            pool_addresses: Family::default(),
            allocation_failures: Counter::default(),
            announcer_changes: Counter::default(),
            leader: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("tideway");
        r.register(
            "reconcile_duration_seconds",
            "Time to decide one reconcile",
            m.reconcile_duration.clone(),
        );
        r.register("reconcile_writes", "Writes performed, by kind", m.writes.clone());
        r.register(
            "reconcile_write_errors",
            "Writes that failed after retries, by kind",
            m.write_errors.clone(),
        );
        r.register("reconcile_events", "Events recorded, by reason", m.events.clone());
        r.register(
            "ipam_addresses",
            "LoadBalancer addresses per pool, family and state",
            m.pool_addresses.clone(),
        );
        r.register("ipam_allocation_failures", "Services that got no address", m.allocation_failures.clone());
        r.register("announcer_changes", "Layer-2 announcer changes", m.announcer_changes.clone());
        r.register("operator_leader", "1 while this replica is the leader", m.leader.clone());
        m
    }
}
