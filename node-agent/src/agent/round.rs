//! One sync round's values: what the agent plans and keeps between syncs ([`Planned`],
//! [`Planning`]) and what a sync that programmed the kernel did ([`Synced`]).

use std::sync::Arc;
use std::time::Duration;

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::{NodeContext, Ruleset};
use tideway_core::program::{ChangeSet, Program, ProgramState};
use tideway_core::render::Renderer;

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
    pub(super) fn full(node: NodeContext, ruleset: Arc<Ruleset>) -> Planning {
        let renderer = Renderer::new(node.settings.mode, &ruleset);
        let _render = tracing::info_span!("render", full = true).entered();
        if renderer.backend().streams_full_apply() {
            // What is kept is counted while the apply streams the programs; until then, the
            // node-level part alone.
            let programs = IpFamily::ALL.map(|f| ProgramState::start(&renderer.skeleton(f)));
            let planned = Planned { node, ruleset, programs };
            return Planning { planned, full: true, whole: None, changes: Vec::new() };
        }
        let whole = IpFamily::ALL.map(|f| renderer.lower(f));
        let programs = whole.each_ref().map(ProgramState::new);
        let planned = Planned { node, ruleset, programs };
        Planning { planned, full: true, whole: Some(whole), changes: Vec::new() }
    }
}

/// A sync that programmed the kernel.
pub(super) struct Synced {
    /// Mode programmed.
    pub(super) mode: ProxyMode,
    /// A full sync.
    pub(super) full: bool,
    /// How long it took.
    pub(super) elapsed: Duration,
    /// Stale UDP conntrack entries deleted.
    pub(super) deleted: usize,
    /// Health-check server errors.
    pub(super) hc_errors: Vec<String>,
    /// The ProxyConfig and generation in force.
    pub(super) config: Option<(String, i64)>,
    /// The Service version it programmed up to ([`tideway_core::cluster::ClusterState::services_version`]
    /// when it took the changes).
    pub(super) version: Option<u64>,
}
