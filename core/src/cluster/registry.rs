//! The kinds the cluster state holds, each defined once: how an object is named, its list in
//! a [`Snapshot`], and how it lands in the state (its store and the change it marks).
//!
//! [`for_each_kind`] is the registry. A relist of everything ([`ClusterState::reset`]), the
//! carry-over of objects whose new version is invalid ([`ClusterState::reset_keeping`]) and
//! the sources' loaders walk it, so a new kind is its definition and one line there. Kinds
//! kept in one [`Store`](super::store::Store) are defined by [`stored_kind!`]; the others
//! (Services, EndpointSlices, the BGP set) by hand. A kind defined outside this crate needs no
//! line here: [`extra_kind!`](crate::extra_kind) keeps it by type, and both walks include it.

use super::state::{ClusterState, Snapshot};

/// A kind the cluster state holds.
pub trait StateKind: Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// The kind, as manifests name it.
    const KIND: &'static str;
    /// Whether the state keeps the kind's objects by namespace (else under `""`).
    const NAMESPACED: bool;

    /// The object's namespace (`""` for a kind that has none) and name.
    fn names(&self) -> (&str, &str);

    /// The object's own kind, as manifests name it: [`Self::KIND`], unless one model type
    /// holds several kinds (the BGP set).
    fn kind_of(&self) -> &str {
        Self::KIND
    }

    /// The kind's list in a snapshot.
    fn listed(snapshot: &mut Snapshot) -> &mut Vec<Self>;

    /// Inserts or updates an object; false when nothing changed.
    fn apply(state: &mut ClusterState, obj: Self) -> bool;

    /// Replaces every object of the kind (after a relist), recording only real differences.
    fn replace(state: &mut ClusterState, all: Vec<Self>);

    /// Every object of the kind, as the sources delivered them.
    fn held(state: &ClusterState) -> Box<dyn Iterator<Item = &Self> + '_>;
}

/// A kind whose objects a namespace and a name identify (all but the BGP set, whose kinds
/// share one model type).
pub trait Keyed: StateKind {
    /// Removes the object; false when it was absent.
    fn delete(state: &mut ClusterState, namespace: &str, name: &str) -> bool;

    /// The object, if held.
    fn get<'s>(state: &'s ClusterState, namespace: &str, name: &str) -> Option<&'s Self>;
}

/// Something done once per kind ([`for_each_kind`]).
pub trait KindVisitor {
    /// Does it for kind `K`.
    fn visit<K: StateKind>(&mut self);
}

/// The registry: visits every kind, in the order a relist applies them.
pub fn for_each_kind(visitor: &mut impl KindVisitor) {
    use crate::config::ProxyConfig;
    use crate::model::*;
    visitor.visit::<Service>();
    visitor.visit::<EndpointSlice>();
    visitor.visit::<Node>();
    visitor.visit::<Pod>();
    visitor.visit::<ProxyConfig>();
    visitor.visit::<Namespace>();
    visitor.visit::<NodeProxyState>();
    visitor.visit::<L2Announcement>();
    visitor.visit::<LoadBalancerPool>();
    visitor.visit::<MetalLbPool>();
    visitor.visit::<L2Advertisement>();
    visitor.visit::<ServiceL2Status>();
    visitor.visit::<ServiceCidr>();
    visitor.visit::<super::bgp::BgpObject>();
    visitor.visit::<super::bgp::BgpSecret>();
}

impl ClusterState {
    /// A state holding `snapshot`.
    pub fn from_snapshot(snapshot: Snapshot) -> Self {
        let mut state = Self::new();
        state.reset(snapshot);
        state
    }

    /// Inserts or updates an object of any kind; false when nothing changed.
    pub fn apply<K: StateKind>(&mut self, obj: K) -> bool {
        K::apply(self, obj)
    }

    /// Removes the object of kind `K` at `namespace/name` (`""` for a kind without
    /// namespaces); false when it was absent.
    pub fn delete<K: Keyed>(&mut self, namespace: &str, name: &str) -> bool {
        K::delete(self, namespace, name)
    }

    /// Replaces every object of kind `K` (after a relist), recording only real differences.
    pub fn replace<K: StateKind>(&mut self, all: Vec<K>) {
        K::replace(self, all);
    }

    /// The object of kind `K` at `namespace/name`.
    pub fn get<K: Keyed>(&self, namespace: &str, name: &str) -> Option<&K> {
        K::get(self, namespace, name)
    }

