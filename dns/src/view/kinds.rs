//! How the kinds the DNS server watches land in its [`ClusterView`]: each object is reduced to
//! its facts as it arrives.

use std::collections::{BTreeMap, BTreeSet};

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
        self.reset_carrying(snapshot, &kept_by(keep));
    }

    fn registered(&mut self) -> &mut ClusterState {
        &mut self.registered
    }

    /// Each object is packed into its facts as it lands: a compact copy of a list first would
    /// only double the first view's peak.
    fn keeps_objects() -> bool {
        false
    }
}

/// Which objects of a kind keep their current facts: a test of (namespace, name).
type KeptHere<'a> = &'a dyn Fn(&str, &str) -> bool;

/// The objects named in `keep` (a relist's invalid ones), as a test of (namespace, name): the
/// namespace `""` for a kind without one.
fn in_keys(keep: &[ObjectKey], namespaced: bool) -> impl Fn(&str, &str) -> bool + '_ {
    let ns = move |k| if namespaced { namespace(k) } else { "" };
    let wanted: BTreeSet<(&str, &str)> = keep.iter().map(|k| (ns(k), k.name.as_str())).collect();
    move |ns, name| wanted.contains(&(ns, name))
}

impl ClusterView {
    /// Replaces everything with `snapshot` kind by kind, as a relist of each would: the
    /// objects `kept` names (kind, namespace, name) keep their current facts. The registered
    /// kinds go to their own state, through its carry-over.
    pub(super) fn reset_carrying(
        &mut self,
        mut snapshot: Snapshot,
        kept: &dyn Fn(&str, Option<&str>, &str) -> bool,
    ) {
        let extra = Snapshot { extra: std::mem::take(&mut snapshot.extra), ..Snapshot::default() };
        self.registered.reset_keeping(extra, kept);
        self.replace_namespaces(snapshot.namespaces, &|_, name| kept("Namespace", None, name));
        self.replace_services(snapshot.services, &|ns, name| kept("Service", Some(ns), name));
        let slices = snapshot.endpoint_slices.into_iter().map(|s| (s.namespace.clone(), SliceFacts::of(&s)));
        self.replace_kind(|n| &mut n.slices, slices, &|ns, name| kept("EndpointSlice", Some(ns), name));
        let pods = snapshot.pods.into_iter().map(|p| (p.namespace.clone(), PodFacts::of(&p)));
        self.replace_kind(|n| &mut n.pods, pods, &|ns, name| kept("Pod", Some(ns), name));
        self.replace_reports(snapshot.node_states, &|_, node| kept("NodeProxyState", None, node));
    }

    /// Replaces every object of one namespaced kind (the set `field` selects) with `all`; the
    /// objects `kept` names keep their current facts.
    fn replace_kind<T: Named + PartialEq + Clone>(
        &mut self,
        field: fn(&mut NamespaceView) -> &mut ByName<T>,
        all: impl IntoIterator<Item = (String, T)>,
        kept: KeptHere<'_>,
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
        for (ns, objects) in &old {
            let carried = objects.iter().filter(|o| kept(ns, o.name())).cloned();
            new.entry(ns.clone()).or_default().extend(carried);
        }
        new.retain(|_, objects| !objects.is_empty());
        if old != new {
            self.changes.objects += 1;
            self.changes.touched = super::Touched::Everything;
        }
        for (ns, objects) in new {
            *field(self.namespace_mut(&ns)) = objects;
        }
        self.namespaces.retain(|_, view| !view.is_empty());
    }

    /// [`Self::replace_kind`] for Services, whose facts keep their spec versions.
    fn replace_services(&mut self, all: Vec<model::Service>, kept: KeptHere<'_>) {
        let all: Vec<_> = all
            .into_iter()
            .map(|s| {
                let facts = ServiceFacts::of(&s, self.service(&s.name.namespace, &s.name.name));
                (s.name.namespace, facts)
            })
            .collect();
        self.replace_kind(|n| &mut n.services, all, kept);
    }

    /// Replaces the Namespace objects with `all`; those `kept` names (namespace `""`) stay.
    fn replace_namespaces(&mut self, all: Vec<model::Namespace>, kept: KeptHere<'_>) {
        let listed: BTreeSet<&str> = all.iter().map(|n| n.name.as_str()).collect();
        let gone: Vec<Box<str>> = self
            .namespaces
            .iter()
            .filter(|(name, view)| view.object && !listed.contains(&***name) && !kept("", name))
            .map(|(name, _)| name.clone())
            .collect();
        gone.iter().for_each(|name| self.delete_namespace(name));
        all.into_iter().for_each(|n| self.apply_namespace(n));
    }

    /// Replaces the node reports with `all`; those `kept` names (namespace `""`) stay.
    fn replace_reports(&mut self, all: Vec<model::NodeProxyState>, kept: KeptHere<'_>) {
        let listed: BTreeSet<&str> = all.iter().map(|r| r.node.as_str()).collect();
        let gone: Vec<Box<str>> = self
            .reports
            .keys()
            .filter(|node| !listed.contains(&***node) && !kept("", node))
            .cloned()
            .collect();
        gone.iter().for_each(|node| self.delete_node_state(node));
        all.into_iter().for_each(|r| self.apply_node_state(r));
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
        self.replace_services(all, &in_keys(keep, true));
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
        self.replace_kind(|n| &mut n.slices, all, &in_keys(keep, true));
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
        self.replace_kind(|n| &mut n.pods, all, &in_keys(keep, true));
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
        self.replace_namespaces(all, &in_keys(keep, false));
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
        self.replace_reports(all, &in_keys(keep, false));
    }
}
