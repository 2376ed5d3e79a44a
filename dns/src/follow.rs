//! A view that follows a cluster model someone else keeps: the node agent's, whose node-local
//! listener answers from the same view that programs the node's Services (no second watch).
//! Each call copies what the model's changes name: the changed Services with their
//! EndpointSlices, and the Namespace objects when any changed; the first call copies all.
//! The copy ([`Copied`]) is written into the view later, when its owner says: the agent
//! writes it once its node has programmed those changes, so its listener never gives out an
//! address its node's rules do not serve yet (`tideway dns --require-programmed`'s rule).

use std::collections::{BTreeSet, HashMap};

use tideway_core::cluster::{Changes, ClusterState};
use tideway_core::model::{EndpointSlice, Namespace, Service, ServiceName};

use crate::view::ClusterView;

/// What was copied last, so that what left the model leaves the view.
#[derive(Debug, Default)]
pub struct Follower {
    /// The EndpointSlices copied per Service, by name.
    slices: HashMap<ServiceName, Vec<String>>,
    /// The Namespace objects copied.
    namespaces: BTreeSet<String>,
    primed: bool,
}

/// What one call copied from the model, in order, for a view.
#[derive(Debug, Default)]
pub struct Copied(Vec<Step>);

#[derive(Debug)]
enum Step {
    Service(Service),
    ServiceGone(ServiceName),
    Slice(EndpointSlice),
    /// Namespace and name.
    SliceGone(String, String),
    Namespace(Namespace),
    NamespaceGone(String),
}

impl Copied {
    /// Writes the copy into `view`.
    pub fn into_view(self, view: &mut ClusterView) {
        for copy in self.0 {
            match copy {
                Step::Service(svc) => view.apply_service(svc),
                Step::ServiceGone(name) => view.delete_service(&name),
                Step::Slice(slice) => view.apply_endpoint_slice(slice),
                Step::SliceGone(ns, name) => view.delete_endpoint_slice(&ns, &name),
                Step::Namespace(ns) => view.apply_namespace(ns),
                Step::NamespaceGone(name) => view.delete_namespace(&name),
            }
        }
    }

    /// Whether nothing was copied.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Follower {
    /// A follower that has copied nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Brings `view` up to `state`, of which `changes` are what changed since the last call.
    pub fn follow(&mut self, view: &mut ClusterView, state: &ClusterState, changes: &Changes) {
        self.copy(state, changes).into_view(view);
    }

    /// What brings a view up to `state` (`changes` are what changed since the last call), to
    /// be written into it later.
    pub fn copy(&mut self, state: &ClusterState, changes: &Changes) -> Copied {
        let mut copied = Copied::default();
        let everything = !std::mem::replace(&mut self.primed, true);
        if everything || changes.namespaces {
            self.namespaces(&mut copied, state);
        }
        if everything {
            let mut names: BTreeSet<ServiceName> = state.services().map(|s| s.name.clone()).collect();
            names.extend(self.slices.keys().cloned());
            names.iter().for_each(|name| self.service(&mut copied, state, name));
        } else {
            changes.services.iter().for_each(|name| self.service(&mut copied, state, name));
        }
        copied
    }

    fn service(&mut self, copied: &mut Copied, state: &ClusterState, name: &ServiceName) {
        copied.0.push(match state.service(name) {
            Some(svc) => Step::Service(svc.clone()),
            None => Step::ServiceGone(name.clone()),
        });
        let now: Vec<String> = state.endpoint_slices_for(name).map(|s| s.name.clone()).collect();
        copied.0.extend(state.endpoint_slices_for(name).map(|slice| Step::Slice(slice.clone())));
        let before = self.slices.remove(name).unwrap_or_default();
        for gone in before.into_iter().filter(|b| !now.contains(b)) {
            copied.0.push(Step::SliceGone(name.namespace.clone(), gone));
        }
        if !now.is_empty() {
            self.slices.insert(name.clone(), now);
        }
    }

    fn namespaces(&mut self, copied: &mut Copied, state: &ClusterState) {
        let now: BTreeSet<String> = state.namespaces().map(|n| n.name.clone()).collect();
        copied.0.extend(state.namespaces().map(|ns| Step::Namespace(ns.clone())));
        let gone = self.namespaces.difference(&now).map(|name| Step::NamespaceGone(name.clone()));
        copied.0.extend(gone);
        self.namespaces = now;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tideway_core::model::Namespace;
    use tideway_core::net::Protocol::Udp;
    use tideway_core::testing::{mk_service, mk_slice};

    use super::*;
    use crate::view::Named;

    fn slices(view: &ClusterView, ns: &str) -> Vec<String> {
        let n = view.namespaces().find(|(name, _)| *name == ns);
        n.map(|(_, n)| n.slices.iter().map(|s| s.name().to_string()).collect()).unwrap_or_default()
    }

    fn namespace(name: &str) -> Namespace {
        Namespace { name: name.into(), labels: BTreeMap::new() }
    }

    #[test]
    fn the_view_follows_services_slices_and_namespaces_as_the_model_changes() {
        let mut state = ClusterState::new();
        state.apply(mk_service("ns1", "web").cluster_ip("10.96.0.10").port("dns", Udp, 53).build());
        state.apply(
            mk_slice("ns1", "web").port("dns", Udp, 53).ready("10.244.1.5", "node-a").name("web-a").build(),
        );
        state.apply(
            mk_slice("ns1", "web").port("dns", Udp, 53).ready("10.244.1.6", "node-a").name("web-b").build(),
        );
        state.apply(namespace("empty"));
        let (mut view, mut follower) = (ClusterView::new(), Follower::new());
        // The first call copies everything, whatever the changes say.
        follower.follow(&mut view, &state, &Changes::default());
        assert!(view.service("ns1", "web").is_some());
        assert_eq!(slices(&view, "ns1"), ["web-a", "web-b"]);
        assert!(view.namespaces().any(|(n, _)| n == "empty"));
        view.take_changes();

        // A slice gone, then the Service, then the Namespace object.
        state.take_changes();
        state.delete::<tideway_core::model::EndpointSlice>("ns1", "web-b");
        let changes = state.take_changes();
        follower.follow(&mut view, &state, &changes);
        assert_eq!(slices(&view, "ns1"), ["web-a"]);
        state.delete::<tideway_core::model::Service>("ns1", "web");
        let changes = state.take_changes();
        follower.follow(&mut view, &state, &changes);
        assert!(view.service("ns1", "web").is_none());
        state.delete::<Namespace>("", "empty");
        let changes = state.take_changes();
        follower.follow(&mut view, &state, &changes);
        assert!(!view.namespaces().any(|(n, _)| n == "empty"), "the namespace left with its object");
    }
}
