//! The BGP objects: Tideway's cluster-scoped `BGPPeer`, `BGPAdvertisement`, `BFDProfile` and
//! `Community` and, when read, MetalLB's namespaced ones, merged into one set ([`BgpSet`])
//! whenever any of them changes.
//!
//! One name, one object: a Tideway object and a MetalLB object of one kind and name are one
//! too many, and the Tideway one is used (as with pools); between MetalLB namespaces, the
//! first namespace in order. A `Community` name defined twice keeps its first definition, in
//! the same order. Each object left out is a [`BgpConflict`].

use std::collections::BTreeMap;

use super::ClusterState;
use super::store::{Key, Store};
use crate::model::bgp::{BfdProfile, BgpAdvertisement, BgpPeer, CommunityAlias, Objects};

/// The four BGP kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BgpKind {
    /// `BGPPeer`.
    Peer,
    /// `BGPAdvertisement`.
    Advertisement,
    /// `BFDProfile`.
    BfdProfile,
    /// `Community`.
    Community,
}

impl BgpKind {
    /// Every kind.
    pub const ALL: [BgpKind; 4] =
        [BgpKind::Peer, BgpKind::Advertisement, BgpKind::BfdProfile, BgpKind::Community];

    /// The kind's name, as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            BgpKind::Peer => "BGPPeer",
            BgpKind::Advertisement => "BGPAdvertisement",
            BgpKind::BfdProfile => "BFDProfile",
            BgpKind::Community => "Community",
        }
    }
}

/// What one BGP object says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BgpSpec {
    /// A `BGPPeer`.
    Peer(BgpPeer),
    /// A `BGPAdvertisement`.
    Advertisement(BgpAdvertisement),
    /// A `BFDProfile`.
    BfdProfile(BfdProfile),
    /// A `Community`: the names it defines.
    Community(Vec<CommunityAlias>),
}

impl BgpSpec {
    /// Its kind.
    pub fn kind(&self) -> BgpKind {
        match self {
            BgpSpec::Peer(_) => BgpKind::Peer,
            BgpSpec::Advertisement(_) => BgpKind::Advertisement,
            BgpSpec::BfdProfile(_) => BgpKind::BfdProfile,
            BgpSpec::Community(_) => BgpKind::Community,
        }
    }
}

/// One BGP object as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpObject {
    /// `""` for Tideway's (cluster-scoped) kinds, else the MetalLB object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// What it says.
    pub spec: BgpSpec,
}

impl BgpObject {
    /// A Tideway object.
    pub fn tideway(name: &str, spec: BgpSpec) -> BgpObject {
        BgpObject { namespace: String::new(), name: name.to_string(), spec }
    }

    /// A MetalLB object in `namespace`.
    pub fn metallb(namespace: &str, name: &str, spec: BgpSpec) -> BgpObject {
        BgpObject { namespace: namespace.to_string(), name: name.to_string(), spec }
    }

    /// True for a MetalLB object.
    pub fn is_metallb(&self) -> bool {
        !self.namespace.is_empty()
    }

    /// `name` or `namespace/name`, with the kind, for people.
    pub fn describe(&self) -> String {
        describe(self.spec.kind(), &self.namespace, &self.name)
    }
}

fn describe(kind: BgpKind, namespace: &str, name: &str) -> String {
    match namespace {
        "" => format!("{} {name}", kind.as_str()),
        ns => format!("{} {ns}/{name} (metallb.io)", kind.as_str()),
    }
}

impl Key for BgpObject {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

/// A `kubernetes.io/basic-auth` Secret a `BGPPeer`'s `passwordSecret` may name: its `password`.
#[derive(Clone, PartialEq, Eq)]
pub struct BgpSecret {
    /// The Secret's name (in the namespace the agent reads them from).
    pub name: String,
    /// Its `password` key.
    pub password: String,
}

impl std::fmt::Debug for BgpSecret {
    /// The password is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BgpSecret").field("name", &self.name).field("password", &"***").finish()
    }
}

impl Key for BgpSecret {
    fn key(&self) -> (&str, &str) {
        ("", &self.name)
    }
}

/// An object left out because another one has its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
#[error("{left_out} is not used: {used} has the name {name:?}")]
pub struct BgpConflict {
    /// The name both use (an object's, or for communities, the name a `Community` defines).
    pub name: String,
    /// The object used.
    pub used: String,
    /// The object left out.
    pub left_out: String,
}

/// The BGP objects in force, one per name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BgpSet {
    /// `BGPPeer`s, by name.
    pub peers: Vec<BgpPeer>,
    /// `BGPAdvertisement`s, by name.
    pub advertisements: Vec<BgpAdvertisement>,
    /// `BFDProfile`s, by name.
    pub bfd_profiles: Vec<BfdProfile>,
    /// The names `Community` objects define.
    pub communities: Vec<CommunityAlias>,
    /// What was left out.
    pub conflicts: Vec<BgpConflict>,
}

