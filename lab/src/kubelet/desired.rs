//! The pods bound to this node as the kubelet's watch says, less those it has itself stopped
//! and deleted: the watch's events for such a pod that were under way when it was deleted (its
//! own status writes among them) arrive after, and must not bind it again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;

/// A pod's uid.
pub(super) fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// The pods this node should run, by uid.
#[derive(Default)]
pub(super) struct Desired {
    /// By uid.
    pub(super) pods: BTreeMap<String, Pod>,
    deleted: BTreeSet<String>,
    listing: Option<BTreeMap<String, Pod>>,
}

impl Desired {
    /// Takes one watch event; whether it ended a list (the state is then whole).
    pub(super) fn on_event(&mut self, event: Event<Pod>) -> bool {
        match event {
            Event::Init => self.listing = Some(BTreeMap::new()),
            Event::InitApply(p) => {
                if let Some(l) = &mut self.listing {
                    l.insert(uid(&p), p);
                }
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                self.deleted.retain(|u| listed.contains_key(u));
                self.pods = listed.into_iter().filter(|(u, _)| !self.deleted.contains(u)).collect();
                return true;
            }
            Event::Apply(p) => {
                if !self.deleted.contains(&uid(&p)) {
                    self.pods.insert(uid(&p), p);
                }
            }
            Event::Delete(p) => {
                self.pods.remove(&uid(&p));
                self.deleted.remove(&uid(&p));
            }
        }
        false
    }

    /// The kubelet stopped pod `uid` and deleted it from the API.
    pub(super) fn deleted_here(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.deleted.insert(uid.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, rv: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid, "resourceVersion": rv},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_deleted_here_is_not_bound_again_by_the_events_still_under_way() {
        let mut d = Desired::default();
        assert!(!d.on_event(Event::Init));
        d.on_event(Event::InitApply(pod("a", "1")));
        assert!(d.on_event(Event::InitDone));
        assert!(d.pods.contains_key("a"));
        d.deleted_here("a");
        // The status it wrote while the pod drained, delivered after the deletion.
        d.on_event(Event::Apply(pod("a", "2")));
        assert!(!d.pods.contains_key("a"), "bound again");
        // A relist from before the deletion took effect: still not bound.
        d.on_event(Event::Init);
        d.on_event(Event::InitApply(pod("a", "2")));
        d.on_event(Event::InitDone);
        assert!(!d.pods.contains_key("a"));
        // Its Delete event ends the memory; a new pod of the same name has another uid.
        d.on_event(Event::Delete(pod("a", "3")));
        d.on_event(Event::Apply(pod("b", "4")));
        assert_eq!(d.pods.keys().collect::<Vec<_>>(), ["b"]);
        assert!(d.deleted.is_empty());
    }

    #[test]
    fn a_relist_without_the_pod_forgets_it() {
        let mut d = Desired::default();
        d.on_event(Event::Apply(pod("a", "1")));
        d.deleted_here("a");
        d.on_event(Event::Init);
        d.on_event(Event::InitDone);
        assert!(d.deleted.is_empty(), "a missed Delete event leaves nothing behind after a relist");
    }
}
