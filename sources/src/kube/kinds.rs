//! Each watched kind: how its objects convert into the model and land in the [`ClusterState`]
//! (or in a consumer's own store, [`Holds`]).

use std::fmt::Debug;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Resource;
use tideway_api::crd::BgpResource;
use tideway_api::{ToModel, crd};
use tideway_core::cluster::{ClusterState, StateKind};
use tideway_core::model;

use crate::shared::ObjectKey;

/// A [`Store`](crate::Store) that holds the objects of kind `K`: what the watch of `K` writes into it. The
/// [`ClusterState`] holds every kind; a consumer's own store holds the kinds it watches.
pub trait Holds<K: Kind> {
    /// Inserts or updates a converted object.
    fn apply(&mut self, model: K::Model);
    /// Removes the object named by `key`.
    fn delete(&mut self, key: &ObjectKey);
    /// Replaces every object of the kind (after a relist); the objects named in `keep`,
    /// invalid in the relist, keep their current versions.
    fn replace(&mut self, all: Vec<K::Model>, keep: &[ObjectKey]);
}

impl<K: Kind> Holds<K> for ClusterState {
    fn apply(&mut self, model: K::Model) {
        K::apply(self, model);
    }

    fn delete(&mut self, key: &ObjectKey) {
        K::delete(self, key);
    }

    fn replace(&mut self, mut all: Vec<K::Model>, keep: &[ObjectKey]) {
        all.extend(keep.iter().filter_map(|key| K::current(self, key)));
        K::replace(self, all);
    }
}

/// A Kubernetes kind a source watches.
///
/// Its model type and conversion are [`ToModel`]'s (an object the model ignores also removes
/// a previous version).
pub trait Kind: Resource<DynamicType = ()> + ToModel + Clone + Debug + Send + Sync + 'static {
    /// Inserts or updates a converted object.
    fn apply(state: &mut ClusterState, model: Self::Model) {
        state.apply(model);
    }
    /// Removes the object named by `key`.
    fn delete(state: &mut ClusterState, key: &ObjectKey);
    /// Replaces every object of the kind (after a relist).
    fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
        state.replace(all);
    }
    /// The state's current version of the object named by `key` (kept when an update is invalid).
    fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model>;

    /// Drops what `reader` does not read, so that it is not kept (nothing by default).
    fn trim(_model: &mut Self::Model, _reader: Reader) {}

    /// The name of its watch (in sync progress, faults, metrics and invalid objects): the
    /// kind, unless two groups share it.
    fn watch_name() -> String {
        Self::kind(&()).to_string()
    }

    /// The key naming `obj`.
    fn key(obj: &Self) -> ObjectKey {
        let meta = obj.meta();
        ObjectKey::new(Self::watch_name(), meta.namespace.as_deref(), meta.name.clone().unwrap_or_default())
    }
}

fn ns(key: &ObjectKey) -> &str {
    key.namespace.as_deref().unwrap_or("default")
}

/// Who reads the objects a watch delivers: each keeps only what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reader {
    /// Everything is kept (the operator).
    #[default]
    All,
    /// A service proxy (the node agent): of the labels, only the two it reads; of an
    /// endpoint, no hostname, pod or zone (its node and hints decide locality).
    Proxy,
    /// Cluster DNS: no labels, no endpoint topology (node, zone, hints).
    Dns,
}

/// The only labels a service proxy reads: which proxy a Service is for, and headlessness.
fn keep_proxy_labels(labels: &mut std::collections::BTreeMap<String, String>) {
    // Rebuilt rather than retained: an emptied map would keep its node allocated.
    *labels = std::mem::take(labels)
        .into_iter()
        .filter(|(k, _)| k == model::LABEL_SERVICE_PROXY_NAME || k == model::LABEL_HEADLESS)
        .collect();
}

fn trim_service(m: &mut model::Service, reader: Reader) {
    match reader {
        Reader::All => {}
        Reader::Proxy => keep_proxy_labels(&mut m.labels),
        Reader::Dns => m.labels = Default::default(),
    }
}

fn trim_slice(m: &mut model::EndpointSlice, reader: Reader) {
    match reader {
        Reader::All => {}
        Reader::Proxy => {
            keep_proxy_labels(&mut m.labels);
            for ep in &mut m.endpoints {
                ep.pod_name = None;
                ep.set_hostname(None);
                ep.set_zone(None);
            }
        }
        Reader::Dns => {
            m.labels = Default::default();
            for ep in &mut m.endpoints {
                ep.node_name = None;
                ep.set_zone(None);
                ep.set_hints(None);
            }
        }
    }
}

