//! Drift by content for backends that read rules back as text (iptables-save): each chain's
//! rules as the kernel prints them, digested right after they were written, and compared with
//! what the periodic check reads back.
//!
//! Counting rules finds a flushed or extended chain but not a rule edited in place
//! (`iptables -R`): the count stays. iptables-save canonicalises what it prints (`-m tcp`,
//! `/32`, quoting), so the comparison is between two read-backs of the kernel, not between the
//! restore text and a read-back. A chain whose digest could not be learnt (an incremental
//! write is not read back) is adopted as the next check finds it, as the nftables backend
//! does.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use super::Digest;
use crate::net::IpFamily;
use crate::program::ChangeSet;

/// A chain of one table: `(table, chain)`.
pub type ChainId = (String, String);

/// Rules as read back: rule argument lines per chain, in order.
pub type SavedRules = BTreeMap<ChainId, Vec<String>>;

/// A chain of one family's tables.
type Key = (IpFamily, String, String);

/// The digest of a chain's rules, in order.
pub fn rules_digest(rules: &[String]) -> Digest {
    let mut h = std::hash::DefaultHasher::new();
    rules.hash(&mut h);
    h.finish()
}

/// The chains a change set wrote (created, refilled, or given or relieved of a rule) and
/// those it deleted.
pub fn written(cs: &ChangeSet) -> (Vec<ChainId>, Vec<ChainId>) {
    let filled =
        cs.add_chains.iter().chain(&cs.flush_chains).map(|c| (c.table.to_string(), c.name.to_string()));
    let edited =
        cs.add_rules.iter().chain(&cs.delete_rules).map(|(c, _)| (c.table.to_string(), c.name.to_string()));
    let deleted = cs.delete_chains.iter().map(|c| (c.table.to_string(), c.name.to_string())).collect();
    (filled.chain(edited).collect(), deleted)
}

/// Rule digests of our chains, per family, as read back after they were written.
#[derive(Debug, Clone, Default)]
pub struct LearntRules(HashMap<Key, Digest>);

impl LearntRules {
    /// Learns `chains` from `saved` after a full write, forgetting the rest of the family.
    pub fn learn_all(
        &mut self,
        family: IpFamily,
        chains: impl IntoIterator<Item = ChainId>,
        saved: &SavedRules,
    ) {
        self.0.retain(|(f, _, _), _| *f != family);
        self.learn(family, chains, saved);
    }

    /// Learns `chains` from `saved` after a partial write; a chain `saved` lacks is forgotten.
    pub fn learn(&mut self, family: IpFamily, chains: impl IntoIterator<Item = ChainId>, saved: &SavedRules) {
        for (table, chain) in chains {
            let rules = saved.get(&(table.clone(), chain.clone()));
            let key = (family, table, chain);
            match rules {
                Some(rules) => _ = self.0.insert(key, rules_digest(rules)),
                None => _ = self.0.remove(&key),
            }
        }
    }

    /// Forgets `chains` of `family` (written without a read-back: adopted at the next check).
    pub fn forget(&mut self, family: IpFamily, chains: &[ChainId]) {
        for (t, c) in chains {
            self.0.remove(&(family, t.clone(), c.clone()));
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Of `chains`, those present in `saved` whose rules read back other than learnt, leaving
    /// out those `skip` names (already found otherwise); chains never learnt are adopted.
    pub fn differing<'a>(
        &mut self,
        family: IpFamily,
        chains: impl IntoIterator<Item = &'a ChainId>,
        saved: &SavedRules,
        skip: impl Fn(&ChainId) -> bool,
    ) -> Vec<ChainId> {
        let mut out = Vec::new();
        for id in chains {
            let Some(rules) = saved.get(id) else { continue };
            if skip(id) {
                continue;
            }
            let now = rules_digest(rules);
            let learnt = self.0.entry((family, id.0.clone(), id.1.clone())).or_insert(now);
            if *learnt != now {
                out.push(id.clone());
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

    fn saved(sep: &[&str]) -> SavedRules {
        let mut s = SavedRules::new();
        s.insert(("nat".into(), "KUBE-SERVICES".into()), chain(&["-d 10.96.0.10/32 -j KUBE-SVC-A"]));
        s.insert(("nat".into(), "KUBE-SEP-A".into()), chain(sep));
        s
    }

    fn id(chain: &str) -> ChainId {
        ("nat".into(), chain.into())
    }

    const SEP: [&str; 2] =
        ["-s 10.244.1.2/32 -j KUBE-MARK-MASQ", "-p tcp -j DNAT --to-destination 10.244.1.2:80"];

    #[test]
    fn an_edit_in_place_is_found_by_content_and_nothing_else_is() {
        let written = saved(&SEP);
        let ours: Vec<ChainId> = written.keys().cloned().collect();
        let mut l = LearntRules::default();
        l.learn_all(IpFamily::V4, ours.clone(), &written);
        assert!(l.differing(IpFamily::V4, &ours, &written, |_| false).is_empty());
        let edited = saved(&[SEP[0], "-p tcp -j DNAT --to-destination 10.244.9.9:80"]);
        assert_eq!(l.differing(IpFamily::V4, &ours, &edited, |_| false), [id("KUBE-SEP-A")]);
        // The same rules in another order differ too; the other family is not concerned.
        let reordered = saved(&[SEP[1], SEP[0]]);
        assert_eq!(l.differing(IpFamily::V4, &ours, &reordered, |_| false).len(), 1);
        assert!(l.differing(IpFamily::V6, &ours, &edited, |_| false).is_empty(), "never learnt: adopted");
        assert_eq!(l.differing(IpFamily::V6, &ours, &reordered, |_| false).len(), 1, "adopted as first read");
    }

    #[test]
    fn skipped_chains_are_not_named_and_forgotten_ones_are_adopted() {
        let written = saved(&SEP);
        let ours: Vec<ChainId> = written.keys().cloned().collect();
        let mut l = LearntRules::default();
        l.learn_all(IpFamily::V4, ours.clone(), &written);
        let edited = saved(&[SEP[0], "-j DROP"]);
        assert!(l.differing(IpFamily::V4, &ours, &edited, |c| *c == id("KUBE-SEP-A")).is_empty());
        l.forget(IpFamily::V4, &[id("KUBE-SEP-A")]);
        assert!(l.differing(IpFamily::V4, &ours, &edited, |_| false).is_empty(), "adopted");
        assert_eq!(l.differing(IpFamily::V4, &ours, &written, |_| false).len(), 1, "then held to it");
        l.learn(IpFamily::V4, [id("KUBE-SEP-A")], &written);
        assert!(l.differing(IpFamily::V4, &ours, &written, |_| false).is_empty(), "relearnt");
    }

    #[test]
    fn a_full_write_forgets_the_familys_other_chains_and_a_chain_not_read_back_is_unlearnt() {
        let written = saved(&SEP);
        let mut l = LearntRules::default();
        l.learn_all(IpFamily::V4, written.keys().cloned(), &written);
        l.learn_all(IpFamily::V4, [id("KUBE-SERVICES")], &written);
        // KUBE-SEP-A was forgotten by the second full write: whatever it holds now is adopted.
        let edited = saved(&["-j DROP"]);
        assert!(l.differing(IpFamily::V4, &[id("KUBE-SEP-A")], &edited, |_| false).is_empty());
        l.learn(IpFamily::V4, [id("KUBE-GONE")], &written);
        assert!(
            l.differing(IpFamily::V4, &[id("KUBE-GONE")], &written, |_| false).is_empty(),
            "absent: nothing"
        );
    }
}
