//! The operator against the real API server (root; needs `make kube` and Go): one control plane
//! for the binary, the chart's RBAC applied as `helm template` renders it (with
//! `metallb.compat`), and the operator's source, reconcile loop, writer, election and REST API
//! each running as the chart's `tideway-operator` ServiceAccount, with a token the server
//! mints. The phases run in turn, each removing what it made:
//! * writes: a LoadBalancer Service gets its address (server-side applied to its status), an
//!   L2Announcement owned by the Service, the pool's and the ProxyConfig's status, an Event;
//!   NodeProxyStates roll the ProxyConfig out; the Service deleted, its announcement goes;
//! * a forbidden write (a role without Events): the server's 403 names who was refused, and the
//!   rest is written;
//! * an Event repeated is a patch of the first one's series;
//! * leader election over the real Lease: one leader, a release hands over at once, a death
//!   after the Lease's duration;
//! * REST changes of a ProxyConfig, reviewed by the server's TokenReview and
//!   SubjectAccessReview, reach it as the `tideway-api` manager's merge patch;
//! * failover when only an agent dies, its Node Ready and unchanged: liveness fed to the
//!   operator's state, then the gossip itself (the operator's member and the agents'), and
//!   0.1.x agents that keep their address for the hand-over;
//! * MetalLB's own CRDs and objects, read with `--metallb-compat`: every address kept, the
//!   advertisements decide who may announce, a name clash an Event on both objects, nothing of
//!   MetalLB's written.
//!
//! The API server's audit log shows what each request was; what the imitation recorded
//! instead. A 409 on cue (a retried status write) is what the real server cannot give, and
//! stays on the imitation (`operator/tests/kube.rs`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::rest as api_rest;
use tideway_lab::kube::standalone::Standalone;
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod election;
mod failover;
mod metallb;
mod rest;
mod writes;

/// The chart's operator, as the audit log names it.
const OPERATOR: &str = "system:serviceaccount:tideway-system:tideway-operator";

/// The control plane, the admin's client and applier, and the operator's kubeconfig.
struct Cluster {
    standalone: Standalone,
    admin: kube::Client,
    applier: Applier,
    operator: PathBuf,
}

