//! LoadBalancer IP allocation with MetalLB `IPAddressPool` semantics, deterministic.
//!
//! ```text
//!  Pools (spec.addresses, autoAssign, avoidBuggyIPs, serviceAllocation)
//!        | Allocator::set_pools: validate the whole set (malformed, overlapping -> invalid)
//!        v
//!  Allocator  <-- restore(request, status IPs)   start-up, before anything new is assigned
//!             <-- assign(request)                 every Service change; stable
//!             <-- release(service)                Service deleted or no longer LoadBalancer
//!        |
//!        v
//!  Assignment { ips, pool }  /  AllocError (the Kubernetes Event message)
//!  pool_status(): assigned / available per family, and why a pool is invalid
//! ```
//!
//! Rules, in MetalLB's terms:
//! * An assignment is kept while it stays valid (same families, same requested IPs and
//!   pool annotation, its pool still admits the Service, sharing still compatible; the pool's
//!   `autoAssign`, priority and validity do not matter): nothing is ever reshuffled because a
//!   better pool appeared. Otherwise it is cleared and replaced in the same call
//!   ([`Assignment::cleared`] says why); when no replacement is found the Service holds
//!   nothing.
//! * With a sharing key, finding a joinable address walks the addresses held under that key,
//!   so a key shared by thousands of Services costs a scan per allocation.
//! * Requested IPs (`spec.loadBalancerIP`, [`crate::model::ANNOTATION_LOAD_BALANCER_IPS`])
//!   must all lie in one valid pool that admits the Service (`autoAssign` does not matter)
//!   and be free or shareable.
//! * Otherwise the pool annotation names the only pool to use (`autoAssign` does not
//!   matter); without it the valid `autoAssign` pools that admit the Service are tried:
//!   pools with a `serviceAllocation` by priority (lower first, unset after set), then pools
//!   without, ties by name (MetalLB breaks ties at random). The lowest free address wins.
//! * Dual-stack takes one address of each family from one pool, as MetalLB does.
//! * Services share an address only with the same sharing key, no common (protocol, port),
//!   and all `externalTrafficPolicy: Cluster` or all the same pod selector. With a key, an
//!   address already held by compatible Services is reused before a free one is taken.
//! * Of two overlapping pools, the one whose name sorts later is invalid. Invalid pools
//!   assign nothing new, but addresses they gave out stay with their Services.
//!
//! Addresses are never materialised: used addresses are kept as runs, so finding the lowest
//! free one is a logarithmic lookup, and an IPv6 `/64` costs no more than a `/30`.

mod alloc;
mod pool;
mod range;
mod share;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;

pub use alloc::{Allocator, PoolStatus, PoolsReport};
pub use pool::{Pool, PoolError, PoolStats, ServiceAllocation};
pub use range::{AddrRange, RangeError, is_buggy};
pub use share::SharingConflict;

use crate::model::{Service, ServiceName, ServiceType, TrafficPolicy};
use crate::net::{IpFamily, Protocol};

/// What one LoadBalancer Service asks of the allocator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbRequest {
    /// The Service.
    pub service: ServiceName,
    /// Its `metadata.labels` (pool Service selectors).
    pub labels: BTreeMap<String, String>,
    /// Its namespace's labels (pool namespace selectors).
    pub namespace_labels: BTreeMap<String, String>,
    /// `spec.ipFamilies`, primary first: one family, or both for dual-stack.
    pub families: Vec<IpFamily>,
    /// Requested addresses, one per family at most (`spec.loadBalancerIP` and/or
    /// [`crate::model::ANNOTATION_LOAD_BALANCER_IPS`]); empty: any.
    pub requested: Vec<IpAddr>,
    /// [`crate::model::ANNOTATION_ADDRESS_POOL`]: only this pool.
    pub pool: Option<String>,
    /// [`crate::model::ANNOTATION_ALLOW_SHARED_IP`].
    pub sharing_key: Option<String>,
    /// `spec.ports` as (protocol, port).
    pub ports: Vec<(Protocol, u16)>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.selector`.
    pub selector: BTreeMap<String, String>,
}

impl LbRequest {
    /// A request for `families` with nothing else asked.
    pub fn new(service: ServiceName, families: Vec<IpFamily>) -> LbRequest {
        LbRequest {
            service,
            labels: BTreeMap::new(),
            namespace_labels: BTreeMap::new(),
            families,
            requested: Vec::new(),
            pool: None,
            sharing_key: None,
            ports: Vec::new(),
            external_traffic_policy: TrafficPolicy::Cluster,
            selector: BTreeMap::new(),
        }
    }

    /// The request of a LoadBalancer Service (None for other types or without a readable
    /// [`crate::model::LoadBalancerRequest`]; the caller filters `loadBalancerClass` and
    /// reports `LoadBalancerRequest::error`). Families follow `spec.clusterIPs`.
    pub fn for_service(svc: &Service, namespace_labels: &BTreeMap<String, String>) -> Option<LbRequest> {
        let lb = svc.load_balancer.as_deref().filter(|lb| lb.error.is_none())?;
        if svc.service_type != ServiceType::LoadBalancer {
            return None;
        }
        let mut families: Vec<IpFamily> = Vec::new();
        for family in svc.cluster_ips.iter().map(IpFamily::of) {
            if !families.contains(&family) {
                families.push(family);
            }
        }
        Some(LbRequest {
            labels: svc.labels.clone(),
            namespace_labels: namespace_labels.clone(),
            requested: lb.ips.clone(),
            pool: lb.pool.clone(),
            sharing_key: lb.sharing_key.clone(),
            ports: svc.ports.iter().map(|p| (p.protocol, p.port)).collect(),
            external_traffic_policy: svc.external_traffic_policy,
            selector: lb.selector.clone(),
            ..LbRequest::new(svc.name.clone(), families)
        })
    }
}

/// The addresses a Service holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// One address per requested family, in the request's family order.
    pub ips: Vec<IpAddr>,
    /// The pool they come from.
    pub pool: String,
    /// Set by [`Allocator::assign`] when it replaced an assignment that was no longer valid
    /// (MetalLB's `ClearAssignment` event).
    pub cleared: Option<Cleared>,
}

/// An assignment that was dropped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// The addresses given back.
    pub ips: Vec<IpAddr>,
    /// Why.
    pub reason: ClearReason,
}

/// Why an existing assignment stopped being valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClearReason {
    /// No configured pool holds the addresses any more (pool deleted or shrunk).
    #[error("no address pool holds the addresses any more")]
    LeftPools,
    /// `spec.ipFamilies` changed.
    #[error("the Service's IP families changed")]
    FamiliesChanged,
    /// The requested addresses changed.
    #[error("the requested addresses changed")]
    RequestedChanged,
    /// The pool annotation names another pool.
    #[error("the Service asks for another address pool")]
    PoolChanged,
    /// The pool's `serviceAllocation` no longer admits the Service.
    #[error("address pool {pool:?} no longer admits the Service")]
    NotAdmitted {
        /// The pool.
        pool: String,
    },
    /// The Service's sharing terms no longer fit the other holders of its address.
    #[error("sharing is no longer possible: {0}")]
    Sharing(Box<AllocError>),
}

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
