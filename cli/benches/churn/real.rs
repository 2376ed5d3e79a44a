//! Where the churn's changes are written: the tests' stand-in API server, or (the cross-check,
//! `REAL=1`) the real one (`make kube`), whose audit log counts the writes the components made.

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

/// The real API server, its Service CIDR a /12 (10.96.0.0 to 10.111.255.255, every ClusterIP
/// the churn writes), reached from the components' namespace through a relay.
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

impl Real {
    pub(crate) fn start(ns: &Netns, objects: Vec<Value>) -> Real {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let api = rt.block_on(Api::start_with_cidr("churnx", &[], "10.96.0.0/12"));
        rt.block_on(write_all(&api, objects));
        let (port, relays) = {
            let _in_runtime = rt.enter();
            relays(&[ns], api.standalone.cp.host_endpoint())
        };
        let audit_log = api.standalone.cp.layout().audit_log();
        let writer = tideway_lab::kube::apply::Applier::new(api.admin.clone(), "tideway-bench");
        Real { api, _relays: relays, rt, port, writer, audit_log, marked: 0 }
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
        let text = std::fs::read(&self.audit_log).unwrap_or_default();
        let written = |line: &&[u8]| {
            let Ok(event) = serde_json::from_slice::<Value>(line) else { return false };
            let verb = event["verb"].as_str().unwrap_or_default();
            let component = tideway_tests::audit::usage_of(&event).is_some();
            component && event["stage"] == "ResponseComplete" && !matches!(verb, "get" | "list" | "watch")
        };
        text.get(self.marked..).unwrap_or_default().split(|b| *b == b'\n').filter(written).count()
    }
}
