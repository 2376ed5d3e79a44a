//! The cluster state a source shares with its consumer, with the source's "synced" signal and
//! the objects it had to skip as invalid.

mod carry_over;
mod object_key;
mod signals;

pub use carry_over::kept_by;
pub use object_key::{InvalidObjects, ObjectKey};
pub use signals::Signals;

use std::sync::{Arc, Mutex, MutexGuard};

use tideway_api::manifest::ObjectRef;
use tideway_core::cluster::{ClusterState, Snapshot};

/// A copy of objects just read, made once the temporaries of reading them (text, parse trees,
/// API objects) are freed, the originals dropped. As read, they sit among the freed
/// temporaries, and the allocator gives back only whole free pages: 100,000 Services x 10
/// endpoints read from a file hold 240 MiB that way and 150 MiB copied (one copy, about a
/// tenth of the parse's time).
pub(crate) fn compact<T: Clone>(read: T) -> T {
    read.clone()
}

/// What a source writes into: the whole cluster model ([`ClusterState`]), or a consumer's own
/// copy of the little it reads (the DNS server's). How each watched kind lands in it is
/// [`Holds`](crate::kube::Holds).
pub trait Store: Default + Send + 'static {
    /// True when there are changes the consumer has not taken yet.
    fn has_changes(&self) -> bool;
    /// Replaces everything with `snapshot` (a source that reads everything at once); the
    /// objects in `keep`, invalid in the snapshot, keep their current versions.
    fn reset_keeping(&mut self, snapshot: Snapshot, keep: &[ObjectRef]);
    /// Where the kinds [`register`](crate::kube::register)ed from outside the sources land:
    /// the state itself, or a part of a consumer's own store kept for them.
    fn registered(&mut self) -> &mut ClusterState;
    /// Whether it keeps the converted objects themselves, so that a complete list is copied
    /// compactly ([`compact`]) before it lands. A store that packs each object into facts of
    /// its own as it lands (the DNS server's) does not: the copy would only double the list's
    /// memory at its peak.
    fn keeps_objects() -> bool {
        true
    }
}

impl Store for ClusterState {
    fn has_changes(&self) -> bool {
        ClusterState::has_changes(self)
    }

    fn reset_keeping(&mut self, snapshot: Snapshot, keep: &[ObjectRef]) {
        ClusterState::reset_keeping(self, snapshot, &kept_by(keep));
    }

    fn registered(&mut self) -> &mut ClusterState {
        self
    }
}

/// A cluster state shared between a source and its consumer: the whole model by default, or
/// a consumer's own [`Store`]. What it says beside the objects is its [`Signals`], read as
/// its own.
pub struct SharedCluster<S = ClusterState> {
    state: Arc<Mutex<S>>,
    signals: Signals,
}

impl<S> Clone for SharedCluster<S> {
    fn clone(&self) -> Self {
        SharedCluster { state: Arc::clone(&self.state), signals: self.signals.clone() }
    }
}

impl<S: Store> Default for SharedCluster<S> {
    /// An empty, not-yet-synced store.
    fn default() -> Self {
        SharedCluster { state: Arc::default(), signals: Signals::default() }
    }
}

impl<S> std::ops::Deref for SharedCluster<S> {
    type Target = Signals;

    fn deref(&self) -> &Signals {
        &self.signals
    }
}

impl SharedCluster {
    /// An empty, not-yet-synced cluster model.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S: Store> SharedCluster<S> {
    /// Locks the state (hold it briefly; never across an await).
    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mutates the state and wakes the consumer when there are changes to take (an update
    /// that changed nothing, such as a relist that found what was there, wakes nobody).
    pub fn update<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut state = self.lock();
        let r = f(&mut state);
        let wake = state.has_changes();
        drop(state);
        if wake {
            self.wake();
        }
        r
    }

    /// Its signals, apart (what a watch landing in a part of the store reports through).
    pub fn signals(&self) -> &Signals {
        &self.signals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_server_that_does_not_answer_is_named_first_until_it_answers() {
        let cluster = SharedCluster::new();
        cluster.set_unlisted(vec!["Node".into()]);
        cluster.describe_unanswered("the API server at https://10.96.0.1:443, which does not answer".into());
        assert_eq!(cluster.waiting_for(), ["the first list of Node"], "said only while unreachable");
        cluster.set_api_reachable(false);
        assert_eq!(
            cluster.waiting_for(),
            ["the API server at https://10.96.0.1:443, which does not answer", "the first list of Node"]
        );
        cluster.set_api_reachable(true);
        cluster.mark_synced();
        assert!(cluster.waiting_for().is_empty());
    }

    #[tokio::test]
    async fn a_new_refusal_wakes_the_consumer_and_the_same_one_again_does_not() {
        let cluster = SharedCluster::new();
        let soon = || tokio::time::timeout(std::time::Duration::from_millis(50), cluster.changed());
        let key = ObjectKey::new("LoadBalancerPool", None, "reversed");
        cluster.set_invalid(key.clone(), "spec.addresses[0]: reversed".into());
        assert!(soon().await.is_ok(), "a new refusal wakes the consumer, which writes its condition");
        cluster.set_invalid(key.clone(), "spec.addresses[0]: reversed".into());
        assert!(soon().await.is_err(), "the same refusal again does not");
        cluster.set_invalid(key, "spec.addresses[1]: reversed".into());
        assert!(soon().await.is_ok(), "a refusal that says something new does");
    }
}
