//! The pools the operator allocates from: Tideway's `LoadBalancerPool`s and, when read,
//! MetalLB's `IPAddressPool`s and `L2Advertisement`s, merged into one set whenever any of
//! them changes ([`merge_pools`]).

use super::ClusterState;
use super::store::Key;
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

impl ClusterState {
    /// Inserts or updates a `LoadBalancerPool`.
    pub fn apply_pool(&mut self, pool: LoadBalancerPool) -> bool {
        let changed = self.own_pools.apply(pool);
        self.merged_pools(changed)
    }

    /// Removes a `LoadBalancerPool`.
    pub fn delete_pool(&mut self, name: &str) -> bool {
        let removed = self.own_pools.delete(&("", name)).is_some();
        self.merged_pools(removed)
    }

    /// Replaces every `LoadBalancerPool` (after a relist).
    pub fn replace_pools(&mut self, pools: Vec<LoadBalancerPool>) {
        let changed = !self.own_pools.replace(pools).is_empty();
        self.merged_pools(changed);
    }

    /// Inserts or updates an `IPAddressPool`.
    pub fn apply_metallb_pool(&mut self, pool: MetalLbPool) -> bool {
        let changed = self.metallb_pools.apply(pool);
        self.merged_pools(changed)
    }

    /// Removes an `IPAddressPool`.
    pub fn delete_metallb_pool(&mut self, namespace: &str, name: &str) -> bool {
        let removed = self.metallb_pools.delete(&(namespace, name)).is_some();
        self.merged_pools(removed)
    }

    /// Replaces every `IPAddressPool` (after a relist).
    pub fn replace_metallb_pools(&mut self, pools: Vec<MetalLbPool>) {
        let changed = !self.metallb_pools.replace(pools).is_empty();
        self.merged_pools(changed);
    }

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

    /// Inserts or updates an `L2Advertisement`.
    pub fn apply_l2_advertisement(&mut self, ad: L2Advertisement) -> bool {
        let changed = self.l2_advertisements.apply(ad);
        self.merged_pools(changed)
    }

    /// Removes an `L2Advertisement`.
    pub fn delete_l2_advertisement(&mut self, namespace: &str, name: &str) -> bool {
        let removed = self.l2_advertisements.delete(&(namespace, name)).is_some();
        self.merged_pools(removed)
    }

    /// Replaces every `L2Advertisement` (after a relist).
    pub fn replace_l2_advertisements(&mut self, ads: Vec<L2Advertisement>) {
        let changed = !self.l2_advertisements.replace(ads).is_empty();
        self.merged_pools(changed);
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

    /// After an input changed (`changed`), merges the pools again; records a change of the
    /// merged set only. Returns `changed`.
    fn merged_pools(&mut self, changed: bool) -> bool {
        if changed {
            let (merged, conflicts) = merge_pools(
                self.own_pools.values(),
                self.metallb_pools.values(),
                self.l2_advertisements.values(),
            );
            self.changes.pools |= !self.pools.replace(merged).is_empty() || self.pool_conflicts != conflicts;
            self.pool_conflicts = conflicts;
        }
        changed
    }
}
