//! Fenced leadership over real Leases (root; needs `make kube`): two operators (source,
//! election, reconcile loop) against the real API server, each as its own user (a client
//! certificate kubeadm signs, in `kubeadm:cluster-admins`) and each through its own
//! fault-injecting proxy. The leader's connection is cut and its reconnects hang: it steps down
//! on its own timer, and the API server's audit log, which records when each request arrived,
//! shows no write of it after its renew deadline, also once its network comes back; the
//! standby takes over once the Lease expires and assigns what was created meanwhile.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_lab::kube::ControlPlane;
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::fault_proxy::FaultProxy;
use tideway_tests::until;
use tokio::sync::watch;
use tokio::time::Instant;

fn leads(lead: &watch::Receiver<Lead>) -> bool {
    lead.borrow().leads_at(Instant::now())
}

/// One operator as user `who`, through its own proxy.
struct Operator {
    lead: watch::Receiver<Lead>,
    /// The latest end of term it announced, on the wall clock (the audit log's).
    last_term: Arc<Mutex<Option<SystemTime>>>,
    proxy: Arc<FaultProxy>,
}

async fn operator(standalone: &Standalone, who: &str, timings: LeaseTimings) -> Operator {
    let proxy = FaultProxy::start(standalone.cp.host_endpoint()).await;
    let server = format!("https://{}", proxy.addr);
    let kubeconfig = standalone.kubeconfig_for(who, &["kubeadm:cluster-admins"], &server).unwrap();
    let c = client(Some(&kubeconfig)).await.expect("client");
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    let (tx, lead) = watch::channel(Lead::Follow);
    let lease = KubeLease::new(c.clone(), "tideway-system", "tideway-operator");
    tokio::spawn(tideway_operator::election::run(
        lease,
        Elector::new(who),
        timings,
        tx,
        std::future::pending(),
    ));
    let last_term = Arc::new(Mutex::new(None));
    let (mut terms, seen) = (lead.clone(), last_term.clone());
    tokio::spawn(async move {
        while terms.changed().await.is_ok() {
            if let Some(until) = terms.borrow().until() {
                let wall = SystemTime::now() + until.saturating_duration_since(Instant::now());
                *seen.lock().unwrap() = Some(wall);
            }
        }
    });
    let opts = LoopOptions { write_timeout: Duration::from_millis(300), ..LoopOptions::default() };
    tokio::spawn(tideway_operator::reconcile::run(
        cluster,
        Arc::new(KubeWriter::new(c, Some(who.into()))),
        lead.clone(),
        opts,
        Arc::new(Metrics::new(&mut Registry::default())),
        Arc::new(RwLock::new(OperatorStatus::default())),
        std::future::pending(),
    ));
    Operator { lead, last_term, proxy }
}

/// The writes (not reads, not the Lease) `who` made, by when the API server received them.
fn writes(cp: &ControlPlane, who: &str) -> Vec<(SystemTime, String)> {
    let text = std::fs::read_to_string(cp.layout().audit_log()).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == who && e["objectRef"]["resource"] != "leases")
        .filter(|e| !["get", "list", "watch"].contains(&e["verb"].as_str().unwrap_or_default()))
        .filter_map(|e| {
            let at: MicroTime = serde_json::from_value(e["requestReceivedTimestamp"].clone()).ok()?;
            Some((SystemTime::from(at.0), format!("{} {}", e["verb"].as_str()?, e["requestURI"].as_str()?)))
        })
        .collect()
}

fn load_balancer(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "demo"},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                 "selector": {"app": name}}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_sends_no_write_after_its_renew_deadline_and_a_standby_takes_over() {
    let standalone = Standalone::start("fen", |_| {}).await.expect("a control plane (root; make kube)");
    let cp = &standalone.cp;
    let admin = standalone.admin().await.unwrap();
    standalone.apply_crds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds")).await.unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-test");
    for name in ["tideway-system", "demo"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &n).await.unwrap();
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}]}});
    nodes.patch_status("node-a", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    applier
        .apply(&json!({"apiVersion": "tideway.io/v1alpha1", "kind": "LoadBalancerPool",
            "metadata": {"name": "default"}, "spec": {"addresses": ["172.18.240.0/24"]}}))
        .await
        .unwrap();

    let t = LeaseTimings {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    let a = operator(&standalone, "op-a", t).await;
    until("op-a leads", || leads(&a.lead)).await;
    let b = operator(&standalone, "op-b", t).await;

    // Services keep coming, one every 50 ms, for both operators to see.
    let services: Api<Service> = Api::namespaced(admin.clone(), "demo");
    let churn = {
        let services = services.clone();
        tokio::spawn(async move {
            for i in 0..60 {
                services.create(&PostParams::default(), &load_balancer(&format!("svc-{i}"))).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // op-a writes as the leader; it is cut off right after a renewal, with its whole renew
    // deadline left to try writing.
    let deadline = Instant::now() + Duration::from_secs(30);
    while writes(cp, "op-a").is_empty() {
        assert!(Instant::now() < deadline, "op-a never wrote");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut renewals = a.lead.clone();
    renewals.borrow_and_update();
    tokio::time::timeout(Duration::from_secs(2), renewals.changed()).await.expect("op-a renews").unwrap();
    a.proxy.hold(true);
    a.proxy.cut();
    let cut = SystemTime::now();
    let hung = Instant::now();
    until("op-b leads", || leads(&b.lead)).await;
    let took_over = hung.elapsed();
    churn.await.unwrap();
    // Every Service gets an address: the standby finished what the deposed leader could not.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = services.list(&Default::default()).await.unwrap();
        let assigned = list.items.iter().filter(|s| {
            s.status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref())
                .is_some_and(|i| !i.is_empty())
        });
        if assigned.count() == 60 {
            break;
        }
        assert!(Instant::now() < deadline, "not every Service was assigned");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!leads(&a.lead) && leads(&b.lead));
    // op-a kept trying; its network comes back: whatever it still had to send arrives now,
    // after its term, unless it gave up in time.
    assert!(a.proxy.arrived_held() > 0, "op-a tried to reach the server while cut off");
    a.proxy.hold(false);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!leads(&a.lead) && leads(&b.lead), "op-a does not take the Lease back");

    let term = a.last_term.lock().unwrap().expect("op-a led");
    let a_writes = writes(cp, "op-a");
    let late: Vec<_> = a_writes.iter().filter(|(at, _)| *at > term).collect();
    assert!(late.is_empty(), "op-a wrote after its renew deadline: {late:?}");
    let b_first = writes(cp, "op-b").iter().map(|(at, _)| *at).min().expect("op-b wrote");
    assert!(b_first > term, "op-b wrote only after op-a's term ended");
    let since = |t: SystemTime| {
        t.duration_since(cut).map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64())
    };
    eprintln!(
        "hand-over: op-a cut off at 0; its last write received at {:.3} s; its term ended at {:.3} s; op-b led at {:.3} s and its first write arrived at {:.3} s",
        since(a_writes.iter().map(|(at, _)| *at).max().unwrap()),
        since(term),
        took_over.as_secs_f64(),
        since(b_first),
    );
}
