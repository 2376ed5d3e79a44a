//! The `LoadBalancerPool` CRD: addresses the operator assigns to LoadBalancer Services, with
//! MetalLB `IPAddressPool` field names and semantics (a MetalLB pool moves over by changing
//! `apiVersion` and `kind`), plus an `l2` section naming the nodes and interfaces that may
//! announce its addresses (MetalLB's `L2Advertisement`, folded in).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_core::ipam::{AddrRange, Pool, ServiceAllocation as CoreAllocation};
use tideway_core::model::{L2Settings as CoreL2, LoadBalancerPool as CorePool, PoolAddress, PoolOrigin};
use tideway_core::operator::PoolReport;

use crate::error::{ConvertError, Ctx};
use crate::validation;

/// A pool of LoadBalancer addresses.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tideway.io",
    version = "v1alpha1",
    kind = "LoadBalancerPool",
    status = "LoadBalancerPoolStatus",
    shortname = "lbp",
    printcolumn = r#"{"name":"Auto Assign","type":"boolean","jsonPath":".spec.autoAssign"}"#,
    printcolumn = r#"{"name":"Assigned IPv4","type":"integer","jsonPath":".status.assignedIPv4"}"#,
    printcolumn = r#"{"name":"Available IPv4","type":"integer","jsonPath":".status.availableIPv4"}"#,
    printcolumn = r#"{"name":"Assigned IPv6","type":"integer","priority":1,"jsonPath":".status.assignedIPv6"}"#,
    printcolumn = r#"{"name":"Available IPv6","type":"integer","priority":1,"jsonPath":".status.availableIPv6"}"#,
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerPoolSpec {
    /// CIDRs (`192.168.10.0/24`, `fc00:f853:ccd:e799::/124`) or ranges
    /// (`192.168.9.1-192.168.9.5`), IPv4 and IPv6 mixed.
    pub addresses: Vec<String>,
    /// Assign from this pool automatically (default true); false: only to Services that ask
    /// for one of its addresses or name the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_assign: Option<bool>,
    /// Skip IPv4 addresses ending in `.0` and `.255`, which some networks mishandle.
    #[serde(default, rename = "avoidBuggyIPs", skip_serializing_if = "Option::is_none")]
    pub avoid_buggy_ips: Option<bool>,
    /// Which Services may get addresses from this pool, and its precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
    /// Layer-2 announcement of this pool's addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<L2Settings>,
}

/// MetalLB's `serviceAllocation`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Lower numbers are tried first; pools without a priority come last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Namespaces whose Services may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Selectors over namespace labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Selectors over Service labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// Layer-2 announcement settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct L2Settings {
    /// Announce this pool's addresses over ARP / NDP (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Interfaces to announce on (default: the node's interface holding its InternalIP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// Nodes that may announce (a node matching any selector; empty: every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
}

/// Usage, as MetalLB reports it, plus a `Valid` condition.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LoadBalancerPoolStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, rename = "observedGeneration", skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// IPv4 addresses assigned.
    #[serde(default, rename = "assignedIPv4")]
    pub assigned_ipv4: i64,
    /// IPv6 addresses assigned.
    #[serde(default, rename = "assignedIPv6")]
    pub assigned_ipv6: i64,
    /// IPv4 addresses left.
    #[serde(default, rename = "availableIPv4")]
    pub available_ipv4: i64,
    /// IPv6 addresses left (saturates at the int64 maximum).
    #[serde(default, rename = "availableIPv6")]
    pub available_ipv6: i64,
    /// `Valid`: False with a reason for a malformed or overlapping range.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Converts a pool: each address entry parses (a CIDR or a range of one family, first to
/// last), and list lengths, namespaces, interface names and selectors are valid. Ranges that
/// overlap another pool's are the allocator's to find, over the whole set of pools (reported
/// in the pool's status).
pub fn load_balancer_pool(obj: &LoadBalancerPool) -> Result<CorePool, ConvertError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("LoadBalancerPool", None, &name);
    let spec = &obj.spec;
    let pool = pool_of(
        &cx,
        &name,
        &spec.addresses,
        spec.auto_assign,
        spec.avoid_buggy_ips,
        spec.service_allocation.as_ref(),
    )?;
    let l2 = spec.l2.clone().unwrap_or_default();
    Ok(CorePool {
        pool,
        l2: CoreL2 {
            enabled: l2.enabled.unwrap_or(true),
            interfaces: interfaces(&cx, "spec.l2.interfaces", l2.interfaces)?,
            node_selectors: selectors(&cx, "spec.l2.nodeSelectors", &l2.node_selectors)?,
        },
        generation: obj.metadata.generation.unwrap_or(0),
        origin: PoolOrigin::Tideway,
    })
}

