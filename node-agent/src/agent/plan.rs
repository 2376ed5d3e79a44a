//! The planning half of a sync: the plans the agent keeps between syncs, and what one sync
//! plans on top of them — every Service again (a full sync, rendering whole programs) or only
//! the changed ones (change sets, the fragments before re-derived from the plans before).

use std::sync::Arc;

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
    /// Shared with the REST API's last published answer: changed in place when not shared,
    /// else copied on write.
    pub(super) ruleset: Arc<Ruleset>,
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
    /// This sync applies everything, not change sets.
    pub(super) full: bool,
    /// Whole programs, when this sync is a full one that renders them (dropped once applied).
    /// An nftables full sync does not: its apply is given them a service port at a time, and
    /// what is kept of them is counted then ([`Desired::into_kept`]).
    pub(super) whole: Option<[Program; 2]>,
    /// The change sets (IPv4, IPv6) of an incremental sync; empty for a full one.
    pub(super) changes: Vec<ChangeSet>,
}

impl Planning {
    /// A full sync of `ruleset` for `node`, rendered whole unless the mode streams it.
    fn full(node: NodeContext, ruleset: Arc<Ruleset>) -> Planning {
        let mode = node.settings.mode;
        let _render = tracing::info_span!("render", full = true).entered();
        if mode.streams_full_apply() {
            // What is kept is counted while the apply streams the programs; until then, the
            // node-level part alone.
            let programs = IpFamily::ALL.map(|f| ProgramState::start(&render::skeleton(mode, &ruleset, f)));
            let planned = Planned { node, ruleset, programs };
            return Planning { planned, full: true, whole: None, changes: Vec::new() };
        }
        let whole = IpFamily::ALL.map(|f| render::lower(mode, &ruleset, f));
        let programs = whole.each_ref().map(ProgramState::new);
        let planned = Planned { node, ruleset, programs };
        Planning { planned, full: true, whole: Some(whole), changes: Vec::new() }
    }
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
        let changed =
            plan_span.in_scope(|| Arc::make_mut(&mut planned.ruleset).update(&state, &self.pending));
        drop(state);
        let _render = tracing::info_span!("render", full = false, fragments = changed.len()).entered();
        let mut changes = Vec::new();
        for kept in &mut planned.programs {
            match render::update(mode, &planned.ruleset, kept, &changed) {
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
