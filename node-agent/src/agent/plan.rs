//! The planning half of a sync: the plans the agent keeps between syncs, and what one sync
//! plans on top of them — every Service again (a full sync, rendering whole programs) or only
//! the changed ones (change sets, the fragments before re-derived from the plans before).

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::{NodeContext, Ruleset, compile};
use tideway_core::program::{ChangeSet, Program, ProgramState};
use tideway_core::render;

use super::{Agent, LARGE};
use crate::dataplane::Desired;

/// What the agent keeps between syncs: the node it planned for, the plans, and what is kept
/// of each family's program (base and counts; the rules themselves are the plans).
pub(super) struct Planned {
    pub(super) node: NodeContext,
    pub(super) ruleset: Ruleset,
    pub(super) programs: [ProgramState; 2],
}

impl Planned {
    /// What was last planned, as the dataplane is given it (whole programs on demand).
    pub(super) fn desired(&self) -> Desired<'_> {
        Desired::new(self.node.settings.mode, &self.ruleset, self.programs.each_ref())
    }

    /// Rules of both families' programs, without walking them.
    pub(super) fn rule_count(&self) -> usize {
        self.programs.iter().map(ProgramState::rule_count).sum()
    }
}

/// What one sync planned.
pub(super) struct Planning {
    pub(super) planned: Planned,
    /// Whole programs, when this sync is a full one (dropped once applied).
    pub(super) whole: Option<[Program; 2]>,
    /// The change sets (IPv4, IPv6) of an incremental sync; empty for a full one.
    pub(super) changes: Vec<ChangeSet>,
}

/// Renders both families' whole programs, and what is kept of them between syncs.
fn render_whole(mode: ProxyMode, ruleset: &Ruleset) -> ([Program; 2], [ProgramState; 2]) {
    tracing::info_span!("render", full = true).in_scope(|| {
        let programs = IpFamily::ALL.map(|f| render::lower(mode, ruleset, f));
        let kept = programs.each_ref().map(ProgramState::new);
        (programs, kept)
    })
}

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
        let changed = plan_span.in_scope(|| planned.ruleset.update(&state, &self.pending));
        drop(state);
        let _render = tracing::info_span!("render", full = false, fragments = changed.len()).entered();
        let mut changes = Vec::new();
        for kept in &mut planned.programs {
            match render::update(mode, &planned.ruleset, kept, &changed) {
                Some(cs) => changes.push(cs),
                // The node-level part changed: everything is rendered again.
                None => {
                    let (programs, kept) = render_whole(mode, &planned.ruleset);
                    planned.programs = kept;
                    return Planning { planned, whole: Some(programs), changes: Vec::new() };
                }
            }
        }
        Planning { planned, whole: None, changes }
    }

    /// Plans and renders every Service.
    fn plan_all(&mut self, node: &NodeContext) -> Planning {
        let state = self.cluster.lock();
        if self.dataplane.is_none() && state.service_count() >= LARGE {
            tracing::info!(services = state.service_count(), "first sync: planning every Service");
        }
        let ruleset = tracing::info_span!("plan", full = true).in_scope(|| compile(&state, node));
        drop(state);
        let (programs, kept) = render_whole(node.settings.mode, &ruleset);
        let planned = Planned { node: node.clone(), ruleset, programs: kept };
        Planning { planned, whole: Some(programs), changes: Vec::new() }
    }
}
