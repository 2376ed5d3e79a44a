//! The cluster state every component reads from, with kube-proxy-style change tracking.
//!
//! Sources (a YAML file, kube-runtime watchers, the lab) call the event-shaped methods
//! (`apply_*`, `delete_*`, `reset`); no-op updates are dropped, so `take_changes` reports only
//! Services whose rules or records can actually differ.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::ProxyConfig;
use crate::model::{EndpointSlice, Node, Pod, Service, ServiceName};

/// What changed since the last [`ClusterState::take_changes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services whose Service object or EndpointSlices changed.
    pub services: BTreeSet<ServiceName>,
    /// Nodes that changed.
    pub nodes: BTreeSet<String>,
    /// True when any Pod changed.
    pub pods: bool,
    /// True when any ProxyConfig changed.
    pub proxy_configs: bool,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.nodes.is_empty() && !self.pods && !self.proxy_configs
    }

    /// Folds `other` into `self`.
    pub fn merge(&mut self, other: Changes) {
        self.services.extend(other.services);
        self.nodes.extend(other.nodes);
        self.pods |= other.pods;
        self.proxy_configs |= other.proxy_configs;
    }
}

/// A full set of objects, as read from a file or a watcher's initial list.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Services.
    pub services: Vec<Service>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// ProxyConfigs.
    pub proxy_configs: Vec<ProxyConfig>,
}

type ObjectKey = (String, String);

/// Services, EndpointSlices, Nodes, Pods and ProxyConfigs, indexed for the planner and DNS.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    services: BTreeMap<ServiceName, Service>,
    /// namespace -> slice name -> slice (lookups by `&str`, no allocation).
    slices: BTreeMap<String, BTreeMap<String, EndpointSlice>>,
    slices_by_service: BTreeMap<ServiceName, BTreeSet<String>>,
    nodes: BTreeMap<String, Node>,
    pods: BTreeMap<ObjectKey, Pod>,
    proxy_configs: BTreeMap<String, ProxyConfig>,
    changes: Changes,
}

