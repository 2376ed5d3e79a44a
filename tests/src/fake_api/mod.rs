//! A stand-in for the Kubernetes API server, for tests and benchmarks of the Kubernetes edge.
//!
//! The real API server runs in the test bed (the lab's control plane, built from Kubernetes'
//! own modules: `make kube`), and every Kubernetes-facing test that it can serve runs there:
//! * CRD admission with the real schema and CEL (`lab/tests/crd_admission.rs`);
//! * watches, streamed first views, 410 Gone after a real compaction, a server without
//!   WatchList (`lab/tests/watches.rs`, with [`crate::fault_proxy`] for cut and hung connections);
//! * the Kubernetes source's selectors, streamed views, ServiceCIDRs, synced signal, BGP kinds
//!   of both groups (MetalLB's own CRDs), the NodeProxyState's server-side apply, RBAC denials
//!   and the reviews' cost (`lab/tests/source_api.rs`);
//! * TokenReviews and SubjectAccessReviews by audience and RBAC (`lab/tests/reviews.rs`);
//!   server-side apply's conflicts and a real `kubectl edit` (`lab/tests/server_side_apply.rs`);
//! * a killed API server, a stopped etcd (504s), an RBAC denial (`lab/tests/api_faults.rs`);
//!   fenced leadership over real Leases (`lab/tests/fencing.rs`); 429s from API Priority and
//!   Fairness (`lab/tests/throttled.rs`);
//! * the operator's writes, Events, election, reviewed REST changes, failover and MetalLB's
//!   objects (`lab/tests/operator_api/`);
//! * `tideway dns` and `tideway agent` with `--source kubernetes` (`cli/tests/kubernetes_api.rs`),
//!   the operator and two agents failing over as processes (`cli/tests/failover.rs`),
//!   `tideway migrate --from-cluster` (`cli/tests/migrate_cluster.rs`), and the lab in kube
//!   mode (`cli/tests/lab_kube.rs`).
//!
//! The components run there as the chart's ServiceAccounts, and the server's audit log
//! ([`crate::audit`]) is `make check-rbac`'s evidence. What still runs here, and why:
//! * what a real server does not do on cue: an object changed or removed with no watch event
//!   (`remove_silently`, the relist's diff) and a 410 at once, watches that time out every
//!   200 ms, a server that cannot stream lists answering 410 after a list, an invalid object
//!   (`sources/tests/kube_source.rs`); a 409 answered to one status write
//!   (`operator/tests/kube.rs`); a 410 answered to the agent's watch and an invalid Service
//!   (`cli/tests/kubernetes.rs`); an outage answering 503 to every request and closing
//!   watches at once, and a silent server (`sources/tests/api_reach.rs`: the real one, etcd
//!   stopped, keeps watches open and lists from its cache);
//! * `sources/tests/api_server.rs`, which holds this server to the real one's answers
//!   (`lab/tests/server_side_apply.rs`'s assertions) for as long as tests run here;
//! * the benchmarks that count requests (`node-agent/benches/report.rs`,
//!   `cli/benches/agent/process.rs`): the real server beside them on two cores would measure
//!   itself.
//!
//! Its requests authorized by the chart's roles are recorded for `make check-rbac` too.
//!
//! It speaks just enough of the REST protocol for
//! kube-rs: paginated lists with label and field selectors, watches as streams of JSON lines
//! ([`watch`]: a bounded history with `410 Gone` past it, timeouts with bookmarks, connections
//! cut on demand, streamed lists), GET, server-side-apply and merge PATCH of objects and their
//! status, TokenReviews and SubjectAccessReviews of tokens and grants the test sets. Every
//! request is authenticated (a kubeconfig names an [`Account`]; any other token is a 401) and
//! authorized by the chart's own RBAC ([`rbac`]): what the chart does not grant a component's
//! ServiceAccount is a `403 Forbidden`, as in a cluster. It records every request for
//! assertions.
//!
//! Objects are plain JSON; the test adds, changes and deletes them, and open watches see it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

mod apply;
mod background;
mod handlers;
pub mod rbac;
mod reviews;
mod watch;
mod writes;

pub use background::BackgroundApi;
use handlers::handle;
pub use rbac::Account;

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it arrived.
    pub at: std::time::Instant,
    /// Who sent it: the bearer token (see [`FakeApi::kubeconfig_as`]).
    pub user: Option<String>,
    /// The account the token authenticated as.
    pub account: Option<Account>,
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Query parameters.
    pub query: BTreeMap<String, String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// Body, parsed as JSON (kube sends apply patches as JSON), or Null.
    pub body: Value,
}

