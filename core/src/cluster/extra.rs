//! Kinds defined outside the registry's list ([`for_each_kind`](super::for_each_kind)): a kind
//! a test defines, or one a later crate adds. Each is kept in a store of its own found by its
//! type ([`extra_store`](super::extra_store)), so adding one changes neither [`ClusterState`]
//! nor [`Snapshot`]: its definition ([`extra_kind!`](crate::extra_kind)) is all. A relist of
//! everything ([`ClusterState::reset`]) and the carry-over of objects whose new version is
//! invalid ([`ClusterState::reset_keeping`]) walk these stores after the registry's kinds; a
//! change marks the kind in [`Changes::extra`](super::Changes::extra).
//!
//! The functions here are what [`extra_kind!`](crate::extra_kind) expands to.

use std::any::Any;
use std::collections::BTreeMap;

use super::extra_store::{AnyList, AnyStore, ExtraLists, Kept};
use super::registry::StateKind;
use super::state::{ClusterState, Snapshot};

/// An extra kind's objects, by namespace and name.
type Objects<K> = BTreeMap<(String, String), K>;

fn owned((namespace, name): (&str, &str)) -> (String, String) {
    (namespace.to_string(), name.to_string())
}

impl<K: StateKind> AnyList<ClusterState> for Vec<K> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn AnyList<ClusterState>> {
        Box::new(self.clone())
    }
    fn describe(&self) -> (&'static str, usize) {
        (K::KIND, self.len())
    }
    fn replace_into(self: Box<Self>, state: &mut ClusterState) {
        K::replace(state, *self);
    }
}

impl<K: StateKind> AnyStore<ClusterState> for Objects<K> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn AnyStore<ClusterState>> {
        Box::new(self.clone())
    }
    fn describe(&self) -> (&'static str, usize) {
        (K::KIND, self.len())
    }
    fn none(&self) -> Box<dyn AnyList<ClusterState>> {
        Box::new(Vec::<K>::new())
    }
    fn carry(&self, kept: Kept<'_>, into: &mut ExtraLists<ClusterState>) {
        let carried =
            self.iter().filter(|((ns, name), _)| kept(K::KIND, (!ns.is_empty()).then_some(ns), name));
        into.list_mut::<K, Vec<K>>().extend(carried.map(|(_, o)| o.clone()));
    }
}

fn store<K: StateKind>(state: &ClusterState) -> Option<&Objects<K>> {
    state.extra.get::<K, Objects<K>>()
}

fn store_mut<K: StateKind>(state: &mut ClusterState) -> &mut Objects<K> {
    state.extra.get_mut::<K, Objects<K>>()
}

/// [`StateKind::listed`] of an extra kind.
pub fn listed<K: StateKind>(snapshot: &mut Snapshot) -> &mut Vec<K> {
    snapshot.extra.list_mut::<K, Vec<K>>()
}

/// [`StateKind::apply`] of an extra kind.
pub fn apply<K: StateKind>(state: &mut ClusterState, obj: K) -> bool {
    let key = owned(obj.names());
    let store = store_mut::<K>(state);
    if store.get(&key) == Some(&obj) {
        return false;
    }
    store.insert(key, obj);
    state.changes.extra.insert(K::KIND);
    true
}

/// [`StateKind::replace`] of an extra kind: marks it only when something differs.
pub fn replace<K: StateKind>(state: &mut ClusterState, all: Vec<K>) {
    let all: Objects<K> = all.into_iter().map(|o| (owned(o.names()), o)).collect();
    let store = store_mut::<K>(state);
    if *store != all {
        *store = all;
        state.changes.extra.insert(K::KIND);
    }
}

/// [`StateKind::held`] of an extra kind.
pub fn held<K: StateKind>(state: &ClusterState) -> Box<dyn Iterator<Item = &K> + '_> {
    match store::<K>(state) {
        Some(store) => Box::new(store.values()),
        None => Box::new(std::iter::empty()),
    }
}

/// [`Keyed::delete`](super::Keyed::delete) of an extra kind.
pub fn delete<K: StateKind>(state: &mut ClusterState, namespace: &str, name: &str) -> bool {
    let removed = store_mut::<K>(state).remove(&owned((namespace, name))).is_some();
    if removed {
        state.changes.extra.insert(K::KIND);
    }
    removed
}

/// [`Keyed::get`](super::Keyed::get) of an extra kind.
pub fn get<'s, K: StateKind>(state: &'s ClusterState, namespace: &str, name: &str) -> Option<&'s K> {
    store::<K>(state)?.get(&owned((namespace, name)))
}

/// Defines a kind kept by type ([`extra`](crate::cluster::extra)): its name as manifests
/// write it, and the fields holding its namespace (for a namespaced kind) and name.
///
/// ```ignore
/// tideway_core::extra_kind!(Widget, "Widget", namespace: namespace, name: name);
/// tideway_core::extra_kind!(Gadget, "Gadget", name: name);
/// ```
#[macro_export]
macro_rules! extra_kind {
    (@ns $o:ident) => {
        ""
    };
    (@ns $o:ident $ns:ident) => {
        $o.$ns.as_str()
    };
    (@impl $t:ty, $kind:literal, $namespaced:literal, [$($ns:ident)?], $name:ident) => {
        impl $crate::cluster::StateKind for $t {
            const KIND: &'static str = $kind;
            const NAMESPACED: bool = $namespaced;
            fn names(&self) -> (&str, &str) {
                let o = self;
                ($crate::extra_kind!(@ns o $($ns)?), o.$name.as_str())
            }
            fn listed(snapshot: &mut $crate::cluster::Snapshot) -> &mut Vec<Self> {
                $crate::cluster::extra::listed(snapshot)
            }
            fn apply(state: &mut $crate::cluster::ClusterState, obj: Self) -> bool {
                $crate::cluster::extra::apply(state, obj)
            }
            fn replace(state: &mut $crate::cluster::ClusterState, all: Vec<Self>) {
                $crate::cluster::extra::replace(state, all)
            }
            fn held(state: &$crate::cluster::ClusterState) -> Box<dyn Iterator<Item = &Self> + '_> {
                $crate::cluster::extra::held(state)
            }
        }
        impl $crate::cluster::Keyed for $t {
            fn delete(state: &mut $crate::cluster::ClusterState, namespace: &str, name: &str) -> bool {
                $crate::cluster::extra::delete::<Self>(state, namespace, name)
            }
            fn get<'s>(
                state: &'s $crate::cluster::ClusterState,
                namespace: &str,
                name: &str,
            ) -> Option<&'s Self> {
                $crate::cluster::extra::get(state, namespace, name)
            }
        }
    };
    ($t:ty, $kind:literal, namespace: $ns:ident, name: $name:ident) => {
        $crate::extra_kind!(@impl $t, $kind, true, [$ns], $name);
    };
    ($t:ty, $kind:literal, name: $name:ident) => {
        $crate::extra_kind!(@impl $t, $kind, false, [], $name);
    };
}
