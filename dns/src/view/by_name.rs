//! A namespace's objects of one kind, in name order, each found by the name it holds itself:
//! no key beside it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;

/// Facts that carry their object's name.
pub(crate) trait Named {
    /// The name's bytes (what orders and finds the facts; no UTF-8 check on the way).
    fn name_bytes(&self) -> &[u8];

    fn name(&self) -> &str {
        std::str::from_utf8(self.name_bytes()).unwrap_or("")
    }

    /// Found only by a whole scan where a name prefix would find the others (a slice not
    /// named after its Service): counted by the set ([`ByName::irregular`]).
    fn irregular(&self) -> bool {
        false
    }
}

/// Ordered and compared by name alone, so that the set finds it by name.
#[derive(Debug, Clone)]
pub(crate) struct Entry<T>(T);

impl<T: Named> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name_bytes() == other.0.name_bytes()
    }
}

impl<T: Named> Eq for Entry<T> {}

impl<T: Named> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: Named> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.name_bytes().cmp(other.0.name_bytes())
    }
}

impl<T: Named> Borrow<[u8]> for Entry<T> {
    fn borrow(&self) -> &[u8] {
        self.0.name_bytes()
    }
}

/// Objects by name, and how many of them are [`Named::irregular`]. Two are equal when they
/// hold the same facts, not only the same names.
#[derive(Debug, Clone)]
pub(crate) struct ByName<T>(BTreeSet<Entry<T>>, usize);

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName(BTreeSet::new(), 0)
    }
}

impl<T: Named + PartialEq> ByName<T> {
    pub(crate) fn get(&self, name: &str) -> Option<&T> {
        self.0.get(name.as_bytes()).map(|e| &e.0)
    }

    /// Holds `facts` in place of those of the same name; true when that changed anything.
    pub(crate) fn insert(&mut self, facts: T) -> bool {
        self.1 += usize::from(facts.irregular());
        match self.0.replace(Entry(facts)) {
            Some(old) => {
                self.1 -= usize::from(old.0.irregular());
                self.0.get(old.0.name_bytes()).is_none_or(|new| new.0 != old.0)
            }
            None => true,
        }
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<T> {
        let old = self.0.take(name.as_bytes())?.0;
        self.1 -= usize::from(old.irregular());
        Some(old)
    }

    /// How many are [`Named::irregular`].
    pub(crate) fn irregular(&self) -> usize {
        self.1
    }

    /// Those whose names start with `prefix`, in name order.
    pub(crate) fn prefixed(&self, prefix: Vec<u8>) -> impl Iterator<Item = &T> {
        let from = (std::ops::Bound::Included(prefix.as_slice()), std::ops::Bound::Unbounded);
        let found = self.0.range::<[u8], _>(from).map(|e| &e.0);
        found.take_while(move |f| f.name_bytes().starts_with(&prefix))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|e| &e.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T: Named + PartialEq> FromIterator<T> for ByName<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut set = ByName::default();
        set.extend(iter);
        set
    }
}

impl<T: Named + PartialEq> Extend<T> for ByName<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for facts in iter {
            self.insert(facts);
        }
    }
}

impl<T: Named> IntoIterator for ByName<T> {
    type Item = T;
    type IntoIter = std::iter::Map<std::collections::btree_set::IntoIter<Entry<T>>, fn(Entry<T>) -> T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().map(|e| e.0)
    }
}

impl<T: Named + PartialEq> PartialEq for ByName<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<T: Named + Eq> Eq for ByName<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Fact(&'static str, u8);

    impl Named for Fact {
        fn name_bytes(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }

    #[test]
    fn found_by_name_equal_by_facts() {
        let mut a: ByName<Fact> = [Fact("b", 1), Fact("a", 1)].into_iter().collect();
        assert_eq!(a.iter().map(|f| f.0).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(a.get("b"), Some(&Fact("b", 1)));
        assert!(!a.insert(Fact("b", 1)), "the same facts change nothing");
        let before = a.clone();
        assert!(a.insert(Fact("b", 2)));
        assert_ne!(a, before, "same names, other facts");
        assert_eq!(a.remove("a"), Some(Fact("a", 1)));
        assert_eq!(a.len(), 1);
    }
}