    /// Replaces everything with `snapshot`, recording only real differences as changes.
    pub fn reset(&mut self, snapshot: Snapshot) {
        struct Reset<'a>(&'a mut ClusterState, Snapshot);
        impl KindVisitor for Reset<'_> {
            fn visit<K: StateKind>(&mut self) {
                K::replace(self.0, std::mem::take(K::listed(&mut self.1)));
            }
        }
        let mut reset = Reset(self, snapshot);
        for_each_kind(&mut reset);
        // The extra kinds: those held and not listed are emptied, the listed replaced.
        let Reset(state, snapshot) = reset;
        for list in state.extra.lacking(&snapshot.extra).into_iter().chain(snapshot.extra.into_lists()) {
            list.replace_into(state);
        }
    }

    /// [`Self::reset`], but the objects `kept` names (kind, namespace, name), invalid in
    /// `snapshot`, keep their current versions.
    pub fn reset_keeping(&mut self, mut snapshot: Snapshot, kept: &dyn Fn(&str, Option<&str>, &str) -> bool) {
        self.carry_over(kept, &mut snapshot);
        self.reset(snapshot);
    }

    /// Puts the current version of every object `kept` names into `snapshot`.
    fn carry_over(&self, kept: &dyn Fn(&str, Option<&str>, &str) -> bool, snapshot: &mut Snapshot) {
        struct Carry<'a> {
            state: &'a ClusterState,
            kept: &'a dyn Fn(&str, Option<&str>, &str) -> bool,
            into: &'a mut Snapshot,
        }
        impl KindVisitor for Carry<'_> {
            fn visit<K: StateKind>(&mut self) {
                let kept = K::held(self.state).filter(|o| {
                    let (ns, name) = o.names();
                    (self.kept)(o.kind_of(), (!ns.is_empty()).then_some(ns), name)
                });
                K::listed(self.into).extend(kept.cloned());
            }
        }
        for_each_kind(&mut Carry { state: self, kept, into: snapshot });
        for store in self.extra.stores() {
            store.carry(kept, &mut snapshot.extra);
        }
    }
}

/// Defines a kind kept in one store field of the state: `$kind` as manifests name it, whether
/// it is kept by namespace, its snapshot list, its store, and what a change marks (given the state and the changed keys).
macro_rules! stored_kind {
    ($t:ty, $kind:literal, namespaced: $namespaced:literal, $listed:ident, $store:ident, $mark:expr) => {
        impl $crate::cluster::registry::StateKind for $t {
            const KIND: &'static str = $kind;
            const NAMESPACED: bool = $namespaced;
            fn names(&self) -> (&str, &str) {
                $crate::cluster::store::Key::key(self)
            }
            fn listed(snapshot: &mut $crate::cluster::state::Snapshot) -> &mut Vec<Self> {
                &mut snapshot.$listed
            }
            fn apply(state: &mut $crate::cluster::state::ClusterState, obj: Self) -> bool {
                let (ns, name) = $crate::cluster::store::Key::key(&obj);
                if state.$store.get(&(ns, name)).is_some_and(|held| *held == obj) {
                    return false;
                }
                let key = (ns.to_string(), name.to_string());
                state.$store.insert(obj);
                ($mark)(state, vec![key]);
                true
            }
            fn replace(state: &mut $crate::cluster::state::ClusterState, all: Vec<Self>) {
                let changed = state.$store.replace(all);
                if !changed.is_empty() {
                    ($mark)(state, changed);
                }
            }
            fn held(state: &$crate::cluster::state::ClusterState) -> Box<dyn Iterator<Item = &Self> + '_> {
                Box::new(state.$store.values())
            }
        }
        impl $crate::cluster::registry::Keyed for $t {
            fn delete(state: &mut $crate::cluster::state::ClusterState, namespace: &str, name: &str) -> bool {
                let removed = state.$store.delete(&(namespace, name)).is_some();
                if removed {
                    ($mark)(state, vec![(namespace.to_string(), name.to_string())]);
                }
                removed
            }
            fn get<'s>(
                state: &'s $crate::cluster::state::ClusterState,
                namespace: &str,
                name: &str,
            ) -> Option<&'s Self> {
                state.$store.get(&(namespace, name))
            }
        }
    };
}
pub(crate) use stored_kind;
