//! The writes the operator decides ([`Action`]) and what they carry: Events, pool reports,
//! refusals.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::rollout::{Condition, ConfigStatus};
use crate::ipam::PoolStats;
use crate::model::{L2Announcement, ServiceName};

/// An object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    /// `Service`, `ProxyConfig`, `LoadBalancerPool`, `IPAddressPool`.
    pub kind: &'static str,
    /// Namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    pub(super) fn service(name: &ServiceName) -> Self {
        ObjectRef { kind: "Service", namespace: Some(name.namespace.clone()), name: name.name.clone() }
    }

    pub(crate) fn cluster_scoped(kind: &'static str, name: &str) -> Self {
        ObjectRef { kind, namespace: None, name: name.to_string() }
    }

    pub(super) fn metallb_pool(namespace: &str, name: &str) -> Self {
        ObjectRef { kind: "IPAddressPool", namespace: Some(namespace.to_string()), name: name.to_string() }
    }
}

/// A Kubernetes Event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What it is about.
    pub object: ObjectRef,
    /// `Warning` (true) or `Normal`.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
    /// A second object the Event involves (the node that now announces). Recorders fold
    /// repeats of one reason on one object into a series that keeps the first message; the
    /// related object keeps a move to another node its own Event, with its own reason.
    pub related: Option<ObjectRef>,
}

impl Event {
    pub(super) fn normal(object: ObjectRef, reason: &'static str, message: String) -> Self {
        Event { object, warning: false, reason, message, related: None }
    }

    pub(super) fn warning(object: ObjectRef, reason: &'static str, message: String) -> Self {
        Event { object, warning: true, reason, message, related: None }
    }

    pub(super) fn related(self, related: Option<ObjectRef>) -> Self {
        Event { related, ..self }
    }
}

/// Stored objects whose conversion refused their current version (name → why): the last
/// valid version, if any, stays in force, and the status says why the new one is not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refused {
    /// ProxyConfigs (their `Degraded` condition, reason `InvalidSpec`).
    pub proxy_configs: BTreeMap<String, String>,
    /// LoadBalancerPools (their `Valid` condition, reason `InvalidSpec`).
    pub pools: BTreeMap<String, String>,
}

/// The `Valid` message of a pool whose stored version was refused for `why`.
pub(super) fn refused_pool_message(why: &str, last_valid_in_force: bool) -> String {
    if last_valid_in_force {
        format!("the stored version is refused; the last valid one stays in force: {why}")
    } else {
        format!(
            "the stored version is refused and none was valid before; no address is handed out from it: {why}"
        )
    }
}

/// A pool's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolReport {
    /// The pool's generation.
    pub observed_generation: i64,
    /// Addresses assigned and available.
    pub stats: PoolStats,
    /// `Valid`.
    pub valid: Condition,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set `status.loadBalancer.ingress` to these addresses (empty: clear it).
    SetIngress {
        /// The Service.
        service: ServiceName,
        /// Its addresses.
        ips: Vec<IpAddr>,
    },
    /// Create or update the Service's `L2Announcement`.
    Announce(L2Announcement),
    /// Delete the Service's `L2Announcement`.
    Withdraw(ServiceName),
    /// Write a ProxyConfig's status.
    ProxyConfigStatus {
        /// The config.
        name: String,
        /// Its status.
        status: ConfigStatus,
    },
    /// Write a pool's status.
    PoolStatus {
        /// The pool.
        name: String,
        /// Its status.
        status: PoolReport,
    },
    /// Record an Event.
    Event(Event),
}
