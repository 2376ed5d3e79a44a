//! The Kubernetes source: one kube-runtime watcher per kind, converted at once into the model.
//!
//! ```text
//!  watcher(Api<K>, selectors).default_backoff()  (one task per kind; first view streamed or
//!                                                 listed: see [`watching`])
//!     --Event<K>--> KindAdapter<K> --convert--> SharedCluster (ClusterState)
//!     errors --> ErrorLog (logged once per cause) + tideway_source_watch_errors_total
//!     panics --> supervise: started again with backoff, counted, a fault until relisted
//!  SyncBarrier: the state is marked synced after the first complete list of every kind
//! ```
//! No reflector store is kept: objects are converted as they arrive and only the model stays;
//! the agent's Services and EndpointSlices keep only the labels a proxy reads.
//!
//! What each component watches:
//! * agent: its own Node (field selector), ProxyConfigs, its L2Announcements (label
//!   `tideway.io/node`), Services and EndpointSlices with kube-proxy's label selector
//!   (`!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`; when the
//!   node's ProxyConfig names a proxy, the watches restart with `!…/headless` and the planner
//!   keeps the Services labelled for it), and ServiceCIDRs unless told not to (before
//!   Kubernetes 1.33); with a node-local DNS listener, Namespaces too, and every Service and
//!   EndpointSlice whole ([`KubeSource::with_node_dns`]);
//! * DNS: Services, EndpointSlices, Namespaces, and Pods with `--pods verified`;
//! * operator: Services, EndpointSlices, Nodes, Namespaces, every `tideway.io` kind and, with
//!   [`KubeSource::with_metallb`], MetalLB's `IPAddressPool`s, `L2Advertisement`s and
//!   `ServiceL2Status`es (empty where MetalLB, before v0.14, has no such CRD); at its start,
//!   [`crds`] brings the cluster's CRDs to its release;
//! * every role: every kind [`register`]ed (a kind defined outside this crate), into the
//!   store's part for them ([`Store::registered`]).

mod adapter;
mod agent;
mod client;
pub mod crds;
mod errors;
#[macro_use]
mod watched_kind;
mod kinds;
mod landing;
mod lease;
mod reach;
pub mod review;
mod status;
mod sync_barrier;
mod watch_spec;
mod watching;
mod writer;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client};
use tideway_api::crd;
use tokio::task::JoinSet;

pub use adapter::{KindAdapter, Outcome};
pub use client::{ClientError, client, failing_fast_client, server_url, unanswered};
pub use errors::{ErrorCause, ErrorLog, classify, classify_request};
pub use kinds::{Holds, Kind, Reader, state_names};
pub use landing::{InRegistered, Landing};
pub use lease::{KubeLease, record as lease_record};
pub use review::{CachedReview, KubeReview, NEGATIVE_TTL, REVIEW_TTL, Reviewer, Subject};
pub use status::{FIELD_MANAGER, KubeNodeStateSink};
pub use writer::{API_MANAGER, KubeWriter, OPERATOR_MANAGER};

use crate::metrics::SourceMetrics;
use crate::shared::{SharedCluster, Store};
use crate::supervise::{Restart, supervise};
use sync_barrier::SyncBarrier;
use watch_spec::WatchSpec;
use watching::watch_kind;

impl From<kube::Error> for crate::status::WriteError {
    /// The API server's answer (status and message) when there was one.
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => {
                crate::status::WriteError::Refused { code: status.code, message: status.message }
            }
            other => crate::status::WriteError::Transport(other.to_string()),
        }
    }
}

/// Starts the watch of one registered kind into the registered kinds' part of a store.
type SpawnWatch = fn(&KubeSource, &mut JoinSet<()>, &InRegistered, &SyncBarrier);

/// The kinds [`register`]ed, by watch name.
static REGISTERED: std::sync::RwLock<Vec<(String, SpawnWatch)>> = std::sync::RwLock::new(Vec::new());

/// Reads the objects of `K` from now on, as the sources' own kinds: in manifest files
/// ([`tideway_api::manifest::register`]) and in a watch of every object that every role's
/// source (agent, DNS, operator) starts beside its own, syncing once it is listed too. They
/// land where the store keeps registered kinds ([`Store::registered`]). For a kind
/// defined outside this crate (a test's): its model kept by type (`tideway_core::extra_kind!`),
/// its watch's landing by [`watched_kind!`](crate::watched_kind). Registering twice is
/// registering once.
pub fn register<K: Kind>() {
    tideway_api::manifest::register::<K>();
    let mut kinds = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if !kinds.iter().any(|(name, _)| *name == K::watch_name()) {
        kinds.push((K::watch_name(), |source, tasks, registered, barrier| {
            let api: Api<K> = Api::all(source.client.clone());
            source.supervised(tasks, api, source.first_view(WatchSpec::all()), registered, barrier);
        }));
    }
}

