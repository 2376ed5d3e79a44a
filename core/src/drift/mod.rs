//! Drift: how the kernel's copy of one table differs from what was applied, and the smallest
//! rewrite that repairs it.
//!
//! A backend reads the kernel back into an [`Observed`] table (per chain: its base-chain
//! header and a digest of its rules; per set: a digest of its elements), the agent keeps the
//! [`Expected`] one (headers and element digests from the program, rule digests learnt when
//! the rules were applied), and [`compare`] names every difference by object. [`Repair::plan`]
//! turns the differences into the objects to rewrite: a chain edited in place is refilled, a
//! set whose elements were replaced is refilled, a deleted chain or set is recreated, a
//! foreign one is removed; only a missing table rewrites everything.
//!
//! Backends that read rules back as text (iptables) keep their digests in [`rules`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub mod rules;

use crate::program::BaseHook;

/// A content digest (rules of a chain in order, or the elements of a set in any order).
pub type Digest = u64;

/// What differs, by kind: the `kind` label of `tideway_drift_repairs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriftKind {
    /// The whole table is gone.
    TableMissing,
    /// A chain we program is gone (deleted, or renamed).
    ChainMissing,
    /// A base chain's hook, priority, type or policy changed.
    ChainHook,
    /// A chain's rules differ: edited in place, added, removed or reordered.
    ChainRules,
    /// A chain we do not program sits in our table (a renamed chain, a hand-made one).
    ForeignChain,
    /// A set we program is gone.
    SetMissing,
    /// A set's elements differ (added, removed or replaced).
    SetElements,
    /// A set we do not program sits in our table.
    ForeignSet,
    /// IPVS: the addresses on the dummy interface differ.
    Addresses,
    /// IPVS: virtual servers differ.
    VirtualServers,
    /// IPVS: a virtual server's real servers differ.
    RealServers,
}

impl DriftKind {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            DriftKind::TableMissing => "table_missing",
            DriftKind::ChainMissing => "chain_missing",
            DriftKind::ChainHook => "chain_hook",
            DriftKind::ChainRules => "chain_rules",
            DriftKind::ForeignChain => "foreign_chain",
            DriftKind::SetMissing => "set_missing",
            DriftKind::SetElements => "set_elements",
            DriftKind::ForeignSet => "foreign_set",
            DriftKind::Addresses => "addresses",
            DriftKind::VirtualServers => "virtual_servers",
            DriftKind::RealServers => "real_servers",
        }
    }
}

impl std::fmt::Display for DriftKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A base chain's header as the kernel holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Hook, type and priority.
    pub hook: BaseHook,
    /// True when the chain's policy is drop (ours is always accept).
    pub drops: bool,
}

/// One chain read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainSeen {
    /// The base-chain header, `None` for a regular chain.
    pub header: Option<Header>,
    /// Digest of its rules, in order.
    pub rules: Digest,
}

/// One table read back from the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Chains by name.
    pub chains: HashMap<String, ChainSeen>,
    /// Sets by name, with the digest of their elements when they were read.
    pub sets: HashMap<String, Option<Digest>>,
}

/// What one table should hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    /// Chains by name: the hook of base chains, and the rules' digest when known.
    pub chains: BTreeMap<String, (Option<BaseHook>, Option<Digest>)>,
    /// Sets by name, with the digest of their elements when they are to be compared (not
    /// for sets the packet path fills).
    pub sets: BTreeMap<String, Option<Digest>>,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// What kind of difference.
    pub kind: DriftKind,
    /// The chain or set (empty for the table).
    pub name: String,
    /// What differs, for people.
    pub detail: String,
}

fn found(kind: DriftKind, name: &str, detail: impl Into<String>) -> Found {
    Found { kind, name: name.to_string(), detail: detail.into() }
}

