//! What a retired backend must leave in the kernel because the new mode uses it too.

use std::collections::BTreeSet;

use tideway_core::program::Program;

/// An empty chain in the `filter` table that says Tideway wrote the `KUBE-*` chains beside it:
/// iptables and IPVS modes use kube-proxy's own chain names, so without it a Tideway agent in
/// nftables mode beside kube-proxy would take kube-proxy's chains for its own leftovers and
/// remove them. Every full sync writes it; a clean-up removes it with the chains.
pub(super) const OWNER_MARK: &str = "TIDEWAY-OWNED";

/// Objects a cleanup must leave alone because the new mode uses them too (iptables and IPVS
/// share chain names such as `KUBE-SERVICES`).
#[derive(Debug, Clone, Default)]
pub struct Keep {
    /// `(table, chain)` of iptables chains to keep.
    pub chains: BTreeSet<(String, String)>,
    /// `(table, chain, rule arguments)` of built-in chain jumps to keep.
    pub jumps: BTreeSet<(String, String, String)>,
}

impl Keep {
    /// Everything `programs` uses in iptables tables.
    pub fn of(programs: [&Program; 2]) -> Keep {
        let mut keep = Keep::default();
        for p in programs {
            if !p.mode.writes_iptables() {
                continue;
            }
            for c in p.assemble().chains {
                keep.chains.insert((c.def.table.to_string(), c.def.name.to_string()));
            }
            keep.chains.insert(("filter".to_string(), OWNER_MARK.to_string()));
            for (t, c, a) in tideway_core::render::iptables::text::builtin_jumps(p) {
                keep.jumps.insert((t.to_string(), c, a));
            }
        }
        keep
    }
}
