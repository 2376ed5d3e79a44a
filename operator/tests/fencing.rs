//! Fenced leadership: a leader whose API calls hang steps down on its own timer, sends no write
//! after its renew deadline, and a standby takes over once the Lease expires; a follower keeps
//! no changes however long the churn.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::cluster::Snapshot;
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_core::testing::{mk_node, mk_slice};
use tideway_operator::election::{Lead, MemoryLease};
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeLease, KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_sources::status::MemoryWriter;
use tideway_tests::fake_api::{Account, FakeApi};
use tideway_tests::until;
use tokio::sync::watch;
use tokio::time::Instant;

fn leads(lead: &watch::Receiver<Lead>) -> bool {
    lead.borrow().leads_at(Instant::now())
}

/// Campaigns as `who` on the in-memory Lease; returns its leadership.
fn campaign(store: &MemoryLease, who: &str, timings: LeaseTimings) -> watch::Receiver<Lead> {
    let (tx, rx) = watch::channel(Lead::Follow);
    tokio::spawn(tideway_operator::election::run(
        store.clone(),
        Elector::new(who),
        timings,
        tx,
        std::future::pending(),
    ));
    rx
}

/// On tokio's paused clock: op-a's Lease calls hang. It steps down at its renew deadline while
/// the calls still hang; op-b takes over once the Lease has not changed for its duration.
#[tokio::test(start_paused = true)]
async fn a_hung_leader_steps_down_on_its_timer_and_a_standby_takes_over() {
    let t = LeaseTimings::default();
    let lease = MemoryLease::default();
    let (a_store, b_store) = (lease.candidate(), lease.candidate());
    let a = campaign(&a_store, "op-a", t);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(leads(&a));
    let b = campaign(&b_store, "op-b", t);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(leads(&a) && !leads(&b), "op-a renews; op-b follows");

    a_store.hang(true);
    let hung = Instant::now();
    let until = a.borrow().until().expect("op-a's term");
    assert!(until <= hung + t.renew_deadline && until + t.retry_period >= hung + t.renew_deadline);
    let (mut stepped_down, mut took_over) = (None, None);
    for _ in 0..1_500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = Instant::now();
        if *a.borrow() == Lead::Follow && stepped_down.is_none() {
            stepped_down = Some(now);
        }
        if leads(&b) {
            took_over = Some(now);
            break;
        }
    }
    let stepped_down = stepped_down.expect("op-a stepped down") - hung;
    let took_over = took_over.expect("op-b took over") - hung;
    assert!(stepped_down <= until - hung + Duration::from_millis(10), "on its timer: {stepped_down:?}");
    assert!(took_over > until - hung, "never two leaders: op-b at {took_over:?}, op-a's term ended before");
    assert!(
        took_over >= t.duration - t.retry_period && took_over <= t.duration + 2 * t.retry_period,
        "{took_over:?}"
    );
    assert_eq!(lease.stored().and_then(|l| l.holder).as_deref(), Some("op-b"));

    // op-a's calls come back failed: it follows op-b.
    a_store.hang(false);
    tokio::time::sleep(3 * t.retry_period).await;
    assert!(!leads(&a) && leads(&b));
}

/// A follower drops what it is told: its change set stays bounded under endless churn.
#[tokio::test(start_paused = true)]
async fn a_follower_keeps_no_changes_under_churn() {
    let cluster = SharedCluster::new();
    cluster.update(|s| {
        s.reset(Snapshot { nodes: vec![mk_node("node-a", "172.18.0.2", "z")], ..Default::default() })
    });
    cluster.mark_synced();
    let (_lead, follows) = watch::channel(Lead::Follow);
    let writer = MemoryWriter::default();
    tokio::spawn(tideway_operator::reconcile::run(
        cluster.clone(),
        Arc::new(writer.clone()),
        follows,
        LoopOptions::default(),
        Arc::new(Metrics::new(&mut Registry::default())),
        Arc::new(RwLock::new(OperatorStatus::default())),
        std::future::pending(),
    ));
    let mut most = 0;
    for i in 0..5_000usize {
        let mut slice = mk_slice("demo", &format!("svc-{}", i % 500))
            .ready(&format!("10.1.{}.{}", i / 250 % 250, i % 250), "node-a")
            .build();
        slice.trigger_time = Some(std::time::UNIX_EPOCH + Duration::from_secs(i as u64));
        cluster.update(|s| s.apply_endpoint_slice(slice));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let state = cluster.lock();
        most = most.max(state.changes().trigger_times.len() + state.changes().services.len());
    }
    assert!(most <= 4, "a follower's pending changes reached {most}");
    assert!(writer.written().is_empty());
}

/// One operator (source, election, reconcile loop) against the test API server as `who`.
struct Operator {
    lead: watch::Receiver<Lead>,
    /// The latest end of term it announced.
    last_term: Arc<Mutex<Option<Instant>>>,
}