/// Every difference between `expected` and `observed` (`None`: the table is gone).
pub fn compare(expected: &Expected, observed: Option<&Observed>) -> Vec<Found> {
    let Some(observed) = observed else {
        return vec![found(DriftKind::TableMissing, "", "missing")];
    };
    let mut out = Vec::new();
    for (name, (hook, rules)) in &expected.chains {
        let Some(seen) = observed.chains.get(name) else {
            out.push(found(DriftKind::ChainMissing, name, "missing"));
            continue;
        };
        let header = hook.map(|hook| Header { hook, drops: false });
        if seen.header != header {
            out.push(found(DriftKind::ChainHook, name, describe_header(seen.header, header)));
        } else if rules.is_some_and(|want| want != seen.rules) {
            out.push(found(DriftKind::ChainRules, name, "rules differ from the applied ones"));
        }
    }
    for name in observed.chains.keys().filter(|n| !expected.chains.contains_key(*n)) {
        out.push(found(DriftKind::ForeignChain, name, "not ours"));
    }
    for (name, elements) in &expected.sets {
        match observed.sets.get(name) {
            None => out.push(found(DriftKind::SetMissing, name, "missing")),
            Some(seen) => {
                if let (Some(want), Some(got)) = (elements, seen)
                    && want != got
                {
                    out.push(found(DriftKind::SetElements, name, "elements differ from the applied ones"));
                }
            }
        }
    }
    for name in observed.sets.keys().filter(|n| !expected.sets.contains_key(*n)) {
        out.push(found(DriftKind::ForeignSet, name, "not ours"));
    }
    out.sort();
    out
}

fn describe_header(got: Option<Header>, want: Option<Header>) -> String {
    match (got, want) {
        (None, Some(_)) => "no longer hooked".to_string(),
        (Some(_), None) => "hooked, expected a regular chain".to_string(),
        (Some(g), Some(w)) if g.drops && !w.drops => "policy drop, expected accept".to_string(),
        (Some(g), Some(w)) => format!(
            "{:?} {:?} priority {}, expected {:?} {:?} priority {}",
            g.hook.kind, g.hook.hook, g.hook.priority, w.hook.kind, w.hook.hook, w.hook.priority
        ),
        (None, None) => String::new(),
    }
}

/// The objects to rewrite, in the order a backend must send them: sets before the rules that
/// look them up, chains before the rules that jump to them, foreign objects last (after the
/// rules that referred to them are gone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repair {
    /// Rewrite the whole table.
    pub full: bool,
    /// Sets to declare and fill.
    pub add_sets: BTreeSet<String>,
    /// Sets to empty and fill again.
    pub refill_sets: BTreeSet<String>,
    /// Chains to create and fill.
    pub add_chains: BTreeSet<String>,
    /// Chains to delete and create again (their header is wrong), then fill.
    pub recreate_chains: BTreeSet<String>,
    /// Chains to flush and fill again.
    pub refill_chains: BTreeSet<String>,
    /// Foreign chains to flush, then delete.
    pub delete_chains: BTreeSet<String>,
    /// Foreign sets to delete.
    pub delete_sets: BTreeSet<String>,
}

impl Repair {
    /// The rewrite that repairs `found`.
    pub fn plan(found: &[Found]) -> Repair {
        let mut r = Repair::default();
        for f in found {
            let name = f.name.clone();
            match f.kind {
                DriftKind::TableMissing => r.full = true,
                DriftKind::ChainMissing => _ = r.add_chains.insert(name),
                DriftKind::ChainHook => _ = r.recreate_chains.insert(name),
                DriftKind::ChainRules => _ = r.refill_chains.insert(name),
                DriftKind::ForeignChain => _ = r.delete_chains.insert(name),
                DriftKind::SetMissing => _ = r.add_sets.insert(name),
                DriftKind::SetElements => _ = r.refill_sets.insert(name),
                DriftKind::ForeignSet => _ = r.delete_sets.insert(name),
                // Not table objects: only a full rewrite reaches them.
                DriftKind::Addresses | DriftKind::VirtualServers | DriftKind::RealServers => r.full = true,
            }
        }
        if r.full {
            return Repair { full: true, ..Repair::default() };
        }
        r
    }

    /// True when nothing is to be rewritten.
    pub fn is_empty(&self) -> bool {
        *self == Repair::default()
    }

