//! What a shared cluster says beside its objects: whether the source delivered its first
//! view, what it waits for, what it skipped as invalid, whether the API server answers, and
//! the wake-ups of its consumer and readers. None of it depends on the store the objects land
//! in, so a watch landing in a part of a store (a registered kind's) reports through it too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use super::object_key::{InvalidObjects, ObjectKey};

/// The signals of a [`SharedCluster`](super::SharedCluster), which reads them as its own.
#[derive(Clone)]
pub struct Signals {
    changed: Arc<Notify>,
    synced: watch::Sender<bool>,
    invalid: Arc<Mutex<InvalidObjects>>,
    api_reachable: watch::Sender<bool>,
    api_doubted: watch::Sender<bool>,
    stale: Arc<std::sync::atomic::AtomicBool>,
    unlisted: Arc<Mutex<Vec<String>>>,
    /// Supervised tasks that panicked and have not recovered yet: task -> what happened.
    faults: Arc<Mutex<BTreeMap<String, String>>>,
    /// What to say of the API server while it does not answer before the first view.
    unanswered: Arc<Mutex<Option<String>>>,
    /// Counts the wake-ups of the consumer, for readers beside it ([`Signals::subscribe`]).
    generation: watch::Sender<u64>,
}

impl Default for Signals {
    /// Not yet synced, the API server taken to answer.
    fn default() -> Self {
        Signals {
            changed: Arc::new(Notify::new()),
            synced: watch::channel(false).0,
            invalid: Arc::default(),
            api_reachable: watch::channel(true).0,
            api_doubted: watch::channel(false).0,
            stale: Arc::default(),
            unlisted: Arc::default(),
            faults: Arc::default(),
            unanswered: Arc::default(),
            generation: watch::channel(0).0,
        }
    }
}

impl Signals {
    /// Wakes the consumer, and the readers beside it.
    pub(crate) fn wake(&self) {
        self.changed.notify_one();
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// A reader beside the consumer (the agent's layer-2 speaker): its receiver changes
    /// whenever the consumer is woken, and it reads the state without taking the changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Waits until the state may have changed since the last call (one consumer).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Wakes the consumer without a change of objects (something it reads beside them, such as
    /// its fence, changed).
    pub fn poke(&self) {
        self.wake();
    }

    /// Records that the source delivered its first complete view.
    pub fn mark_synced(&self) {
        self.stale.store(false, std::sync::atomic::Ordering::Relaxed);
        self.synced.send_replace(true);
        self.wake();
    }

    /// True once the source delivered a complete view.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Records the kinds whose first complete list has not arrived yet (the Kubernetes
    /// source's; empty for sources that read everything at once).
    pub fn set_unlisted(&self, kinds: Vec<String>) {
        *self.unlisted.lock().unwrap_or_else(|e| e.into_inner()) = kinds;
    }

    /// What the first complete view still waits for, in words (empty once synced).
    pub fn waiting_for(&self) -> Vec<String> {
        if self.is_synced() {
            return Vec::new();
        }
        let unlisted = self.unlisted.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut what = Vec::new();
        if !self.api_reachable()
            && let Some(said) = self.unanswered.lock().unwrap_or_else(|e| e.into_inner()).clone()
        {
            what.push(said);
        }
        if unlisted.is_empty() {
            what.push("the source's first complete view".into());
        }
        what.extend(unlisted.into_iter().map(|k| format!("the first list of {k}")));
        what
    }

    /// What [`Self::waiting_for`] says first while the API server does not answer
    /// (which server, and what may stand between it and this component).
    pub fn describe_unanswered(&self, said: String) {
        *self.unanswered.lock().unwrap_or_else(|e| e.into_inner()) = Some(said);
    }

    /// Records that `task` (a watch, a writer) panicked and was started again: `what` is shown
    /// by [`Self::faults`] until [`Self::clear_fault`] (its view is whole
    /// again).
    pub fn set_fault(&self, task: &str, what: String) {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).insert(task.to_string(), what);
    }

    /// `task` recovered.
    pub fn clear_fault(&self, task: &str) {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).remove(task);
    }

    /// The supervised tasks that restarted after a panic and have not recovered yet, in words
    /// (readiness names them).
    pub fn faults(&self) -> Vec<String> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Waits for the first complete view.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// A reader beside the consumer ([`Self::subscribe`]), subscribed now and handed over once
    /// the first complete view is in: what a speaker follows from then on.
    pub async fn subscribe_synced(&self) -> watch::Receiver<u64> {
        let changed = self.subscribe();
        self.wait_synced().await;
        changed
    }

    /// Records whether the source reaches the API server now (a lab's control-plane faults; a
    /// watch or list that fails). Starts true.
    pub fn set_api_reachable(&self, reachable: bool) {
        self.api_reachable.send_if_modified(|r| std::mem::replace(r, reachable) != reachable);
    }

    /// [`Self::api_reachable`], watched.
    pub fn watch_api_reachable(&self) -> watch::Receiver<bool> {
        self.api_reachable.subscribe()
    }

    /// Whether the source reached the API server at its last attempt.
    pub fn api_reachable(&self) -> bool {
        *self.api_reachable.borrow()
    }

    /// Records whether the consumer doubts that the API server still answers though nothing
    /// failed (an agent whose gossip reaches a minority: a partition, where a watch's
    /// connection hangs silently rather than failing). While in doubt a Kubernetes source asks
    /// the API server, and one that does not answer counts as unreachable.
    pub fn doubt_api(&self, doubt: bool) {
        self.api_doubted.send_if_modified(|d| std::mem::replace(d, doubt) != doubt);
    }

    /// Records that the view may be stale: the API server fell silent while doubted, and the
    /// watches, whose connections may have hung through it, start again. The next complete
    /// view ([`Self::mark_synced`]) clears it.
    pub fn mark_stale(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the view may be stale ([`Self::mark_stale`]): an agent answers for no
    /// address meanwhile.
    pub fn is_stale(&self) -> bool {
        self.stale.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`Self::doubt_api`], watched.
    pub fn watch_api_doubted(&self) -> watch::Receiver<bool> {
        self.api_doubted.subscribe()
    }

    fn invalid(&self) -> MutexGuard<'_, InvalidObjects> {
        self.invalid.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Objects the source skipped as invalid, with why.
    pub fn invalid_objects(&self) -> InvalidObjects {
        self.invalid().clone()
    }

    /// One line per invalid object, for status reports.
    pub fn errors(&self) -> Vec<String> {
        self.invalid().iter().map(|(k, msg)| format!("{k}: {msg}")).collect()
    }

    /// Records that `key` is invalid (its last valid version stays in the state).
    /// The consumer is woken when the refusal is new or says something new: its condition is
    /// the consumer's to write, and no change to the state announces it.
    pub fn set_invalid(&self, key: ObjectKey, message: String) {
        let before = self.invalid().insert(key, message.clone());
        if before.as_ref() != Some(&message) {
            self.changed.notify_one();
        }
    }

    /// Records that `key` is valid again, or gone.
    pub fn clear_invalid(&self, key: &ObjectKey) {
        self.invalid().remove(key);
    }

    /// Replaces the invalid objects of `kind` (after a relist of that kind).
    pub fn replace_invalid_kind(&self, kind: &str, objects: InvalidObjects) {
        let mut invalid = self.invalid();
        invalid.retain(|k, _| k.kind != kind);
        invalid.extend(objects);
    }

    /// Replaces every invalid object (a source that reads everything at once).
    pub fn replace_invalid(&self, objects: InvalidObjects) {
        *self.invalid() = objects;
    }
}