impl ClusterState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state holding `snapshot`.
    pub fn from_snapshot(snapshot: Snapshot) -> Self {
        let mut state = Self::new();
        state.reset(snapshot);
        state
    }

    // === Services ===

    /// Inserts or updates a Service; returns false when nothing changed.
    pub fn apply_service(&mut self, svc: Service) -> bool {
        if self.services.get(&svc.name) == Some(&svc) {
            return false;
        }
        self.changes.services.insert(svc.name.clone());
        self.services.insert(svc.name.clone(), svc);
        true
    }

    /// Removes a Service; returns false when it was absent.
    pub fn delete_service(&mut self, name: &ServiceName) -> bool {
        if self.services.remove(name).is_some() {
            self.changes.services.insert(name.clone());
            true
        } else {
            false
        }
    }

    /// The Service called `name`.
    pub fn service(&self, name: &ServiceName) -> Option<&Service> {
        self.services.get(name)
    }

    /// Every Service, sorted by name.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values()
    }

    /// Number of Services.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    // === EndpointSlices ===

    /// Inserts or updates an EndpointSlice; returns false when nothing changed.
    pub fn apply_endpoint_slice(&mut self, slice: EndpointSlice) -> bool {
        let prev = self.slices.get(&slice.namespace).and_then(|m| m.get(&slice.name));
        if prev == Some(&slice) {
            return false;
        }
        if let Some(old) = prev {
            let old_svc = ServiceName::new(&old.namespace, &old.service);
            if old.service != slice.service {
                self.unindex_slice(&old_svc, &slice.name);
            }
            self.changes.services.insert(old_svc);
        }
        let svc = ServiceName::new(&slice.namespace, &slice.service);
        self.slices_by_service.entry(svc.clone()).or_default().insert(slice.name.clone());
        self.changes.services.insert(svc);
        self.slices.entry(slice.namespace.clone()).or_default().insert(slice.name.clone(), slice);
        true
    }

    /// Removes an EndpointSlice; returns false when it was absent.
    pub fn delete_endpoint_slice(&mut self, namespace: &str, name: &str) -> bool {
        let Some(ns) = self.slices.get_mut(namespace) else { return false };
        let Some(old) = ns.remove(name) else { return false };
        if ns.is_empty() {
            self.slices.remove(namespace);
        }
        let svc = ServiceName::new(&old.namespace, &old.service);
        self.unindex_slice(&svc, name);
        self.changes.services.insert(svc);
        true
    }

    fn unindex_slice(&mut self, svc: &ServiceName, slice: &str) {
        if let Some(set) = self.slices_by_service.get_mut(svc) {
            set.remove(slice);
            if set.is_empty() {
                self.slices_by_service.remove(svc);
            }
        }
    }

    /// The EndpointSlices of a Service, sorted by slice name.
    pub fn endpoint_slices_for<'a>(
        &'a self,
        svc: &ServiceName,
    ) -> impl Iterator<Item = &'a EndpointSlice> + 'a {
        let ns = self.slices.get(svc.namespace.as_str());
        self.slices_by_service.get(svc).into_iter().flatten().filter_map(move |name| ns?.get(name.as_str()))
    }

    /// Every EndpointSlice.
    pub fn endpoint_slices(&self) -> impl Iterator<Item = &EndpointSlice> {
        self.slices.values().flat_map(BTreeMap::values)
    }

    // === Nodes, Pods, ProxyConfigs ===

    /// Inserts or updates a Node; returns false when nothing changed.
    pub fn apply_node(&mut self, node: Node) -> bool {
        if self.nodes.get(&node.name) == Some(&node) {
            return false;
        }
        self.changes.nodes.insert(node.name.clone());
        self.nodes.insert(node.name.clone(), node);
        true
    }

    /// Removes a Node.
    pub fn delete_node(&mut self, name: &str) -> bool {
        let removed = self.nodes.remove(name).is_some();
        if removed {
            self.changes.nodes.insert(name.to_string());
        }
        removed
    }

    /// The Node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    /// Every Node.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Inserts or updates a Pod.
    pub fn apply_pod(&mut self, pod: Pod) -> bool {
        let key = (pod.namespace.clone(), pod.name.clone());
        if self.pods.get(&key) == Some(&pod) {
            return false;
        }
        self.pods.insert(key, pod);
        self.changes.pods = true;
        true
    }

    /// Removes a Pod.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) -> bool {
        let removed = self.pods.remove(&(namespace.to_string(), name.to_string())).is_some();
        self.changes.pods |= removed;
        removed
    }

    /// Every Pod.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    /// Inserts or updates a ProxyConfig.
    pub fn apply_proxy_config(&mut self, config: ProxyConfig) -> bool {
        if self.proxy_configs.get(&config.name) == Some(&config) {
            return false;
        }
        self.proxy_configs.insert(config.name.clone(), config);
        self.changes.proxy_configs = true;
        true
    }

    /// Removes a ProxyConfig.
    pub fn delete_proxy_config(&mut self, name: &str) -> bool {
        let removed = self.proxy_configs.remove(name).is_some();
        self.changes.proxy_configs |= removed;
        removed
    }

    /// Every ProxyConfig.
    pub fn proxy_configs(&self) -> impl Iterator<Item = &ProxyConfig> {
        self.proxy_configs.values()
    }

    // === Bulk ===

    /// Replaces everything with `snapshot`, recording only real differences as changes.
    pub fn reset(&mut self, snapshot: Snapshot) {
        let keep: BTreeSet<ServiceName> = snapshot.services.iter().map(|s| s.name.clone()).collect();
        let gone: Vec<ServiceName> = self.services.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.iter().for_each(|k| {
            self.delete_service(k);
        });
        snapshot.services.into_iter().for_each(|s| {
            self.apply_service(s);
        });

        let keep: BTreeSet<ObjectKey> =
            snapshot.endpoint_slices.iter().map(|s| (s.namespace.clone(), s.name.clone())).collect();
        let gone: Vec<ObjectKey> = self
            .endpoint_slices()
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .filter(|k| !keep.contains(k))
            .collect();
        gone.iter().for_each(|(ns, n)| {
            self.delete_endpoint_slice(ns, n);
        });
        snapshot.endpoint_slices.into_iter().for_each(|s| {
            self.apply_endpoint_slice(s);
        });

        let keep: BTreeSet<String> = snapshot.nodes.iter().map(|n| n.name.clone()).collect();
        let gone: Vec<String> = self.nodes.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.iter().for_each(|n| {
            self.delete_node(n);
        });
        snapshot.nodes.into_iter().for_each(|n| {
            self.apply_node(n);
        });

        let keep: BTreeSet<ObjectKey> =
            snapshot.pods.iter().map(|p| (p.namespace.clone(), p.name.clone())).collect();
        let gone: Vec<ObjectKey> = self.pods.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.iter().for_each(|(ns, n)| {
            self.delete_pod(ns, n);
        });
        snapshot.pods.into_iter().for_each(|p| {
            self.apply_pod(p);
        });

        let keep: BTreeSet<String> = snapshot.proxy_configs.iter().map(|c| c.name.clone()).collect();
        let gone: Vec<String> = self.proxy_configs.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.iter().for_each(|n| {
            self.delete_proxy_config(n);
        });
        snapshot.proxy_configs.into_iter().for_each(|c| {
            self.apply_proxy_config(c);
        });
    }

    /// Returns and clears the accumulated changes.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Endpoint;
    use crate::net::IpFamily;

    fn svc(name: &str) -> Service {
        Service::new(ServiceName::new("ns", name))
    }

    fn slice(name: &str, svc: &str, ip: &str) -> EndpointSlice {
        EndpointSlice {
            namespace: "ns".into(),
            name: name.into(),
            service: svc.into(),
            family: IpFamily::V4,
            ports: vec![],
            endpoints: vec![Endpoint::ready(ip.parse().unwrap())],
            labels: Default::default(),
        }
    }

    #[test]
    fn no_op_updates_are_dropped() {
        let mut state = ClusterState::new();
        assert!(state.apply_service(svc("a")));
        assert_eq!(state.take_changes().services.len(), 1);
        assert!(!state.apply_service(svc("a")));
        assert!(state.take_changes().is_empty());
    }

    #[test]
    fn slices_mark_their_service_and_move_between_services() {
        let mut state = ClusterState::new();
        state.apply_endpoint_slice(slice("a-1", "a", "10.0.0.1"));
        state.apply_endpoint_slice(slice("a-2", "a", "10.0.0.2"));
        assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 2);
        state.take_changes();
        // Relabelled to another Service: both are marked.
        state.apply_endpoint_slice(slice("a-2", "b", "10.0.0.2"));
        let changed = state.take_changes().services;
        assert!(
            changed.contains(&ServiceName::new("ns", "a")) && changed.contains(&ServiceName::new("ns", "b"))
        );
        assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 1);
        assert!(state.delete_endpoint_slice("ns", "a-1"));
        assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 0);
    }

    #[test]
    fn reset_records_only_differences() {
        let mut state = ClusterState::from_snapshot(Snapshot {
            services: vec![svc("a"), svc("b")],
            ..Default::default()
        });
        state.take_changes();
        state.reset(Snapshot { services: vec![svc("a"), svc("c")], ..Default::default() });
        let changed: Vec<String> = state.take_changes().services.into_iter().map(|s| s.name).collect();
        assert_eq!(changed, vec!["b".to_string(), "c".to_string()]);
    }
}