impl Recorded {
    /// A GET for the state of a collection rather than its changes: a list (or a read of one
    /// object), or a watch that streams a list (`sendInitialEvents=true`).
    pub fn is_first_view(&self) -> bool {
        let watch = self.query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let streamed = self.query.get("sendInitialEvents").is_some_and(|s| s == "true");
        self.method == "GET" && (!watch || streamed)
    }
}

/// One resource: `/api/v1/services`, `/apis/tideway.io/v1alpha1/proxyconfigs`, ...
struct Resource {
    kind: String,
    api_version: String,
    /// (namespace or "", name) -> object
    objects: BTreeMap<(String, String), Value>,
    /// The latest events with their resource versions, for watches resuming from one.
    log: Vec<(u64, Value)>,
    /// The newest version dropped from `log`: a watch from an older one is 410 Gone.
    compacted: u64,
    /// How many events `log` keeps.
    history: usize,
    events: broadcast::Sender<(u64, Value)>,
    /// Field ownership per object.
    owners: BTreeMap<(String, String), apply::Owners>,
    forbidden: bool,
    gone_next_watch: bool,
}

struct Inner {
    resources: BTreeMap<String, Resource>,
    requests: Vec<Recorded>,
    rv: u64,
    /// (method, path) -> HTTP status to answer, once each.
    failures: Vec<(String, String, u16)>,
    reviews: reviews::Reviews,
    /// Users whose requests hang until released (then they are dropped, never applied).
    hanging: BTreeMap<String, tokio::sync::watch::Sender<bool>>,
    /// While set, every request is answered with this status (an outage).
    outage: Option<u16>,
    /// The longest a watch lasts, whatever its `timeoutSeconds`.
    watch_cap: Option<std::time::Duration>,
    /// Streams lists (`sendInitialEvents`, the `WatchList` feature, on by default since
    /// Kubernetes 1.32); when off, such a watch is refused as a server without it refuses it.
    watch_list: bool,
    /// Bearer token -> the account it authenticates.
    accounts: BTreeMap<String, Account>,
    /// The chart's RBAC (one value set's) that decides what each account may do.
    rbac: &'static rbac::Rbac,
    usage: rbac::Usage,
}

