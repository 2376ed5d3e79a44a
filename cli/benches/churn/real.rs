//! Where the churn's changes are written: the tests' stand-in API server, or (the cross-check
//! and the first view) the real one (`make kube`), whose audit log counts the requests the
//! components made.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tideway_tests::fake_api::{Account, BackgroundApi};
use tideway_tests::fault_proxy::FaultProxy;
use tideway_tests::netns::Netns;

use super::changes::Change;
use super::support::real_api::{Api, relays};

/// An API server the components read and the writer changes.
pub(crate) trait Server {
    /// A kubeconfig for `account`, reachable from the components' namespace.
    fn kubeconfig(&self, dir: &Path, account: Account) -> PathBuf;
    /// Writes `change`.
    fn write(&mut self, change: Change);
    /// Starts counting the components' writes.
    fn mark(&mut self);
    /// Writes the components made since the mark (creates, updates, patches, deletes).
    fn component_writes(&self) -> usize;
}

/// The tests' stand-in, serving inside the components' namespace.
pub(crate) struct Standin(BackgroundApi, Instant);

impl Standin {
    pub(crate) fn start(ns: &Netns, objects: Vec<Value>) -> Standin {
        let server = BackgroundApi::start(Some(&ns.name));
        server.api.stream_lists(true);
        server.api.preload(objects);
        Standin(server, Instant::now())
    }

    /// Authorizes by the chart rendered with the value set `set` (see `FakeApi::chart_values`).
    pub(crate) fn chart_values(&self, set: &str) {
        self.0.api.chart_values(set);
    }
}

impl Server for Standin {
    fn kubeconfig(&self, dir: &Path, account: Account) -> PathBuf {
        self.0.api.kubeconfig(dir, account)
    }

    fn write(&mut self, change: Change) {
        for gone in &change.deletes {
            let meta = &gone["metadata"];
            let kind = gone["kind"].as_str().unwrap_or_default();
            self.0.api.delete(kind, meta["namespace"].as_str(), meta["name"].as_str().unwrap_or_default());
        }
        for obj in change.upserts {
            self.0.api.upsert(obj);
        }
    }

    fn mark(&mut self) {
        self.1 = Instant::now();
    }

    fn component_writes(&self) -> usize {
        // The writer's own changes are not requests: every request is a component's.
        self.0.api.requests().iter().filter(|r| r.at >= self.1 && r.method != "GET").count()
    }
}

/// The real API server's Service CIDR, a /12 (10.96.0.0 to 10.111.255.255): every ClusterIP
/// the churn writes, at 100,000 Services and more.
const SERVICE_CIDR: &str = "10.96.0.0/12";

/// The real API server, reached from the components' namespace through a relay.
pub(crate) struct Real {
    // The control plane and the relays go before the runtime they were started on.
    api: Api,
    _relays: Vec<Arc<FaultProxy>>,
    rt: tokio::runtime::Runtime,
    port: u16,
    /// The churn's writer (one, as the EndpointSlice controller is one).
    writer: tideway_lab::kube::apply::Applier,
    audit_log: PathBuf,
    /// The audit log's length at the mark.
    marked: usize,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

impl Real {
    /// A control plane holding `objects`, written now.
    pub(crate) fn start(ns: &Netns, objects: Vec<Value>) -> Real {
        let rt = runtime();
        let api = rt.block_on(Api::start_configured("churnx", &[], |c| c.service_cidr = SERVICE_CIDR.into()));
        rt.block_on(write_all(&api, objects));
        Real::serve(rt, api, ns)
    }

    /// A control plane (test `tag`) started from etcd snapshot `snapshot` (see
    /// [`Real::snapshot`]), its API server given `flags` too.
    pub(crate) fn from_snapshot(ns: &Netns, tag: &str, snapshot: &Path, flags: &[&str]) -> Real {
        let rt = runtime();
        let api = rt.block_on(Api::start_configured(tag, &[], |c| {
            c.service_cidr = SERVICE_CIDR.into();
            c.etcd_seed = Some(snapshot.to_path_buf());
            c.apiserver_flags = flags.iter().map(|f| f.to_string()).collect();
        }));
        Real::serve(rt, api, ns)
    }

    /// Writes `objects` into a control plane of their own (the node, the namespaces and a
    /// first Service through the API, the rest into etcd: see `etcd_seed`), counts them back
    /// through the API, stops it and keeps etcd's data directory as `snapshot`; how long the
    /// writing took.
    pub(crate) fn snapshot(objects: Vec<Value>, snapshot: &Path) -> std::time::Duration {
        let rt = runtime();
        let mut api =
            rt.block_on(Api::start_configured("churnw", &[], |c| c.service_cidr = SERVICE_CIDR.into()));
        let t = Instant::now();
        let services = objects.iter().filter(|o| o["kind"] == "Service").count() as u64;
        let head = objects.iter().take_while(|o| o["kind"] != "Service").count();
        let (written, rest) = objects.split_at(head + 2);
        rt.block_on(write_all(&api, written.to_vec()));
        rt.block_on(super::etcd_seed::write_rest(&api, written, rest));
        let took = t.elapsed();
        // Every object is there, as the API serves it (`default/kubernetes` and its slice too).
        let count = |path| rt.block_on(super::etcd_seed::count(&api, path));
        assert_eq!(count("/api/v1/services"), services + 1, "Services in the API");
        assert_eq!(
            count("/apis/discovery.k8s.io/v1/endpointslices"),
            services + 1,
            "EndpointSlices in the API"
        );
        api.standalone.cp.snapshot_etcd(snapshot).expect("etcd's data directory copied");
        took
    }

