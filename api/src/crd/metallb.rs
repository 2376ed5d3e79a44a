//! MetalLB's own kinds, read as they are (`metallb.io/v1beta1` `IPAddressPool` and
//! `L2Advertisement`) by an operator started with `--metallb-compat`, and by the manifest
//! loader. Their CRDs are MetalLB's: Tideway ships none of them, reads the fields that
//! `LoadBalancerPool` maps (BGP's, and `L2Advertisement.spec.nodeSelectors` beyond label
//! selectors, have no meaning here) and converts each object once, here, into the core model
//! the `LoadBalancerPool` feeds ([`tideway_core::model::merge_pools`] joins them).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use tideway_core::model::{
    L2Advertisement as CoreAdvertisement, MetalLbPool, PoolConflict, PoolOrigin, merge_pools,
};

use super::load_balancer_pool::{L2Settings, LoadBalancerPool, LoadBalancerPoolSpec, ServiceAllocation};
use super::load_balancer_pool::{interfaces, pool_of, selectors};
use super::selector::selector_object;
use crate::error::{ConvertError, Ctx};
use crate::validation;

/// MetalLB's kinds are read, never written: no CRD is generated for them, and an object
/// without a `spec` (MetalLB's own `L2Advertisement` example has none) decodes with an empty one.
macro_rules! metallb_kind {
    ($kind:ident, $spec:ty, $plural:literal) => {
        metallb_kind!($kind, stringify!($kind), "v1beta1", $spec, $plural);
    };
    ($kind:ident, $name:expr, $version:literal, $spec:ty, $plural:literal) => {
        #[doc = concat!("MetalLB's `", $name, "` (`metallb.io/", $version, "`).")]
        #[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
        pub struct $kind {
            /// Standard object metadata.
            pub metadata: ObjectMeta,
            /// The spec (empty when the object has none).
            #[serde(default)]
            pub spec: $spec,
        }

        impl kube::Resource for $kind {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                $name.into()
            }

            fn group(_: &()) -> Cow<'_, str> {
                "metallb.io".into()
            }

            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }

            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

metallb_kind!(IPAddressPool, IPAddressPoolSpec, "ipaddresspools");
metallb_kind!(L2Advertisement, L2AdvertisementSpec, "l2advertisements");
metallb_kind!(MetalLbBgpPeer, "BGPPeer", "v1beta2", super::bgp::BGPPeerSpec, "bgppeers");
metallb_kind!(
    MetalLbBgpAdvertisement,
    "BGPAdvertisement",
    "v1beta1",
    super::bgp::BGPAdvertisementSpec,
    "bgpadvertisements"
);
metallb_kind!(MetalLbBfdProfile, "BFDProfile", "v1beta1", super::bgp::BFDProfileSpec, "bfdprofiles");
metallb_kind!(MetalLbCommunity, "Community", "v1beta1", super::bgp::CommunitySpec, "communities");

/// `IPAddressPool.spec`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressPoolSpec {
    /// CIDRs or `first-last` ranges.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Assign from this pool automatically (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_assign: Option<bool>,
    /// Skip IPv4 addresses ending in `.0` and `.255`.
    #[serde(default, rename = "avoidBuggyIPs", skip_serializing_if = "Option::is_none")]
    pub avoid_buggy_ips: Option<bool>,
    /// Which Services may get addresses from this pool, and its precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
}

/// `L2Advertisement.spec`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L2AdvertisementSpec {
    /// Pools by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools by label (none named or selected: every pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes that may announce (empty: every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Interfaces to announce on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
}

fn context(kind: &'static str, namespace: &str, name: &str) -> Ctx {
    Ctx::new(kind, Some(namespace), name)
}

/// Converts an `IPAddressPool`, checked field by field as a `LoadBalancerPool` is.
pub fn ip_address_pool(obj: &IPAddressPool) -> Result<MetalLbPool, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let namespace = obj.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = context("IPAddressPool", &namespace, &name);
    let s = &obj.spec;
    let pool =
        pool_of(&cx, &name, &s.addresses, s.auto_assign, s.avoid_buggy_ips, s.service_allocation.as_ref())?;
    Ok(MetalLbPool {
        namespace,
        labels: obj.metadata.labels.clone().unwrap_or_default(),
        pool,
        generation: obj.metadata.generation.unwrap_or(0),
    })
}

