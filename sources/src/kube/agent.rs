//! The agent's watches: its own Node and ProxyConfigs first, then Services and EndpointSlices
//! with the selector the node's ProxyConfig gives (started again when it changes), and the
//! kinds its options add (ServiceCIDRs, Namespaces for node-local DNS, the BGP kinds, the
//! peers' password Secrets, MetalLB's own).

use k8s_openapi::api::core::v1::{Namespace, Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::runtime::watcher;
use tideway_api::crd;
use tideway_core::config::resolve_proxy_config;
use tideway_core::model::service_watch_selector;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::KubeSource;
use super::kinds::Reader;
use super::watch_spec::WatchSpec;
use crate::shared::SharedCluster;

impl KubeSource {
    /// The agent's watches of `node`, until dropped.
    pub(super) async fn run_agent(self, cluster: SharedCluster, node: String, service_cidrs: bool) {
        let mut kinds = vec!["Node", "ProxyConfig", "L2Announcement", "Service", "EndpointSlice"];
        if service_cidrs {
            kinds.push("ServiceCIDR");
        }
        if self.node_dns {
            kinds.push("Namespace");
        }
        let metallb_bgp = self.metallb.as_ref().filter(|_| self.bgp);
        if self.bgp {
            kinds.extend(["BGPPeer", "BGPAdvertisement", "BFDProfile", "Community", "LoadBalancerPool"]);
        }
        let secrets = self.bgp_secrets.as_ref().filter(|_| self.bgp);
        if secrets.is_some() {
            kinds.push("Secret");
        }
        if metallb_bgp.is_some() {
            kinds.extend(["BGPPeer.metallb.io", "BGPAdvertisement.metallb.io", "BFDProfile.metallb.io"]);
            kinds.extend(["Community.metallb.io", "IPAddressPool", "L2Advertisement"]);
        }
        let mut tasks = JoinSet::new();
        let barrier = self.start_registered(&mut tasks, &cluster, kinds);
        let (config_changed, mut config_rx) = watch::channel(0u64);
        let own_node = watcher::Config::default().fields(&format!("metadata.name={node}"));
        self.spawn::<Node, _>(
            &mut tasks,
            &cluster,
            &barrier,
            WatchSpec { notify: Some(config_changed.clone()), ..WatchSpec::with(own_node) },
        );
        self.spawn::<crd::ProxyConfig, _>(
            &mut tasks,
            &cluster,
            &barrier,
            WatchSpec { notify: Some(config_changed), ..WatchSpec::all() },
        );
        let announcements = watcher::Config::default().labels(&format!("{}={node}", crd::LABEL_NODE));
        self.spawn::<crd::L2Announcement, _>(&mut tasks, &cluster, &barrier, WatchSpec::with(announcements));
        if service_cidrs {
            self.spawn::<ServiceCIDR, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        }
        if self.node_dns {
            self.spawn::<Namespace, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        }
        if self.bgp {
            self.spawn::<crd::BGPPeer, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
            self.spawn::<crd::BGPAdvertisement, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
            self.spawn::<crd::BFDProfile, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
            self.spawn::<crd::Community, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
            self.spawn::<crd::LoadBalancerPool, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        }
        if let Some(ns) = secrets {
            // Only the password Secrets: the API server sends no other (a TLS key) at all.
            let basic_auth =
                watcher::Config::default().fields(&format!("type={}", tideway_api::convert::BASIC_AUTH));
            self.spawn_in_with::<Secret>(&mut tasks, ns, WatchSpec::with(basic_auth), &cluster, &barrier);
        }
        if let Some(ns) = metallb_bgp {
            self.spawn_in::<crd::MetalLbBgpPeer>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::MetalLbBgpAdvertisement>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::MetalLbBfdProfile>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::MetalLbCommunity>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::IPAddressPool>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::L2Advertisement>(&mut tasks, ns, &cluster, &barrier);
        }
        barrier.wait_listed(&["Node", "ProxyConfig"]).await;
        loop {
            let name = proxy_name(&cluster, &node);
            let (selector, reader) = match self.node_dns {
                true => (String::new(), Reader::All),
                false => (service_watch_selector(name.as_deref()), Reader::Proxy),
            };
            tracing::info!(%selector, "watching Services and EndpointSlices");
            let mut services = JoinSet::new();
            let labelled =
                || WatchSpec { reader, ..WatchSpec::with(watcher::Config::default().labels(&selector)) };
            self.spawn::<Service, _>(&mut services, &cluster, &barrier, labelled());
            self.spawn::<EndpointSlice, _>(&mut services, &cluster, &barrier, labelled());
            loop {
                if config_rx.changed().await.is_err() {
                    while services.join_next().await.is_some() {}
                    return;
                }
                if proxy_name(&cluster, &node) != name {
                    break;
                }
            }
            // The new watches relist and replace both kinds: only differences reach the planner.
            services.abort_all();
        }
    }
}

/// The `service-proxy-name` the node's ProxyConfig sets, if any.
fn proxy_name(cluster: &SharedCluster, node: &str) -> Option<String> {
    let state = cluster.lock();
    let labels = state.node(node).map(|n| n.labels.clone()).unwrap_or_default();
    resolve_proxy_config(state.proxy_configs(), &labels).and_then(|c| c.settings.service_proxy_name.clone())
}
