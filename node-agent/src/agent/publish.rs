//! Publishing what was programmed to the REST API's reader ([`Publisher`]).

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

    /// Publishes what was just programmed. The next sync changes its own copy of the plan
    /// ([`Arc::make_mut`]): the plan's maps are persistent, so the copy shares every part of
    /// the plan it does not change.
    pub(super) fn publish(&mut self, mode: ProxyMode, ruleset: &Arc<Ruleset>) {
        let Some(p) = &self.publisher else { return };
        p.send_replace(Some(Arc::new(Published::new(&self.opts.node, mode, Arc::clone(ruleset)))));
    }
}
