//! The cluster state every component reads from, with kube-proxy-style change tracking.
//!
//! Sources (a YAML file, kube-runtime watchers, the lab) call the event-shaped methods
//! (`apply_*`, `delete_*`, `replace_*` for one kind after a relist, `reset` for everything);
//! no-op updates are dropped, so `take_changes` reports only what can actually differ.
//!
//! Beside the Kubernetes kinds it keeps each node's agent liveness
//! ([`ClusterState::set_agent_liveness`]), which the operator learns from the agents' failure
//! detector rather than the API: a Node stays Ready when only its agent died. A liveness
//! change marks the node in [`Changes::nodes`]; a relist (`reset`) leaves liveness alone.

mod bgp;
mod liveness;
mod names;
mod pools;
mod service_cidrs;
mod services;
mod slices;
mod store;
mod written;

use std::collections::{BTreeMap, BTreeSet};

use bgp::BgpStores;
pub use bgp::{BgpConflict, BgpKind, BgpObject, BgpSecret, BgpSet, BgpSpec};
use names::SharedNames;
pub use services::spec_version;
pub use slices::ServiceSlices;
use slices::SliceIndex;
use store::Store;

use crate::config::ProxyConfig;
use crate::model::{
    AgentLiveness, EndpointSlice, L2Advertisement, L2Announcement, LoadBalancerPool, MetalLbPool, Namespace,
    Node, NodeProxyState, Pod, PoolConflict, Service, ServiceCidr, ServiceName,
};

/// What changed since the last [`ClusterState::take_changes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services whose Service object or EndpointSlices changed.
    pub services: BTreeSet<ServiceName>,
    /// Service objects added, changed or removed (kube-proxy's service change count).
    pub service_events: u64,
    /// EndpointSlices added, changed or removed (kube-proxy's endpoint change count).
    pub endpoint_events: u64,
    /// Nodes that changed, or whose agent's liveness changed.
    pub nodes: BTreeSet<String>,
    /// True when any Pod changed.
    pub pods: bool,
    /// True when any ProxyConfig changed.
    pub proxy_configs: bool,
    /// True when any Namespace changed.
    pub namespaces: bool,
    /// Nodes whose `NodeProxyState` changed.
    pub node_states: BTreeSet<String>,
    /// Services whose `L2Announcement` changed.
    pub announcements: BTreeSet<ServiceName>,
    /// True when any `LoadBalancerPool` changed.
    pub pools: bool,
    /// True when any `ServiceCIDR` changed.
    pub service_cidrs: bool,
    /// True when the BGP objects in force changed.
    pub bgp: bool,
    /// The trigger times of the EndpointSlice versions applied (network programming latency).
    pub trigger_times: Vec<std::time::SystemTime>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self == &Changes::default()
    }

    /// True when these changes can alter the rules or announcements of node `node`: Services
    /// or their slices, the node itself, ProxyConfigs, ServiceCIDRs, announcements. (Other
    /// nodes, their reports, pools, pods and namespaces cannot.)
    pub fn affect_proxy(&self, node: &str) -> bool {
        !self.services.is_empty()
            || self.nodes.contains(node)
            || self.proxy_configs
            || self.service_cidrs
            || !self.announcements.is_empty()
    }

    /// Folds `other` into `self`.
    pub fn merge(&mut self, other: Changes) {
        self.services.extend(other.services);
        self.service_events += other.service_events;
        self.endpoint_events += other.endpoint_events;
        self.nodes.extend(other.nodes);
        self.pods |= other.pods;
        self.proxy_configs |= other.proxy_configs;
        self.namespaces |= other.namespaces;
        self.node_states.extend(other.node_states);
        self.announcements.extend(other.announcements);
        self.pools |= other.pools;
        self.service_cidrs |= other.service_cidrs;
        self.bgp |= other.bgp;
        self.trigger_times.extend(other.trigger_times);
    }
}

/// A full set of objects, as read from a file or every watcher's initial list.
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
    /// Namespaces.
    pub namespaces: Vec<Namespace>,
    /// NodeProxyStates.
    pub node_states: Vec<NodeProxyState>,
    /// L2Announcements.
    pub announcements: Vec<L2Announcement>,
    /// LoadBalancerPools.
    pub pools: Vec<LoadBalancerPool>,
    /// MetalLB's IPAddressPools.
    pub metallb_pools: Vec<MetalLbPool>,
    /// MetalLB's L2Advertisements.
    pub l2_advertisements: Vec<L2Advertisement>,
    /// ServiceCIDRs.
    pub service_cidrs: Vec<ServiceCidr>,
    /// BGP objects, Tideway's and MetalLB's.
    pub bgp: Vec<BgpObject>,
}

