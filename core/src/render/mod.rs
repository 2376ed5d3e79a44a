//! Renderers: lower a [`Ruleset`] into a [`Program`]
//! per backend, and print programs and change sets as kernel input text.

pub mod chains;
mod fmt;
pub mod iptables;
pub mod ipvs;
mod local_traffic;
pub mod names;
pub mod nftables;

use std::collections::BTreeSet;

use crate::config::ProxyMode;
use crate::model::ServicePortName;
use crate::net::IpFamily;
use crate::plan::{Changed, PlanKey, Ruleset};
use crate::program::{Fragment, Program, ProgramState};

/// Lowers `ruleset` for `family` with the backend of `mode`.
pub fn lower(mode: ProxyMode, ruleset: &Ruleset, family: IpFamily) -> Program {
    let mut program = skeleton(mode, ruleset, family);
    program.services = fragments(mode, ruleset, family).map(|(name, f)| (name.clone(), f)).collect();
    program
}

/// The service ports' fragments of [`lower`]'s program, in key order, each lowered when the
/// iterator reaches it (ports that contribute nothing are left out).
fn fragments<'r>(
    mode: ProxyMode,
    ruleset: &'r Ruleset,
    family: IpFamily,
) -> impl Iterator<Item = (&'r ServicePortName, Fragment)> + 'r {
    ruleset
        .plans(family)
        .map(move |plan| (&plan.name, lower_fragment(mode, ruleset, plan)))
        .filter(|(_, f)| *f != Fragment::default())
}

use crate::program::ChangeSet;

/// The node-level part of what [`lower`] gives: mode, family and base, no service
/// fragments.
pub fn skeleton(mode: ProxyMode, ruleset: &Ruleset, family: IpFamily) -> Program {
    let np = ruleset.family(family);
    match mode {
        ProxyMode::Nftables => Program::new(ProxyMode::Nftables, family, nftables::base(np)),
        ProxyMode::Iptables => Program {
            large_cluster: iptables::is_large(ruleset, family),
            ..Program::new(ProxyMode::Iptables, family, iptables::base(np))
        },
        ProxyMode::Ipvs => Program::new(ProxyMode::Ipvs, family, ipvs::base(np)),
    }
}

/// Lowers `ruleset` for `family` one service port at a time, for a full apply that encodes
/// as it goes and never holds the whole program: `apply` is given the node-level part
/// ([`skeleton`]) and the service fragments [`lower`] would hold, in key order, each lowered
/// as it is asked for and dropped once passed on. Returns what is kept of the program between
/// syncs, as [`ProgramState::new`] of [`lower`]'s program would be.
pub fn stream<R>(
    mode: ProxyMode,
    ruleset: &Ruleset,
    family: IpFamily,
    apply: impl FnOnce(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
) -> (ProgramState, R) {
    let skeleton = skeleton(mode, ruleset, family);
    let mut state = ProgramState::start(&skeleton);
    state.reserve(ruleset.tally().service_ports);
    let mut fragments = fragments(mode, ruleset, family).map(|(_, f)| f).inspect(|f| state.take(f));
    let r = apply(&skeleton, &mut fragments);
    drop(fragments);
    (state, r)
}

/// [`stream`] of some service ports only (`only`'s keys of `family`), for a program that is
/// replaced whole right after: nothing of it is kept.
pub fn stream_only<R>(
    mode: ProxyMode,
    ruleset: &Ruleset,
    family: IpFamily,
    only: &BTreeSet<PlanKey>,
    apply: impl FnOnce(&Program, &mut dyn Iterator<Item = Fragment>) -> R,
) -> R {
    let skeleton = skeleton(mode, ruleset, family);
    let plans = only.iter().filter(|k| k.0 == family).filter_map(|k| ruleset.services.get(k));
    let mut fragments =
        plans.map(|plan| lower_fragment(mode, ruleset, plan)).filter(|f| *f != Fragment::default());
    apply(&skeleton, &mut fragments)
}

/// The full kernel input for a program, in its backend's syntax.
pub fn program_text(p: &Program) -> String {
    match p.mode {
        ProxyMode::Nftables => nftables::text::program(p),
        ProxyMode::Iptables => iptables::text::program(p, &[]),
        ProxyMode::Ipvs => ipvs::text::program(p),
    }
}

/// The kernel input applying `cs`, in `p`'s backend syntax (`p` is the new program).
pub fn changes_text(p: &Program, cs: &ChangeSet) -> String {
    match p.mode {
        ProxyMode::Nftables => nftables::text::changes(p, cs),
        ProxyMode::Iptables => iptables::text::changes(p, cs),
        ProxyMode::Ipvs => ipvs::text::changes(p, cs),
    }
}

/// Everything a node programs in `mode`, as text: both families (IPv6 only when the node or a
/// Service has IPv6), each in its backend's syntax.
pub fn node_text(mode: ProxyMode, ruleset: &Ruleset) -> String {
    let mut out = String::new();
    for family in IpFamily::ALL {
        let used = ruleset.plans(family).next().is_some() || !ruleset.family(family).node_ips.is_empty();
        if family == IpFamily::V6 && !used {
            continue;
        }
        let program = lower(mode, ruleset, family);
        if mode != ProxyMode::Nftables {
            out.push_str(&format!("# {family} ({mode})\n"));
        }
        out.push_str(&program_text(&program));
    }
    out
}

/// Lowers one service port for `mode`, consistent with [`lower`] (for incremental syncs).
pub fn lower_fragment(
    mode: ProxyMode,
    ruleset: &Ruleset,
    plan: &crate::plan::ServicePortPlan,
) -> crate::program::Fragment {
    let np = ruleset.family(plan.family);
    match mode {
        ProxyMode::Nftables => nftables::lower_plan(np, plan),
        ProxyMode::Iptables => iptables::lower_plan(np, plan, iptables::is_large(ruleset, plan.family)),
        ProxyMode::Ipvs => ipvs::lower_plan(np, plan, ruleset.node.settings.ipvs.scheduler),
    }
}

/// The change set that brings the program `state` keeps up to date with `ruleset`, after
/// [`Ruleset::update`] returned `changed`: each changed fragment is rendered as it is now and,
/// from the plan before, as it was (the same renderer on the same node facts gives the same
/// fragment, so nothing of the old program needs keeping). `None` when the node-level part
/// changed: only a full sync will do.
pub fn update(
    mode: ProxyMode,
    ruleset: &Ruleset,
    state: &mut ProgramState,
    changed: &Changed,
) -> Option<ChangeSet> {
    let family = state.skeleton().family;
    if needs_full(mode, ruleset, state.skeleton()) {
        return None;
    }
    let fragments: Vec<(Option<Fragment>, Option<Fragment>)> = changed
        .iter()
        .filter(|((f, _), _)| *f == family)
        .map(|(key, before)| {
            let old = before.as_ref().map(|p| lower_fragment(mode, ruleset, p));
            let new = ruleset.services.get(key).map(|p| lower_fragment(mode, ruleset, p));
            (old, new)
        })
        .collect();
    Some(state.replace_all(fragments.iter().map(|(old, new)| (old.as_ref(), new.as_ref()))))
}

/// True when the program `p` no longer matches the ruleset's node-level facts (node addresses,
/// settings, kube-proxy's large-cluster mode): incremental updates are not enough.
pub fn needs_full(mode: ProxyMode, ruleset: &Ruleset, p: &Program) -> bool {
    let fresh_base = match mode {
        ProxyMode::Nftables => nftables::base(ruleset.family(p.family)),
        ProxyMode::Iptables => iptables::base(ruleset.family(p.family)),
        ProxyMode::Ipvs => ipvs::base(ruleset.family(p.family)),
    };
    let large = mode == ProxyMode::Iptables && iptables::is_large(ruleset, p.family);
    fresh_base != p.base || large != p.large_cluster
}
