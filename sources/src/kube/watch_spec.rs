//! Options of one kind's watch: its selectors, who to tell of changes, who reads the objects,
//! whether the kind may be missing.

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
    /// The kind may not be served (a CRD another project adds in some of its versions only):
    /// while the API server answers `404 Not Found`, it counts as listed and empty.
    pub(super) optional: bool,
}

impl WatchSpec {
    pub(super) fn all() -> Self {
        WatchSpec { config: watcher::Config::default(), notify: None, reader: Reader::All, optional: false }
    }

    pub(super) fn with(config: watcher::Config) -> Self {
        WatchSpec { config, ..Self::all() }
    }

    /// Every object of a kind that may not be served ([`Self::optional`]).
    pub(super) fn optional() -> Self {
        WatchSpec { optional: true, ..Self::all() }
    }
}
