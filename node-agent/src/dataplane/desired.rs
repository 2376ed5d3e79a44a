//! What a sync wants programmed, for both families.
//!
//! Between syncs the agent keeps plans, not programs: a [`ProgramState`] per family holds the
//! node-level part of the program and the counts incremental changes need. A backend that
//! needs the whole program (a full apply, a drift check, a repair) asks for it and it is
//! rendered then, once per [`Desired`]; an incremental apply needs only the change sets and
//! the kept state. A full apply that encodes as it goes ([`Desired::stream`]) is given the
//! programs one service port at a time and never holds them whole; what is kept of them is
//! counted on the way ([`Desired::into_kept`]).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::{PlanKey, Ruleset};
use tideway_core::program::{Fragment, Program, ProgramState};
use tideway_core::render::Renderer;

use super::keep::Keep;

/// The programs a sync wants ([IPv4, IPv6]), rendered when first asked for.
pub struct Desired<'a> {
    renderer: Renderer<'a>,
    kept: [&'a ProgramState; 2],
    whole: OnceLock<[Program; 2]>,
    /// What is kept of the programs a streamed apply was given.
    streamed: OnceLock<[ProgramState; 2]>,
}

impl<'a> Desired<'a> {
    /// What `ruleset` programs in `mode`, with `kept` the state kept of it.
    pub fn new(mode: ProxyMode, ruleset: &'a Ruleset, kept: [&'a ProgramState; 2]) -> Desired<'a> {
        Desired {
            renderer: Renderer::new(mode, ruleset),
            kept,
            whole: OnceLock::new(),
            streamed: OnceLock::new(),
        }
    }

    /// The same, with the whole programs already rendered (a full sync renders them anyway).
    pub fn rendered(
        mode: ProxyMode,
        ruleset: &'a Ruleset,
        kept: [&'a ProgramState; 2],
        programs: [Program; 2],
    ) -> Desired<'a> {
        let renderer = Renderer::new(mode, ruleset);
        Desired { renderer, kept, whole: OnceLock::from(programs), streamed: OnceLock::new() }
    }

    /// Both whole programs, rendered on first use.
    pub fn programs(&self) -> [&Program; 2] {
        let whole = self.whole.get_or_init(|| IpFamily::ALL.map(|f| self.renderer.lower(f)));
        [&whole[0], &whole[1]]
    }

    /// Both families' programs (IPv4, then IPv6) given to `apply` one service port at a time:
    /// the node-level part, then the service fragments in key order, each lowered as `apply`
    /// asks for it (copied, when the programs were already rendered whole). What is kept of
    /// them is counted on the way, for [`into_kept`](Self::into_kept).
    pub fn stream<R>(
        &self,
        mut apply: impl FnMut(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
    ) -> [R; 2] {
        if let Some(whole) = self.whole.get() {
            return whole.each_ref().map(|p| apply(p, &mut p.services.values().cloned()));
        }
        let [(v4, r4), (v6, r6)] = IpFamily::ALL.map(|f| self.renderer.stream(f, &mut apply));
        let _ = self.streamed.set([v4, v6]);
        [r4, r6]
    }

    /// [`stream`](Self::stream) of the service ports `only` names, for a transaction that a
    /// full one replaces right after (nothing of it is kept).
    pub fn stream_only<R>(
        &self,
        only: &BTreeSet<PlanKey>,
        mut apply: impl FnMut(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
    ) -> [R; 2] {
        IpFamily::ALL.map(|f| self.renderer.stream_only(f, only, &mut apply))
    }

    /// The ruleset the programs are lowered from.
    pub fn ruleset(&self) -> &'a Ruleset {
        self.renderer.ruleset()
    }

    /// What is kept between syncs of the programs a full sync applied: counted while they
    /// were streamed, or from the whole programs when they were rendered, else lowered once
    /// more to count it.
    pub fn into_kept(self) -> [ProgramState; 2] {
        if let Some(kept) = self.streamed.into_inner() {
            return kept;
        }
        if let Some(whole) = self.whole.into_inner() {
            return whole.each_ref().map(ProgramState::new);
        }
        IpFamily::ALL.map(|f| self.renderer.stream(f, |_, fragments| fragments.for_each(drop)).0)
    }

    /// What a retired backend must leave in place for these programs (shared iptables
    /// names; nothing for nftables, whose programs are then not rendered for it).
    pub fn keep(&self) -> Keep {
        if !self.renderer.backend().mode().writes_iptables() {
            return Keep::default();
        }
        Keep::of(self.programs())
    }

    /// Service ports and endpoints of both families: a measure of a full apply's size.
    pub fn size(&self) -> usize {
        self.ruleset().services.len()
            + IpFamily::ALL.map(|f| self.ruleset().endpoint_total(f)).iter().sum::<usize>()
    }

    /// What is kept of each family's program (its base, counts and interval-set members).
    pub fn kept(&self) -> [&'a ProgramState; 2] {
        self.kept
    }

    /// Each family's program without its service fragments (for what an incremental apply
    /// needs of it: family, dialect, base chains and sets).
    pub fn skeletons(&self) -> [&'a Program; 2] {
        self.kept.map(ProgramState::skeleton)
    }
}

#[cfg(test)]
mod tests {
    use tideway_core::plan::compile;
    use tideway_core::testing::{mk_node_context, synthetic_cluster};

    use super::*;

    /// What is kept is the same whichever way a full sync got its programs: streamed, rendered
    /// whole, or not asked for at all.
    #[test]
    fn what_is_kept_of_a_full_sync_does_not_depend_on_how_it_was_applied() {
        let ruleset = compile(&synthetic_cluster(40, 3), &mk_node_context());
        let mode = ProxyMode::Nftables;
        let skeletons =
            IpFamily::ALL.map(|f| ProgramState::start(&Renderer::new(mode, &ruleset).skeleton(f)));
        let whole = IpFamily::ALL.map(|f| Renderer::new(mode, &ruleset).lower(f));
        let want = whole.each_ref().map(|p| (p.rule_count(), ProgramState::new(p).rule_count()));
        let kept_by = |desired: Desired<'_>| desired.into_kept().map(|k| k.rule_count());

        let streamed = Desired::new(mode, &ruleset, skeletons.each_ref());
        let mut fragments = 0;
        streamed.stream(|_, f| fragments += f.count());
        assert_eq!(fragments, whole.iter().map(|p| p.services.len()).sum::<usize>());
        let rendered = Desired::new(mode, &ruleset, skeletons.each_ref());
        rendered.programs();
        let untouched = Desired::new(mode, &ruleset, skeletons.each_ref());
        for (how, got) in [
            ("streamed", kept_by(streamed)),
            ("rendered", kept_by(rendered)),
            ("untouched", kept_by(untouched)),
        ] {
            assert_eq!(got, want.map(|(_, kept)| kept), "{how}");
        }
        assert!(want[0].0 > skeletons[0].rule_count(), "the Services add rules to count");
    }
}
