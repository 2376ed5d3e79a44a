//! `LoadBalancerPool`: the allocator's pool plus its layer-2 announcement settings.

use crate::config::LabelSelector;
use crate::ipam::Pool;

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
