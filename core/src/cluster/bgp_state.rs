//! How the BGP objects land in the cluster state: the set of every BGP kind of both sources
//! (merged again on each change, [`BgpStores`]) and the peers' password Secrets.

use std::collections::BTreeMap;

use super::bgp::{BgpKind, BgpObject, BgpSecret, BgpSet};
use super::registry::{StateKind, stored_kind};
use super::state::{ClusterState, Snapshot};

/// The BGP set: several kinds of two sources in one model type, so a name alone does not
/// identify an object (the watches delete by kind, [`ClusterState::delete_bgp`]). `KIND` names
/// the set; each object names its own kind ([`StateKind::kind_of`]). Tideway's objects are kept
/// under namespace `""`, MetalLB's under theirs.
impl StateKind for BgpObject {
    const KIND: &'static str = "BGP";
    const NAMESPACED: bool = true;
    fn names(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
    fn kind_of(&self) -> &str {
        self.spec.kind().as_str()
    }
    fn listed(snapshot: &mut Snapshot) -> &mut Vec<Self> {
        &mut snapshot.bgp
    }
    fn apply(state: &mut ClusterState, obj: Self) -> bool {
        let changed = state.bgp_stores.store(obj.spec.kind(), obj.is_metallb()).apply(obj);
        state.merged_bgp(changed)
    }
    /// Every BGP object of both sources (a relist of everything).
    fn replace(state: &mut ClusterState, objs: Vec<Self>) {
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
            state.replace_bgp(kind, metallb, objs);
        }
    }
    fn held(state: &ClusterState) -> Box<dyn Iterator<Item = &Self> + '_> {
        Box::new(BgpKind::ALL.into_iter().flat_map(|k| state.bgp_stores.of(k)))
    }
}

stored_kind!(BgpSecret, "Secret", namespaced: false, bgp_secrets, bgp_secrets, |s: &mut ClusterState, _| s.changes.bgp = true);

impl ClusterState {
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
    use crate::cluster::BgpSpec;
    use crate::model::bgp::{BgpPeer, CommunityAlias};

    fn peer(name: &str, asn: u32) -> BgpSpec {
        BgpSpec::Peer(BgpPeer::new(name, asn, 64513, "172.30.0.1".parse().unwrap()))
    }

    fn alias(name: &str, a: u16) -> CommunityAlias {
        CommunityAlias { name: name.into(), value: Community::Standard(a, 1) }
    }

    #[test]
    fn tideway_objects_win_their_names_and_the_others_are_named() {
        let mut s = ClusterState::new();
        s.apply(BgpObject::metallb("metallb-system", "router", peer("router", 64600)));
        s.apply(BgpObject::metallb("zz", "router", peer("router", 64700)));
        assert_eq!(s.bgp().peers.len(), 1);
        assert_eq!(s.bgp().peers[0].my_asn, 64600, "the first namespace in order");
        assert!(s.take_changes().bgp);

        s.apply(BgpObject::tideway("router", peer("router", 64500)));
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
        s.apply(BgpObject::tideway("a", peer("a", 64500)));
        s.apply(BgpObject::metallb("metallb-system", "b", peer("b", 64500)));
        s.take_changes();
        assert!(!s.apply(BgpObject::tideway("a", peer("a", 64500))));
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
        s.apply(BgpObject::metallb(
            "metallb-system",
            "c",
            BgpSpec::Community(vec![alias("x", 1), alias("y", 2)]),
        ));
        s.apply(BgpObject::tideway("mine", BgpSpec::Community(vec![alias("x", 3)])));
        let set = s.bgp();
        assert_eq!(set.communities, vec![alias("x", 3), alias("y", 2)]);
        assert_eq!(set.conflicts.len(), 1);
        assert_eq!(set.conflicts[0].name, "x");
        assert_eq!(set.conflicts[0].used, "Community mine");
        assert_eq!(set.objects().communities.len(), 2);
    }
}
