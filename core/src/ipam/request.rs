//! What a Service asks of the allocator ([`LbRequest`]) and what it gets ([`Assignment`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::error::AllocError;
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
