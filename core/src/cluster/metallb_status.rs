//! MetalLB's `ServiceL2Status`es: which node MetalLB announces each Service from, read with
//! `--metallb-compat` so the operator keeps an address there when it takes over. Stored by
//! their own names, found by Service through a [`StatusIndex`] kept as they change.

use super::registry::stored_kind;
use super::state::ClusterState;
use super::store::{ChangedKey, Key};
use crate::model::{ServiceL2Status, ServiceName};

impl Key for ServiceL2Status {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

stored_kind!(ServiceL2Status, "ServiceL2Status", namespaced: true, service_l2_statuses, service_l2_statuses, reindex);

/// The statuses' change mark: the index follows them, and the Services they name (before and
/// now) are marked.
fn reindex(state: &mut ClusterState, changed: Vec<ChangedKey>) {
    for key in changed {
        let service =
            state.service_l2_statuses.get(&(key.0.as_str(), key.1.as_str())).map(|s| s.service.clone());
        let touched = state.l2_status_index.set(key, service.as_ref());
        state.changes.metallb_announcers.extend(touched);
    }
}

impl ClusterState {
    /// The node MetalLB announces `service` from, by its `ServiceL2Status` (None: MetalLB
    /// records none, or is not read).
    pub fn metallb_announcer(&self, service: &ServiceName) -> Option<&str> {
        let (namespace, name) = self.l2_status_index.first(service)?;
        self.service_l2_statuses.get(&(namespace.as_str(), name.as_str())).map(|s| s.node.as_str())
    }

    /// Every `ServiceL2Status`, by namespace and name.
    pub fn service_l2_statuses(&self) -> impl Iterator<Item = &ServiceL2Status> {
        self.service_l2_statuses.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;

    fn status(name: &str, service: &str, node: &str) -> ServiceL2Status {
        ServiceL2Status {
            namespace: "metallb-system".into(),
            name: name.into(),
            service: ServiceName::new("default", service),
            node: node.into(),
        }
    }

    /// Found by Service, changed and deleted by the object's own names, relisted; each change
    /// marks the Services it concerns.
    #[test]
    fn an_announcer_is_found_by_its_service_and_follows_its_object() {
        let svc3 = ServiceName::new("default", "svc3");
        let mut state = ClusterState::new();
        assert!(state.apply(status("l2-c54z5", "svc3", "myk8s-worker3")));
        assert_eq!(state.metallb_announcer(&svc3), Some("myk8s-worker3"));
        assert_eq!(state.take_changes().metallb_announcers, [svc3.clone()].into());
        assert!(!state.apply(status("l2-c54z5", "svc3", "myk8s-worker3")), "no-op update");
        assert!(!state.has_changes());
        assert!(state.delete::<ServiceL2Status>("metallb-system", "l2-c54z5"));
        assert_eq!(state.metallb_announcer(&svc3), None);
        assert_eq!(state.take_changes().metallb_announcers, [svc3.clone()].into());
        state.reset(Snapshot {
            service_l2_statuses: vec![
                status("l2-aaaaa", "svc3", "myk8s-worker"),
                status("l2-bbbbb", "svc4", "n"),
            ],
            ..Default::default()
        });
        assert_eq!(state.metallb_announcer(&svc3), Some("myk8s-worker"));
        assert_eq!(state.take_changes().metallb_announcers.len(), 2);
        state.replace(vec![status("l2-bbbbb", "svc4", "n")]);
        assert_eq!(state.metallb_announcer(&svc3), None, "gone from the relist");
        assert_eq!(state.take_changes().metallb_announcers, [svc3].into());
        assert_eq!(state.service_l2_statuses().count(), 1);
    }
}
