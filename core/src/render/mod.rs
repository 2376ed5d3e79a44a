//! Renderers: lower a [`Ruleset`](crate::plan::Ruleset) into a [`Program`](crate::program::Program)
//! per backend, and print programs and change sets as kernel input text.

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
