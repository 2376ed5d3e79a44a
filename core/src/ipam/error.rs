//! Why an allocation, a pool or a sharing fails: the messages the operator puts in Events and
//! pool conditions.

use std::net::IpAddr;

use crate::model::RangeError;
use crate::model::{ServiceName, TrafficPolicy};
use crate::net::{IpFamily, Protocol};

/// Why a Service got no address; the message suits a Kubernetes Event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// `spec.ipFamilies` is empty, too long or repeats a family.
    #[error("IP families {families:?} must be one family or two different ones")]
    BadFamilies {
        /// The families given.
        families: Vec<IpFamily>,
    },
    /// Requested addresses do not give one address per requested family.
    #[error("requested addresses {requested:?} do not give one address per IP family {families:?}")]
    RequestedFamilies {
        /// The requested addresses.
        requested: Vec<IpAddr>,
        /// The Service's families.
        families: Vec<IpFamily>,
    },
    /// No valid auto-assigned pool admits the Service.
    #[error("no address pool with autoAssign admits this Service (namespace and label selectors)")]
    NoMatchingPool,
    /// The named pool does not exist.
    #[error("address pool {pool:?} does not exist")]
    UnknownPool {
        /// The pool.
        pool: String,
    },
    /// The pool is invalid.
    #[error("address pool {pool:?} is invalid: {error}")]
    InvalidPool {
        /// The pool.
        pool: String,
        /// Why.
        error: PoolError,
    },
    /// The pool's `serviceAllocation` does not admit the Service.
    #[error("address pool {pool:?} does not admit this Service (serviceAllocation)")]
    NotAdmitted {
        /// The pool.
        pool: String,
    },
    /// The pools that admit the Service lack a family (dual-stack needs one pool with both).
    #[error("no address pool among {pools:?} has {}", family_list(.families))]
    FamilyUnavailable {
        /// The families asked.
        families: Vec<IpFamily>,
        /// The pools that admit the Service.
        pools: Vec<String>,
    },
    /// Every pool that could serve is full.
    #[error("no address left in pool(s) {pools:?}")]
    Exhausted {
        /// The pools tried.
        pools: Vec<String>,
    },
    /// A requested (or restored) address is in no pool.
    #[error("{ip} is not in any address pool")]
    NotInAnyPool {
        /// The address.
        ip: IpAddr,
    },
    /// Requested (or restored) addresses lie in different pools.
    #[error("addresses {ips:?} are not in one address pool")]
    SplitAcrossPools {
        /// The addresses.
        ips: Vec<IpAddr>,
    },
    /// A requested address is outside the pool the annotation names.
    #[error("{ip} is not in address pool {pool:?} named by the Service")]
    NotInNamedPool {
        /// The address.
        ip: IpAddr,
        /// The named pool.
        pool: String,
    },
    /// The address is held by a Service it cannot be shared with (no or another key).
    #[error("{ip} is in use by Service {by} ({})", key_clash(.ours, .theirs))]
    InUse {
        /// The address.
        ip: IpAddr,
        /// A Service holding it.
        by: ServiceName,
        /// Our sharing key.
        ours: Option<String>,
        /// Theirs.
        theirs: Option<String>,
    },
    /// Same sharing key, but the Services cannot share.
    #[error("{ip} is shared with Service {with}, but {conflict}")]
    SharingConflict {
        /// The address.
        ip: IpAddr,
        /// The Service in the way.
        with: ServiceName,
        /// What clashes.
        conflict: SharingConflict,
    },
}

fn family_list(families: &[IpFamily]) -> String {
    let names: Vec<String> = families.iter().map(|f| f.to_string()).collect();
    names.join(" and ")
}

fn key_clash(ours: &Option<String>, theirs: &Option<String>) -> String {
    match (ours, theirs) {
        (None, _) => "this Service has no sharing key".into(),
        (_, None) => "it has no sharing key".into(),
        (Some(a), Some(b)) => format!("sharing key {a:?} differs from {b:?}"),
    }
}

/// Why a pool is invalid. An invalid pool assigns nothing new; addresses it already gave out
/// stay with their Services.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// An entry of `spec.addresses` does not parse.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// Two entries of the pool overlap.
    #[error("{range} overlaps {other} in the same pool")]
    OverlapWithin {
        /// The later entry (in address order).
        range: String,
        /// The entry it overlaps.
        other: String,
    },
    /// An entry overlaps a valid pool whose name sorts first.
    #[error("{range} overlaps {other_range} of pool {other_pool:?}")]
    Overlap {
        /// This pool's entry.
        range: String,
        /// The pool that keeps the addresses.
        other_pool: String,
        /// Its entry.
        other_range: String,
    },
}

/// What keeps two Services with the same sharing key off one address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SharingConflict {
    /// Both use the same protocol and port.
    #[error("both use port {protocol}/{port}")]
    Port {
        /// Protocol.
        protocol: Protocol,
        /// Port.
        port: u16,
    },
    /// One is `externalTrafficPolicy: Local`, the other `Cluster`, and their pod selectors
    /// differ, so no single node can serve both.
    #[error("externalTrafficPolicy is {ours:?} here and {theirs:?} there, with different pod selectors")]
    Policy {
        /// This Service's policy.
        ours: TrafficPolicy,
        /// The other's.
        theirs: TrafficPolicy,
    },
    /// Both are `Local` with different pod selectors.
    #[error("both have externalTrafficPolicy Local with different pod selectors")]
    Selector,
}
