//! The kinds without a file of their own: EndpointSlices (indexed by Service, their names
//! shared), and the Nodes, Pods, Namespaces and ProxyConfigs kept in one store each.

use std::collections::BTreeSet;

use super::registry::{Keyed, StateKind, stored_kind};
use super::state::{ClusterState, Snapshot, fit};
use super::store::ChangedKey;
use crate::config::ProxyConfig;
use crate::model::{EndpointSlice, Namespace, Node, Pod, ServiceName};

/// EndpointSlices are indexed by Service too ([`SliceIndex`](super::slices::SliceIndex)); their node and zone names are
/// shared ([`SharedNames`](super::names::SharedNames)).
impl StateKind for EndpointSlice {
    const KIND: &'static str = "EndpointSlice";
    const NAMESPACED: bool = true;
    fn names(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
    fn listed(snapshot: &mut Snapshot) -> &mut Vec<Self> {
        &mut snapshot.endpoint_slices
    }
    fn apply(state: &mut ClusterState, mut slice: Self) -> bool {
        state.names.share_in(&mut slice);
        if state.slices.get(&slice.namespace, &slice.name).is_some_and(|p| *p == slice) {
            return false;
        }
        fit(&mut slice.endpoints);
        let svc = ServiceName::new(&slice.namespace, &slice.service);
        state.changes.endpoint_events += 1;
        state.changes.trigger_times.extend(slice.trigger_time);
        if let Some(old) = state.slices.insert(slice) {
            state.changes.services.insert(ServiceName::new(&old.namespace, &old.service));
        }
        state.changes.services.insert(svc);
        true
    }
    fn replace(state: &mut ClusterState, slices: Vec<Self>) {
        let keep: BTreeSet<ChangedKey> =
            slices.iter().map(|s| (s.namespace.clone(), s.name.clone())).collect();
        let gone: Vec<ChangedKey> = state
            .endpoint_slices()
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .filter(|k| !keep.contains(k))
            .collect();
        for (ns, name) in &gone {
            Self::delete(state, ns, name);
        }
        for slice in slices {
            Self::apply(state, slice);
        }
    }
    fn held(state: &ClusterState) -> Box<dyn Iterator<Item = &Self> + '_> {
        Box::new(state.slices.iter())
    }
}

impl Keyed for EndpointSlice {
    fn delete(state: &mut ClusterState, namespace: &str, name: &str) -> bool {
        let Some(old) = state.slices.remove(namespace, name) else { return false };
        state.changes.services.insert(ServiceName::new(&old.namespace, &old.service));
        state.changes.endpoint_events += 1;
        true
    }
    fn get<'s>(state: &'s ClusterState, namespace: &str, name: &str) -> Option<&'s Self> {
        state.slices.get(namespace, name)
    }
}

stored_kind!(Node, "Node", namespaced: false, nodes, nodes, |s: &mut ClusterState, keys: Vec<ChangedKey>| {
    s.changes.nodes.extend(keys.into_iter().map(|(_, name)| name))
});
stored_kind!(Pod, "Pod", namespaced: true, pods, pods, |s: &mut ClusterState, _| s.changes.pods = true);
stored_kind!(Namespace, "Namespace", namespaced: false, namespaces, namespaces, |s: &mut ClusterState, _| s
    .changes
    .namespaces = true);
stored_kind!(ProxyConfig, "ProxyConfig", namespaced: false, proxy_configs, proxy_configs, |s: &mut ClusterState, _| s
    .changes
    .proxy_configs = true);
