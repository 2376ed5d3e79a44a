//! How the kinds the DNS server watches land in its [`ClusterView`]: each object is reduced to
//! its facts as it arrives.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tideway_api::crd::NodeProxyState;
use tideway_api::manifest::ObjectRef;
use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::{self, ServiceName};
use tideway_sources::ObjectKey;
use tideway_sources::kube::Holds;
use tideway_sources::{Store, kept_by};

use super::{ByName, ClusterView, Named, NamespaceView, PodFacts, ServiceFacts, SliceFacts};

fn namespace(key: &ObjectKey) -> &str {
    key.namespace.as_deref().unwrap_or("default")
}

impl Store for ClusterView {
    fn has_changes(&self) -> bool {
        ClusterView::has_changes(self)
    }

    fn reset_keeping(&mut self, snapshot: Snapshot, keep: &[ObjectRef]) {
        self.reset_carrying(snapshot, kept_by(keep));
    }

    fn registered(&mut self) -> &mut ClusterState {
        &mut self.registered
    }
}

impl ClusterView {
    /// Replaces every object of one namespaced kind (the set `field` selects) with `all`; the
    /// objects named in `keep` keep their current facts.
    fn replace_kind<T: Named + PartialEq + Clone>(
        &mut self,
        field: fn(&mut NamespaceView) -> &mut ByName<T>,
        all: impl IntoIterator<Item = (String, T)>,
        keep: &[ObjectKey],
    ) {
        let mut old: BTreeMap<Box<str>, ByName<T>> = BTreeMap::new();
        for (ns, view) in &mut self.namespaces {
            let objects = std::mem::take(field(view));
            if !objects.is_empty() {
                old.insert(ns.clone(), objects);
            }
        }
        let mut new: BTreeMap<Box<str>, ByName<T>> = BTreeMap::new();
        for (ns, facts) in all {
            new.entry(ns.into()).or_default().extend([facts]);
        }
        for key in keep {
            let ns = namespace(key);
            if let Some(facts) = old.get(ns).and_then(|o| o.get(&key.name)) {
                new.entry(ns.into()).or_default().extend([facts.clone()]);
            }
        }
        if old != new {
            self.changes.objects += 1;
        }
        for (ns, objects) in new {
            *field(self.namespace_mut(&ns)) = objects;
        }
        self.namespaces.retain(|_, view| !view.is_empty());
    }
}

impl Holds<Service> for ClusterView {
    fn apply(&mut self, model: model::Service) {
        self.apply_service(model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        self.delete_service(&ServiceName::new(namespace(key), &key.name));
    }

    fn replace(&mut self, all: Vec<model::Service>, keep: &[ObjectKey]) {
        let all: Vec<_> = all
            .into_iter()
            .map(|s| {
                let old = self
                    .namespaces
                    .get(s.name.namespace.as_str())
                    .and_then(|n| n.services.get(s.name.name.as_str()));
                let facts = ServiceFacts::of(&s, old);
                (s.name.namespace, facts)
            })
            .collect();
        self.replace_kind(|n| &mut n.services, all, keep);
    }
}

impl Holds<EndpointSlice> for ClusterView {
    fn apply(&mut self, model: model::EndpointSlice) {
        self.apply_endpoint_slice(model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        self.delete_endpoint_slice(namespace(key), &key.name);
    }

    fn replace(&mut self, all: Vec<model::EndpointSlice>, keep: &[ObjectKey]) {
        let all = all.into_iter().map(|s| {
            let facts = SliceFacts::of(&s);
            (s.namespace, facts)
        });
        self.replace_kind(|n| &mut n.slices, all, keep);
    }
}

impl Holds<Pod> for ClusterView {
    fn apply(&mut self, model: model::Pod) {
        self.apply_pod(model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        self.delete_pod(namespace(key), &key.name);
    }

    fn replace(&mut self, all: Vec<model::Pod>, keep: &[ObjectKey]) {
        let all = all.into_iter().map(|p| {
            let facts = PodFacts::of(&p);
            (p.namespace, facts)
        });
        self.replace_kind(|n| &mut n.pods, all, keep);
    }
}

impl Holds<Namespace> for ClusterView {
    fn apply(&mut self, model: model::Namespace) {
        self.apply_namespace(model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        self.delete_namespace(&key.name);
    }

    fn replace(&mut self, all: Vec<model::Namespace>, keep: &[ObjectKey]) {
        let listed: std::collections::BTreeSet<&str> = all.iter().map(|n| n.name.as_str()).collect();
        let gone: Vec<Box<str>> = self
            .namespaces
            .iter()
            .filter(|(name, view)| {
                view.object && !listed.contains(&***name) && !keep.iter().any(|k| *k.name == ***name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        gone.iter().for_each(|name| self.delete_namespace(name));
        all.into_iter().for_each(|n| self.apply_namespace(n));
    }
}

impl Holds<NodeProxyState> for ClusterView {
    fn apply(&mut self, model: model::NodeProxyState) {
        self.apply_node_state(model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        self.delete_node_state(&key.name);
    }

    fn replace(&mut self, all: Vec<model::NodeProxyState>, keep: &[ObjectKey]) {
        let listed: std::collections::BTreeSet<&str> = all.iter().map(|r| r.node.as_str()).collect();
        let gone: Vec<Box<str>> = self
            .reports
            .keys()
            .filter(|node| !listed.contains(&***node) && !keep.iter().any(|k| *k.name == ***node))
            .cloned()
            .collect();
        gone.iter().for_each(|node| self.delete_node_state(node));
        all.into_iter().for_each(|r| self.apply_node_state(r));
    }
}