type ObjectKey = (String, String);

/// Every kind Tideway reads, indexed for the planner, DNS and the operator.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    services: Store<Service>,
    slices: SliceIndex,
    nodes: Store<Node>,
    pods: Store<Pod>,
    proxy_configs: Store<ProxyConfig>,
    namespaces: Store<Namespace>,
    node_states: Store<NodeProxyState>,
    announcements: Store<L2Announcement>,
    own_pools: Store<LoadBalancerPool>,
    metallb_pools: Store<MetalLbPool>,
    l2_advertisements: Store<L2Advertisement>,
    service_cidrs: Store<ServiceCidr>,
    /// Every pool: `own_pools`, then the `IPAddressPool`s whose names are free.
    pools: Store<LoadBalancerPool>,
    pool_conflicts: Vec<PoolConflict>,
    bgp_stores: BgpStores,
    bgp_secrets: Store<BgpSecret>,
    /// The BGP objects in force, merged from `bgp_stores`.
    bgp: BgpSet,
    /// Agent liveness of the nodes it is known for (absent: `Unknown`).
    liveness: BTreeMap<String, AgentLiveness>,
    /// Node and zone names, one copy each for all endpoints.
    names: SharedNames,
    /// The highest Service `resourceVersion` applied (see [`ClusterState::services_version`]).
    services_version: Option<u64>,
    changes: Changes,
}

