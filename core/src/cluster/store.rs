//! One kind of object, ordered by its own names: apply/delete that report whether anything
//! changed, and a whole-kind replace (a relist) that reports only the keys that differ.
//!
//! An object is found by the names it holds (namespace, then name), not by a copy of them:
//! the set orders boxed objects through [`Key`], and lookups pass a `(&str, &str)` pair.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::config::ProxyConfig;
use crate::model::{
    L2Announcement, LoadBalancerPool, Namespace, Node, NodeProxyState, Pod, Service, ServiceCidr, ServiceName,
};

/// A place in an order of two names compared in turn: an object's (namespace, name), with
/// `""` for kinds that are not namespaced, or a pair to look one up by.
pub(crate) trait Key {
    fn key(&self) -> (&str, &str);
}

impl Key for (&str, &str) {
    fn key(&self) -> (&str, &str) {
        *self
    }
}

impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn Key + '_ {}

impl PartialOrd for dyn Key + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn Key + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Orders `T` by its [`Key`] and lets a set of `T` be searched by a `&dyn Key`.
macro_rules! ordered_by_key {
    ($t:ident $(<$p:ident>)?) => {
        impl$(<$p: Key>)? PartialEq for $t$(<$p>)? {
            fn eq(&self, other: &Self) -> bool {
                self.key() == other.key()
            }
        }
        impl$(<$p: Key>)? Eq for $t$(<$p>)? {}
        impl$(<$p: Key>)? PartialOrd for $t$(<$p>)? {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl$(<$p: Key>)? Ord for $t$(<$p>)? {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.key().cmp(&other.key())
            }
        }
        impl<'a $(, $p: Key + 'a)?> std::borrow::Borrow<dyn Key + 'a> for $t$(<$p>)? {
            fn borrow(&self) -> &(dyn Key + 'a) {
                self
            }
        }
    };
}
pub(crate) use ordered_by_key;

/// One stored object (boxed: a set node then holds a pointer per object, so the room
/// half-full nodes leave costs a pointer, not a whole object).
#[derive(Debug, Clone)]
struct Entry<V>(Box<V>);

impl<V: Key> Key for Entry<V> {
    fn key(&self) -> (&str, &str) {
        self.0.key()
    }
}

ordered_by_key!(Entry<V>);

/// Objects of one kind.
#[derive(Debug, Clone)]
pub(crate) struct Store<V> {
    objects: BTreeSet<Entry<V>>,
}

impl<V> Default for Store<V> {
    fn default() -> Self {
        Store { objects: BTreeSet::new() }
    }
}

/// The owned key of a changed object.
pub(crate) type ChangedKey = (String, String);

impl<V: Key + PartialEq> Store<V> {
    /// Inserts or updates; false when the stored value is already equal.
    pub(crate) fn apply(&mut self, value: V) -> bool {
        if self.get(&value.key()).is_some_and(|v| *v == value) {
            return false;
        }
        self.insert(value);
        true
    }

    /// Inserts or replaces, unconditionally.
    pub(crate) fn insert(&mut self, value: V) {
        self.objects.replace(Entry(Box::new(value)));
    }

    /// Removes; the removed value, if there was one.
    pub(crate) fn delete(&mut self, key: &dyn Key) -> Option<V> {
        self.objects.take(key).map(|e| *e.0)
    }

    /// Replaces every object with `items`; returns the keys that were added, changed or removed.
    pub(crate) fn replace(&mut self, items: Vec<V>) -> Vec<ChangedKey> {
        let owned = |v: &V| (v.key().0.to_string(), v.key().1.to_string());
        let keep: BTreeSet<ChangedKey> = items.iter().map(owned).collect();
        let mut changed: Vec<ChangedKey> = Vec::new();
        let gone: Vec<ChangedKey> =
            self.objects.iter().map(|e| owned(&e.0)).filter(|k| !keep.contains(k)).collect();
        for key in gone {
            self.delete(&(key.0.as_str(), key.1.as_str()));
            changed.push(key);
        }
        for value in items {
            let key = owned(&value);
            if self.apply(value) {
                changed.push(key);
            }
        }
        changed
    }

    /// The object at `key`.
    pub(crate) fn get(&self, key: &dyn Key) -> Option<&V> {
        self.objects.get(key).map(|e| &*e.0)
    }

    /// Every object, in key order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.objects.iter().map(|e| &*e.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }
}

/// Kinds that are not namespaced: `("", name)`.
macro_rules! cluster_wide {
    ($($t:ty => $name:ident),* $(,)?) => {$(
        impl Key for $t {
            fn key(&self) -> (&str, &str) {
                ("", &self.$name)
            }
        }
    )*};
}

cluster_wide!(Node => name, Namespace => name, ProxyConfig => name, NodeProxyState => node, ServiceCidr => name);

impl Key for ServiceName {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

impl Key for Service {
    fn key(&self) -> (&str, &str) {
        self.name.key()
    }
}

impl Key for L2Announcement {
    fn key(&self) -> (&str, &str) {
        self.service.key()
    }
}

/// The Services (or announcements) named by changed keys.
pub(crate) fn service_names(changed: Vec<ChangedKey>) -> impl Iterator<Item = ServiceName> {
    changed.into_iter().map(|(namespace, name)| ServiceName { namespace, name })
}

impl Key for Pod {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

impl Key for LoadBalancerPool {
    fn key(&self) -> (&str, &str) {
        ("", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Obj(&'static str, i32);

    impl Key for Obj {
        fn key(&self) -> (&str, &str) {
            ("", self.0)
        }
    }

    #[test]
    fn replace_reports_only_differences() {
        let mut s: Store<Obj> = Store::default();
        s.apply(Obj("a", 1));
        s.apply(Obj("b", 2));
        let key = |k: &str| (String::new(), k.to_string());
        let mut changed = s.replace(vec![Obj("a", 1), Obj("b", 3), Obj("c", 4)]);
        changed.sort();
        assert_eq!(changed, vec![key("b"), key("c")]);
        assert_eq!(s.replace(vec![Obj("c", 4)]), vec![key("a"), key("b")]);
        assert_eq!(s.len(), 1);
        assert!(!s.apply(Obj("c", 4)));
        assert_eq!(s.get(&("", "c")), Some(&Obj("c", 4)));
        assert_eq!(s.delete(&("", "c")), Some(Obj("c", 4)));
        assert_eq!(s.len(), 0);
    }
}
