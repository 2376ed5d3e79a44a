//! The BGP objects: Tideway's cluster-scoped `BGPPeer`, `BGPAdvertisement`, `BFDProfile` and
//! `Community` and, when read, MetalLB's namespaced ones, merged into one set ([`BgpSet`])
//! whenever any of them changes.
//!
//! One name, one object: a Tideway object and a MetalLB object of one kind and name are one
//! too many, and the Tideway one is used (as with pools); between MetalLB namespaces, the
//! first namespace in order. A `Community` name defined twice keeps its first definition, in
//! the same order. Each object left out is a [`BgpConflict`].

use std::collections::BTreeMap;

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
pub(crate) struct BgpStores(pub(super) BTreeMap<(BgpKind, bool), Store<BgpObject>>);

impl BgpStores {
    pub(super) fn store(&mut self, kind: BgpKind, metallb: bool) -> &mut Store<BgpObject> {
        self.0.entry((kind, metallb)).or_default()
    }

    /// Every object of `kind`, Tideway's first, then MetalLB's by namespace and name.
    pub(super) fn of(&self, kind: BgpKind) -> impl Iterator<Item = &BgpObject> {
        [false, true].into_iter().filter_map(move |m| self.0.get(&(kind, m))).flat_map(Store::values)
    }

    /// One object per name, in name order; the others as conflicts.
    pub(super) fn merged(&self) -> BgpSet {
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
