//! Each watched kind: how its objects convert into the model and land in the [`ClusterState`].

use std::fmt::Debug;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use serde::de::DeserializeOwned;
use tideway_api::{ConvertError, convert, crd};
use tideway_core::cluster::ClusterState;
use tideway_core::model::{self, ServiceName};

use crate::shared::ObjectKey;

/// A Kubernetes kind a source watches.
pub trait Kind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// Its model type.
    type Model: Send + 'static;

    /// Converts an object; `Ok(None)` for objects the model ignores (an FQDN EndpointSlice, a
    /// slice of no Service), which also removes a previous version.
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError>;
    /// Inserts or updates a converted object.
    fn apply(state: &mut ClusterState, model: Self::Model);
    /// Removes the object named by `key`.
    fn delete(state: &mut ClusterState, key: &ObjectKey);
    /// Replaces every object of the kind (after a relist).
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>);
    /// The state's current version of the object named by `key` (kept when an update is invalid).
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model>;

    /// Drops what a service proxy does not read (called for the agent's watches only).
    fn trim_for_proxy(_model: &mut Self::Model) {}

    /// The key naming `obj`.
    fn key(obj: &Self) -> ObjectKey {
        let meta = obj.meta();
        ObjectKey::new(Self::kind(&()), meta.namespace.as_deref(), meta.name.clone().unwrap_or_default())
    }
}

fn ns(key: &ObjectKey) -> &str {
    key.namespace.as_deref().unwrap_or("default")
}

fn service_name(key: &ObjectKey) -> ServiceName {
    ServiceName::new(ns(key), &key.name)
}

/// The only labels a service proxy reads: which proxy a Service is for, and headlessness.
fn keep_proxy_labels(labels: &mut std::collections::BTreeMap<String, String>) {
    // Rebuilt rather than retained: an emptied map would keep its node allocated.
    *labels = std::mem::take(labels)
        .into_iter()
        .filter(|(k, _)| k == model::LABEL_SERVICE_PROXY_NAME || k == model::LABEL_HEADLESS)
        .collect();
}

impl Kind for Service {
    type Model = model::Service;
    fn trim_for_proxy(m: &mut Self::Model) {
        keep_proxy_labels(&mut m.labels);
    }
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        convert::service(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_service(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_service(&service_name(key));
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_services(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.service(&service_name(key)).cloned()
    }
}

impl Kind for EndpointSlice {
    type Model = model::EndpointSlice;
    fn trim_for_proxy(m: &mut Self::Model) {
        keep_proxy_labels(&mut m.labels);
    }
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        convert::endpoint_slice(self)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_endpoint_slice(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_endpoint_slice(ns(key), &key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_endpoint_slices(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.endpoint_slices().find(|s| s.namespace == ns(key) && s.name == key.name).cloned()
    }
}

impl Kind for Node {
    type Model = model::Node;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        convert::node(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_node(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_node(&key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_nodes(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.node(&key.name).cloned()
    }
}

impl Kind for Pod {
    type Model = model::Pod;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        convert::pod(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_pod(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_pod(ns(key), &key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_pods(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.pods().find(|p| p.namespace == ns(key) && p.name == key.name).cloned()
    }
}

impl Kind for Namespace {
    type Model = model::Namespace;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        convert::namespace(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_namespace(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_namespace(&key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_namespaces(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.namespace(&key.name).cloned()
    }
}

impl Kind for crd::ProxyConfig {
    type Model = tideway_core::config::ProxyConfig;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        crd::proxy_config(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_proxy_config(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_proxy_config(&key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_proxy_configs(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.proxy_configs().find(|c| c.name == key.name).cloned()
    }
}

impl Kind for crd::NodeProxyState {
    type Model = model::NodeProxyState;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        crd::node_state_from(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_node_state(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_node_state(&key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_node_states(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.node_state(&key.name).cloned()
    }
}

impl Kind for crd::L2Announcement {
    type Model = model::L2Announcement;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        crd::l2_announcement(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_announcement(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_announcement(&service_name(key));
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_announcements(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.announcement(&service_name(key)).cloned()
    }
}

impl Kind for crd::LoadBalancerPool {
    type Model = model::LoadBalancerPool;
    fn convert(&self) -> Result<Option<Self::Model>, ConvertError> {
        crd::load_balancer_pool(self).map(Some)
    }
    fn apply(state: &mut ClusterState, m: Self::Model) {
        state.apply_pool(m);
    }
    fn delete(state: &mut ClusterState, key: &ObjectKey) {
        state.delete_pool(&key.name);
    }
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace_pools(all);
    }
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
        state.pool(&key.name).cloned()
    }
}
