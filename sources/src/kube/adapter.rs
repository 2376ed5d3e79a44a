//! Watcher events of one kind into the shared state.
//!
//! * `Init` .. `InitApply`* .. `InitDone`: converted objects are buffered (no raw object is
//!   kept) and replace the kind in one step at `InitDone`, so a relist after an error or a
//!   410 Gone changes only what differs and never empties the state in between.
//! * `Apply`: converted and applied at once. An object whose new version is invalid keeps its
//!   last valid version and is listed as invalid, so a bad edit never removes what is programmed.
//! * `Delete`: removed.

use super::kinds::{Kind, Reader};
use super::landing::Landing;
use crate::shared::{InvalidObjects, ObjectKey, SharedCluster, compact};
use kube::runtime::watcher::Event;

/// Feeds one kind's events into a [`SharedCluster`] (or another [`Landing`]).
pub struct KindAdapter<K: Kind, L: Landing<K> = SharedCluster> {
    cluster: L,
    relist: Option<Relist<K>>,
    listed: bool,
    reader: Reader,
}

struct Relist<K: Kind> {
    objects: Vec<K::Model>,
    invalid: InvalidObjects,
}

/// What an event did, for the caller's bookkeeping (sync barrier, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A (re)list began or continued.
    Listing,
    /// A list completed; `first` is true the first time.
    Listed {
        /// The first complete list of this kind.
        first: bool,
    },
    /// An object was applied or deleted.
    Changed,
    /// An object was invalid and skipped (its last valid version stays).
    Invalid,
}

impl<K: Kind, L: Landing<K>> KindAdapter<K, L> {
    /// An adapter writing into `cluster`.
    pub fn new(cluster: L) -> Self {
        KindAdapter { cluster, relist: None, listed: false, reader: Reader::All }
    }

    /// An adapter that keeps only what `reader` reads ([`Kind::trim`]).
    pub fn for_reader(cluster: L, reader: Reader) -> Self {
        KindAdapter { reader, ..Self::new(cluster) }
    }

    fn model_of(&self, obj: &K) -> Result<Option<K::Model>, tideway_api::ConvertError> {
        let mut m = obj.convert()?;
        if let Some(m) = m.as_mut() {
            K::trim(m, self.reader);
        }
        Ok(m)
    }

    /// Handles one event.
    pub fn handle(&mut self, event: Event<K>) -> Outcome {
        match event {
            Event::Init => {
                self.relist = Some(Relist { objects: Vec::new(), invalid: InvalidObjects::new() });
                Outcome::Listing
            }
            Event::InitApply(obj) => self.init_apply(&obj),
            Event::InitDone => self.init_done(),
            Event::Apply(obj) => self.apply(&obj),
            Event::Delete(obj) => {
                let key = K::key(&obj);
                self.cluster.update(|s| s.delete(&key));
                self.cluster.signals().clear_invalid(&key);
                Outcome::Changed
            }
        }
    }

    fn init_apply(&mut self, obj: &K) -> Outcome {
        let key = K::key(obj);
        let converted = self.model_of(obj);
        let relist =
            self.relist.get_or_insert_with(|| Relist { objects: Vec::new(), invalid: InvalidObjects::new() });
        match converted {
            Ok(Some(m)) => relist.objects.push(m),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "invalid object skipped; its last valid version stays");
                relist.invalid.insert(key, e.to_string());
                return Outcome::Invalid;
            }
        }
        Outcome::Listing
    }

    fn init_done(&mut self) -> Outcome {
        let relist =
            self.relist.take().unwrap_or(Relist { objects: Vec::new(), invalid: InvalidObjects::new() });
        let objects = if self.cluster.compacts_lists() { compact(relist.objects) } else { relist.objects };
        let keep: Vec<ObjectKey> = relist.invalid.keys().cloned().collect();
        self.cluster.update(|s| s.replace(objects, &keep));
        self.cluster.signals().replace_invalid_kind(&K::watch_name(), relist.invalid);
        let first = !self.listed;
        self.listed = true;
        Outcome::Listed { first }
    }

    fn apply(&mut self, obj: &K) -> Outcome {
        let key: ObjectKey = K::key(obj);
        match self.model_of(obj) {
            Ok(Some(m)) => self.cluster.update(|s| s.apply(m)),
            Ok(None) => self.cluster.update(|s| s.delete(&key)),
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "invalid object skipped; its last valid version stays");
                self.cluster.signals().set_invalid(key, e.to_string());
                return Outcome::Invalid;
            }
        }
        self.cluster.signals().clear_invalid(&key);
        Outcome::Changed
    }
}
