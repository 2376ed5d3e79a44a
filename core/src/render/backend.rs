//! The three backends behind one trait: what differs between nftables, iptables and IPVS when
//! a ruleset is lowered and printed. The mode is matched here once ([`backend`]); everything
//! else asks the backend it was given.

use crate::config::ProxyMode;
use crate::net::IpFamily;
use crate::plan::{Ruleset, ServicePortPlan};
use crate::program::{ChangeSet, Fragment, Program};

use super::{iptables, ipvs, nftables};

/// One backend's lowering and syntax.
pub trait Backend: Sync {
    /// The mode this backend programs.
    fn mode(&self) -> ProxyMode;

    /// The node-level part of `ruleset`'s program for `family`: mode, family and base, no
    /// service fragments.
    fn skeleton(&self, ruleset: &Ruleset, family: IpFamily) -> Program;

    /// One service port's fragment.
    fn lower_plan(&self, ruleset: &Ruleset, plan: &ServicePortPlan) -> Fragment;

    /// The full kernel input for a program, in this backend's syntax.
    fn program_text(&self, p: &Program) -> String;

    /// The kernel input applying `cs` (`p` is the new program).
    fn changes_text(&self, p: &Program, cs: &ChangeSet) -> String;

    /// True when a full sync is rendered as it is written, one Service at a time (nftables:
    /// one `nft -f` transaction fed from a pipe), rather than rendered whole first.
    fn streams_full_apply(&self) -> bool {
        false
    }
}

/// The backend that programs `mode`.
pub fn backend(mode: ProxyMode) -> &'static dyn Backend {
    match mode {
        ProxyMode::Nftables => &Nftables,
        ProxyMode::Iptables => &Iptables,
        ProxyMode::Ipvs => &Ipvs,
    }
}

/// kube-proxy's nftables mode: one table per family.
struct Nftables;

impl Backend for Nftables {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Nftables
    }

    fn skeleton(&self, ruleset: &Ruleset, family: IpFamily) -> Program {
        Program::new(ProxyMode::Nftables, family, nftables::base(ruleset.family(family)))
    }

    fn lower_plan(&self, ruleset: &Ruleset, plan: &ServicePortPlan) -> Fragment {
        nftables::lower_plan(ruleset.family(plan.family), plan)
    }

    fn program_text(&self, p: &Program) -> String {
        nftables::text::program(p)
    }

    fn changes_text(&self, p: &Program, cs: &ChangeSet) -> String {
        nftables::text::changes(p, cs)
    }

    fn streams_full_apply(&self) -> bool {
        true
    }
}

/// kube-proxy's iptables mode, with its large-cluster mode (no per-endpoint comments).
struct Iptables;

impl Backend for Iptables {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Iptables
    }

    fn skeleton(&self, ruleset: &Ruleset, family: IpFamily) -> Program {
        Program {
            large_cluster: iptables::is_large(ruleset, family),
            ..Program::new(ProxyMode::Iptables, family, iptables::base(ruleset.family(family)))
        }
    }

    fn lower_plan(&self, ruleset: &Ruleset, plan: &ServicePortPlan) -> Fragment {
        let large = iptables::is_large(ruleset, plan.family);
        iptables::lower_plan(ruleset.family(plan.family), plan, large)
    }

    fn program_text(&self, p: &Program) -> String {
        iptables::text::program(p, &[])
    }

    fn changes_text(&self, p: &Program, cs: &ChangeSet) -> String {
        iptables::text::changes(p, cs)
    }
}

/// kube-proxy's IPVS mode: virtual servers plus a few iptables rules.
struct Ipvs;

impl Backend for Ipvs {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Ipvs
    }

    fn skeleton(&self, ruleset: &Ruleset, family: IpFamily) -> Program {
        Program::new(ProxyMode::Ipvs, family, ipvs::base(ruleset.family(family)))
    }

    fn lower_plan(&self, ruleset: &Ruleset, plan: &ServicePortPlan) -> Fragment {
        ipvs::lower_plan(ruleset.family(plan.family), plan, ruleset.node.settings.ipvs.scheduler)
    }

    fn program_text(&self, p: &Program) -> String {
        ipvs::text::program(p)
    }

    fn changes_text(&self, p: &Program, cs: &ChangeSet) -> String {
        ipvs::text::changes(p, cs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_has_its_own_backend() {
        for mode in ProxyMode::ALL {
            assert_eq!(backend(mode).mode(), mode);
        }
        let streaming: Vec<_> =
            ProxyMode::ALL.into_iter().filter(|m| backend(*m).streams_full_apply()).collect();
        assert_eq!(streaming, [ProxyMode::Nftables]);
    }
}