impl BgpSet {
    /// The set as the advertisement decision reads it.
    pub fn objects(&self) -> Objects<'_> {
        Objects {
            peers: &self.peers,
            advertisements: &self.advertisements,
            bfd_profiles: &self.bfd_profiles,
            communities: &self.communities,
        }
    }

    /// True when no peer exists: the node speaks no BGP.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

/// The objects of both sources: Tideway's sort first (namespace `""`).
#[derive(Debug, Clone, Default)]
pub(crate) struct BgpStores(BTreeMap<(BgpKind, bool), Store<BgpObject>>);

impl BgpStores {
    fn store(&mut self, kind: BgpKind, metallb: bool) -> &mut Store<BgpObject> {
        self.0.entry((kind, metallb)).or_default()
    }

    /// Every object of `kind`, Tideway's first, then MetalLB's by namespace and name.
    fn of(&self, kind: BgpKind) -> impl Iterator<Item = &BgpObject> {
        [false, true].into_iter().filter_map(move |m| self.0.get(&(kind, m))).flat_map(Store::values)
    }

    /// One object per name, in name order; the others as conflicts.
    fn merged(&self) -> BgpSet {
        let mut set = BgpSet::default();
        for kind in [BgpKind::Peer, BgpKind::Advertisement, BgpKind::BfdProfile] {
            for obj in first_per_name(self.of(kind), |o| o.name.clone(), &mut set.conflicts) {
                match &obj.spec {
                    BgpSpec::Peer(p) => set.peers.push(p.clone()),
                    BgpSpec::Advertisement(a) => set.advertisements.push(a.clone()),
                    BgpSpec::BfdProfile(b) => set.bfd_profiles.push(b.clone()),
                    BgpSpec::Community(_) => {}
                }
            }
        }
        let aliases = self.of(BgpKind::Community).flat_map(|o| match &o.spec {
            BgpSpec::Community(list) => list.iter().map(|a| (o, a)).collect(),
            _ => Vec::new(),
        });
        set.communities = first_per_name(aliases, |(_, a)| a.name.clone(), &mut set.conflicts)
            .map(|(_, a)| a.clone())
            .collect();
        set.conflicts.sort();
        set
    }
}

/// Something named, read from an object.
trait Named {
    fn object(&self) -> &BgpObject;
}

impl Named for &BgpObject {
    fn object(&self) -> &BgpObject {
        self
    }
}

impl Named for (&BgpObject, &CommunityAlias) {
    fn object(&self) -> &BgpObject {
        self.0
    }
}

/// The first item of each name (by `name_of`), in name order; the later ones as conflicts.
fn first_per_name<T: Named>(
    items: impl Iterator<Item = T>,
    name_of: impl Fn(&T) -> String,
    conflicts: &mut Vec<BgpConflict>,
) -> impl Iterator<Item = T> {
    let mut by_name: BTreeMap<String, T> = BTreeMap::new();
    for item in items {
        let name = name_of(&item);
        match by_name.get(&name) {
            Some(used) => conflicts.push(BgpConflict {
                name,
                used: used.object().describe(),
                left_out: item.object().describe(),
            }),
            None => {
                by_name.insert(name, item);
            }
        }
    }
    by_name.into_values()
}

impl ClusterState {
    /// Inserts or updates a BGP object.
    pub fn apply_bgp(&mut self, obj: BgpObject) -> bool {
        let changed = self.bgp_stores.store(obj.spec.kind(), obj.is_metallb()).apply(obj);
        self.merged_bgp(changed)
    }

    /// Removes the BGP object of `kind` at `namespace/name` (`""` for Tideway's).
    pub fn delete_bgp(&mut self, kind: BgpKind, namespace: &str, name: &str) -> bool {
        let removed = self.bgp_stores.store(kind, !namespace.is_empty()).delete(&(namespace, name)).is_some();
        self.merged_bgp(removed)
    }

    /// Replaces every object of `kind` from one source (`metallb`, else Tideway's) after a
    /// relist; the other source's are kept.
    pub fn replace_bgp(&mut self, kind: BgpKind, metallb: bool, objs: Vec<BgpObject>) {
        let objs = objs.into_iter().filter(|o| o.spec.kind() == kind && o.is_metallb() == metallb).collect();
        let changed = !self.bgp_stores.store(kind, metallb).replace(objs).is_empty();
        self.merged_bgp(changed);
    }

    /// Replaces every BGP object of both sources (a relist of everything).
    pub(super) fn replace_every_bgp(&mut self, objs: Vec<BgpObject>) {
        let mut by_store: BTreeMap<(BgpKind, bool), Vec<BgpObject>> = BTreeMap::new();
        for kind in BgpKind::ALL {
            for metallb in [false, true] {
                by_store.insert((kind, metallb), Vec::new());
            }
        }
        for obj in objs {
            by_store.entry((obj.spec.kind(), obj.is_metallb())).or_default().push(obj);
        }
        for ((kind, metallb), objs) in by_store {
            self.replace_bgp(kind, metallb, objs);
        }
    }

    /// The BGP object of `kind` at `namespace/name`, as read.
    pub fn bgp_object(&self, kind: BgpKind, namespace: &str, name: &str) -> Option<&BgpObject> {
        self.bgp_stores.0.get(&(kind, !namespace.is_empty()))?.get(&(namespace, name))
    }