/// Moves `list` into a new allocation of its exact size. Not `shrink_to_fit`, and whatever
/// the capacity says: allocators shrink a block in place when the new size is close to the
/// old, so ten endpoints grown to room for sixteen and shrunk keep the larger block (half as
/// much again), with a capacity of ten. One copy per slice applied, the state's largest part.
fn fit<T>(list: &mut Vec<T>) {
    if !list.is_empty() {
        let mut exact = Vec::with_capacity(list.len());
        exact.append(list);
        *list = exact;
    }
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

    /// Number of Services.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    // === EndpointSlices ===

    /// Inserts or updates an EndpointSlice; returns false when nothing changed.
    pub fn apply_endpoint_slice(&mut self, mut slice: EndpointSlice) -> bool {
        self.names.share_in(&mut slice);
        if self.slices.get(&slice.namespace, &slice.name).is_some_and(|p| *p == slice) {
            return false;
        }
        fit(&mut slice.endpoints);
        let svc = ServiceName::new(&slice.namespace, &slice.service);
        self.changes.endpoint_events += 1;
        self.changes.trigger_times.extend(slice.trigger_time);
        if let Some(old) = self.slices.insert(slice) {
            self.changes.services.insert(ServiceName::new(&old.namespace, &old.service));
        }
        self.changes.services.insert(svc);
        true
    }

    /// Removes an EndpointSlice; returns false when it was absent.
    pub fn delete_endpoint_slice(&mut self, namespace: &str, name: &str) -> bool {
        let Some(old) = self.slices.remove(namespace, name) else { return false };
        self.changes.services.insert(ServiceName::new(&old.namespace, &old.service));
        self.changes.endpoint_events += 1;
        true
    }

    /// Replaces every EndpointSlice (after a relist), recording only real differences.
    pub fn replace_endpoint_slices(&mut self, slices: Vec<EndpointSlice>) {
        let keep: BTreeSet<ObjectKey> =
            slices.iter().map(|s| (s.namespace.clone(), s.name.clone())).collect();
        let gone: Vec<ObjectKey> = self
            .endpoint_slices()
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .filter(|k| !keep.contains(k))
            .collect();
        for (ns, name) in &gone {
            self.delete_endpoint_slice(ns, name);
        }
        for slice in slices {
            self.apply_endpoint_slice(slice);
        }
    }

    /// The EndpointSlices of a Service, sorted by slice name.
    pub fn endpoint_slices_for(&self, svc: &ServiceName) -> ServiceSlices<'_> {
        self.slices.for_service(&svc.namespace, &svc.name)
    }

    /// Every Service with its EndpointSlices, in Service order: one walk of the Services and
    /// the slices side by side instead of a lookup per Service.
    pub fn services_with_slices(&self) -> impl Iterator<Item = (&Service, ServiceSlices<'_>)> {
        self.slices.with_services(self.services.values())
    }

    /// Every EndpointSlice.
    pub fn endpoint_slices(&self) -> impl Iterator<Item = &EndpointSlice> {
        self.slices.iter()
    }

    // === Nodes ===

    /// Inserts or updates a Node; returns false when nothing changed.
    pub fn apply_node(&mut self, node: Node) -> bool {
        let name = node.name.clone();
        let changed = self.nodes.apply(node);
        if changed {
            self.changes.nodes.insert(name);
        }
        changed
    }

    /// Removes a Node.
    pub fn delete_node(&mut self, name: &str) -> bool {
        let removed = self.nodes.delete(&("", name)).is_some();
        if removed {
            self.changes.nodes.insert(name.to_string());
        }
        removed
    }

    /// Replaces every Node (after a relist).
    pub fn replace_nodes(&mut self, nodes: Vec<Node>) {
        let changed = self.nodes.replace(nodes);
        self.changes.nodes.extend(changed.into_iter().map(|(_, name)| name));
    }

    /// The Node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(&("", name))
    }

    /// Every Node.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    // === Pods, Namespaces, ProxyConfigs ===

    /// Inserts or updates a Pod.
    pub fn apply_pod(&mut self, pod: Pod) -> bool {
        let changed = self.pods.apply(pod);
        self.changes.pods |= changed;
        changed
    }

    /// Removes a Pod.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) -> bool {
        let removed = self.pods.delete(&(namespace, name)).is_some();
        self.changes.pods |= removed;
        removed
    }

    /// Replaces every Pod (after a relist).
    pub fn replace_pods(&mut self, pods: Vec<Pod>) {
        let changed = self.pods.replace(pods);
        self.changes.pods |= !changed.is_empty();
    }

    /// Every Pod.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    /// Inserts or updates a Namespace.
    pub fn apply_namespace(&mut self, ns: Namespace) -> bool {
        let changed = self.namespaces.apply(ns);
        self.changes.namespaces |= changed;
        changed
    }

    /// Removes a Namespace.
    pub fn delete_namespace(&mut self, name: &str) -> bool {
        let removed = self.namespaces.delete(&("", name)).is_some();
        self.changes.namespaces |= removed;
        removed
    }

    /// Replaces every Namespace (after a relist).
    pub fn replace_namespaces(&mut self, namespaces: Vec<Namespace>) {
        let changed = self.namespaces.replace(namespaces);
        self.changes.namespaces |= !changed.is_empty();
    }

    /// The Namespace called `name`.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(&("", name))
    }

    /// Every Namespace.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.namespaces.values()
    }

    /// Inserts or updates a ProxyConfig.
    pub fn apply_proxy_config(&mut self, config: ProxyConfig) -> bool {
        let changed = self.proxy_configs.apply(config);
        self.changes.proxy_configs |= changed;
        changed
    }

    /// Removes a ProxyConfig.
    pub fn delete_proxy_config(&mut self, name: &str) -> bool {
        let removed = self.proxy_configs.delete(&("", name)).is_some();
        self.changes.proxy_configs |= removed;
        removed
    }

    /// Replaces every ProxyConfig (after a relist).
    pub fn replace_proxy_configs(&mut self, configs: Vec<ProxyConfig>) {
        let changed = self.proxy_configs.replace(configs);
        self.changes.proxy_configs |= !changed.is_empty();
    }

    /// Every ProxyConfig.
    pub fn proxy_configs(&self) -> impl Iterator<Item = &ProxyConfig> {
        self.proxy_configs.values()
    }

    // === Bulk ===

    /// Replaces everything with `snapshot`, recording only real differences as changes.
    pub fn reset(&mut self, snapshot: Snapshot) {
        self.replace_services(snapshot.services);
        self.replace_endpoint_slices(snapshot.endpoint_slices);
        self.replace_nodes(snapshot.nodes);
        self.replace_pods(snapshot.pods);
        self.replace_proxy_configs(snapshot.proxy_configs);
        self.replace_namespaces(snapshot.namespaces);
        self.replace_node_states(snapshot.node_states);
        self.replace_announcements(snapshot.announcements);
        self.replace_pools(snapshot.pools);
        self.replace_metallb_pools(snapshot.metallb_pools);
        self.replace_l2_advertisements(snapshot.l2_advertisements);
        self.replace_service_cidrs(snapshot.service_cidrs);
        self.replace_every_bgp(snapshot.bgp);
    }

    /// The changes waiting to be taken.
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// True when changes are waiting to be taken.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Returns and clears the accumulated changes.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests;
