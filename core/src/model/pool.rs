//! `LoadBalancerPool`: the allocator's pool (its spec: addresses, auto-assignment, which
//! Services it serves; the allocator is [`crate::ipam`]) plus its layer-2 announcement settings.

use super::addr_range::PoolAddress;
use crate::config::LabelSelector;

/// A pool of LoadBalancer addresses and who may announce them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerPool {
    /// What the allocator needs (its name is the object's).
    pub pool: Pool,
    /// Layer-2 announcement.
    pub l2: L2Settings,
    /// `metadata.generation` (0 when the source has none).
    pub generation: i64,
    /// The object it was read from.
    pub origin: PoolOrigin,
}

/// The object a pool was read from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PoolOrigin {
    /// A `LoadBalancerPool` (its status is the operator's to write).
    #[default]
    Tideway,
    /// MetalLB's `IPAddressPool` in `namespace` (whose status is MetalLB's: left alone).
    MetalLb {
        /// Its namespace.
        namespace: String,
    },
}

/// `spec.l2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Settings {
    /// Announce the pool's addresses over ARP / NDP.
    pub enabled: bool,
    /// Interfaces to announce on (empty: the node-network interface).
    pub interfaces: Vec<String>,
    /// Nodes that may announce (any selector matching; empty: every node).
    pub node_selectors: Vec<LabelSelector>,
}

impl Default for L2Settings {
    fn default() -> Self {
        L2Settings { enabled: true, interfaces: Vec::new(), node_selectors: Vec::new() }
    }
}

impl LoadBalancerPool {
    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.pool.name
    }
}

/// A `LoadBalancerPool` (MetalLB `IPAddressPool`), as the allocator needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Object name, unique (a later pool with the same name replaces an earlier one).
    pub name: String,
    /// `spec.addresses`: CIDRs and `first-last` ranges, IPv4 and IPv6 mixed, each parsed.
    pub addresses: Vec<PoolAddress>,
    /// `spec.autoAssign` (default true): false pools serve only Services that ask for one of
    /// their addresses or name the pool.
    pub auto_assign: bool,
    /// `spec.avoidBuggyIPs`: the pool holds no IPv4 address ending in `.0` or `.255`.
    pub avoid_buggy_ips: bool,
    /// `spec.serviceAllocation`.
    pub allocation: Option<ServiceAllocation>,
}

impl Pool {
    /// A pool with MetalLB's defaults (auto-assigned, every address, every Service).
    pub fn new(name: impl Into<String>, addresses: &[&str]) -> Pool {
        Pool {
            name: name.into(),
            addresses: addresses.iter().map(|a| PoolAddress::new(a)).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            allocation: None,
        }
    }
}

/// `spec.serviceAllocation`: which Services a pool serves, and its precedence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceAllocation {
    /// Lower numbers are tried first; pools without one come after those with one.
    pub priority: Option<i32>,
    /// Namespaces whose Services the pool serves.
    pub namespaces: Vec<String>,
    /// Selectors over namespace labels (a namespace matching any is served).
    pub namespace_selectors: Vec<LabelSelector>,
    /// Selectors over Service labels (a Service matching any is served).
    pub service_selectors: Vec<LabelSelector>,
}