/// The fake API server; stops when dropped (with the runtime that serves it).
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// The resources a Tideway component (or `tideway migrate`) may ask for: (path, kind,
/// apiVersion).
pub const RESOURCES: &[(&str, &str, &str)] = &[
    ("/api/v1/services", "Service", "v1"),
    ("/api/v1/nodes", "Node", "v1"),
    ("/api/v1/pods", "Pod", "v1"),
    ("/api/v1/namespaces", "Namespace", "v1"),
    ("/api/v1/configmaps", "ConfigMap", "v1"),
    ("/api/v1/secrets", "Secret", "v1"),
    ("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice", "discovery.k8s.io/v1"),
    ("/apis/networking.k8s.io/v1/servicecidrs", "ServiceCIDR", "networking.k8s.io/v1"),
    ("/apis/tideway.io/v1alpha1/proxyconfigs", "ProxyConfig", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/nodeproxystates", "NodeProxyState", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/loadbalancerpools", "LoadBalancerPool", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/l2announcements", "L2Announcement", "tideway.io/v1alpha1"),
    ("/apis/metallb.io/v1beta1/ipaddresspools", "IPAddressPool", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/l2advertisements", "L2Advertisement", "metallb.io/v1beta1"),
    ("/apis/tideway.io/v1alpha1/bgppeers", "BGPPeer", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/bgpadvertisements", "BGPAdvertisement", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/bfdprofiles", "BFDProfile", "tideway.io/v1alpha1"),
    ("/apis/tideway.io/v1alpha1/communities", "Community", "tideway.io/v1alpha1"),
    ("/apis/metallb.io/v1beta2/bgppeers", "BGPPeer", "metallb.io/v1beta2"),
    ("/apis/metallb.io/v1beta1/bgpadvertisements", "BGPAdvertisement", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/bfdprofiles", "BFDProfile", "metallb.io/v1beta1"),
    ("/apis/metallb.io/v1beta1/communities", "Community", "metallb.io/v1beta1"),
    ("/apis/coordination.k8s.io/v1/leases", "Lease", "coordination.k8s.io/v1"),
    ("/apis/events.k8s.io/v1/events", "Event", "events.k8s.io/v1"),
];

/// Events kept per resource for watches that resume (the API server's watch cache keeps 100 by
/// default; older versions are compacted away).
pub const HISTORY: usize = 100;

/// Field manager of the changes a test makes with [`FakeApi::upsert`] and [`FakeApi::preload`].
pub const TEST_MANAGER: &str = "test";

/// The collection path of `kind`, or of `Kind.group` for a kind two groups share (`BGPPeer`
/// alone is Tideway's, `BGPPeer.metallb.io` MetalLB's).
pub fn path_of(kind: &str) -> &'static str {
    let (kind, group) = kind.split_once('.').map_or((kind, None), |(k, g)| (k, Some(g)));
    RESOURCES
        .iter()
        .find(|(_, k, v)| *k == kind && group.is_none_or(|g| v.split('/').next() == Some(g)))
        .map(|(p, _, _)| *p)
        .unwrap_or_else(|| panic!("unknown kind {kind}"))
}

/// The collection path of `obj`: by its kind and, when it has one, its `apiVersion`.
fn path_of_object(obj: &Value) -> &'static str {
    let kind = obj["kind"].as_str().expect("object has a kind");
    let group = obj["apiVersion"].as_str().and_then(|v| v.split_once('/')).map(|(g, _)| g);
    match group {
        Some(g) if RESOURCES.iter().any(|(_, k, v)| *k == kind && v.starts_with(&format!("{g}/"))) => {
            path_of(&format!("{kind}.{g}"))
        }
        _ => path_of(kind),
    }
}

impl FakeApi {
    /// Starts serving on 127.0.0.1 (of the current network namespace) in the current runtime.
    pub async fn start() -> FakeApi {
        FakeApi::start_at(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts serving on `bind` (port 0: any free one) in the current runtime: an address
    /// other than loopback lets processes in other network namespaces reach it, as the nodes
    /// of a cluster reach its API server.
    pub async fn start_at(bind: SocketAddr) -> FakeApi {
        let resources = RESOURCES
            .iter()
            .map(|(path, kind, api_version)| {
                (
                    path.to_string(),
                    Resource {
                        kind: kind.to_string(),
                        api_version: api_version.to_string(),
                        objects: BTreeMap::new(),
                        log: Vec::new(),
                        compacted: 0,
                        history: HISTORY,
                        events: broadcast::channel(1 << 16).0,
                        owners: BTreeMap::new(),
                        forbidden: false,
                        gone_next_watch: false,
                    },
                )
            })
            .collect();
        let inner = Arc::new(Mutex::new(Inner {
            resources,
            requests: Vec::new(),
            rv: 1,
            failures: Vec::new(),
            reviews: Default::default(),
            hanging: BTreeMap::new(),
            outage: None,
            watch_cap: None,
            watch_list: true,
            accounts: Account::COMPONENTS
                .into_iter()
                .chain([Account::ClusterAdmin])
                .map(|a| (a.token().to_string(), a))
                .collect(),
            rbac: rbac::Rbac::chart(rbac::DEFAULT_VALUES),
            usage: Default::default(),
        }));
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind fake API");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeApi { inner, addr }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes a kubeconfig pointing at this server into `dir` that authenticates as
    /// `account`; returns its path.
    pub fn kubeconfig(&self, dir: &Path, account: Account) -> PathBuf {
        self.kubeconfig_as(dir, account, account.token())
    }

    /// As [`FakeApi::kubeconfig`] with a bearer token of its own (one replica of a component:
    /// requests are recorded, and can be made to hang, per token).
    pub fn kubeconfig_as(&self, dir: &Path, account: Account, token: &str) -> PathBuf {
        self.lock().accounts.insert(token.to_string(), account);
        let path = dir.join(format!("kubeconfig-{token}"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: fake\n  user:\n    token: {}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr, token
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// Adds or replaces an object (JSON in Kubernetes form; kind and apiVersion are filled in).
    pub fn upsert(&self, mut obj: Value) {
        let path = path_of_object(&obj);
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path).expect("resource");
        let key = res.stamp(&mut obj, rv);
        let kind = if res.objects.contains_key(&key) { "MODIFIED" } else { "ADDED" };
        res.track(&key, &mut obj);
        res.objects.insert(key, obj.clone());
        res.emit(rv, json!({"type": kind, "object": obj}));
    }

    /// Adds many objects at once without emitting events (a large initial list).
    pub fn preload(&self, objects: impl IntoIterator<Item = Value>) {
        let mut inner = self.lock();
        for mut obj in objects {
            inner.rv += 1;
            let rv = inner.rv;
            let res = inner.resources.get_mut(path_of_object(&obj)).expect("resource");
            let key = res.stamp(&mut obj, rv);
            res.track(&key, &mut obj);
            res.objects.insert(key, obj);
        }
    }

    /// Deletes an object.
    pub fn delete(&self, kind: &str, namespace: Option<&str>, name: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        res.owners.remove(&key);
        if let Some(mut obj) = res.objects.remove(&key) {
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            res.emit(rv, json!({"type": "DELETED", "object": obj}));
        }
    }

    /// Removes an object without a watch event (as if it went while no watch was open).
    pub fn remove_silently(&self, kind: &str, namespace: Option<&str>, name: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        res.owners.remove(&key);
        res.objects.remove(&key);
    }

    /// The stored object, if any.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let inner = self.lock();
        inner.resources[path_of(kind)]
            .objects
            .get(&(namespace.unwrap_or("").to_string(), name.to_string()))
            .cloned()
    }

    /// Authorizes by the chart rendered with the value set `set` (a file of
    /// `helm/tideway/ci`, as the snapshots name it) instead of the default values.
    pub fn chart_values(&self, set: &str) {
        self.lock().rbac = rbac::Rbac::chart(set);
    }

    /// Stops serving `kind` at all, as an API server where its CRD is not installed: every
    /// request for it is a `404 NotFound` ("could not find the requested resource").
    pub fn unserve(&self, kind: &str) {
        self.lock().resources.remove(path_of(kind));
    }

    /// Makes every request for `kind` answer 403, whatever the chart grants (a grant withdrawn
    /// or not yet in force), or stop doing so.
    pub fn forbid(&self, kind: &str, forbidden: bool) {
        self.lock().resources.get_mut(path_of(kind)).expect("resource").forbidden = forbidden;
    }

    /// Ends the open watches of `kind` with a `410 Gone` error event (the server compacted
    /// past them), and answers the next watch the same way: the client must relist.
    pub fn expire_watches(&self, kind: &str) {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        res.gone_next_watch = true;
        let _ = res.events.send((rv, gone()));
    }

    /// Keeps the latest `events` events per resource for resuming watches (default
    /// [`HISTORY`]); what is older is compacted away at the next change.
    pub fn keep_history(&self, events: usize) {
        for res in self.lock().resources.values_mut() {
            res.history = events.max(1);
        }
    }

    /// Compacts the history of `kind` now (as etcd's compaction): a watch from any version
    /// before the current one gets 410 Gone. Open watches carry on.
    pub fn compact(&self, kind: &str) {
        let mut inner = self.lock();
        let rv = inner.rv;
        let res = inner.resources.get_mut(path_of(kind)).expect("resource");
        res.log.clear();
        res.compacted = rv;
    }

    /// Ends every watch after `cap` at most, whatever its `timeoutSeconds` (the API server's
    /// request timeout, shortened so that tests see many watches end); `None`: as asked.
    pub fn cap_watches(&self, cap: Option<std::time::Duration>) {
        self.lock().watch_cap = cap;
    }

    /// Whether watches stream lists (`sendInitialEvents=true`; on unless turned off): off, the
    /// server answers such a watch `422 Invalid` as a server without the `WatchList` feature
    /// (Kubernetes 1.27-1.31 by default) does.
    pub fn stream_lists(&self, on: bool) {
        self.lock().watch_list = on;
    }

    /// Cuts the open watch connections of `kind` mid-stream (no clean end, as when a load
    /// balancer or the network drops them).
    pub fn drop_watches(&self, kind: &str) {
        let inner = self.lock();
        let _ = inner.resources[path_of(kind)].events.send((inner.rv, json!({"type": DROP})));
    }

    /// An outage (`Some(code)`, e.g. 503 while the API server restarts) or its end (`None`):
    /// while it lasts every request is answered `code`; as it starts, every open watch ends
    /// without an event, as when the server closes its connections.
    pub fn outage(&self, code: Option<u16>) {
        let mut inner = self.lock();
        inner.outage = code;
        if code.is_some() {
            inner.rv += 1;
            let rv = inner.rv;
            for res in inner.resources.values() {
                let _ = res.events.send((rv, json!({"type": CLOSE})));
            }
        }
    }

    /// Answers the next `method` request to exactly `path` with `code` (once).
    pub fn fail_next(&self, method: &str, path: &str, code: u16) {
        self.lock().failures.push((method.to_string(), path.to_string(), code));
    }

    /// Makes every new request from `user` hang (as behind a partition or an overloaded server)
    /// until [`FakeApi::release`]; open watches keep streaming.
    pub fn hang(&self, user: &str) {
        self.lock().hanging.insert(user.to_string(), tokio::sync::watch::channel(true).0);
    }

    /// Releases `user`'s hung requests: each is answered 503 and never applied (the request
    /// was lost on the way); new requests are served again.
    pub fn release(&self, user: &str) {
        if let Some(hung) = self.lock().hanging.remove(user) {
            hung.send_replace(false);
        }
    }

    /// TokenReviews of `token` authenticate `user` in `groups` (a token for the API server's
    /// own audience, as `kubectl create token SA` mints).
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.add_token_for(token, user, groups, &[reviews::API_AUDIENCE]);
    }

    /// As [`FakeApi::add_token`], for `audiences` (`kubectl create token SA --audience A`).
    pub fn add_token_for(&self, token: &str, user: &str, groups: &[&str], audiences: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        let audiences = audiences.iter().map(|a| a.to_string()).collect();
        self.lock().reviews.tokens.insert(token.into(), (user.into(), groups, audiences));
    }

    /// SubjectAccessReviews allow `user` to `verb` the `resource` of API `group`.
    pub fn grant(&self, user: &str, verb: &str, group: &str, resource: &str) {
        self.lock().reviews.grants.insert((user.into(), verb.into(), group.into(), resource.into()));
    }

    /// Every stored object of `kind`.
    pub fn list(&self, kind: &str) -> Vec<Value> {
        self.lock().resources[path_of(kind)].objects.values().cloned().collect()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// Requests whose path starts with `prefix`.
    pub fn requests_to(&self, prefix: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path.starts_with(prefix)).collect()
    }
}

impl Resource {
    /// Fills in what the API server would: apiVersion, resourceVersion, a uid. Returns the key.
    fn stamp(&self, obj: &mut Value, rv: u64) -> (String, String) {
        obj["apiVersion"] = json!(self.api_version);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = object_key(obj);
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{}-{}", key.0, key.1));
        }
        key
    }

    /// Records a change the test made (field manager `test`) in `obj`'s managed fields.
    fn track(&mut self, key: &(String, String), obj: &mut Value) {
        let owners = self.owners.entry(key.clone()).or_default();
        let old = self.objects.get(key);
        owners.update(old, obj, TEST_MANAGER, "");
        owners.update(old, obj, TEST_MANAGER, "status");
        obj["metadata"]["managedFields"] = owners.managed_fields(&self.api_version);
    }

    /// Stores `obj` at `rv` with its `owners`, and tells the watches; returns it.
    fn store(
        &mut self,
        key: (String, String),
        mut obj: Value,
        owners: apply::Owners,
        rv: u64,
        event: &str,
    ) -> Value {
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["managedFields"] = owners.managed_fields(&self.api_version);
        self.owners.insert(key.clone(), owners);
        self.objects.insert(key, obj.clone());
        self.emit(rv, json!({"type": event, "object": obj.clone()}));
        obj
    }

    fn emit(&mut self, rv: u64, event: Value) {
        self.log.push((rv, event.clone()));
        if self.log.len() > self.history {
            let gone = self.log.len() - self.history;
            self.compacted = self.log[gone - 1].0;
            self.log.drain(..gone);
        }
        let _ = self.events.send((rv, event));
    }
}

/// The type of the internal event that ends a watch without a word (never sent to a client).
const CLOSE: &str = "CLOSE";

/// The type of the internal event that cuts a watch's connection (never sent to a client).
const DROP: &str = "DROP";

fn gone() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410}})
}

fn object_key(obj: &Value) -> (String, String) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("").to_string();
    let name = obj["metadata"]["name"].as_str().expect("object has a name").to_string();
    (ns, name)
}