    fn serve(rt: tokio::runtime::Runtime, api: Api, ns: &Netns) -> Real {
        let (port, relays) = {
            let _in_runtime = rt.enter();
            relays(&[ns], api.standalone.cp.host_endpoint())
        };
        let audit_log = api.standalone.cp.layout().audit_log();
        let writer = tideway_lab::kube::apply::Applier::new(api.admin.clone(), "tideway-bench");
        Real { api, _relays: relays, rt, port, writer, audit_log, marked: 0 }
    }

    /// The API server's own metrics (`/metrics`), read as the admin.
    pub(crate) fn apiserver_metrics(&self) -> String {
        let req = http::Request::get("/metrics").body(Vec::new()).expect("a request");
        self.rt.block_on(self.api.admin.request_text(req)).expect("the API server's metrics")
    }

    /// The RSS of the API server and of etcd, MiB.
    pub(crate) fn control_plane_rss(&self) -> (f64, f64) {
        let rss = |c: &str| self.api.standalone.cp.pid(c).map_or(0.0, tideway_tests::procfs::rss_mib);
        (rss("kube-apiserver"), rss("etcd"))
    }

    /// The request URIs of the lists the components made since the mark (each page is one).
    pub(crate) fn component_lists(&self) -> Vec<String> {
        self.components_since_mark()
            .filter(|e| e["verb"] == "list")
            .filter_map(|e| e["requestURI"].as_str().map(String::from))
            .collect()
    }

    /// The components' requests since the mark, as the audit log completed them.
    fn components_since_mark(&self) -> impl Iterator<Item = Value> {
        let text = std::fs::read(&self.audit_log).unwrap_or_default();
        let events: Vec<Value> = text
            .get(self.marked..)
            .unwrap_or_default()
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
            .filter(|e| e["stage"] == "ResponseComplete" && tideway_tests::audit::usage_of(e).is_some())
            .collect();
        events.into_iter()
    }
}

/// Writes `objects` (namespaces and the node first), eight writers at once for the rest; the
/// node's status (its address, Ready) through its subresource.
async fn write_all(api: &Api, mut objects: Vec<Value>) {
    let rest = objects.split_off(objects.iter().take_while(|o| o["kind"] != "Service").count());
    let mut first = tideway_lab::kube::apply::Applier::new(api.admin.clone(), "tideway-bench");
    first.apply_all(objects.clone()).await.expect("namespaces and the node");
    for node in objects.iter().filter(|o| o["kind"] == "Node") {
        let path = format!("/api/v1/nodes/{}/status", node["metadata"]["name"].as_str().unwrap_or_default());
        super::support::real_api::merge(&api.admin, &path, json!({"status": node["status"]})).await;
    }
    let rest = Arc::new(rest);
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let mut applier = tideway_lab::kube::apply::Applier::new(api.admin.clone(), "tideway-bench");
        let rest = Arc::clone(&rest);
        writers.spawn(async move {
            for pair in rest.chunks(2).skip(w).step_by(8) {
                applier.apply_all(pair.to_vec()).await.expect("a Service and its slice written");
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
}

/// The components' ServiceAccounts as the chart makes them: the DNS server's in
/// `kube-system`, beside the cluster DNS it replaces; the others in `tideway-system`.
fn service_account(account: Account) -> (&'static str, &'static str) {
    match account {
        Account::Agent => ("tideway-system", "tideway-agent"),
        Account::Dns => ("kube-system", "tideway-dns"),
        _ => ("tideway-system", "tideway-operator"),
    }
}

impl Server for Real {
    fn kubeconfig(&self, _dir: &Path, account: Account) -> PathBuf {
        let (namespace, name) = service_account(account);
        self.rt.block_on(self.api.kubeconfig_via(namespace, name, self.port))
    }

    fn write(&mut self, change: Change) {
        let Real { rt, writer: applier, .. } = self;
        rt.block_on(async {
            for gone in &change.deletes {
                applier.delete(gone).await.expect("a deletion");
            }
            applier.apply_all(change.upserts).await.expect("a change written");
        });
    }

    fn mark(&mut self) {
        self.marked = std::fs::metadata(&self.audit_log).map_or(0, |m| m.len() as usize);
    }

    fn component_writes(&self) -> usize {
        let written = |e: &Value| !matches!(e["verb"].as_str().unwrap_or_default(), "get" | "list" | "watch");
        self.components_since_mark().filter(written).count()
    }
}
