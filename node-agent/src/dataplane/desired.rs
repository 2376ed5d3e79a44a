//! What a sync wants programmed, for both families.
//!
//! Between syncs the agent keeps plans, not programs: a [`ProgramState`] per family holds the
//! node-level part of the program and the counts incremental changes need. A backend that
//! needs the whole program (a full apply, a drift check, a repair) asks for it and it is
//! rendered then, once per [`Desired`]; an incremental apply needs only the change sets and
//! the kept state.

use std::sync::OnceLock;

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::Ruleset;
use tideway_core::program::{Program, ProgramState};
use tideway_core::render;

/// The programs a sync wants ([IPv4, IPv6]), rendered when first asked for.
pub struct Desired<'a> {
    mode: ProxyMode,
    ruleset: &'a Ruleset,
    kept: [&'a ProgramState; 2],
    whole: OnceLock<[Program; 2]>,
}

impl<'a> Desired<'a> {
    /// What `ruleset` programs in `mode`, with `kept` the state kept of it.
    pub fn new(mode: ProxyMode, ruleset: &'a Ruleset, kept: [&'a ProgramState; 2]) -> Desired<'a> {
        Desired { mode, ruleset, kept, whole: OnceLock::new() }
    }

    /// The same, with the whole programs already rendered (a full sync renders them anyway).
    pub fn rendered(
        mode: ProxyMode,
        ruleset: &'a Ruleset,
        kept: [&'a ProgramState; 2],
        programs: [Program; 2],
    ) -> Desired<'a> {
        Desired { mode, ruleset, kept, whole: OnceLock::from(programs) }
    }

    /// Both whole programs, rendered on first use.
    pub fn programs(&self) -> [&Program; 2] {
        let whole =
            self.whole.get_or_init(|| IpFamily::ALL.map(|f| render::lower(self.mode, self.ruleset, f)));
        [&whole[0], &whole[1]]
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
