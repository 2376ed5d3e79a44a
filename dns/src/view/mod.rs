//! What the DNS server keeps of the cluster: per Service, EndpointSlice and pod the few facts
//! its records read, packed, by namespace. The sources write into it directly (it is a
//! [`Store`](tideway_sources::Store)); the index is built from it. The cluster model
//! the agents and the operator keep is never built here: at 100,000 Services × 10 endpoints
//! it would hold 150 MiB beside a 33 MiB index.
//!
//! A namespace exists when its Namespace object does, or when anything lives in it (sources
//! without Namespace objects).
//!
//! A kind registered from outside the sources (`tideway_sources::kube::register`) is kept
//! apart as its models, in a [`ClusterState`] of its own: read from files and watches, its
//! invalid versions carried over, as the agents and the operator keep it. No record reads it.

mod by_name;
mod facts;
mod kinds;
mod packed;

use std::collections::{BTreeMap, BTreeSet};

use by_name::ByName;
pub(crate) use by_name::Named;

use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::{EndpointSlice, Namespace, NodeProxyState, Pod, Service, ServiceName};

pub(crate) use facts::{AddressFacts, PodFacts, Publish, ServiceFacts, SliceFacts};
pub(crate) use packed::Ports;

/// One namespace's objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NamespaceView {
    /// Its Namespace object exists.
    object: bool,
    pub(crate) services: ByName<ServiceFacts>,
    pub(crate) slices: ByName<SliceFacts>,
    pub(crate) pods: ByName<PodFacts>,
}

impl NamespaceView {
    fn is_empty(&self) -> bool {
        !self.object && self.services.is_empty() && self.slices.is_empty() && self.pods.is_empty()
    }
}

/// What a consumer takes: whether anything changed since it last looked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewChanges {
    /// Objects changed (a Service, slice, pod or namespace): the records may have.
    pub objects: usize,
    /// Node reports changed (only `--require-programmed` reads them).
    pub reports: bool,
    /// Whose records the changed objects can have changed.
    pub touched: Touched,
}

/// Whose records changes can have changed: named Services (their own objects or their
/// slices changed), or anything (a namespace, a pod, a relist, or too many to name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// These Services, by namespace and name.
    Services(BTreeSet<(Box<str>, Box<str>)>),
    /// Anything.
    Everything,
}

impl Default for Touched {
    /// None yet.
    fn default() -> Self {
        Touched::Services(BTreeSet::new())
    }
}

impl Touched {
    /// More Services than this are not named: a full build is as cheap then.
    const NAMED: usize = 4096;

    fn service(&mut self, namespace: &str, name: &str) {
        if let Touched::Services(set) = self {
            set.insert((namespace.into(), name.into()));
            if set.len() > Self::NAMED {
                *self = Touched::Everything;
            }
        }
    }
}

/// The DNS server's copy of the cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    pub(crate) namespaces: BTreeMap<Box<str>, NamespaceView>,
    /// Each node's report: the Service version its agent programmed up to.
    pub(crate) reports: BTreeMap<Box<str>, Option<u64>>,
    changes: ViewChanges,
    /// The registered kinds' objects ([`tideway_sources::Store::registered`]).
    pub(crate) registered: ClusterState,
}

