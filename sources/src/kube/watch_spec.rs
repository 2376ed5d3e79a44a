//! Options of one kind's watch: its selectors, who to tell of changes, who reads the objects.

use kube::runtime::watcher;
use tokio::sync::watch;

use super::kinds::Reader;

/// Options of one kind's watch.
#[derive(Clone)]
pub(super) struct WatchSpec {
    pub(super) config: watcher::Config,
    /// Bumped after every change, for watches that depend on this kind.
    pub(super) notify: Option<watch::Sender<u64>>,
    /// Who reads the objects (what is kept of them).
    pub(super) reader: Reader,
}

impl WatchSpec {
    pub(super) fn all() -> Self {
        WatchSpec { config: watcher::Config::default(), notify: None, reader: Reader::All }
    }

    pub(super) fn with(config: watcher::Config) -> Self {
        WatchSpec { config, ..Self::all() }
    }
}
