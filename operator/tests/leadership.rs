//! Only the leader writes; a failed write is retried; a new leader starts from the cluster.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::ipam::Pool;
use tideway_core::model::{L2Settings, LoadBalancerPool};
use tideway_core::net::Protocol;
use tideway_core::operator::Action;
use tideway_core::testing::{mk_node, mk_service};
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus, run};
use tideway_sources::SharedCluster;
use tideway_sources::status::{ClusterWriter, MemoryWriter, WriteError};
use tokio::sync::watch;

fn ingress_writes(w: &MemoryWriter) -> usize {
    w.written().iter().filter(|a| matches!(a, Action::SetIngress { .. })).count()
}

/// A synced cluster: one node, one LoadBalancer Service, one pool.
fn one_load_balancer() -> SharedCluster {
    let cluster = SharedCluster::new();
    cluster.update(|s| {
        s.reset(Snapshot {
            nodes: vec![mk_node("node-a", "172.18.0.2", "z")],
            services: vec![
                mk_service("demo", "web")
                    .cluster_ip("10.96.0.10")
                    .port("http", Protocol::Tcp, 80)
                    .load_balancer()
                    .build(),
            ],
            ..Default::default()
        });
        s.apply(LoadBalancerPool {
            pool: Pool::new("default", &["172.18.255.200/29"]),
            l2: L2Settings::default(),
            generation: 1,
            origin: Default::default(),
        });
    });
    cluster.mark_synced();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_failed_writes_are_retried() {
    let cluster = one_load_balancer();
    let writer = MemoryWriter::default();
    // The first two attempts of the first write fail with conflicts: the loop retries.
    writer.fail_next(vec![
        WriteError::Refused { code: 409, message: "conflict".into() },
        WriteError::Refused { code: 409, message: "conflict".into() },
    ]);
    let (leader_tx, leader) = watch::channel(Lead::Follow);
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let opts = LoopOptions { resync_period: Duration::from_secs(3600), ..LoopOptions::default() };
    tokio::spawn(run(
        cluster.clone(),
        Arc::new(writer.clone()),
        leader,
        opts,
        metrics,
        status.clone(),
        std::future::pending(),
    ));

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(writer.written().is_empty(), "a follower writes nothing");
    assert!(status.read().unwrap().synced && !status.read().unwrap().leader);

    leader_tx.send_replace(Lead::Always);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ingress_writes(&writer) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the leader never wrote");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status.read().unwrap().write_errors, 0, "the conflicts were retried away");

    // Leadership lost: new decisions are not written.
    leader_tx.send_replace(Lead::Follow);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = writer.written().len();
    cluster.update(|s| {
        s.apply(
            mk_service("demo", "api")
                .cluster_ip("10.96.0.11")
                .port("http", Protocol::Tcp, 80)
                .load_balancer()
                .build(),
        );
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(writer.written().len(), before, "a former leader stops writing");

    // Leading again: it decides from the whole cluster, including what changed meanwhile.
    leader_tx.send_replace(Lead::Always);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ingress_writes(&writer) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the new leader never wrote");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Panics on its first write, then records like a [`MemoryWriter`].
struct PanicsOnce {
    panicked: std::sync::atomic::AtomicBool,
    inner: MemoryWriter,
}

#[async_trait::async_trait]
impl ClusterWriter for PanicsOnce {
    async fn write(&self, action: &Action) -> Result<(), WriteError> {
        if !self.panicked.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("the writer broke");
        }
        self.inner.write(action).await
    }
}

/// A reconcile loop that panics is started again after its backoff, says so meanwhile, and the
/// new loop writes what the old one could not.
#[tokio::test(start_paused = true)]
async fn a_reconcile_loop_that_panics_starts_again_and_writes() {
    let cluster = one_load_balancer();
    let inner = MemoryWriter::default();
    let writer = Arc::new(PanicsOnce { panicked: false.into(), inner: inner.clone() });
    let (_leader_tx, leader) = watch::channel(Lead::Always);
    let mut registry = Registry::default();
    let restarts = tideway_sources::metrics::SourceMetrics::new(&mut registry);
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    tokio::spawn(tideway_operator::reconcile::run_supervised(
        cluster.clone(),
        writer,
        leader,
        LoopOptions::default(),
        Arc::new(Metrics::new(&mut Registry::default())),
        status,
        restarts,
        std::future::pending::<()>,
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let faults = cluster.faults();
    assert!(faults.len() == 1 && faults[0].contains("the writer broke"), "{faults:?}");
    assert_eq!(ingress_writes(&inner), 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ingress_writes(&inner), 1, "the restarted loop assigned the address");
    assert!(cluster.faults().is_empty());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("tideway_source_task_restarts_total{task=\"reconcile\"} 1"), "{text}");
}

/// Each pass is a `reconcile` span (changes, actions, write errors) with a `decide` child and
/// one `write` child per action, captured by an in-memory OpenTelemetry pipeline.
#[tokio::test]
async fn each_reconcile_is_a_span_with_its_writes() {
    use tideway_telemetry::testing::Capture;
    let capture = Capture::new();
    let _guard = capture.install();
    let cluster = one_load_balancer();
    let writer = MemoryWriter::default();
    let (_leader_tx, leader) = watch::channel(Lead::Always);
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let opts = LoopOptions { resync_period: Duration::from_secs(3600), ..LoopOptions::default() };
    let looping =
        run(cluster, Arc::new(writer.clone()), leader, opts, metrics, status, std::future::pending());
    tokio::spawn(looping);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ingress_writes(&writer) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no address assigned");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let spans = capture.spans();
    let reconcile = spans.iter().find(|s| s.name == "reconcile").expect("a reconcile span");
    let actions: usize = reconcile.attributes["actions"].parse().unwrap();
    assert!(actions >= 2, "an address and an announcement at least: {reconcile:?}");
    assert_eq!(reconcile.attributes["write_errors"], "0");
    assert!(spans.iter().any(|s| s.name == "decide" && s.parent.as_deref() == Some("reconcile")));
    let writes: Vec<_> = spans.iter().filter(|s| s.name == "write").collect();
    assert!(writes.len() >= actions, "{spans:#?}");
    assert!(writes.iter().all(|w| w.parent.as_deref() == Some("reconcile")));
    assert!(writes.iter().any(|w| w.attributes["kind"] == "ingress"), "{writes:#?}");
}
