//! The cluster state's shape: what it holds ([`ClusterState`]), a full read of it
//! ([`Snapshot`]) and what changed ([`Changes`]), with the readers the planner, DNS and the
//! operator use. How each kind lands in it is in the files of its kinds.

use std::collections::{BTreeMap, BTreeSet};

use super::bgp::{BgpObject, BgpSecret, BgpSet, BgpStores};
use super::extra_store::{ExtraLists, ExtraStores};
use super::names::SharedNames;
use super::slices::{ServiceSlices, SliceIndex};
use super::status_index::StatusIndex;
use super::store::Store;
use crate::config::ProxyConfig;
use crate::model::{
    AgentLiveness, EndpointSlice, L2Advertisement, L2Announcement, LoadBalancerPool, MetalLbPool, Namespace,
    Node, NodeProxyState, Pod, PoolConflict, Service, ServiceCidr, ServiceL2Status, ServiceName,
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
    /// Services whose MetalLB announcer changed (a `ServiceL2Status` naming them).
    pub metallb_announcers: BTreeSet<ServiceName>,
    /// True when any `ServiceCIDR` changed.
    pub service_cidrs: bool,
    /// True when the BGP objects in force changed.
    pub bgp: bool,
    /// The extra kinds ([`extra_kind!`](crate::extra_kind)) whose objects changed.
    pub extra: BTreeSet<&'static str>,
    /// The trigger times of the EndpointSlice versions applied (network programming latency).
    pub trigger_times: Vec<std::time::SystemTime>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self == &Changes::default()
    }

    /// True when these changes can alter the rules of node `node`: Services or their slices,
    /// the node itself, ProxyConfigs, ServiceCIDRs. (Other nodes, their reports, the
    /// announcements, pools, pods and namespaces cannot; the announcements are the layer-2
    /// speaker's, which follows them on its own.)
    pub fn affect_proxy(&self, node: &str) -> bool {
        !self.services.is_empty() || self.nodes.contains(node) || self.proxy_configs || self.service_cidrs
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
        self.metallb_announcers.extend(other.metallb_announcers);
        self.service_cidrs |= other.service_cidrs;
        self.bgp |= other.bgp;
        self.extra.extend(other.extra);
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
    /// MetalLB's ServiceL2Statuses.
    pub service_l2_statuses: Vec<ServiceL2Status>,
    /// ServiceCIDRs.
    pub service_cidrs: Vec<ServiceCidr>,
    /// BGP objects, Tideway's and MetalLB's.
    pub bgp: Vec<BgpObject>,
    /// The BGP peers' password Secrets.
    pub bgp_secrets: Vec<BgpSecret>,
    /// The extra kinds' objects ([`extra_kind!`](crate::extra_kind)), by type.
    pub extra: ExtraLists<ClusterState>,
}

/// Every kind Tideway reads, indexed for the planner, DNS and the operator.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub(super) services: Store<Service>,
    pub(super) slices: SliceIndex,
    pub(super) nodes: Store<Node>,
    pub(super) pods: Store<Pod>,
    pub(super) proxy_configs: Store<ProxyConfig>,
    pub(super) namespaces: Store<Namespace>,
    pub(super) node_states: Store<NodeProxyState>,
    pub(super) announcements: Store<L2Announcement>,
    pub(super) own_pools: Store<LoadBalancerPool>,
    pub(super) metallb_pools: Store<MetalLbPool>,
    pub(super) l2_advertisements: Store<L2Advertisement>,
    pub(super) service_l2_statuses: Store<ServiceL2Status>,
    /// The `service_l2_statuses` by the Service they name.
    pub(super) l2_status_index: StatusIndex,
    pub(super) service_cidrs: Store<ServiceCidr>,
    /// Every pool: `own_pools`, then the `IPAddressPool`s whose names are free.
    pub(super) pools: Store<LoadBalancerPool>,
    pub(super) pool_conflicts: Vec<PoolConflict>,
    pub(super) bgp_stores: BgpStores,
    pub(super) bgp_secrets: Store<BgpSecret>,
    /// The extra kinds' stores ([`extra_kind!`](crate::extra_kind)), by type.
    pub(super) extra: ExtraStores<ClusterState>,
    /// The BGP objects in force, merged from `bgp_stores`.
    pub(super) bgp: BgpSet,
    /// Agent liveness of the nodes it is known for (absent: `Unknown`).
    pub(super) liveness: BTreeMap<String, AgentLiveness>,
    /// Node and zone names, one copy each for all endpoints.
    pub(super) names: SharedNames,
    /// The highest Service `resourceVersion` applied (see [`ClusterState::services_version`]).
    pub(super) services_version: Option<u64>,
    pub(super) changes: Changes,
    /// Grows with every change of the announcements (see
    /// [`ClusterState::announcements_version`]).
    pub(super) announcements_version: u64,
}

/// Moves `list` into a new allocation of its exact size. Not `shrink_to_fit`, and whatever
/// the capacity says: allocators shrink a block in place when the new size is close to the
/// old, so ten endpoints grown to room for sixteen and shrunk keep the larger block (half as
/// much again), with a capacity of ten. One copy per slice applied, the state's largest part.
pub(super) fn fit<T>(list: &mut Vec<T>) {
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

    /// Number of Services.
    pub fn service_count(&self) -> usize {
        self.services.len()
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

    /// The Node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(&("", name))
    }

    /// Every Node.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Every Pod.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    /// The Namespace called `name`.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(&("", name))
    }

    /// Every Namespace.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.namespaces.values()
    }

    /// Every ProxyConfig.
    pub fn proxy_configs(&self) -> impl Iterator<Item = &ProxyConfig> {
        self.proxy_configs.values()
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
