//! Renderers: lower a [`Ruleset`] into a [`Program`] per backend, and print programs and
//! change sets as kernel input text. The backend is chosen once, when a [`Renderer`] is made
//! for a ruleset (see [`Backend`]).

mod backend;
pub mod chains;
mod fmt;
pub mod iptables;
pub mod ipvs;
mod local_traffic;
pub mod names;
pub mod nftables;
pub mod node_dns;

use std::collections::BTreeSet;

pub use backend::{Backend, backend};

use crate::config::ProxyMode;
use crate::model::ServicePortName;
use crate::net::IpFamily;
use crate::plan::{Changed, PlanKey, Ruleset, ServicePortPlan};
use crate::program::{ChangeSet, Fragment, Program, ProgramState};

/// A ruleset and the backend it is lowered for, chosen once: every program, fragment and
/// change set a node's sync needs comes from here.
#[derive(Clone, Copy)]
pub struct Renderer<'r> {
    backend: &'static dyn Backend,
    ruleset: &'r Ruleset,
}

impl<'r> Renderer<'r> {
    /// `ruleset` lowered with the backend of `mode`.
    pub fn new(mode: ProxyMode, ruleset: &'r Ruleset) -> Renderer<'r> {
        Renderer { backend: backend(mode), ruleset }
    }

    /// The backend it lowers with.
    pub fn backend(&self) -> &'static dyn Backend {
        self.backend
    }

    /// The ruleset it lowers.
    pub fn ruleset(&self) -> &'r Ruleset {
        self.ruleset
    }

    /// The whole program of `family`.
    pub fn lower(&self, family: IpFamily) -> Program {
        let mut program = self.skeleton(family);
        program.services = self.fragments(family).map(|(name, f)| (name.clone(), f)).collect();
        program
    }

    /// The node-level part of what [`lower`](Self::lower) gives: mode, family and base, no
    /// service fragments.
    pub fn skeleton(&self, family: IpFamily) -> Program {
        self.backend.skeleton(self.ruleset, family)
    }

    /// One service port, consistent with [`lower`](Self::lower) (for incremental syncs).
    pub fn fragment(&self, plan: &ServicePortPlan) -> Fragment {
        self.backend.lower_plan(self.ruleset, plan)
    }

    /// The service ports' fragments of [`lower`](Self::lower)'s program, in key order, each
    /// lowered when the iterator reaches it (ports that contribute nothing are left out).
    fn fragments(self, family: IpFamily) -> impl Iterator<Item = (&'r ServicePortName, Fragment)> + 'r {
        self.ruleset
            .plans(family)
            .map(move |plan| (&plan.name, self.fragment(plan)))
            .filter(|(_, f)| *f != Fragment::default())
    }

    /// `family`'s program one service port at a time, for a full apply that encodes as it
    /// goes and never holds the whole program: `apply` is given the node-level part
    /// ([`skeleton`](Self::skeleton)) and the service fragments [`lower`](Self::lower) would
    /// hold, in key order, each lowered as it is asked for and dropped once passed on. Returns
    /// what is kept of the program between syncs, as [`ProgramState::new`] of the whole
    /// program would be.
    pub fn stream<R>(
        &self,
        family: IpFamily,
        apply: impl FnOnce(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
    ) -> (ProgramState, R) {
        let skeleton = self.skeleton(family);
        let mut state = ProgramState::start(&skeleton);
        state.reserve(self.ruleset.tally().service_ports);
        let mut fragments = self.fragments(family).map(|(_, f)| f).inspect(|f| state.take(f));
        let r = apply(&skeleton, &mut fragments);
        drop(fragments);
        (state, r)
    }

    /// [`stream`](Self::stream) of some service ports only (`only`'s keys of `family`), for a
    /// program that is replaced whole right after: nothing of it is kept.
    pub fn stream_only<R>(
        &self,
        family: IpFamily,
        only: &BTreeSet<PlanKey>,
        apply: impl FnOnce(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
    ) -> R {
        let skeleton = self.skeleton(family);
        let plans = only.iter().filter(|k| k.0 == family).filter_map(|k| self.ruleset.services.get(k));
        let mut fragments = plans.map(|plan| self.fragment(plan)).filter(|f| *f != Fragment::default());
        apply(&skeleton, &mut fragments)
    }

    /// The change set that brings the program `state` keeps up to date with the ruleset,
    /// after [`Ruleset::update`] returned `changed`: each changed fragment is rendered as it
    /// is now and, from the plan before, as it was (the same renderer on the same node facts
    /// gives the same fragment, so nothing of the old program needs keeping). `None` when the
    /// node-level part changed: only a full sync will do.
    pub fn update(&self, state: &mut ProgramState, changed: &Changed) -> Option<ChangeSet> {
        let family = state.skeleton().family;
        if self.needs_full(state.skeleton()) {
            return None;
        }
        let fragments: Vec<(Option<Fragment>, Option<Fragment>)> = changed
            .iter()
            .filter(|((f, _), _)| *f == family)
            .map(|(key, before)| {
                let old = before.as_ref().map(|p| self.fragment(p));
                let new = self.ruleset.services.get(key).map(|p| self.fragment(p));
                (old, new)
            })
            .collect();
        Some(state.replace_all(fragments.iter().map(|(old, new)| (old.as_ref(), new.as_ref()))))
    }

    /// True when the program `p` no longer matches the ruleset's node-level facts (node
    /// addresses, settings, kube-proxy's large-cluster mode): incremental updates are not
    /// enough.
    pub fn needs_full(&self, p: &Program) -> bool {
        let fresh = self.skeleton(p.family);
        fresh.base != p.base || fresh.large_cluster != p.large_cluster
    }

    /// Everything the node programs, as text: both families (IPv6 only when the node or a
    /// Service has IPv6), each in the backend's syntax.
    pub fn node_text(&self) -> String {
        let mut out = String::new();
        for family in IpFamily::ALL {
            let used = self.ruleset.plans(family).next().is_some()
                || !self.ruleset.family(family).node_ips.is_empty();
            if family == IpFamily::V6 && !used {
                continue;
            }
            let program = self.lower(family);
            if self.backend.mode() != ProxyMode::Nftables {
                out.push_str(&format!("# {family} ({})\n", self.backend.mode()));
            }
            out.push_str(&program_text(&program));
        }
        out
    }
}

/// The full kernel input for a program, in its backend's syntax.
pub fn program_text(p: &Program) -> String {
    backend(p.mode).program_text(p)
}

/// The kernel input applying `cs`, in `p`'s backend syntax (`p` is the new program).
pub fn changes_text(p: &Program, cs: &ChangeSet) -> String {
    backend(p.mode).changes_text(p, cs)
}
