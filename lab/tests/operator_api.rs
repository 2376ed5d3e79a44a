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

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::chart;
use tideway_lab::kube::standalone::Standalone;
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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
    writes(&mut cluster).await;
    forbidden(&mut cluster).await;
    event_series(&cluster).await;
    election(&cluster).await;
    rest(&mut cluster).await;
    metallb(&mut cluster).await;
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
    let values = [
        ("metallb.compat".to_string(), "true".to_string()),
        // Rendering needs these; no agent runs here.
        ("gossip.key".to_string(), "k".repeat(32)),
        ("apiServer.address".to_string(), format!("{}:6443", tideway_lab::kube::standalone::ADDRESS)),
    ];
    let rendered = chart::render(&root.join("helm/tideway"), &values).expect("helm template");
    let rbac = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
    let mut objects = vec![chart::namespace()];
    objects.extend(rendered.into_iter().filter(|o| rbac.contains(&o["kind"].as_str().unwrap_or_default())));
    applier.apply_all(objects).await.unwrap();
    for (name, ip) in [("node-a", "172.18.0.2"), ("node-b", "172.18.0.3")] {
        applier.apply(&node(name, ip)).await.unwrap();
    }
    let token = token(&admin, "tideway-system", "tideway-operator").await;
    let operator = kubeconfig(&standalone, "operator", &token);
    Cluster { standalone, admin, applier, operator }
}

