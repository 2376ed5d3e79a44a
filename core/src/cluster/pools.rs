//! The pools the operator allocates from: Tideway's `LoadBalancerPool`s and, when read,
//! MetalLB's `IPAddressPool`s and `L2Advertisement`s, merged into one set whenever any of
//! them changes ([`merge_pools`]).

use super::registry::stored_kind;
use super::state::ClusterState;
use super::store::{ChangedKey, Key};
use crate::model::{L2Advertisement, LoadBalancerPool, MetalLbPool, PoolConflict, merge_pools};

impl Key for MetalLbPool {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, self.name())
    }
}

impl Key for L2Advertisement {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

stored_kind!(LoadBalancerPool, "LoadBalancerPool", namespaced: false, pools, own_pools, merge_again);
stored_kind!(MetalLbPool, "IPAddressPool", namespaced: true, metallb_pools, metallb_pools, merge_again);
stored_kind!(L2Advertisement, "L2Advertisement", namespaced: true, l2_advertisements, l2_advertisements, merge_again);

/// The pools' change mark: merges them again.
fn merge_again(state: &mut ClusterState, _: Vec<ChangedKey>) {
    state.merged_pools();
}

impl ClusterState {
    /// The `IPAddressPool` `namespace/name`.
    pub fn metallb_pool(&self, namespace: &str, name: &str) -> Option<&MetalLbPool> {
        self.metallb_pools.get(&(namespace, name))
    }

    /// Every `IPAddressPool`, by namespace and name.
    pub fn metallb_pools(&self) -> impl Iterator<Item = &MetalLbPool> {
        self.metallb_pools.values()
    }

    /// Every `L2Advertisement`, by namespace and name.
    pub fn l2_advertisements(&self) -> impl Iterator<Item = &L2Advertisement> {
        self.l2_advertisements.values()
    }

    /// The `L2Advertisement` `namespace/name`.
    pub fn l2_advertisement(&self, namespace: &str, name: &str) -> Option<&L2Advertisement> {
        self.l2_advertisements.get(&(namespace, name))
    }

    /// The pool called `name`, whichever object it was read from.
    pub fn pool(&self, name: &str) -> Option<&LoadBalancerPool> {
        self.pools.get(&("", name))
    }

    /// Every pool, by name.
    pub fn pools(&self) -> impl Iterator<Item = &LoadBalancerPool> {
        self.pools.values()
    }

    /// `IPAddressPool`s left unused because another pool has their name.
    pub fn pool_conflicts(&self) -> &[PoolConflict] {
        &self.pool_conflicts
    }

    /// After an input changed, merges the pools again; records a change of the merged set
    /// only.
    fn merged_pools(&mut self) {
        let (merged, conflicts) = merge_pools(
            self.own_pools.values(),
            self.metallb_pools.values(),
            self.l2_advertisements.values(),
        );
        self.changes.pools |= !self.pools.replace(merged).is_empty() || self.pool_conflicts != conflicts;
        self.pool_conflicts = conflicts;
    }
}
