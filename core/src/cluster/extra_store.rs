//! The containers of the extra kinds ([`extra`](super::extra)): one list per kind in a
//! snapshot, one store per kind in the state, each found by its kind's type and holding it
//! behind a trait object, so that the state and the snapshot name no kind of them. They know
//! nothing of the state `S` they serve but what the trait objects do to it.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;

/// A carry-over's question: is the object (kind, namespace, name) kept?
pub(crate) type Kept<'a> = &'a dyn Fn(&str, Option<&str>, &str) -> bool;

/// One extra kind's list in a snapshot, for state `S`.
pub trait AnyList<S>: Send + Sync + 'static {
    /// The list itself, to be downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A copy.
    fn clone_box(&self) -> Box<dyn AnyList<S>>;
    /// The kind and how many objects the list holds.
    fn describe(&self) -> (&'static str, usize);
    /// Replaces the kind's objects in `state` with the list's.
    fn replace_into(self: Box<Self>, state: &mut S);
}

/// One extra kind's store in state `S`.
pub(crate) trait AnyStore<S>: Send + Sync + 'static {
    /// The store itself, to be downcast.
    fn as_any(&self) -> &dyn Any;
    /// The store itself, to be downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A copy.
    fn clone_box(&self) -> Box<dyn AnyStore<S>>;
    /// The kind and how many objects the store holds.
    fn describe(&self) -> (&'static str, usize);
    /// An empty list of the kind: what a relist that lacks the kind replaces it with.
    fn none(&self) -> Box<dyn AnyList<S>>;
    /// Puts the objects `kept` names into their list in `into`.
    fn carry(&self, kept: Kept<'_>, into: &mut ExtraLists<S>);
}

/// The extra kinds' lists, by the kind's type.
pub struct ExtraLists<S: 'static>(BTreeMap<TypeId, Box<dyn AnyList<S>>>);

/// The extra kinds' stores, by the kind's type.
pub(crate) struct ExtraStores<S: 'static>(BTreeMap<TypeId, Box<dyn AnyStore<S>>>);

impl<S: 'static> ExtraLists<S> {
    /// Kind `K`'s list, `L` (empty until pushed to).
    pub fn list_mut<K: 'static, L: AnyList<S> + Default>(&mut self) -> &mut L {
        let list = self.0.entry(TypeId::of::<K>()).or_insert_with(|| Box::new(L::default()));
        list.as_any_mut().downcast_mut().expect("a list is kept under its kind's type")
    }

    /// Every list, to be replaced into a state.
    pub fn into_lists(self) -> impl Iterator<Item = Box<dyn AnyList<S>>> {
        self.0.into_values()
    }
}

impl<S: 'static> ExtraStores<S> {
    /// Kind `K`'s store, `T`, if it was ever written.
    pub(crate) fn get<K: 'static, T: AnyStore<S>>(&self) -> Option<&T> {
        let store = self.0.get(&TypeId::of::<K>())?;
        Some(store.as_any().downcast_ref().expect("a store is kept under its kind's type"))
    }

    /// Kind `K`'s store, `T` (made empty when first asked for).
    pub(crate) fn get_mut<K: 'static, T: AnyStore<S> + Default>(&mut self) -> &mut T {
        let store = self.0.entry(TypeId::of::<K>()).or_insert_with(|| Box::new(T::default()));
        store.as_any_mut().downcast_mut().expect("a store is kept under its kind's type")
    }

    /// An empty list of each kind held here that `lists` lacks.
    pub(crate) fn lacking(&self, lists: &ExtraLists<S>) -> Vec<Box<dyn AnyList<S>>> {
        self.0.iter().filter(|(kind, _)| !lists.0.contains_key(kind)).map(|(_, s)| s.none()).collect()
    }

    /// Every store.
    pub(crate) fn stores(&self) -> impl Iterator<Item = &dyn AnyStore<S>> {
        self.0.values().map(|s| &**s)
    }
}

impl<S: 'static> Default for ExtraLists<S> {
    fn default() -> Self {
        ExtraLists(BTreeMap::new())
    }
}

impl<S: 'static> Default for ExtraStores<S> {
    fn default() -> Self {
        ExtraStores(BTreeMap::new())
    }
}

impl<S: 'static> Clone for ExtraLists<S> {
    fn clone(&self) -> Self {
        ExtraLists(self.0.iter().map(|(t, l)| (*t, l.clone_box())).collect())
    }
}

impl<S: 'static> Clone for ExtraStores<S> {
    fn clone(&self) -> Self {
        ExtraStores(self.0.iter().map(|(t, s)| (*t, s.clone_box())).collect())
    }
}

impl<S: 'static> fmt::Debug for ExtraLists<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.values().map(|l| l.describe())).finish()
    }
}

impl<S: 'static> fmt::Debug for ExtraStores<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.values().map(|s| s.describe())).finish()
    }
}
