//! One copy of each node and zone name, shared by every endpoint the state holds: a
//! cluster has a few hundred nodes and a handful of zones but can have millions of
//! endpoints naming them.

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::EndpointSlice;

/// The names endpoints share.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedNames {
    names: HashSet<Arc<str>>,
    /// How many names were in use at the last prune.
    live: usize,
}

/// Below this many names the set is never pruned.
const PRUNE_FLOOR: usize = 64;

impl SharedNames {
    /// Points the slice's node and zone names at the shared copies.
    pub(crate) fn share_in(&mut self, slice: &mut EndpointSlice) {
        for ep in &mut slice.endpoints {
            if let Some(node) = &mut ep.node_name {
                self.share(node);
            }
            if let Some(zone) = ep.zone_mut() {
                self.share(zone);
            }
        }
    }

    /// Replaces `name` by the shared copy, which it becomes when it is new.
    fn share(&mut self, name: &mut Arc<str>) {
        if let Some(known) = self.names.get(&**name) {
            if !Arc::ptr_eq(known, name) {
                *name = Arc::clone(known);
            }
            return;
        }
        // Nodes come and go: names no endpoint holds any more are let go once the set has
        // doubled since the last count.
        if self.names.len() >= 2 * self.live.max(PRUNE_FLOOR) {
            self.names.retain(|n| Arc::strong_count(n) > 1);
            self.live = self.names.len();
        }
        self.names.insert(Arc::clone(name));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mk_slice;

    #[test]
    fn equal_names_share_one_copy_and_unused_ones_are_let_go() {
        let mut names = SharedNames::default();
        let mut a = mk_slice("ns", "a").ready("10.0.0.1", "node-1").ready("10.0.0.2", "node-1").build();
        let mut b = mk_slice("ns", "b").ready("10.0.0.3", "node-1").build();
        names.share_in(&mut a);
        names.share_in(&mut b);
        let node = |s: &EndpointSlice, i: usize| Arc::clone(s.endpoints[i].node_name.as_ref().unwrap());
        assert!(Arc::ptr_eq(&node(&a, 0), &node(&a, 1)) && Arc::ptr_eq(&node(&a, 0), &node(&b, 0)));
        assert_eq!(names.len(), 1);

        // Node churn: names of nodes gone are dropped once the set doubles.
        for i in 0..1000 {
            let mut s = mk_slice("ns", "c").ready("10.0.1.1", &format!("temp-{i}")).build();
            names.share_in(&mut s);
        }
        assert!(names.len() <= 2 * PRUNE_FLOOR + 1, "{} names kept", names.len());
        let mut c = mk_slice("ns", "c").ready("10.0.0.4", "node-1").build();
        names.share_in(&mut c);
        assert!(Arc::ptr_eq(&node(&a, 0), &node(&c, 0)), "a name in use is kept");
    }
}