async fn operator(api: &FakeApi, who: &str, timings: LeaseTimings, write_timeout: Duration) -> Operator {
    let dir = std::env::temp_dir().join(format!("tideway-fence-{who}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = client(Some(&api.kubeconfig_as(&dir, Account::Operator, who))).await.expect("client");
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
                *seen.lock().unwrap() = Some(until);
            }
        }
    });
    let opts = LoopOptions { write_timeout, ..LoopOptions::default() };
    tokio::spawn(tideway_operator::reconcile::run(
        cluster,
        Arc::new(KubeWriter::new(c, Some(who.into()))),
        lead.clone(),
        opts,
        Arc::new(Metrics::new(&mut Registry::default())),
        Arc::new(RwLock::new(OperatorStatus::default())),
        std::future::pending(),
    ));
    Operator { lead, last_term }
}

fn load_balancer(name: &str, i: usize) -> Value {
    json!({"kind": "Service", "metadata": {"name": name, "namespace": "demo"},
        "spec": {"type": "LoadBalancer", "clusterIP": format!("10.96.1.{i}"), "clusterIPs": [format!("10.96.1.{i}")],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": name}}})
}

/// Two operators through the real client: the leader's requests hang (and are dropped when
/// released). Its writes stop before its renew deadline; the standby takes over after the
/// Lease expires and assigns what was created meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_sends_no_write_after_its_renew_deadline() {
    let t = LeaseTimings {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    let write_timeout = Duration::from_millis(300);
    let api = FakeApi::start().await;
    api.preload(vec![
        json!({"kind": "Node", "metadata": {"name": "node-a"},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "default", "generation": 1},
            "spec": {"addresses": ["172.18.240.0/24"]}}),
    ]);
    let a = operator(&api, "op-a", t, write_timeout).await;
    until("op-a leads", || leads(&a.lead)).await;
    let b = operator(&api, "op-b", t, write_timeout).await;

    // Services keep coming, one every 50 ms, for both operators to see.
    let churn = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..80 {
                api.upsert(load_balancer(&format!("svc-{i}"), i));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // op-a writes as the leader; it hangs right after a renewal, so that it has its whole renew
    // deadline left to try writing (under load a fixed sleep could land at the end of a term).
    until("op-a writes", || {
        api.requests().iter().any(|r| r.user.as_deref() == Some("op-a") && r.path.ends_with("/status"))
    })
    .await;
    let mut renewals = a.lead.clone();
    renewals.borrow_and_update();
    tokio::time::timeout(Duration::from_secs(2), renewals.changed()).await.expect("op-a renews").unwrap();
    api.hang("op-a");
    let hung = Instant::now();
    assert!(leads(&a.lead), "op-a leads as it hangs");
    until("op-b leads", || leads(&b.lead)).await;
    let took_over = hung.elapsed();
    // op-b assigns what was created while op-a hung.
    let created_after = api.requests().len();
    until("op-b writes", || {
        api.requests()[created_after..]
            .iter()
            .any(|r| r.user.as_deref() == Some("op-b") && r.path.ends_with("/status"))
    })
    .await;
    api.release("op-a");
    churn.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!leads(&a.lead) && leads(&b.lead));

    let term = a.last_term.lock().unwrap().expect("op-a led").into_std();
    let hung = hung.into_std();
    let writes = |who: &str| -> Vec<_> {
        api.requests()
            .into_iter()
            .filter(|r| r.user.as_deref() == Some(who) && r.method != "GET" && !r.path.contains("/leases"))
            .collect()
    };
    let a_writes = writes("op-a");
    let hung_writes = a_writes.iter().filter(|r| r.at > hung).count();
    assert!(hung_writes > 0, "op-a kept trying to write while it hung (else this proves nothing)");
    let late: Vec<_> = a_writes.iter().filter(|r| r.at > term).map(|r| (&r.method, &r.path)).collect();
    assert!(late.is_empty(), "op-a wrote after its renew deadline: {late:?}");
    let last = a_writes.iter().map(|r| r.at).max().unwrap();
    let b_first = writes("op-b").iter().map(|r| r.at).min().expect("op-b wrote");
    assert!(b_first > term, "op-b wrote only after op-a's term ended");
    eprintln!(
        "hand-over: op-a hung at 0; its last write sent at {:?}; its term ended at {:?}; op-b led at {:?} and wrote at {:?}",
        last - hung,
        term - hung,
        took_over,
        b_first - hung
    );
    // Every Service has an address: the standby finished what the deposed leader could not.
    until("every Service assigned", || {
        api.list("Service").iter().all(|s| s["status"]["loadBalancer"]["ingress"][0]["ip"].is_string())
    })
    .await;
}