fn registered() -> Vec<(String, SpawnWatch)> {
    REGISTERED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Which component the source feeds (it decides the kinds and selectors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The node agent of `node`.
    Agent {
        /// This node's name.
        node: String,
        /// Watch ServiceCIDRs (served from Kubernetes 1.33).
        service_cidrs: bool,
    },
    /// The DNS server; `pods` when pod records are verified against Pod objects or answers
    /// depend on the asking pod's node, `node_states` when they depend on what that node's
    /// agent reports programmed.
    Dns {
        /// Watch Pods.
        pods: bool,
        /// Watch NodeProxyStates.
        node_states: bool,
    },
    /// The operator.
    Operator,
}

/// A store holding every kind a DNS server watches ([`KubeSource::run_dns`]).
pub trait DnsStore:
    Store + Holds<Service> + Holds<EndpointSlice> + Holds<Namespace> + Holds<Pod> + Holds<crd::NodeProxyState>
{
}

impl<S> DnsStore for S where
    S: Store
        + Holds<Service>
        + Holds<EndpointSlice>
        + Holds<Namespace>
        + Holds<Pod>
        + Holds<crd::NodeProxyState>
{
}

/// Feeds a [`SharedCluster`] from the API server.
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
    role: Role,
    metrics: SourceMetrics,
    /// The operator reads MetalLB's `IPAddressPool`s, `L2Advertisement`s and
    /// `ServiceL2Status`es of this namespace (and an agent speaking BGP, MetalLB's BGP kinds
    /// too).
    metallb: Option<String>,
    /// The agent speaks BGP: it reads the BGP kinds and the pools.
    bgp: bool,
    /// An agent speaking BGP reads the password Secrets of this namespace.
    bgp_secrets: Option<String>,
    /// How long the API server keeps each watch open (seconds; kube's default when None).
    watch_timeout: Option<u32>,
    /// The agent's node-local DNS listener answers from its view ([`Self::with_node_dns`]).
    node_dns: bool,
}

impl KubeSource {
    /// A source for `role` over `client`; errors and events are counted in `metrics`.
    pub fn new(client: Client, role: Role, metrics: SourceMetrics) -> Self {
        KubeSource {
            client,
            role,
            metrics,
            metallb: None,
            bgp: false,
            bgp_secrets: None,
            watch_timeout: None,
            node_dns: false,
        }
    }

    /// The agent's node-local DNS listener answers from its view: it also reads Namespaces (a
    /// name in an empty namespace is NODATA, in none NXDOMAIN), and every Service and
    /// EndpointSlice whole (headless ones and endpoint hostnames are records; the planner
    /// leaves what is not its own to proxy).
    pub fn with_node_dns(self, node_dns: bool) -> Self {
        KubeSource { node_dns, ..self }
    }

    /// The operator also reads MetalLB's `IPAddressPool`s and `L2Advertisement`s in
    /// `namespace` (where MetalLB's controller reads them), as pools beside the
    /// `LoadBalancerPool`s, and the `ServiceL2Status`es MetalLB's speakers keep there (which
    /// node announces each Service). The first two CRDs must be installed: until both kinds are
    /// listed, the state is not synced and the operator decides nothing. MetalLB before v0.14
    /// has no `ServiceL2Status`: where it is not served, it counts as listed and empty.
    pub fn with_metallb(self, namespace: Option<String>) -> Self {
        KubeSource { metallb: namespace, ..self }
    }

    /// The agent also reads the BGP kinds (`BGPPeer`, `BGPAdvertisement`, `BFDProfile`,
    /// `Community`) and the pools its addresses come from; with [`Self::with_metallb`],
    /// MetalLB's own of each in that namespace too.
    pub fn with_bgp(self, bgp: bool) -> Self {
        KubeSource { bgp, ..self }
    }