/// The namespace and name `key` names in the state: `""` for a kind kept without one.
pub fn state_names<M: StateKind>(key: &ObjectKey) -> (&str, &str) {
    match M::NAMESPACED {
        true => (ns(key), &key.name),
        false => ("", &key.name),
    }
}

// What a watch of each kind whose model a namespace and a name identify does to the state
// (`watched_kind!`), and how each reader trims it.
watched_kind! {
    Service, trim: trim_service;
    EndpointSlice, trim: trim_slice;
    Node;
    Pod;
    Namespace;
    ServiceCIDR;
    crd::ProxyConfig;
    crd::NodeProxyState;
    crd::L2Announcement;
    crd::LoadBalancerPool;
    crd::IPAddressPool;
    crd::L2Advertisement;
    crd::ServiceL2Status;
    // `kubernetes.io/basic-auth` Secrets, for the BGP peers' `passwordSecret`s (others are
    // not read).
    Secret;
}

/// The namespace a BGP object of `source` is stored under: `""` for Tideway's.
fn bgp_namespace(source: crd::Source, key: &ObjectKey) -> &str {
    match source {
        crd::Source::Tideway => "",
        crd::Source::MetalLb => ns(key),
    }
}

/// The BGP kinds, Tideway's and MetalLB's: one object each in the state's BGP set.
macro_rules! bgp_kinds {
    ($($t:ty),*) => {$(
        impl Kind for $t {
            fn apply(state: &mut ClusterState, m: Self::Model) {
                state.apply(m);
            }
            fn delete(state: &mut ClusterState, key: &ObjectKey) {
                state.delete_bgp(<$t>::KIND, bgp_namespace(<$t>::SOURCE, key), &key.name);
            }
            fn replace(state: &mut ClusterState, all: Vec<Self::Model>) {
                state.replace_bgp(<$t>::KIND, <$t>::SOURCE == crd::Source::MetalLb, all);
            }
            fn current(state: &ClusterState, key: &ObjectKey) -> Option<Self::Model> {
                state.bgp_object(<$t>::KIND, bgp_namespace(<$t>::SOURCE, key), &key.name).cloned()
            }
            fn watch_name() -> String {
                match <$t>::SOURCE {
                    crd::Source::Tideway => <$t>::KIND.as_str().to_string(),
                    crd::Source::MetalLb => format!("{}.metallb.io", <$t>::KIND.as_str()),
                }
            }
        }
    )*};
}

tideway_api::for_each_bgp_kind!(bgp_kinds);

#[cfg(test)]
mod tests {
    use tideway_core::net::Protocol::Tcp;
    use tideway_core::testing::{mk_service, mk_slice};

    use super::*;

    #[test]
    fn each_reader_keeps_what_it_reads() {
        let svc = mk_service("ns", "web")
            .port("http", Tcp, 80)
            .label("app", "web")
            .label(model::LABEL_SERVICE_PROXY_NAME, "p")
            .build();
        let slice =
            mk_slice("ns", "web").port("http", Tcp, 80).ready("10.0.0.1", "node-a").zone_hint("z").build();
        let mut slice =
            model::EndpointSlice { labels: [("app".to_string(), "web".to_string())].into(), ..slice };
        let first = &mut slice.endpoints[0];
        first.pod_name = Some("web-0".into());
        first.set_hostname(Some("web-0".into()));
        first.set_zone(Some("z".into()));
        let trimmed = |reader| {
            let (mut s, mut e) = (svc.clone(), slice.clone());
            Service::trim(&mut s, reader);
            EndpointSlice::trim(&mut e, reader);
            (s, e)
        };
        assert_eq!(trimmed(Reader::All), (svc.clone(), slice.clone()));
        let (s, e) = trimmed(Reader::Proxy);
        assert_eq!(s.labels.keys().collect::<Vec<_>>(), [model::LABEL_SERVICE_PROXY_NAME]);
        assert!(e.labels.is_empty());
        let (ep, was) = (&e.endpoints[0], &slice.endpoints[0]);
        assert_eq!(
            (&ep.node_name, ep.hints()),
            (&was.node_name, was.hints()),
            "a proxy reads nodes and hints"
        );
        assert_eq!((ep.hostname(), &ep.pod_name, ep.zone()), (None, &None, None));
        let (s, e) = trimmed(Reader::Dns);
        assert!(s.labels.is_empty() && e.labels.is_empty());
        assert_eq!(s.ports, svc.ports);
        let ep = &e.endpoints[0];
        assert_eq!((&ep.node_name, ep.zone(), ep.hints()), (&None, None, None));
        assert_eq!((&*ep.addresses, ep.ready), (&*slice.endpoints[0].addresses, true));
        assert_eq!(
            (ep.hostname(), &ep.pod_name),
            (slice.endpoints[0].hostname(), &slice.endpoints[0].pod_name)
        );
    }
}
