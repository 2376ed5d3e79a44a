//! The planning half of a sync: what one sync plans on top of the plans the agent keeps
//! between syncs ([`Planned`](super::round::Planned)) — every Service again (a full sync,
//! rendering whole programs) or only the changed ones (change sets, the fragments before
//! re-derived from the plans before).

use std::sync::Arc;

use tideway_core::plan::{NodeContext, compile};
use tideway_core::render::Renderer;

use super::round::Planning;
use super::{Agent, LARGE};

impl Agent {
    /// Plans this sync for `node`: everything when `full` (or when nothing was planned yet, or
    /// the node-level part of a program changed), else the pending Services.
    pub(super) fn plan(&mut self, node: &NodeContext, full: bool) -> Planning {
        let mode = node.settings.mode;
        let mut planned = match self.planned.take() {
            Some(p) if !full => p,
            _ => return self.plan_all(node),
        };
        let state = self.cluster.lock();
        let plan_span = tracing::info_span!("plan", full = false, services = self.pending.len());
        let changed =
            plan_span.in_scope(|| Arc::make_mut(&mut planned.ruleset).update(&state, &self.pending));
        drop(state);
        let _render = tracing::info_span!("render", full = false, fragments = changed.len()).entered();
        let mut changes = Vec::new();
        let renderer = Renderer::new(mode, &planned.ruleset);
        for kept in &mut planned.programs {
            match renderer.update(kept, &changed) {
                Some(cs) => changes.push(cs),
                // The node-level part changed: everything is rendered again.
                None => return Planning::full(planned.node, planned.ruleset),
            }
        }
        Planning { planned, full: false, whole: None, changes }
    }

    /// Plans and renders every Service.
    fn plan_all(&mut self, node: &NodeContext) -> Planning {
        let state = self.cluster.lock();
        if self.dataplane.is_none() && state.service_count() >= LARGE {
            tracing::info!(services = state.service_count(), "first sync: planning every Service");
        }
        let ruleset = tracing::info_span!("plan", full = true).in_scope(|| compile(&state, node));
        drop(state);
        Planning::full(node.clone(), Arc::new(ruleset))
    }
}