    /// An agent speaking BGP also reads the `kubernetes.io/basic-auth` Secrets of `namespace`,
    /// for the peers' `passwordSecret`s (with read access to that namespace's Secrets only).
    pub fn with_bgp_secrets(self, namespace: Option<String>) -> Self {
        KubeSource { bgp_secrets: namespace, ..self }
    }

    /// The API server ends each watch after `timeout` (kube's default is 290 s), with a bookmark
    /// of its latest version 2 s before, and the watch resumes from there without a list:
    /// tests shorten it to see bookmarks carry a watch in seconds.
    pub fn with_watch_timeout(self, timeout: std::time::Duration) -> Self {
        KubeSource { watch_timeout: Some(timeout.as_secs().clamp(1, u32::MAX.into()) as u32), ..self }
    }

    /// Watches until dropped (and tells `cluster` whether the API server answers). Once a
    /// silence found by doubt ([`SharedCluster::doubt_api`]) ends, every watch starts again from
    /// a list: their connections may have hung through it, and what they hold would be stale.
    pub async fn run(self, cluster: SharedCluster) {
        loop {
            let (source, client, probed, cluster) =
                (self.clone(), self.client.clone(), cluster.clone(), cluster.clone());
            let watches = async move {
                match source.role.clone() {
                    Role::Agent { node, service_cidrs } => {
                        source.run_agent(cluster, node, service_cidrs).await
                    }
                    Role::Dns { .. } => source.watch_for_dns(cluster).await,
                    Role::Operator => source.run_operator(cluster).await,
                }
            };
            if !probing(client, probed, watches).await {
                return;
            }
        }
    }

    fn spawn<K: Kind, S: Store + Holds<K>>(
        &self,
        tasks: &mut JoinSet<()>,
        cluster: &SharedCluster<S>,
        barrier: &SyncBarrier,
        spec: WatchSpec,
    ) {
        let api: Api<K> = Api::all(self.client.clone());
        self.supervised(tasks, api, self.first_view(spec), cluster, barrier);
    }

    /// Where the role reads its first view from. Agents and DNS servers, one per node, read it
    /// from the API server's watch cache (`resourceVersion=0`, streamed: see [`watching`])
    /// instead of quorum reads past it; a slightly old view is caught up by the watch that
    /// follows. The operator, which decides addresses from what it lists, reads the latest.
    fn first_view(&self, mut spec: WatchSpec) -> WatchSpec {
        if !matches!(self.role, Role::Operator) {
            spec.config = spec.config.any_semantic();
        }
        spec
    }

    /// [`Self::spawn`] for one namespace's objects of a namespaced kind.
    fn spawn_in<K: Kind<Scope = kube::core::NamespaceResourceScope>>(
        &self,
        tasks: &mut JoinSet<()>,
        namespace: &str,
        cluster: &SharedCluster,
        barrier: &SyncBarrier,
    ) {
        self.spawn_in_with::<K>(tasks, namespace, WatchSpec::all(), cluster, barrier);
    }

    /// [`Self::spawn_in`] with a watch of its own (selectors).
    fn spawn_in_with<K: Kind<Scope = kube::core::NamespaceResourceScope>>(
        &self,
        tasks: &mut JoinSet<()>,
        namespace: &str,
        spec: WatchSpec,
        cluster: &SharedCluster,
        barrier: &SyncBarrier,
    ) {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        self.supervised(tasks, api, spec, cluster, barrier);
    }

    /// Runs [`watch_kind`] in `tasks`, started again after a panic: the restart is logged,
    /// counted (`tideway_source_task_restarts_total{task="watch KIND"}`) and shown as a fault
    /// of the source (readiness) until the new watch has listed the kind again. The new watch
    /// lists from scratch and replaces the kind: nothing lost, nothing twice.
    fn supervised<K: Kind, L: Landing<K>>(
        &self,
        tasks: &mut JoinSet<()>,
        api: Api<K>,
        spec: WatchSpec,
        cluster: &L,
        barrier: &SyncBarrier,
    ) {
        let kind = K::watch_name();
        let task = format!("watch {kind}");
        let spec = match self.watch_timeout {
            Some(t) => WatchSpec { config: spec.config.timeout(t), ..spec },
            None => spec,
        };
        let (cluster, barrier, metrics) = (cluster.clone(), barrier.clone(), self.metrics.clone());
        let report = {
            let (signals, metrics, task) = (cluster.signals().clone(), metrics.clone(), task.clone());
            move |panic: &str| {
                metrics.restarted(&task);
                signals.set_fault(&kind, format!("the {kind} watch panicked ({panic}) and lists again"));
            }
        };
        let make =
            move || watch_kind(api.clone(), spec.clone(), cluster.clone(), barrier.clone(), metrics.clone());
        tasks.spawn(async move { supervise(&task, Restart::default(), make, report).await });
    }