/// Tasks of one phase, stopped when it ends (one operator at a time).
#[derive(Default)]
struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    fn spawn(&mut self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.0.push(tokio::spawn(f));
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_on_the_real_api_server() {
    let standalone = Standalone::start("op", |config| {
        // No kubelet heartbeats here: the test's Nodes stay as written.
        config.grace = Duration::from_secs(3600);
    })
    .await
    .expect("a control plane (root; make kube)");
    let mut cluster = setup(standalone).await;
    writes::writes(&mut cluster).await;
    writes::forbidden(&mut cluster).await;
    writes::event_series(&cluster).await;
    election::election(&cluster).await;
    rest::rest(&mut cluster).await;
    failover::fed(&mut cluster).await;
    failover::gossip(&mut cluster).await;
    failover::legacy(&mut cluster).await;
    metallb::metallb(&mut cluster).await;
    tideway_tests::audit::record_usage(&cluster.standalone.cp.layout().audit_log());
}

/// CRDs (Tideway's and MetalLB's), the chart's namespace, ServiceAccounts and RBAC, two Ready
/// Nodes, and a kubeconfig with a token for the operator's ServiceAccount.
async fn setup(standalone: Standalone) -> Cluster {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    standalone.apply_crds(&root.join("helm/tideway/crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-test");
    for crd in tideway_tests::metallb::crds(&standalone.dir.join("go")) {
        applier.apply(&crd).await.unwrap_or_else(|e| panic!("{}: {e}", crd["metadata"]["name"]));
    }
    let values = [("metallb.compat".to_string(), "true".to_string())];
    standalone.apply_chart_rbac(&root.join("helm/tideway"), &values).await.unwrap();
    for (name, ip) in [("node-a", "172.18.0.2"), ("node-b", "172.18.0.3")] {
        applier.apply(&node(name, ip)).await.unwrap();
    }
    let operator = standalone.token_kubeconfig("tideway-system", "tideway-operator").await.unwrap();
    Cluster { standalone, admin, applier, operator }
}

fn node(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// GET `path` as the admin: the object, or None when it is not there.
async fn get(admin: &kube::Client, path: &str) -> Option<Value> {
    api_rest::get(admin, path).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// A JSON merge patch of `path` as the admin (a status, for a CRD's `/status`).
async fn merge(admin: &kube::Client, path: &str, patch: Value) {
    api_rest::merge(admin, path, &patch).await.unwrap_or_else(|e| panic!("PATCH {path}: {e}"));
}

/// Polls `f` every 100 ms until it gives `Some`, failing after 30 s with `what`.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The requests `user` made since `since`, as "verb requestURI", in the order they arrived.
fn audited(cluster: &Cluster, user: &str, since: SystemTime) -> Vec<String> {
    let text = std::fs::read_to_string(cluster.standalone.cp.layout().audit_log()).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user)
        .filter_map(|e| {
            let at: MicroTime = serde_json::from_value(e["requestReceivedTimestamp"].clone()).ok()?;
            let request = format!("{} {}", e["verb"].as_str()?, e["requestURI"].as_str()?);
            (SystemTime::from(at.0) >= since).then_some(request)
        })
        .collect()
}

/// The operator's source and its leading reconcile loop as the user of `kubeconfig`, with
/// MetalLB's objects read from `metallb` when given; its status.
async fn run_operator(
    tasks: &mut Tasks,
    kubeconfig: &Path,
    metallb: Option<&str>,
) -> (SharedCluster, Arc<RwLock<OperatorStatus>>) {
    let c = client(Some(kubeconfig)).await.expect("the operator's client");
    let cluster = SharedCluster::new();
    let source = KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default())
        .with_metallb(metallb.map(String::from));
    tasks.spawn(source.run(cluster.clone()));
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let (leading, leader) = watch::channel(Lead::Always);
    let run = tideway_operator::reconcile::run(
        cluster.clone(),
        Arc::new(KubeWriter::new(c, Some("op-0".into()))),
        leader,
        LoopOptions::default(),
        Arc::new(Metrics::new(&mut Registry::default())),
        status.clone(),
        std::future::pending(),
    );
    tasks.spawn(async move {
        // The leadership channel stays open as long as the loop runs.
        let _leading = leading;
        run.await
    });
    (cluster, status)
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn pool(name: &str, addresses: &[&str], auto_assign: bool) -> Value {
    json!({"apiVersion": "tideway.io/v1alpha1", "kind": "LoadBalancerPool", "metadata": {"name": name},
        "spec": {"addresses": addresses, "autoAssign": auto_assign}})
}

/// A LoadBalancer Service without a selector (its endpoints are the test's own slice).
fn load_balancer(ns: &str, name: &str, annotations: Value, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations, "labels": labels},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

/// One ready endpoint of `ns/svc` on node-a.
fn slice(ns: &str, svc: &str, ip: &str) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-1"), "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "nodeName": "node-a", "conditions": {"ready": true}}]})
}

async fn ingress(admin: &kube::Client, ns: &str, name: &str) -> Option<Value> {
    let s = get(admin, &format!("/api/v1/namespaces/{ns}/services/{name}")).await?;
    let first = s["status"]["loadBalancer"]["ingress"][0].clone();
    first.is_object().then_some(first)
}

fn announcement_path(ns: &str, name: &str) -> String {
    format!("/apis/tideway.io/v1alpha1/namespaces/{ns}/l2announcements/{name}")
}

/// The NodeProxyState of `node`, without its status.
fn node_state(node: &str) -> Value {
    json!({"apiVersion": "tideway.io/v1alpha1", "kind": "NodeProxyState",
        "metadata": {"name": node}, "spec": {"nodeName": node}})
}

/// `node`'s agent reports `status` (written through the status subresource, as agents do).
async fn report(cluster: &mut Cluster, node: &str, status: Value) {
    cluster.applier.apply(&node_state(node)).await.unwrap();
    let path = format!("/apis/tideway.io/v1alpha1/nodeproxystates/{node}/status");
    merge(&cluster.admin, &path, json!({ "status": status })).await;
}

/// Events in `ns` with `reason`.
async fn events(admin: &kube::Client, ns: &str, reason: &str) -> Vec<Value> {
    let list = get(admin, &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")).await.expect("events");
    list["items"].as_array().into_iter().flatten().filter(|e| e["reason"] == reason).cloned().collect()
}