    /// Every BGP object as read, Tideway's first.
    pub fn bgp_objects(&self) -> impl Iterator<Item = &BgpObject> {
        BgpKind::ALL.into_iter().flat_map(|k| self.bgp_stores.of(k))
    }

    /// The BGP objects in force.
    pub fn bgp(&self) -> &BgpSet {
        &self.bgp
    }

    /// Inserts or updates a password Secret.
    pub fn apply_bgp_secret(&mut self, secret: BgpSecret) -> bool {
        let changed = self.bgp_secrets.apply(secret);
        self.changes.bgp |= changed;
        changed
    }

    /// Removes a password Secret.
    pub fn delete_bgp_secret(&mut self, name: &str) -> bool {
        let removed = self.bgp_secrets.delete(&("", name)).is_some();
        self.changes.bgp |= removed;
        removed
    }

    /// Replaces every password Secret (after a relist).
    pub fn replace_bgp_secrets(&mut self, secrets: Vec<BgpSecret>) {
        self.changes.bgp |= !self.bgp_secrets.replace(secrets).is_empty();
    }

    /// The password Secret `name`.
    pub fn bgp_secret(&self, name: &str) -> Option<&BgpSecret> {
        self.bgp_secrets.get(&("", name))
    }

    /// After an input changed (`changed`), merges the BGP objects again; records a change of
    /// the merged set only. Returns `changed`.
    fn merged_bgp(&mut self, changed: bool) -> bool {
        if changed {
            let merged = self.bgp_stores.merged();
            self.changes.bgp |= merged != self.bgp;
            self.bgp = merged;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::Community;

    fn peer(name: &str, asn: u32) -> BgpSpec {
        BgpSpec::Peer(BgpPeer::new(name, asn, 64513, "172.30.0.1".parse().unwrap()))
    }

    fn alias(name: &str, a: u16) -> CommunityAlias {
        CommunityAlias { name: name.into(), value: Community::Standard(a, 1) }
    }

    #[test]
    fn tideway_objects_win_their_names_and_the_others_are_named() {
        let mut s = ClusterState::new();
        s.apply_bgp(BgpObject::metallb("metallb-system", "router", peer("router", 64600)));
        s.apply_bgp(BgpObject::metallb("zz", "router", peer("router", 64700)));
        assert_eq!(s.bgp().peers.len(), 1);
        assert_eq!(s.bgp().peers[0].my_asn, 64600, "the first namespace in order");
        assert!(s.take_changes().bgp);

        s.apply_bgp(BgpObject::tideway("router", peer("router", 64500)));
        assert_eq!(s.bgp().peers.iter().map(|p| p.my_asn).collect::<Vec<_>>(), [64500]);
        let left_out: Vec<&str> = s.bgp().conflicts.iter().map(|c| c.left_out.as_str()).collect();
        assert_eq!(
            left_out,
            ["BGPPeer metallb-system/router (metallb.io)", "BGPPeer zz/router (metallb.io)"]
        );
        assert_eq!(s.bgp().conflicts[0].used, "BGPPeer router");

        // Removing the Tideway object brings MetalLB's back.
        assert!(s.delete_bgp(BgpKind::Peer, "", "router"));
        assert_eq!(s.bgp().peers[0].my_asn, 64600);
        assert_eq!(s.bgp().conflicts.len(), 1);
    }

    #[test]
    fn a_relist_of_one_source_keeps_the_other_and_no_op_updates_change_nothing() {
        let mut s = ClusterState::new();
        s.apply_bgp(BgpObject::tideway("a", peer("a", 64500)));
        s.apply_bgp(BgpObject::metallb("metallb-system", "b", peer("b", 64500)));
        s.take_changes();
        assert!(!s.apply_bgp(BgpObject::tideway("a", peer("a", 64500))));
        s.replace_bgp(BgpKind::Peer, true, vec![BgpObject::metallb("metallb-system", "b", peer("b", 64500))]);
        assert!(!s.take_changes().bgp, "nothing differs");
        s.replace_bgp(BgpKind::Peer, false, Vec::new());
        assert_eq!(s.bgp().peers.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert!(s.take_changes().bgp);
        assert!(s.bgp_object(BgpKind::Peer, "metallb-system", "b").is_some());
    }

    #[test]
    fn community_names_keep_their_first_definition() {
        let mut s = ClusterState::new();
        s.apply_bgp(BgpObject::metallb(
            "metallb-system",
            "c",
            BgpSpec::Community(vec![alias("x", 1), alias("y", 2)]),
        ));
        s.apply_bgp(BgpObject::tideway("mine", BgpSpec::Community(vec![alias("x", 3)])));
        let set = s.bgp();
        assert_eq!(set.communities, vec![alias("x", 3), alias("y", 2)]);
        assert_eq!(set.conflicts.len(), 1);
        assert_eq!(set.conflicts[0].name, "x");
        assert_eq!(set.conflicts[0].used, "Community mine");
        assert_eq!(set.objects().communities.len(), 2);
    }
}