    /// The barrier over the role's own `kinds` and the [`register`]ed ones, whose watches it
    /// starts in `tasks`.
    fn start_registered<S: Store>(
        &self,
        tasks: &mut JoinSet<()>,
        cluster: &SharedCluster<S>,
        kinds: Vec<&str>,
    ) -> SyncBarrier {
        let registered = registered();
        let all: Vec<&str> =
            kinds.into_iter().chain(registered.iter().map(|(name, _)| name.as_str())).collect();
        let barrier = SyncBarrier::new(cluster.signals().clone(), &all);
        let part = InRegistered::of(cluster);
        registered.iter().for_each(|(_, spawn)| spawn(self, tasks, &part, &barrier));
        barrier
    }

    /// [`Self::run`] into a DNS server's own store: the kinds its [`Role::Dns`] watches.
    pub async fn run_dns<S: DnsStore>(self, cluster: SharedCluster<S>) {
        loop {
            let (source, client, probed) = (self.clone(), self.client.clone(), cluster.clone());
            if !probing(client, probed, source.watch_for_dns(cluster.clone())).await {
                return;
            }
        }
    }

    /// Services, EndpointSlices and Namespaces; pods and node reports when the role asks.
    async fn watch_for_dns<S: DnsStore>(self, cluster: SharedCluster<S>) {
        let (pods, node_states) = match self.role {
            Role::Dns { pods, node_states } => (pods, node_states),
            Role::Agent { .. } | Role::Operator => (false, false),
        };
        let mut kinds = vec!["Service", "EndpointSlice", "Namespace"];
        if pods {
            kinds.push("Pod");
        }
        if node_states {
            kinds.push("NodeProxyState");
        }
        let mut tasks = JoinSet::new();
        let barrier = self.start_registered(&mut tasks, &cluster, kinds);
        let for_dns = || WatchSpec { reader: Reader::Dns, ..WatchSpec::all() };
        self.spawn::<Service, _>(&mut tasks, &cluster, &barrier, for_dns());
        self.spawn::<EndpointSlice, _>(&mut tasks, &cluster, &barrier, for_dns());
        self.spawn::<Namespace, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        if pods {
            self.spawn::<Pod, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        }
        if node_states {
            self.spawn::<crd::NodeProxyState, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn run_operator(self, cluster: SharedCluster) {
        let mut kinds = vec![
            "Service",
            "EndpointSlice",
            "Node",
            "Namespace",
            "ProxyConfig",
            "NodeProxyState",
            "L2Announcement",
            "LoadBalancerPool",
        ];
        if self.metallb.is_some() {
            kinds.extend(["IPAddressPool", "L2Advertisement", "ServiceL2Status"]);
        }
        let mut tasks = JoinSet::new();
        let barrier = self.start_registered(&mut tasks, &cluster, kinds);
        self.spawn::<Service, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<EndpointSlice, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<Node, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<Namespace, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<crd::ProxyConfig, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<crd::NodeProxyState, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<crd::L2Announcement, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        self.spawn::<crd::LoadBalancerPool, _>(&mut tasks, &cluster, &barrier, WatchSpec::all());
        if let Some(ns) = &self.metallb {
            self.spawn_in::<crd::IPAddressPool>(&mut tasks, ns, &cluster, &barrier);
            self.spawn_in::<crd::L2Advertisement>(&mut tasks, ns, &cluster, &barrier);
            let optional = WatchSpec::optional();
            self.spawn_in_with::<crd::ServiceL2Status>(&mut tasks, ns, optional, &cluster, &barrier);
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// Runs `watches` until they end, telling `cluster` meanwhile whether the API server answers;
/// true when they were dropped to start again (a doubted silence ended).
async fn probing<S: Store>(
    client: Client,
    cluster: SharedCluster<S>,
    watches: impl Future<Output = ()>,
) -> bool {
    let probe = reach::probe_while_unreachable(client, cluster);
    tokio::select! {
        () = watches => false,
        () = probe => {
            tracing::info!("the API server answers after a silence: every watch starts again from a list");
            true
        }
    }
}
