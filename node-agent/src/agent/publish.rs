//! Publishing what was programmed to the REST API's reader ([`Publisher`]), and taking back
//! the copy of the plan made meanwhile.

use std::sync::Arc;

use tideway_core::config::ProxyMode;
use tideway_core::plan::Ruleset;

use super::Agent;
use super::query::{Published, Publisher};

impl Agent {
    /// Publishes each plan programmed on `publisher` (the REST API's reader).
    pub fn answering(mut self, publisher: Publisher) -> Agent {
        self.publisher = Some(publisher);
        self
    }

    /// Publishes what was just programmed, and starts copying it on a blocking thread: the
    /// next sync changes the copy, not the plan the API may be reading (a plan of 10,000
    /// Services takes ~10 ms to copy, against ~40 µs to plan one changed endpoint).
    pub(super) fn publish(&mut self, mode: ProxyMode, ruleset: &Arc<Ruleset>) {
        let Some(p) = &self.publisher else { return };
        p.send_replace(Some(Arc::new(Published::new(&self.opts.node, mode, Arc::clone(ruleset)))));
        let shared = Arc::clone(ruleset);
        self.spare =
            Some((Arc::clone(ruleset), tokio::task::spawn_blocking(move || Ruleset::clone(&shared))));
    }

    /// Puts the copy of the published plan in place of the shared one, so the plan is changed
    /// in place; it is usually made long before (syncs are `minSyncPeriod` apart). A plan that
    /// is no longer the one copied (a failed sync planned another) keeps its own.
    pub(super) async fn take_spare(&mut self) {
        let Some((copied, spare)) = self.spare.take() else { return };
        match spare.await {
            Ok(copy) => {
                if let Some(planned) = self.planned.as_mut()
                    && Arc::ptr_eq(&planned.ruleset, &copied)
                {
                    drop(copied);
                    planned.ruleset = Arc::new(copy);
                }
            }
            Err(e) => tracing::warn!(error = %e, "copying the published plan failed; the sync copies it"),
        }
    }
}