impl ClusterView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view holding what `snapshot` holds of the kinds the DNS server reads.
    pub fn from_snapshot(snapshot: Snapshot) -> Self {
        let mut view = Self::new();
        view.reset(snapshot);
        view
    }

    /// Replaces everything with `snapshot` (a change only when the facts differ). Services
    /// keep their spec versions while their generations stay.
    pub fn reset(&mut self, snapshot: Snapshot) {
        self.reset_carrying(snapshot, &|_, _, _| false);
    }

    /// The facts of Service `name` in `namespace`.
    pub(super) fn service(&self, namespace: &str, name: &str) -> Option<&ServiceFacts> {
        self.namespaces.get(namespace)?.services.get(name)
    }

    /// Number of Services.
    pub fn service_count(&self) -> usize {
        self.namespaces.values().map(|n| n.services.len()).sum()
    }

    /// The registered kinds' objects (each kind defined by `tideway_core::extra_kind!`).
    pub fn registered(&self) -> &ClusterState {
        &self.registered
    }

    /// Takes what changed since the last call (a registered kind's change is taken with it:
    /// no record reads one).
    pub fn take_changes(&mut self) -> ViewChanges {
        self.registered.take_changes();
        std::mem::take(&mut self.changes)
    }

    /// True when there are changes to take.
    pub fn has_changes(&self) -> bool {
        self.changes != ViewChanges::default() || self.registered.has_changes()
    }

    fn namespace_mut(&mut self, ns: &str) -> &mut NamespaceView {
        if !self.namespaces.contains_key(ns) {
            self.namespaces.insert(ns.into(), NamespaceView::default());
        }
        self.namespaces.get_mut(ns).expect("just inserted")
    }

    /// Runs `f` on namespace `ns` (created when missing, dropped when left empty); counts a
    /// change when `f` says it made one, and marks what it touched: the Services `f` names,
    /// or, when it names none, anything.
    fn in_namespace(&mut self, ns: &str, f: impl FnOnce(&mut NamespaceView) -> Option<Vec<Box<str>>>) {
        let view = self.namespace_mut(ns);
        let changed = f(view);
        if view.is_empty() {
            self.namespaces.remove(ns);
        }
        let Some(services) = changed else { return };
        self.changes.objects += 1;
        if services.is_empty() {
            self.changes.touched = Touched::Everything;
        }
        services.iter().for_each(|name| self.changes.touched.service(ns, name));
    }

    /// Inserts or updates a Service.
    pub fn apply_service(&mut self, svc: Service) {
        let facts = ServiceFacts::of(&svc, self.service(&svc.name.namespace, &svc.name.name));
        let name: Box<str> = svc.name.name.as_str().into();
        self.in_namespace(&svc.name.namespace, |n| n.services.insert(facts).then(|| vec![name]));
    }

    /// Removes a Service.
    pub fn delete_service(&mut self, name: &ServiceName) {
        let named: Box<str> = name.name.as_str().into();
        self.in_namespace(&name.namespace, |n| n.services.remove(name.name.as_str()).map(|_| vec![named]));
    }

    /// Inserts or updates an EndpointSlice (a change touches its Service, and the one it
    /// belonged to before).
    pub fn apply_endpoint_slice(&mut self, slice: EndpointSlice) {
        let facts = SliceFacts::of(&slice);
        self.in_namespace(&slice.namespace, |n| {
            let before = n.slices.get(facts.name()).map(service_of);
            let after = service_of(&facts);
            n.slices.insert(facts).then(|| before.into_iter().chain([after]).collect())
        });
    }

    /// Removes an EndpointSlice.
    pub fn delete_endpoint_slice(&mut self, namespace: &str, name: &str) {
        self.in_namespace(namespace, |n| n.slices.remove(name).map(|old| vec![service_of(&old)]));
    }

    /// Inserts or updates a pod.
    pub fn apply_pod(&mut self, pod: Pod) {
        let facts = PodFacts::of(&pod);
        self.in_namespace(&pod.namespace, |n| n.pods.insert(facts).then(Vec::new));
    }

    /// Removes a pod.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        self.in_namespace(namespace, |n| n.pods.remove(name).map(|_| Vec::new()));
    }

    /// Records that a Namespace object exists.
    pub fn apply_namespace(&mut self, ns: Namespace) {
        self.in_namespace(&ns.name, |n| (!std::mem::replace(&mut n.object, true)).then(Vec::new));
    }

    /// Records that a Namespace object is gone (the namespace stays while anything lives in it).
    pub fn delete_namespace(&mut self, name: &str) {
        if self.namespaces.contains_key(name) {
            self.in_namespace(name, |n| std::mem::replace(&mut n.object, false).then(Vec::new));
        }
    }

    /// Inserts or updates a node's report.
    pub fn apply_node_state(&mut self, report: NodeProxyState) {
        let old = self.reports.insert(report.node.as_str().into(), report.programmed_version);
        self.changes.reports |= old != Some(report.programmed_version);
    }

    /// Removes a node's report.
    pub fn delete_node_state(&mut self, node: &str) {
        self.changes.reports |= self.reports.remove(node).is_some();
    }

    /// Every namespace with its objects, by name.
    pub(crate) fn namespaces(&self) -> impl Iterator<Item = (&str, &NamespaceView)> {
        self.namespaces.iter().map(|(name, n)| (&**name, n))
    }

    /// Each node's report.
    pub(crate) fn reports(&self) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.reports.iter().map(|(node, v)| (&**node, *v))
    }
}

/// The name of the Service a slice belongs to.
fn service_of(slice: &SliceFacts) -> Box<str> {
    String::from_utf8_lossy(slice.service()).into()
}

impl NamespaceView {
    /// The slices of Service `service`, in name order: those named `<service>-...`, found by
    /// that prefix, unless a slice of the namespace is named otherwise (a whole scan then).
    pub(crate) fn slices_of(&self, service: &str) -> Vec<&SliceFacts> {
        let of = |s: &&SliceFacts| s.service() == service.as_bytes();
        if self.slices.irregular() > 0 {
            return self.slices.iter().filter(of).collect();
        }
        let prefix = [service.as_bytes(), b"-"].concat();
        self.slices.prefixed(prefix).filter(of).collect()
    }

    /// Calls `f` for each Service with its slices (by slice name), in Service name order.
    pub(crate) fn for_each_service<'a>(
        &'a self,
        mut f: impl FnMut(&'a str, &'a ServiceFacts, &[&'a SliceFacts]),
    ) {
        let mut slices: Vec<(&[u8], &SliceFacts)> = self.slices.iter().map(|s| (s.service(), s)).collect();
        // Slices are mostly named after their Service, so usually in order already. Stable:
        // each Service's slices stay in name order.
        if !slices.is_sorted_by(|a, b| a.0 <= b.0) {
            slices.sort_by(|a, b| a.0.cmp(b.0));
        }
        let mut of_service = Vec::new();
        let mut at = 0;
        for facts in self.services.iter() {
            let name = facts.name_bytes();
            while slices.get(at).is_some_and(|(s, _)| *s < name) {
                at += 1;
            }
            of_service.clear();
            while let Some((_, slice)) = slices.get(at).filter(|(s, _)| *s == name) {
                of_service.push(*slice);
                at += 1;
            }
            f(facts.name(), facts, &of_service);
        }
    }
}

#[cfg(test)]
mod tests;
