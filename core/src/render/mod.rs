//! Renderers: lower a [`Ruleset`](crate::plan::Ruleset) into a [`Program`](crate::program::Program)
//! per backend, and print programs and change sets as kernel input text.

mod fmt;
pub mod iptables;
pub mod ipvs;
pub mod names;
pub mod nftables;

use crate::config::ProxyMode;
use crate::net::IpFamily;
use crate::plan::Ruleset;
use crate::program::Program;

/// Lowers `ruleset` for `family` with the backend of `mode`.
pub fn lower(mode: ProxyMode, ruleset: &Ruleset, family: IpFamily) -> Program {
    match mode {
        ProxyMode::Nftables => nftables::lower(ruleset, family),
        ProxyMode::Iptables => iptables::lower(ruleset, family),
        ProxyMode::Ipvs => ipvs::lower(ruleset, family),
    }
}

use crate::program::{ChangeSet, Dialect};

/// The full kernel input for a program, in its backend's syntax.
pub fn program_text(p: &Program) -> String {
    match p.dialect {
        Dialect::Nftables => nftables::text::program(p),
        Dialect::Iptables => iptables::text::program(p, &[]),
        Dialect::Ipvs => ipvs::text::program(p),
    }
}

/// The kernel input applying `cs`, in `p`'s backend syntax (`p` is the new program).
pub fn changes_text(p: &Program, cs: &ChangeSet) -> String {
    match p.dialect {
        Dialect::Nftables => nftables::text::changes(p, cs),
        Dialect::Iptables => iptables::text::changes(p, cs),
        Dialect::Ipvs => ipvs::text::changes(p, cs),
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
