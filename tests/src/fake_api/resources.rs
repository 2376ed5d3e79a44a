//! The resources the server serves (path, kind, apiVersion) and the collection path of a kind
//! or an object.

use serde_json::Value;

/// The resources a Tideway component (or `tideway migrate`) may ask for: (path, kind,
/// apiVersion).
pub const RESOURCES: &[(&str, &str, &str)] = &[
    ("/api/v1/services", "Service", "v1"),
    ("/api/v1/nodes", "Node", "v1"),
    ("/api/v1/pods", "Pod", "v1"),
    ("/api/v1/namespaces", "Namespace", "v1"),
    ("/api/v1/configmaps", "ConfigMap", "v1"),
    ("/api/v1/secrets", "Secret", "v1"),
    ("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice", "discovery.k8s.io/v1"),
    ("/apis/networking.k8s.io/v1/servicecidrs", "ServiceCIDR", "networking.k8s.io/v1"),
    ("/apis/tideway.io/v1alpha1/proxyconfigs", "ProxyConfig", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/nodeproxystates", "NodeProxyState", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/loadbalancerpools", "LoadBalancerPool", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/l2announcements", "L2Announcement", "tideway.io/v1alpha1"),
    ("/apis/metallb.io/v1beta1/ipaddresspools", "IPAddressPool", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/l2advertisements", "L2Advertisement", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/servicel2statuses", "ServiceL2Status", "metallb.io/v1beta1"),
    ("/apis/tideway.io/v1alpha1/bgppeers", "BGPPeer", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/bgpadvertisements", "BGPAdvertisement", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/bfdprofiles", "BFDProfile", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/communities", "Community", "tideway.io/v1alpha1"),
    ("/apis/metallb.io/v1beta2/bgppeers", "BGPPeer", "metallb.io/v1beta2"),
    ("/apis/metallb.io/v1beta1/bgpadvertisements", "BGPAdvertisement", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/bfdprofiles", "BFDProfile", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/communities", "Community", "metallb.io/v1beta1"),
    ("/apis/coordination.k8s.io/v1/leases", "Lease", "coordination.k8s.io/v1"),
    ("/apis/events.k8s.io/v1/events", "Event", "events.k8s.io/v1"),
];

/// The collection path of `kind`, or of `Kind.group` for a kind two groups share (`BGPPeer`
/// alone is Tideway's, `BGPPeer.metallb.io` MetalLB's).
pub fn path_of(kind: &str) -> &'static str {
    let (kind, group) = kind.split_once('.').map_or((kind, None), |(k, g)| (k, Some(g)));
    RESOURCES
        .iter()
        .find(|(_, k, v)| *k == kind && group.is_none_or(|g| v.split('/').next() == Some(g)))
        .map(|(p, _, _)| *p)
        .unwrap_or_else(|| panic!("unknown kind {kind}"))
}

/// The collection path of `obj`: by its kind and, when it has one, its `apiVersion`.
pub(super) fn path_of_object(obj: &Value) -> &'static str {
    let kind = obj["kind"].as_str().expect("object has a kind");
    let group = obj["apiVersion"].as_str().and_then(|v| v.split_once('/')).map(|(g, _)| g);
    match group {
        Some(g) if RESOURCES.iter().any(|(_, k, v)| *k == kind && v.starts_with(&format!("{g}/"))) => {
            path_of(&format!("{kind}.{g}"))
        }
        _ => path_of(kind),
    }
}
