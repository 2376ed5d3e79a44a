//! Fenced leadership: a leader whose API calls hang steps down on its own timer, sends no write
//! after its renew deadline, and a standby takes over once the Lease expires; a follower keeps
//! no changes however long the churn. On an in-memory Lease with a paused clock; the same over
//! real Leases, the API server's audit log as the witness: `lab/tests/fencing.rs`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::operator::lease::{Elector, LeaseTimings};
use tideway_core::testing::{mk_node, mk_slice};
use tideway_operator::election::{Lead, MemoryLease};
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::status::MemoryWriter;
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
        cluster.update(|s| s.apply(slice));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let state = cluster.lock();
        most = most.max(state.changes().trigger_times.len() + state.changes().services.len());
    }
    assert!(most <= 4, "a follower's pending changes reached {most}");
    assert!(writer.written().is_empty());
}