fn node(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A token for ServiceAccount `ns/name`, minted by the API server (its own audience).
async fn token(admin: &kube::Client, ns: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    let minted: TokenRequest =
        accounts.create_subresource("token", name, &PostParams::default(), &request).await.unwrap();
    minted.status.expect("a token").token
}

/// The admin's kubeconfig with `token` for credentials, at the host's forward: `dir/NAME.conf`.
fn kubeconfig(standalone: &Standalone, name: &str, token: &str) -> PathBuf {
    let mut config = kube::config::Kubeconfig::read_from(standalone.cp.admin_kubeconfig()).unwrap();
    for cluster in &mut config.clusters {
        if let Some(c) = cluster.cluster.as_mut() {
            c.server = Some(standalone.cp.host_url());
        }
    }
    for user in &mut config.auth_infos {
        user.auth_info =
            Some(kube::config::AuthInfo { token: Some(token.to_string().into()), ..Default::default() });
    }
    let path = standalone.dir.join(format!("{name}.conf"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path
}

/// GET `path` as the admin: the object, or None when it is not there.
async fn get(admin: &kube::Client, path: &str) -> Option<Value> {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    match admin.request::<Value>(req).await {
        Ok(v) => Some(v),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// A JSON merge patch of `path` as the admin (a status, for a CRD's `/status`).
async fn merge(admin: &kube::Client, path: &str, patch: Value) {
    let req = http::Request::patch(path)
        .header("content-type", "application/merge-patch+json")
        .body(serde_json::to_vec(&patch).unwrap())
        .unwrap();
    admin.request::<Value>(req).await.unwrap_or_else(|e| panic!("PATCH {path}: {e}"));
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

/// Events in `ns` with `reason`.
async fn events(admin: &kube::Client, ns: &str, reason: &str) -> Vec<Value> {
    let list = get(admin, &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")).await.expect("events");
    list["items"].as_array().into_iter().flatten().filter(|e| e["reason"] == reason).cloned().collect()
}

async fn writes(cluster: &mut Cluster) {
    let (admin, since) = (cluster.admin.clone(), SystemTime::now());
    let objects = [
        namespace("demo"),
        pool("default", &["172.18.255.200-172.18.255.250"], true),
        json!({"apiVersion": "tideway.io/v1alpha1", "kind": "ProxyConfig", "metadata": {"name": "default"},
            "spec": {"mode": "nftables"}}),
        load_balancer("demo", "web", json!({}), json!({})),
        slice("demo", "web", "10.10.1.5"),
    ];
    cluster.applier.apply_all(objects.to_vec()).await.unwrap();
    let mut tasks = Tasks::default();
    let (_, status) = run_operator(&mut tasks, &cluster.operator, None).await;

    let ip = eventually("web's address", || ingress(&admin, "demo", "web")).await;
    assert_eq!(ip, json!({"ip": "172.18.255.200", "ipMode": "VIP"}));
    let status_writes: Vec<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| r.contains("/namespaces/demo/services/web/status"))
        .collect();
    assert!(
        status_writes.iter().all(|r| r.starts_with("patch ") && r.contains("fieldManager=tideway-operator")),
        "{status_writes:?}"
    );
    let ann_path = announcement_path("demo", "web");
    let ann = eventually("the announcement", || get(&admin, &ann_path)).await;
    assert_eq!(ann["metadata"]["labels"]["tideway.io/node"], ann["spec"]["node"]);
    assert_eq!(ann["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert_eq!(ann["spec"]["eligibleNodes"], json!(["node-a", "node-b"]));
    let pool_path = "/apis/tideway.io/v1alpha1/loadbalancerpools/default";
    let p = eventually("the pool's status", || async {
        get(&admin, pool_path).await.filter(|p| p["status"]["assignedIPv4"] == 1)
    })
    .await;
    assert_eq!(p["status"]["availableIPv4"], 50);
    assert_eq!(p["status"]["conditions"][0]["type"], "Valid");
    let pc_path = "/apis/tideway.io/v1alpha1/proxyconfigs/default";
    let pc = eventually("the ProxyConfig's status", || async {
        get(&admin, pc_path).await.filter(|p| p["status"]["nodesSelected"] == 2)
    })
    .await;
    assert_eq!(
        (&pc["status"]["conditions"][0]["type"], &pc["status"]["conditions"][0]["status"]),
        (&json!("Ready"), &json!("False"))
    );
    let allocated = eventually("an IPAllocated Event", || async {
        events(&admin, "demo", "IPAllocated").await.into_iter().next()
    })
    .await;
    assert_eq!(allocated["regarding"]["name"], "web");
    assert_eq!(allocated["reportingController"], "tideway-operator");

    // The nodes report their rules (status through its subresource): the rollout is Ready.
    let generation = pc["metadata"]["generation"].clone();
    for node in ["node-a", "node-b"] {
        cluster
            .applier
            .apply(&json!({"apiVersion": "tideway.io/v1alpha1", "kind": "NodeProxyState",
                "metadata": {"name": node}, "spec": {"nodeName": node}}))
            .await
            .unwrap();
        let status = json!({"status": {"mode": "nftables", "proxyConfig": "default",
            "proxyConfigGeneration": generation, "ready": true}});
        merge(&admin, &format!("/apis/tideway.io/v1alpha1/nodeproxystates/{node}/status"), status).await;
    }
    eventually("the rollout", || async {
        get(&admin, pc_path).await.filter(|p| {
            p["status"]["nodesProgrammed"] == 2 && p["status"]["conditions"][0]["status"] == "True"
        })
    })
    .await;

    // The Service is deleted: its announcement goes and the address is free again.
    cluster.applier.delete(&objects[3]).await.unwrap();
    eventually("the withdrawal", || async {
        get(&admin, &announcement_path("demo", "web")).await.is_none().then_some(())
    })
    .await;
    eventually("the pool's count", || async {
        get(&admin, pool_path).await.filter(|p| p["status"]["assignedIPv4"] == 0)
    })
    .await;
    assert!(status.read().unwrap().leader && status.read().unwrap().writes > 4);
    drop(tasks);
    cluster.applier.delete(&objects[1]).await.unwrap();
}

/// The chart's operator role without its Events grant, for ServiceAccount `no-events/tideway-operator`.
async fn forbidden(cluster: &mut Cluster) {
    let admin = cluster.admin.clone();
    let role = get(&admin, "/apis/rbac.authorization.k8s.io/v1/clusterroles/tideway-operator").await.unwrap();
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["apiGroups"] != json!(["events.k8s.io"]))
        .cloned()
        .collect();
    assert_eq!(rules.len() + 1, role["rules"].as_array().unwrap().len(), "one Events rule");
    let objects = vec![
        namespace("no-events"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "tideway-operator", "namespace": "no-events"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "tideway-operator-no-events"}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "tideway-operator-no-events"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-operator-no-events"},
            "subjects": [{"kind": "ServiceAccount", "name": "tideway-operator", "namespace": "no-events"}]}),
        pool("shadowed", &["172.18.254.200-172.18.254.210"], true),
        load_balancer("no-events", "web", json!({}), json!({})),
        slice("no-events", "web", "10.10.1.7"),
    ];
    cluster.applier.apply_all(objects.clone()).await.unwrap();
    let token = token(&admin, "no-events", "tideway-operator").await;
    let kubeconfig = kubeconfig(&cluster.standalone, "no-events", &token);
    let mut tasks = Tasks::default();
    let (_, status) = run_operator(&mut tasks, &kubeconfig, None).await;
    eventually("the Service's address", || ingress(&admin, "no-events", "web")).await;
    let ann_path = announcement_path("no-events", "web");
    eventually("the announcement", || get(&admin, &ann_path)).await;
    let err = eventually("the refusal in the status", || async {
        let s = status.read().unwrap();
        s.last_error.clone().filter(|e| e.contains("403") && s.write_errors >= 1)
    })
    .await;
    assert!(err.contains("forbidden"), "{err}");
    assert!(err.contains("system:serviceaccount:no-events:tideway-operator"), "{err}");
    assert!(events(&admin, "no-events", "IPAllocated").await.is_empty());
    drop(tasks);
    for object in objects[4..].iter().rev() {
        cluster.applier.delete(object).await.unwrap();
    }
}

async fn event_series(cluster: &Cluster) {
    use tideway_core::operator::{Action, Event, ObjectRef};
    use tideway_sources::status::ClusterWriter;
    let since = SystemTime::now();
    let c = client(Some(&cluster.operator)).await.unwrap();
    let writer = KubeWriter::new(c, Some("op-0".into()));
    let event = Action::Event(Event {
        object: ObjectRef { kind: "Service", namespace: Some("demo".into()), name: "web".into() },
        warning: true,
        reason: "LoadBalancingUnavailable",
        message: "node-a runs iptables, which has no maglev; it balances at random".into(),
        related: None,
    });
    writer.write(&event).await.expect("the first Event");
    writer.write(&event).await.expect("the repeat");
    let found = events(&cluster.admin, "demo", "LoadBalancingUnavailable").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["series"]["count"], 2, "{:?}", found[0]);
    let sent: Vec<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| r.contains("/events"))
        .map(|r| r.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["create", "patch"]);
}

fn leads(lead: &watch::Receiver<Lead>) -> bool {
    lead.borrow().leads_at(tokio::time::Instant::now())
}

async fn election(cluster: &Cluster) {
    let since = SystemTime::now();
    let c = client(Some(&cluster.operator)).await.unwrap();
    let timings = LeaseTimings {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    let campaign = |who: &str| {
        let (tx, rx) = watch::channel(Lead::Follow);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let lease = KubeLease::new(c.clone(), "tideway-system", "tideway-operator");
        let task =
            tokio::spawn(tideway_operator::election::run(lease, Elector::new(who), timings, tx, async {
                let _ = stopped.await;
            }));
        (rx, stop, task)
    };
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/tideway-system/leases/tideway-operator";
    let holder =
        || async { get(&cluster.admin, lease_path).await.map(|l| l["spec"]["holderIdentity"].clone()) };
    let (a_leads, stop_a, task_a) = campaign("op-a");
    eventually("op-a leads", || async { leads(&a_leads).then_some(()) }).await;
    let (b_leads, _stop_b, task_b) = campaign("op-b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leads(&a_leads) && !leads(&b_leads), "a live Lease keeps its holder; op-a renews it");
    assert_eq!(holder().await, Some(json!("op-a")));
    let renewals = audited(cluster, OPERATOR, since).iter().filter(|r| r.starts_with("update ")).count();
    assert!(renewals >= 10, "renewed every retry period: {renewals}");

    // op-a shuts down: it releases the Lease and op-b takes it at once.
    let _ = stop_a.send(());
    task_a.await.unwrap();
    assert!(!leads(&a_leads));
    let released = Instant::now();
    eventually("op-b leads", || async { leads(&b_leads).then_some(()) }).await;
    assert!(released.elapsed() < Duration::from_secs(1), "no wait for expiry after a release");
    let lease = get(&cluster.admin, lease_path).await.unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "op-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "one change of holder");

    // op-b dies without releasing: op-c waits for the Lease to expire on its own clock.
    task_b.abort();
    let died = Instant::now();
    let (c_leads, _stop_c, task_c) = campaign("op-c");
    eventually("op-c leads", || async { leads(&c_leads).then_some(()) }).await;
    let took = died.elapsed();
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(5), "took over after {took:?}");
    assert_eq!(holder().await, Some(json!("op-c")));
    task_c.abort();
}

/// PATCH of a ProxyConfig over the operator's REST API: the token reviewed by the server's
/// TokenReview, the verb by its SubjectAccessReview, the change a merge patch by `tideway-api`.
async fn rest(cluster: &mut Cluster) {
    use axum::body::Body;
    use tideway_api::auth::Authorizer;
    use tideway_operator::api::ApiState;
    use tideway_sources::kube::KubeReview;
    use tower::ServiceExt;

    let admin = cluster.admin.clone();
    let since = SystemTime::now();
    let objects = vec![
        namespace("tw"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "alice", "namespace": "tw"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bob", "namespace": "tw"}}),
        // The chart's own role for who may switch proxy modes (aggregated to `admin`).
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "alice-switches-modes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tideway-proxy-mode-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "tw"}]}),
    ];
    cluster.applier.apply_all(objects).await.unwrap();
    let (alice, bob) = (token(&admin, "tw", "alice").await, token(&admin, "tw", "bob").await);
    let c = client(Some(&cluster.operator)).await.unwrap();
    let mut tasks = Tasks::default();
    let view = SharedCluster::new();
    tasks.spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(view.clone()));
    tideway_tests::eventually("the ProxyConfig in the view", || {
        view.lock().proxy_configs().next().map(|_| ())
    })
    .await;
    let before = view.lock().proxy_configs().find(|c| c.name == "default").expect("default").generation;
    let state = ApiState {
        cluster: view.clone(),
        writer: Arc::new(KubeWriter::new(c.clone(), None)),
        auth: Arc::new(KubeReview::new(c.clone())) as Arc<dyn Authorizer>,
        open_reads: true,
    };
    let router = tideway_operator::api::router(state);
    let patch = |token: &str| {
        http::Request::builder()
            .method("PATCH")
            .uri("/api/v1/proxyconfigs/default")
            .header("content-type", "application/merge-patch+json")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(r#"{"spec": {"mode": "iptables"}}"#))
            .unwrap()
    };
    let code = |r: axum::response::Response| r.status().as_u16();
    let pc_path = "/apis/tideway.io/v1alpha1/proxyconfigs/default";
    assert_eq!(code(router.clone().oneshot(patch("nobody")).await.unwrap()), 401, "unknown token");
    assert_eq!(code(router.clone().oneshot(patch(&bob)).await.unwrap()), 403, "bob may not patch");
    assert_eq!(get(&admin, pc_path).await.unwrap()["spec"]["mode"], "nftables", "unchanged");
    assert_eq!(code(router.clone().oneshot(patch(&alice)).await.unwrap()), 202);
    let pc = get(&admin, pc_path).await.unwrap();
    assert_eq!(pc["spec"]["mode"], "iptables");
    assert_eq!(pc["metadata"]["generation"].as_i64(), Some(before + 1));
    let managers: Vec<(String, String)> = pc["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"]["f:spec"]["f:mode"].is_object())
        .map(|m| (m["manager"].as_str().unwrap().to_string(), m["operation"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(managers, [("tideway-api".to_string(), "Update".to_string())], "who owns the mode");
    let asked: BTreeSet<String> = audited(cluster, OPERATOR, since)
        .into_iter()
        .filter(|r| {
            r.starts_with("create /apis/authentication") || r.starts_with("create /apis/authorization")
        })
        .map(|r| r.trim_end_matches('?').to_string())
        .collect();
    assert_eq!(
        asked,
        BTreeSet::from([
            "create /apis/authentication.k8s.io/v1/tokenreviews".to_string(),
            "create /apis/authorization.k8s.io/v1/subjectaccessreviews".to_string(),
        ])
    );
    // The operator's view follows the watch.
    tideway_tests::eventually("the new generation in the view", || {
        view.lock().proxy_configs().find(|c| c.generation == before + 1).map(|_| ())
    })
    .await;
    merge(&admin, pc_path, json!({"spec": {"mode": "nftables"}})).await;
}

/// MetalLB's objects as MetalLB left them, then the operator with `--metallb-compat`.
async fn metallb(cluster: &mut Cluster) {
    let admin = cluster.admin.clone();
    let since = SystemTime::now();
    let mut objects = vec![namespace("metallb-system"), namespace("elsewhere"), namespace("shop")];
    for mut object in tideway_tests::metallb::example_objects() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.retain(|k, _| ["name", "namespace", "labels", "annotations"].contains(&k.as_str()));
        }
        objects.push(object);
    }
    let none = json!({});
    objects.extend([
        // Tideway's own pool with the name of a MetalLB pool: it is the one used.
        pool("staging", &["192.168.31.0/24"], false),
        load_balancer(
            "demo",
            "nginx",
            json!({"metallb.universe.tf/loadBalancerIPs": "192.168.10.100"}),
            none.clone(),
        ),
        load_balancer("demo", "kept", none.clone(), none.clone()),
        load_balancer("demo", "auto", none.clone(), none.clone()),
        load_balancer(
            "shop",
            "checkout",
            json!({"metallb.io/address-pool": "expensive"}),
            json!({"app": "checkout"}),
        ),
        slice("demo", "nginx", "10.10.1.5"),
        slice("shop", "checkout", "10.10.1.6"),
    ]);
    cluster.applier.apply_all(objects).await.unwrap();
    // The address MetalLB gave `kept` earlier, in its status.
    let kept = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.168.9.3", "ipMode": "VIP"}]}}});
    merge(&admin, "/api/v1/namespaces/demo/services/kept/status", kept).await;

    let mut tasks = Tasks::default();
    run_operator(&mut tasks, &cluster.operator, Some("metallb-system")).await;
    // Pinned in MetalLB's annotation, assigned by MetalLB earlier, and a pool named: kept.
    for (ns, name, want) in [
        ("demo", "nginx", "192.168.10.100"),
        ("demo", "kept", "192.168.9.3"),
        ("shop", "checkout", "203.0.113.64"),
    ] {
        let got = eventually(&format!("{ns}/{name}'s address"), || ingress(&admin, ns, name)).await;
        assert_eq!(got["ip"], want, "{ns}/{name}");
    }
    // A new Service gets an address of the one auto-assigned IPAddressPool read: not the
    // shadowed `staging`, nor a pool of another namespace.
    let auto = eventually("demo/auto's address", || ingress(&admin, "demo", "auto")).await;
    let ip: std::net::Ipv4Addr = auto["ip"].as_str().unwrap().parse().expect("IPv4");
    assert!(
        ip.octets()[..3] == [192, 168, 10] || ip.octets()[..3] == [192, 168, 9],
        "{ip} is not first-pool's"
    );

    // The advertisements decide who may announce: `example` admits node-a only for first-pool,
    // `gold` (by label, no node selector) every node for `expensive`.
    let eligible = |ns: &'static str, name: &'static str, want: Value| {
        let admin = admin.clone();
        async move {
            let ann = get(&admin, &announcement_path(ns, name)).await?;
            (ann["spec"]["eligibleNodes"] == want).then_some(())
        }
    };
    eventually("nginx announced from node-a", || eligible("demo", "nginx", json!(["node-a"]))).await;
    eventually("checkout from both", || eligible("shop", "checkout", json!(["node-a", "node-b"]))).await;

    // The clash of `staging` is a Warning on both objects, naming both.
    let clash = eventually("the PoolConflict Events", || async {
        let mut found = events(&admin, "metallb-system", "PoolConflict").await;
        found.extend(events(&admin, "default", "PoolConflict").await);
        (found.len() == 2).then_some(found)
    })
    .await;
    let on = |kind: &str| clash.iter().find(|e| e["regarding"]["kind"] == kind).expect(kind).clone();
    let metallb = on("IPAddressPool");
    assert_eq!(metallb["regarding"]["apiVersion"], "metallb.io/v1beta1");
    assert_eq!(metallb["regarding"]["namespace"], "metallb-system");
    assert_eq!(metallb["type"], "Warning");
    assert_eq!(on("LoadBalancerPool")["regarding"]["name"], "staging");
    let note = metallb["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("IPAddressPool metallb-system/staging") && note.contains("LoadBalancerPool staging"),
        "{note}"
    );

    // An advertisement changed live moves who may announce.
    let example = "/apis/metallb.io/v1beta1/namespaces/metallb-system/l2advertisements/example";
    let moved = json!({"spec": {"nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-b"}}]}});
    merge(&admin, example, moved).await;
    eventually("nginx announced from node-b only", || eligible("demo", "nginx", json!(["node-b"]))).await;

    // MetalLB's objects are read in their namespace only, and never written; only the
    // LoadBalancerPool gets a status.
    let requests = audited(cluster, OPERATOR, since);
    let metallbs: Vec<&String> = requests.iter().filter(|r| r.contains("/apis/metallb.io/")).collect();
    assert!(!metallbs.is_empty());
    for r in &metallbs {
        let (verb, uri) = r.split_once(' ').unwrap();
        assert!(["list", "watch"].contains(&verb), "{r}");
        assert!(uri.starts_with("/apis/metallb.io/v1beta1/namespaces/metallb-system/"), "{r}");
    }
    let pool_writes: Vec<&String> =
        requests.iter().filter(|r| r.contains("/loadbalancerpools/") && !r.starts_with("watch ")).collect();
    assert!(pool_writes.iter().all(|r| r.contains("/loadbalancerpools/staging/status")), "{pool_writes:?}");
}