    /// Chains whose rules are written by this repair (their rule digests must be learnt
    /// again afterwards).
    pub fn filled_chains(&self) -> impl Iterator<Item = &String> {
        self.add_chains.iter().chain(&self.recreate_chains).chain(&self.refill_chains)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{ChainKind, Hook};

    const NAT: BaseHook = BaseHook { hook: Hook::Prerouting, kind: ChainKind::Nat, priority: -100 };

    fn expected() -> Expected {
        let mut e = Expected::default();
        e.chains.insert("nat-prerouting".into(), (Some(NAT), Some(1)));
        e.chains.insert("services".into(), (None, Some(2)));
        e.chains.insert("svc-web".into(), (None, None));
        e.sets.insert("cluster-ips".into(), Some(10));
        e.sets.insert("affinity".into(), None);
        e
    }

    fn observed() -> Observed {
        let mut o = Observed::default();
        let hooked = Some(Header { hook: NAT, drops: false });
        o.chains.insert("nat-prerouting".into(), ChainSeen { header: hooked, rules: 1 });
        o.chains.insert("services".into(), ChainSeen { header: None, rules: 2 });
        o.chains.insert("svc-web".into(), ChainSeen { header: None, rules: 99 });
        o.sets.insert("cluster-ips".into(), Some(10));
        o.sets.insert("affinity".into(), Some(77));
        o
    }

    fn kinds(found: &[Found]) -> Vec<(DriftKind, &str)> {
        found.iter().map(|f| (f.kind, f.name.as_str())).collect()
    }

    #[test]
    fn a_table_as_applied_has_no_drift() {
        // Unknown rule digests and sets the packet path fills are not compared.
        assert_eq!(compare(&expected(), Some(&observed())), vec![]);
    }

    #[test]
    fn each_kind_of_damage_is_named_by_object() {
        type Damage = fn(&mut Observed);
        type Case = (&'static str, Damage, Vec<(DriftKind, &'static str)>);
        let cases: [Case; 8] = [
            (
                "rule edited",
                |o| o.chains.get_mut("services").unwrap().rules = 3,
                vec![(DriftKind::ChainRules, "services")],
            ),
            (
                "element replaced",
                |o| _ = o.sets.insert("cluster-ips".into(), Some(11)),
                vec![(DriftKind::SetElements, "cluster-ips")],
            ),
            ("chain deleted", |o| _ = o.chains.remove("svc-web"), vec![(DriftKind::ChainMissing, "svc-web")]),
            (
                "chain renamed",
                |o| {
                    let c = o.chains.remove("svc-web").unwrap();
                    o.chains.insert("svc-web-old".into(), c);
                },
                vec![(DriftKind::ChainMissing, "svc-web"), (DriftKind::ForeignChain, "svc-web-old")],
            ),
            (
                "policy drop",
                |o| o.chains.get_mut("nat-prerouting").unwrap().header.as_mut().unwrap().drops = true,
                vec![(DriftKind::ChainHook, "nat-prerouting")],
            ),
            (
                "unhooked",
                |o| o.chains.get_mut("nat-prerouting").unwrap().header = None,
                vec![(DriftKind::ChainHook, "nat-prerouting")],
            ),
            (
                "set deleted",
                |o| _ = o.sets.remove("cluster-ips"),
                vec![(DriftKind::SetMissing, "cluster-ips")],
            ),
            (
                "foreign set",
                |o| _ = o.sets.insert("mine".into(), None),
                vec![(DriftKind::ForeignSet, "mine")],
            ),
        ];
        for (what, damage, want) in cases {
            let mut o = observed();
            damage(&mut o);
            assert_eq!(kinds(&compare(&expected(), Some(&o))), want, "{what}");
        }
        assert_eq!(kinds(&compare(&expected(), None)), vec![(DriftKind::TableMissing, "")]);
    }

    #[test]
    fn the_repair_rewrites_only_what_differs() {
        let mut o = observed();
        o.chains.get_mut("services").unwrap().rules = 3;
        let c = o.chains.remove("svc-web").unwrap();
        o.chains.insert("renamed".into(), c);
        o.sets.insert("cluster-ips".into(), Some(12));
        o.chains.get_mut("nat-prerouting").unwrap().header.as_mut().unwrap().drops = true;
        let r = Repair::plan(&compare(&expected(), Some(&o)));
        let names = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
        assert!(!r.full);
        assert_eq!(names(&r.refill_chains), ["services"]);
        assert_eq!(names(&r.add_chains), ["svc-web"]);
        assert_eq!(names(&r.recreate_chains), ["nat-prerouting"]);
        assert_eq!(names(&r.delete_chains), ["renamed"]);
        assert_eq!(names(&r.refill_sets), ["cluster-ips"]);
        assert!(r.add_sets.is_empty() && r.delete_sets.is_empty());
        assert_eq!(r.filled_chains().count(), 3);
        // A missing table is rewritten whole, whatever else was found.
        let mut all = compare(&expected(), Some(&o));
        all.extend(compare(&expected(), None));
        assert_eq!(Repair::plan(&all), Repair { full: true, ..Repair::default() });
        assert!(Repair::plan(&[]).is_empty());
    }
}