/// Converts an `L2Advertisement`: pool names are object names, selectors and interfaces as a
/// `LoadBalancerPool`'s.
pub fn l2_advertisement(obj: &L2Advertisement) -> Result<CoreAdvertisement, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let namespace = obj.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = context("L2Advertisement", &namespace, &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let s = &obj.spec;
    let field = "spec.ipAddressPools";
    validation::max_items(&cx, field, &s.ip_address_pools, validation::MAX_ALLOCATION_ENTRIES)?;
    if let Some(i) = s.ip_address_pools.iter().position(String::is_empty) {
        return Err(cx.err(format!("{field}[{i}]"), "is empty: a pool's name is required"));
    }
    Ok(CoreAdvertisement {
        namespace,
        name,
        pools: s.ip_address_pools.clone(),
        pool_selectors: selectors(&cx, "spec.ipAddressPoolSelectors", &s.ip_address_pool_selectors)?,
        node_selectors: selectors(&cx, "spec.nodeSelectors", &s.node_selectors)?,
        interfaces: interfaces(&cx, "spec.interfaces", s.interfaces.clone())?,
    })
}

/// The `LoadBalancerPool`s that take over from MetalLB's objects (what `tideway migrate`
/// writes): one per `IPAddressPool`, its spec as it is, and `l2` as the `L2Advertisement`s of
/// its namespace give it, so they convert to the pools the operator makes of MetalLB's objects
/// under `--metallb-compat`. A pool whose name a pool of another namespace took first is a
/// conflict, not a second object.
pub fn load_balancer_pools(
    pools: &[IPAddressPool],
    ads: &[L2Advertisement],
) -> Result<(Vec<LoadBalancerPool>, Vec<PoolConflict>), ConvertError> {
    let converted: Vec<MetalLbPool> = pools.iter().map(ip_address_pool).collect::<Result<_, _>>()?;
    let ads: Vec<CoreAdvertisement> = ads.iter().map(l2_advertisement).collect::<Result<_, _>>()?;
    let (merged, conflicts) = merge_pools(std::iter::empty(), converted.iter(), ads.iter());
    let objects = merged
        .iter()
        .filter_map(|p| {
            let PoolOrigin::MetalLb { namespace } = &p.origin else { return None };
            let source = pools.iter().find(|o| {
                o.metadata.name.as_deref() == Some(p.name())
                    && o.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })?;
            let spec = &source.spec;
            let l2 = L2Settings {
                enabled: Some(p.l2.enabled),
                interfaces: p.l2.interfaces.clone(),
                node_selectors: p
                    .l2
                    .node_selectors
                    .iter()
                    .map(|s| selector_object(s).unwrap_or_default())
                    .collect(),
            };
            Some(LoadBalancerPool::new(
                p.name(),
                LoadBalancerPoolSpec {
                    addresses: spec.addresses.clone(),
                    auto_assign: spec.auto_assign,
                    avoid_buggy_ips: spec.avoid_buggy_ips,
                    service_allocation: spec.service_allocation.clone(),
                    l2: Some(l2),
                },
            ))
        })
        .collect();
    Ok((objects, conflicts))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tideway_core::config::LabelSelector as CoreSelector;
    use tideway_core::model::PoolAddress;

    use super::*;

    fn pool(spec: serde_json::Value) -> Result<MetalLbPool, ConvertError> {
        let obj: IPAddressPool = serde_json::from_value(json!({
            "apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": "first-pool", "namespace": "metallb-system", "generation": 4,
                         "labels": {"tier": "gold"}},
            "spec": spec,
        }))
        .expect("decodes");
        ip_address_pool(&obj)
    }

    fn advertisement(spec: serde_json::Value) -> Result<CoreAdvertisement, ConvertError> {
        let obj: L2Advertisement = serde_json::from_value(json!({
            "apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": {"name": "example", "namespace": "metallb-system"},
            "spec": spec,
        }))
        .expect("decodes");
        l2_advertisement(&obj)
    }

    fn selector(k: &str, v: &str) -> CoreSelector {
        CoreSelector { match_labels: [(k.to_string(), v.to_string())].into(), match_expressions: vec![] }
    }

    /// Each field of an `IPAddressPool`, as MetalLB defaults and reads it.
    #[test]
    fn ip_address_pool_fields_convert_as_metallb_reads_them() {
        let p = pool(json!({"addresses": ["192.168.10.0/24", "192.168.9.1-192.168.9.5"]})).expect("converts");
        assert_eq!((p.namespace.as_str(), p.name(), p.generation), ("metallb-system", "first-pool", 4));
        assert_eq!(p.labels.get("tier").map(String::as_str), Some("gold"));
        assert_eq!(
            p.pool.addresses,
            [PoolAddress::new("192.168.10.0/24"), PoolAddress::new("192.168.9.1-192.168.9.5")]
        );
        assert!(
            p.pool.auto_assign && !p.pool.avoid_buggy_ips && p.pool.allocation.is_none(),
            "MetalLB's defaults"
        );
        let p = pool(json!({
            "addresses": ["fc00:f853:ccd:e799::/124"], "autoAssign": false, "avoidBuggyIPs": true,
            "serviceAllocation": {"priority": 50, "namespaces": ["shop"],
                "namespaceSelectors": [{"matchLabels": {"team": "web"}}],
                "serviceSelectors": [{"matchLabels": {"app": "checkout"}}]},
        }))
        .expect("converts");
        assert!(!p.pool.auto_assign && p.pool.avoid_buggy_ips);
        let a = p.pool.allocation.expect("serviceAllocation");
        assert_eq!((a.priority, a.namespaces), (Some(50), vec!["shop".to_string()]));
        assert_eq!(a.namespace_selectors, [selector("team", "web")]);
        assert_eq!(a.service_selectors, [selector("app", "checkout")]);
    }

    /// A bad value is an error naming the object and the field, as for a `LoadBalancerPool`.
    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (json!({"addresses": ["192.168.10.0/33"]}), "spec.addresses[0]"),
            (json!({"addresses": ["192.168.10.9-192.168.10.1"]}), "spec.addresses[0]"),
            (
                json!({"addresses": [], "serviceAllocation": {"namespaces": ["Not_A_Namespace"]}}),
                "spec.serviceAllocation.namespaces[0]",
            ),
            (
                json!({"addresses": [], "serviceAllocation": {"serviceSelectors": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}),
                "spec.serviceAllocation.serviceSelectors[0].matchExpressions[0].operator",
            ),
        ];
        for (spec, field) in cases {
            let e = pool(spec.clone()).expect_err(&spec.to_string());
            assert_eq!(
                (e.kind, e.object.as_str(), e.field.as_str()),
                ("IPAddressPool", "metallb-system/first-pool", field)
            );
        }
        let e = advertisement(json!({"interfaces": ["eth0", "bad/name"]})).expect_err("bad interface");
        assert_eq!((e.kind, e.field.as_str()), ("L2Advertisement", "spec.interfaces[1]"));
        let e = advertisement(json!({"ipAddressPools": [""]})).expect_err("empty pool name");
        assert_eq!(e.field, "spec.ipAddressPools[0]");
    }

    /// Each field of an `L2Advertisement`; an empty one selects every pool and node.
    #[test]
    fn l2_advertisement_fields_convert() {
        let a = advertisement(json!({})).expect("converts");
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("metallb-system", "example"));
        assert!(
            a.pools.is_empty()
                && a.pool_selectors.is_empty()
                && a.node_selectors.is_empty()
                && a.interfaces.is_empty()
        );
        let a = advertisement(json!({
            "ipAddressPools": ["first-pool"],
            "ipAddressPoolSelectors": [{"matchLabels": {"tier": "gold"}}],
            "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "NodeA"}}],
            "interfaces": ["eth0", "eth1"],
        }))
        .expect("converts");
        assert_eq!(a.pools, ["first-pool"]);
        assert_eq!(a.pool_selectors, [selector("tier", "gold")]);
        assert_eq!(a.node_selectors, [selector("kubernetes.io/hostname", "NodeA")]);
        assert_eq!(a.interfaces, ["eth0", "eth1"]);
    }
}
