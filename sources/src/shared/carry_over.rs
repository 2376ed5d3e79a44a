//! What a source that reads everything at once keeps: the current version of each object whose
//! new one is invalid.

use std::collections::BTreeMap;

use tideway_api::manifest::ObjectRef;
use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::{LoadBalancerPool, PoolOrigin};

/// Puts the current version of every object in `keep` back into `snapshot`.
pub(crate) fn carry_over(state: &ClusterState, keep: &[ObjectRef], snapshot: &mut Snapshot) {
    let wanted: BTreeMap<(&str, Option<&str>, &str), ()> =
        keep.iter().map(|o| ((o.kind.as_str(), o.namespace.as_deref(), o.name.as_str()), ())).collect();
    let has = |kind: &str, ns: Option<&str>, name: &str| {
        wanted.contains_key(&(kind, ns, name)) || wanted.contains_key(&(kind, None, name))
    };
    snapshot
        .services
        .extend(state.services().filter(|s| has("Service", Some(&s.name.namespace), &s.name.name)).cloned());
    snapshot.endpoint_slices.extend(
        state.endpoint_slices().filter(|s| has("EndpointSlice", Some(&s.namespace), &s.name)).cloned(),
    );
    snapshot.nodes.extend(state.nodes().filter(|n| has("Node", None, &n.name)).cloned());
    snapshot.pods.extend(state.pods().filter(|p| has("Pod", Some(&p.namespace), &p.name)).cloned());
    snapshot
        .proxy_configs
        .extend(state.proxy_configs().filter(|c| has("ProxyConfig", None, &c.name)).cloned());
    snapshot.namespaces.extend(state.namespaces().filter(|n| has("Namespace", None, &n.name)).cloned());
    snapshot
        .service_cidrs
        .extend(state.service_cidr_objects().filter(|c| has("ServiceCIDR", None, &c.name)).cloned());
    snapshot
        .node_states
        .extend(state.node_states().filter(|n| has("NodeProxyState", None, &n.node)).cloned());
    let own = |p: &&LoadBalancerPool| p.origin == PoolOrigin::Tideway;
    snapshot
        .pools
        .extend(state.pools().filter(own).filter(|p| has("LoadBalancerPool", None, p.name())).cloned());
    snapshot.metallb_pools.extend(
        state.metallb_pools().filter(|p| has("IPAddressPool", Some(&p.namespace), p.name())).cloned(),
    );
    snapshot.l2_advertisements.extend(
        state.l2_advertisements().filter(|a| has("L2Advertisement", Some(&a.namespace), &a.name)).cloned(),
    );
    snapshot.announcements.extend(
        state
            .announcements()
            .filter(|a| has("L2Announcement", Some(&a.service.namespace), &a.service.name))
            .cloned(),
    );
    // Tideway's BGP kinds are cluster-scoped (namespace ""), MetalLB's namespaced.
    snapshot.bgp.extend(
        state
            .bgp_objects()
            .filter(|o| {
                let ns = (!o.namespace.is_empty()).then_some(o.namespace.as_str());
                has(o.spec.kind().as_str(), ns, &o.name)
            })
            .cloned(),
    );
}
