//! iptables drift by content: each chain's rules as `iptables-save` prints them, digested right
//! after they were written, and compared with what the periodic check reads back.
//!
//! Counting rules finds a flushed or extended chain but not a rule edited in place
//! (`iptables -R`): the count stays. iptables-save canonicalises what it prints (`-m tcp`,
//! `/32`, quoting), so the comparison is between two read-backs of the kernel, not between the
//! restore text and a read-back. A chain whose digest could not be learnt is adopted as the
//! next check finds it, as the nftables backend does.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use tideway_core::drift::Digest;
use tideway_core::net::IpFamily;
use tideway_core::program::ChangeSet;

use super::observe::Counts;
use super::{Drift, DriftKind};

/// iptables-save output: rule argument lines per (table, chain), in order.
pub(super) type Saved = std::collections::BTreeMap<ChainId, Vec<String>>;

/// A chain of one table: `(table, chain)`.
pub(super) type ChainId = (String, String);

/// A chain of one family's tables: `(family, table, chain)`.
type Key = (IpFamily, String, String);

/// The digest of a chain's rules, in order.
fn digest(rules: &[String]) -> Digest {
    let mut h = std::hash::DefaultHasher::new();
    rules.hash(&mut h);
    h.finish()
}

/// The chains a change set wrote (created, refilled, or given or relieved of a rule) and
/// those it deleted, as `(table, chain)`.
pub(super) fn written(cs: &ChangeSet) -> (Vec<ChainId>, Vec<ChainId>) {
    let filled =
        cs.add_chains.iter().chain(&cs.flush_chains).map(|c| (c.table.to_string(), c.name.to_string()));
    let edited =
        cs.add_rules.iter().chain(&cs.delete_rules).map(|(c, _)| (c.table.to_string(), c.name.to_string()));
    let deleted = cs.delete_chains.iter().map(|c| (c.table.to_string(), c.name.to_string())).collect();
    (filled.chain(edited).collect(), deleted)
}

/// Rule digests of our chains (built-in chains excluded: other software writes there too).
#[derive(Debug, Clone, Default)]
pub(super) struct Learnt(HashMap<Key, Digest>);

impl Learnt {
    /// Learns every chain of `expected` from `saved` (after a full write), forgetting the rest
    /// of the family.
    pub(super) fn learn_all(&mut self, family: IpFamily, expected: &Counts, saved: &Saved) {
        self.0.retain(|(f, _, _), _| *f != family);
        self.learn(family, expected.chains.keys().cloned(), saved);
    }

    /// Learns `chains` from `saved` (after a partial write); a chain `saved` lacks is forgotten.
    pub(super) fn learn(
        &mut self,
        family: IpFamily,
        chains: impl IntoIterator<Item = ChainId>,
        saved: &Saved,
    ) {
        for (table, chain) in chains {
            let rules = saved.get(&(table.clone(), chain.clone()));
            let key = (family, table, chain);
            match rules {
                Some(rules) => _ = self.0.insert(key, digest(rules)),
                None => _ = self.0.remove(&key),
            }
        }
    }

    /// Forgets `chains` of `family`.
    pub(super) fn forget(&mut self, family: IpFamily, chains: &[ChainId]) {
        for (t, c) in chains {
            self.0.remove(&(family, t.clone(), c.clone()));
        }
    }

    /// Forgets everything.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// The chains of `expected` whose rules read back other than they were written, leaving
    /// out those in `skip` (already found by count); chains never learnt are adopted.
    pub(super) fn compare(
        &mut self,
        family: IpFamily,
        expected: &Counts,
        saved: &Saved,
        skip: &[Drift],
        label: &str,
    ) -> Vec<Drift> {
        let mut out = Vec::new();
        for (table, chain) in expected.chains.keys() {
            let object = format!("{label} chain {table}/{chain}");
            let Some(rules) = saved.get(&(table.clone(), chain.clone())) else { continue };
            if skip.iter().any(|d| d.object == object) {
                continue;
            }
            let now = digest(rules);
            match self.0.entry((family, table.clone(), chain.clone())) {
                std::collections::hash_map::Entry::Vacant(v) => _ = v.insert(now),
                std::collections::hash_map::Entry::Occupied(o) if *o.get() != now => out.push(Drift {
                    kind: DriftKind::ChainRules,
                    object,
                    detail: "rules differ from the applied ones".into(),
                }),
                std::collections::hash_map::Entry::Occupied(_) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(rules: &[&str]) -> Vec<String> {
        rules.iter().map(|r| r.to_string()).collect()
    }

    fn saved(svc: &[&str]) -> Saved {
        let mut s = Saved::new();
        s.insert(("nat".into(), "KUBE-SERVICES".into()), chain(&["-d 10.96.0.10/32 -j KUBE-SVC-A"]));
        s.insert(("nat".into(), "KUBE-SEP-A".into()), chain(svc));
        s
    }

    fn expected(s: &Saved) -> Counts {
        let mut c = Counts::default();
        for (k, rules) in s {
            c.chains.insert(k.clone(), rules.len());
        }
        c
    }

    const SEP: [&str; 2] =
        ["-s 10.244.1.2/32 -j KUBE-MARK-MASQ", "-p tcp -j DNAT --to-destination 10.244.1.2:80"];

    #[test]
    fn an_edit_in_place_is_found_by_content_and_nothing_else_is() {
        let written = saved(&SEP);
        let counts = expected(&written);
        let mut l = Learnt::default();
        l.learn_all(IpFamily::V4, &counts, &written);
        assert!(l.compare(IpFamily::V4, &counts, &written, &[], "IPv4 iptables").is_empty());
        let edited = saved(&[SEP[0], "-p tcp -j DNAT --to-destination 10.244.9.9:80"]);
        let found = l.compare(IpFamily::V4, &counts, &edited, &[], "IPv4 iptables");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].kind, found[0].object.as_str()),
            (DriftKind::ChainRules, "IPv4 iptables chain nat/KUBE-SEP-A")
        );
        // The same rules in another order differ too; the other family is not concerned.
        let reordered = saved(&[SEP[1], SEP[0]]);
        assert_eq!(l.compare(IpFamily::V4, &counts, &reordered, &[], "x").len(), 1);
        assert!(l.compare(IpFamily::V6, &counts, &edited, &[], "x").is_empty(), "never learnt: adopted");
        assert_eq!(l.compare(IpFamily::V6, &counts, &reordered, &[], "x").len(), 1, "adopted as first read");
    }

    #[test]
    fn chains_found_by_count_are_not_named_twice_and_forgotten_ones_are_adopted() {
        let written = saved(&SEP);
        let counts = expected(&written);
        let mut l = Learnt::default();
        l.learn_all(IpFamily::V4, &counts, &written);
        let edited = saved(&[SEP[0], "-j DROP"]);
        let by_count = Drift {
            kind: DriftKind::ChainRules,
            object: "L chain nat/KUBE-SEP-A".into(),
            detail: String::new(),
        };
        assert!(l.compare(IpFamily::V4, &counts, &edited, &[by_count], "L").is_empty());
        l.forget(IpFamily::V4, &[("nat".into(), "KUBE-SEP-A".into())]);
        assert!(l.compare(IpFamily::V4, &counts, &edited, &[], "L").is_empty(), "adopted");
        assert_eq!(l.compare(IpFamily::V4, &counts, &written, &[], "L").len(), 1, "then held to it");
        l.learn(IpFamily::V4, [("nat".to_string(), "KUBE-SEP-A".to_string())], &written);
        assert!(l.compare(IpFamily::V4, &counts, &written, &[], "L").is_empty(), "relearnt");
    }
}