/// The allocator's pool of MetalLB's `IPAddressPool` fields (which `LoadBalancerPool` shares),
/// each checked as [`load_balancer_pool`] says.
pub(crate) fn pool_of(
    cx: &Ctx,
    name: &str,
    addresses: &[String],
    auto_assign: Option<bool>,
    avoid_buggy_ips: Option<bool>,
    allocation: Option<&ServiceAllocation>,
) -> Result<Pool, ConvertError> {
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    validation::max_items(cx, "spec.addresses", addresses, validation::MAX_POOL_ADDRESSES)?;
    for (i, a) in addresses.iter().enumerate() {
        AddrRange::parse(a).map_err(|e| cx.err(format!("spec.addresses[{i}]"), e.to_string()))?;
    }
    let allocation = match allocation {
        None => None,
        Some(a) => Some(CoreAllocation {
            priority: a.priority,
            namespaces: namespaces(cx, &a.namespaces)?,
            namespace_selectors: selectors(
                cx,
                "spec.serviceAllocation.namespaceSelectors",
                &a.namespace_selectors,
            )?,
            service_selectors: selectors(
                cx,
                "spec.serviceAllocation.serviceSelectors",
                &a.service_selectors,
            )?,
        }),
    };
    Ok(Pool {
        name: name.to_string(),
        addresses: addresses.iter().map(|a| PoolAddress::new(a)).collect(),
        auto_assign: auto_assign.unwrap_or(true),
        avoid_buggy_ips: avoid_buggy_ips.unwrap_or(false),
        allocation,
    })
}

/// Label selectors at `field`, at most [`validation::MAX_ALLOCATION_ENTRIES`].
pub(crate) fn selectors(
    cx: &Ctx,
    field: &str,
    list: &[LabelSelector],
) -> Result<Vec<tideway_core::config::LabelSelector>, ConvertError> {
    validation::max_items(cx, field, list, validation::MAX_ALLOCATION_ENTRIES)?;
    list.iter()
        .enumerate()
        .map(|(i, s)| super::selector::selector(cx, &format!("{field}[{i}]"), Some(s)))
        .collect()
}

/// Interface names at `field`, each valid.
pub(crate) fn interfaces(cx: &Ctx, field: &str, list: Vec<String>) -> Result<Vec<String>, ConvertError> {
    validation::max_items(cx, field, &list, validation::MAX_INTERFACES)?;
    for (i, name) in list.iter().enumerate() {
        validation::interface(cx, &format!("{field}[{i}]"), name)?;
    }
    Ok(list)
}

/// The namespaces of `serviceAllocation`, each a valid name.
fn namespaces(cx: &Ctx, list: &[String]) -> Result<Vec<String>, ConvertError> {
    let field = "spec.serviceAllocation.namespaces";
    validation::max_items(cx, field, list, validation::MAX_ALLOCATION_ENTRIES)?;
    for (i, ns) in list.iter().enumerate() {
        validation::namespace(cx, &format!("{field}[{i}]"), ns)?;
    }
    Ok(list.to_vec())
}

/// The status the operator writes for `report` (IPv6 counts saturate at the int64 maximum).
pub fn load_balancer_pool_status(
    report: &PoolReport,
    previous: &[Condition],
    now: &Time,
) -> LoadBalancerPoolStatus {
    let s = &report.stats;
    let clamp = |n: u128| i64::try_from(n).unwrap_or(i64::MAX);
    LoadBalancerPoolStatus {
        observed_generation: Some(report.observed_generation),
        assigned_ipv4: clamp(u128::from(s.assigned_ipv4)),
        assigned_ipv6: clamp(s.assigned_ipv6),
        available_ipv4: clamp(u128::from(s.available_ipv4)),
        available_ipv6: clamp(s.available_ipv6),
        conditions: super::conditions::conditions(
            std::slice::from_ref(&report.valid),
            previous,
            report.observed_generation,
            now,
        ),
    }
}
