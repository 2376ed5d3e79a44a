//! What a program should leave in the kernel, in countable form, and how to compare it with
//! what a backend read back.

use std::collections::BTreeMap;

use tideway_core::program::Program;

use super::backend::Drift;
use tideway_core::drift::DriftKind;

/// Rule counts per chain and member counts per set: cheap to read back and to compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// `(table, chain)` -> rules.
    pub(super) chains: BTreeMap<(String, String), usize>,
    /// `(table, set)` -> members (sets filled from the packet path are not counted).
    pub(super) sets: BTreeMap<(String, String), usize>,
}

impl Counts {
    /// What `p` programs. Built-in iptables chains are left out (other software adds rules
    /// there); their jumps are checked separately.
    pub(super) fn of(p: &Program) -> Counts {
        let asm = p.assemble();
        let mut c = Counts::default();
        for ch in asm.chains.iter().filter(|c| !c.def.builtin) {
            c.chains.insert((ch.def.table.to_string(), ch.def.name.to_string()), ch.rules.len());
        }
        for s in asm.sets.iter().filter(|s| s.def.flags.dynamic_timeout.is_none()) {
            c.sets.insert((s.def.table.to_string(), s.def.name.to_string()), s.elements.len());
        }
        c
    }

    /// Differences between `self` (expected) and `observed`; sets only when `sets` is true.
    pub(super) fn compare(&self, observed: &Counts, sets: bool, label: &str) -> Vec<Drift> {
        let mut out = Vec::new();
        for ((t, name), want) in &self.chains {
            match observed.chains.get(&(t.clone(), name.clone())) {
                None => out.push(Drift {
                    kind: DriftKind::ChainMissing,
                    object: format!("{label} chain {t}/{name}"),
                    detail: "missing".into(),
                }),
                Some(got) if got != want => out.push(Drift {
                    kind: DriftKind::ChainRules,
                    object: format!("{label} chain {t}/{name}"),
                    detail: format!("{got} rules, expected {want}"),
                }),
                _ => {}
            }
        }
        if sets {
            for ((t, name), want) in &self.sets {
                match observed.sets.get(&(t.clone(), name.clone())) {
                    None => out.push(Drift {
                        kind: DriftKind::SetMissing,
                        object: format!("{label} set {t}/{name}"),
                        detail: "missing".into(),
                    }),
                    Some(got) if got != want => out.push(Drift {
                        kind: DriftKind::SetElements,
                        object: format!("{label} set {t}/{name}"),
                        detail: format!("{got} members, expected {want}"),
                    }),
                    _ => {}
                }
            }
        }
        out
    }
}
