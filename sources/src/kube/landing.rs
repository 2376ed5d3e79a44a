//! Where a watch of one kind lands: a shared store that [`Holds`] the kind, or, for a kind
//! [`register`](super::register)ed from outside the sources, the part of any store kept for
//! such kinds ([`Store::registered`]). The second is what lets one registry line start a
//! registered kind's watch for every component, whatever its store: the line knows the kind,
//! the component knows its store, and [`InRegistered`] is where the two meet without either
//! naming the other.

use std::sync::Arc;

use tideway_core::cluster::ClusterState;

use super::kinds::{Holds, Kind};
use crate::shared::{SharedCluster, Signals, Store};

/// A store a watch of `K` writes into, and the signals it reports through.
pub trait Landing<K: Kind>: Clone + Send + Sync + 'static {
    /// The store's signals (invalid objects, faults, the first view).
    fn signals(&self) -> &Signals;
    /// Runs `f` on what holds `K`, waking the consumer when there are changes to take.
    fn update(&self, f: impl FnOnce(&mut dyn Holds<K>));
    /// Whether a complete list is copied compactly before it lands ([`Store::keeps_objects`]).
    fn compacts_lists(&self) -> bool {
        true
    }
}

impl<K: Kind, S: Store + Holds<K>> Landing<K> for SharedCluster<S> {
    fn signals(&self) -> &Signals {
        SharedCluster::signals(self)
    }

    fn update(&self, f: impl FnOnce(&mut dyn Holds<K>)) {
        SharedCluster::update(self, |s| f(s));
    }

    fn compacts_lists(&self) -> bool {
        S::keeps_objects()
    }
}

/// Runs a closure on the registered kinds' part of a store.
type Reach = Arc<dyn Fn(&mut dyn FnMut(&mut ClusterState)) + Send + Sync>;

/// The registered kinds' part of a shared store, its type forgotten: where a registered
/// kind's watch lands.
#[derive(Clone)]
pub struct InRegistered {
    signals: Signals,
    reach: Reach,
}

impl InRegistered {
    /// The part of `cluster`'s store that [`Store::registered`] names.
    pub fn of<S: Store>(cluster: &SharedCluster<S>) -> Self {
        let shared = cluster.clone();
        let reach: Reach = Arc::new(move |f| shared.update(|s| f(s.registered())));
        InRegistered { signals: cluster.signals().clone(), reach }
    }
}

impl<K: Kind> Landing<K> for InRegistered {
    fn signals(&self) -> &Signals {
        &self.signals
    }

    fn update(&self, f: impl FnOnce(&mut dyn Holds<K>)) {
        let mut f = Some(f);
        (self.reach)(&mut |state| {
            if let Some(f) = f.take() {
                f(state);
            }
        });
    }
}
