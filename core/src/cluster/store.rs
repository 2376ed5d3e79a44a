//! One kind of object keyed by name: apply/delete that report whether anything changed, and a
//! whole-kind replace (a relist) that reports only the keys that differ.

use std::collections::{BTreeMap, BTreeSet};

/// Objects of one kind (boxed: a map node then holds a pointer per object, so the room
/// half-full nodes leave costs a pointer, not a whole object).
#[derive(Debug, Clone)]
pub(crate) struct Store<K, V> {
    objects: BTreeMap<K, Box<V>>,
}

impl<K, V> Default for Store<K, V> {
    fn default() -> Self {
        Store { objects: BTreeMap::new() }
    }
}

impl<K: Ord + Clone, V: PartialEq> Store<K, V> {
    /// Inserts or updates; false when the stored value is already equal.
    pub(crate) fn apply(&mut self, key: K, value: V) -> bool {
        if self.objects.get(&key).is_some_and(|v| **v == value) {
            return false;
        }
        self.objects.insert(key, Box::new(value));
        true
    }

    /// Removes; the removed value, if there was one.
    pub(crate) fn delete<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.objects.remove(key).map(|v| *v)
    }

    /// Replaces every object with `items`; returns the keys that were added, changed or removed.
    pub(crate) fn replace(&mut self, items: impl IntoIterator<Item = (K, V)>) -> Vec<K> {
        let mut changed = Vec::new();
        let mut keep = BTreeSet::new();
        for (key, value) in items {
            keep.insert(key.clone());
            if self.apply(key.clone(), value) {
                changed.push(key);
            }
        }
        let gone: Vec<K> = self.objects.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        for key in gone {
            self.objects.remove(&key);
            changed.push(key);
        }
        changed
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.objects.get(key).map(|v| &**v)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.objects.values().map(|v| &**v)
    }

    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_reports_only_differences() {
        let mut s: Store<&str, i32> = Store::default();
        s.apply("a", 1);
        s.apply("b", 2);
        let mut changed = s.replace([("a", 1), ("b", 3), ("c", 4)]);
        changed.sort();
        assert_eq!(changed, vec!["b", "c"]);
        assert_eq!(s.replace([("c", 4)]), vec!["a", "b"]);
        assert_eq!(s.len(), 1);
        assert!(!s.apply("c", 4));
        assert_eq!(s.delete("c"), Some(4));
    }
}
