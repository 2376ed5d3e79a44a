//! Custom resources of group `tideway.io`, version `v1alpha1` (schemas generated from these
//! types by `tideway crdgen`).
//!
//! | kind | scope | written by | read by |
//! |---|---|---|---|
//! | [`ProxyConfig`] | cluster | users (spec), operator (status) | agents, operator |
//! | [`NodeProxyState`] | cluster, one per node, owned by the Node | that node's agent | operator, DNS, users |
//! | [`LoadBalancerPool`] | cluster | users (spec), operator (status) | operator |
//! | [`L2Announcement`] | namespaced, one per LoadBalancer Service | operator | agents, users |
//! | [`BGPPeer`], [`BGPAdvertisement`], [`BFDProfile`], [`Community`] | cluster | users | agents |

mod bgp;
mod check;
mod conditions;
mod l2_announcement;
mod load_balancer_pool;
mod metallb;
mod node_proxy_state;
mod patch;
mod proxy_config;
pub(crate) mod schema;
mod selector;
mod service_l2_status;

pub use bgp::object::BgpResource;
pub use bgp::{
    BFDProfile, BFDProfileSpec, BGPAdvertisement, BGPAdvertisementSpec, BGPPeer, BGPPeerSpec, Community,
    CommunityAlias, CommunitySpec, SecretReference, Source, bfd_profile, bgp_advertisement, bgp_peer,
    community_aliases,
};
pub use check::{CHECKED_KINDS, check};
pub use conditions::conditions;
pub use l2_announcement::{
    L2Announcement, L2AnnouncementSpec, LABEL_NODE, l2_announcement, l2_announcement_object,
};
pub use load_balancer_pool::{
    L2Settings, LoadBalancerPool, LoadBalancerPoolSpec, LoadBalancerPoolStatus, ServiceAllocation,
    load_balancer_pool, load_balancer_pool_status,
};
pub use metallb::{
    IPAddressPool, IPAddressPoolSpec, L2Advertisement, L2AdvertisementSpec, MetalLbBfdProfile,
    MetalLbBgpAdvertisement, MetalLbBgpPeer, MetalLbCommunity, ip_address_pool, l2_advertisement,
    load_balancer_pools,
};
pub use node_proxy_state::{
    NodeBgpStatus, NodeProxyState, NodeProxyStateSpec, NodeProxyStateStatus, node_proxy_state,
    node_proxy_state_status, node_state_from,
};
pub use patch::{SpecChange, patch_proxy_config};
pub use proxy_config::{
    CLEANUP_ANNOTATION, IpvsSpec, NodeFailure, ProxyConfig, ProxyConfigSpec, ProxyConfigStatus, proxy_config,
    proxy_config_status, spec_of,
};
pub use service_l2_status::{InterfaceInfo, ServiceL2Status, ServiceL2StatusStatus, service_l2_status};

/// The annotation every CRD carries with the release that generated it: the operator applies
/// its CRDs over older ones only, so an operator rolled back never downgrades them.
pub const CRDS_VERSION_ANNOTATION: &str = "tideway.io/crds-version";

/// Whether this release's CRDs may replace CRDs annotated `existing` (absent or unreadable: yes;
/// otherwise when they are not newer).
pub fn replaces_crds_of(existing: Option<&str>) -> bool {
    replaces(env!("CARGO_PKG_VERSION"), existing)
}

fn replaces(ours: &str, existing: Option<&str>) -> bool {
    let parse = |v: &str| -> Option<(u64, u64, u64)> {
        let mut parts = v.split(['.', '-', '+']).map(str::parse::<u64>);
        Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?))
    };
    match (existing.and_then(parse), parse(ours)) {
        (Some(theirs), Some(ours)) => ours >= theirs,
        _ => true,
    }
}

/// Every CustomResourceDefinition, in the order `crdgen` prints them, each annotated with
/// this release ([`CRDS_VERSION_ANNOTATION`]).
pub fn all()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut proxy_config = ProxyConfig::crd();
    schema::constrain(&mut proxy_config, &crate::validation::proxy_config_constraints());
    let mut pool = LoadBalancerPool::crd();
    schema::constrain(&mut pool, &crate::validation::load_balancer_pool_constraints());
    let mut bgp = [BGPPeer::crd(), BGPAdvertisement::crd(), BFDProfile::crd(), Community::crd()];
    for (crd, constraints) in bgp.iter_mut().zip(bgp::constraints()) {
        schema::constrain(crd, &constraints);
    }
    let mut all = vec![proxy_config, NodeProxyState::crd(), pool, L2Announcement::crd()];
    all.extend(bgp);
    for crd in &mut all {
        crd.metadata
            .annotations
            .get_or_insert_default()
            .insert(CRDS_VERSION_ANNOTATION.into(), env!("CARGO_PKG_VERSION").into());
    }
    all
}

#[cfg(test)]
mod release_tests {
    use super::replaces;

    #[test]
    fn crds_are_replaced_by_the_same_or_a_newer_release_only() {
        assert!(replaces("0.2.0", None));
        assert!(replaces("0.2.0", Some("0.1.0")));
        assert!(replaces("0.2.0", Some("0.2.0")));
        assert!(replaces("0.10.0", Some("0.9.3")));
        assert!(!replaces("0.1.0", Some("0.2.0")), "a rollback keeps the newer CRDs");
        assert!(replaces("0.2.0", Some("garbage")));
    }
}
