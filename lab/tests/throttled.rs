//! The agent's source throttled by the real API server's Priority and Fairness (root; needs
//! `make kube`): a PriorityLevelConfiguration of one concurrency share that rejects what it
//! cannot seat, a FlowSchema putting the agent's user there, and a flood from that user while
//! the source starts. Its requests get real 429s; it backs off, syncs, and never reads the
//! server as unreachable (a 429 is an answer from a working server).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tideway_lab::kube::apply::Applier;
use tideway_lab::kube::standalone::Standalone;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, Role, failing_fast_client};
use tideway_sources::metrics::SourceMetrics;

const USER: &str = "tideway-throttled";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_throttled_by_priority_and_fairness_backs_off_syncs_and_stays_reachable() {
    let standalone = Standalone::start("apf", |config| {
        // A small server: one share of 30 seats is one seat.
        config.apiserver_flags =
            vec!["--max-requests-inflight=20".into(), "--max-mutating-requests-inflight=10".into()];
    })
    .await
    .expect("a control plane (root; make kube)");
    standalone.apply_crds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tideway/crds")).await.unwrap();
    let admin = standalone.admin().await.unwrap();
    let mut applier = Applier::new(admin.clone(), "tideway-test");
    let objects: [Value; 2] = [
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "tideway-tiny"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                "limitResponse": {"type": "Reject"}}}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "tideway-tiny"},
            "spec": {"priorityLevelConfiguration": {"name": "tideway-tiny"}, "matchingPrecedence": 300,
                "rules": [{"subjects": [{"kind": "User", "user": {"name": USER}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                        "clusterScope": true, "namespaces": ["*"]}]}]}}),
    ];
    for object in &objects {
        applier.apply(object).await.unwrap();
    }
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a"}})).unwrap();
    Api::<Node>::all(admin.clone()).create(&PostParams::default(), &node).await.unwrap();

    // The agent's client as the throttled user (RBAC: cluster admin; APF: one seat).
    let kubeconfig =
        standalone.kubeconfig_for(USER, &["kubeadm:cluster-admins"], &standalone.cp.host_url()).unwrap();
    let client = failing_fast_client(Some(&kubeconfig)).await.unwrap();
    // A flood from the same user, until the source has been answered 429.
    let flooding = Arc::new(AtomicBool::new(true));
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let (maps, on) = (Api::<ConfigMap>::all(client.clone()), flooding.clone());
            tokio::spawn(async move {
                while on.load(Ordering::Relaxed) {
                    let _ = maps.list(&Default::default()).await;
                }
            })
        })
        .collect();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = SourceMetrics::new(&mut registry);
    let cluster = SharedCluster::new();
    let role = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let task = tokio::spawn(KubeSource::new(client, role, metrics).run(cluster.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while tideway_tests::metrics::sum(&registry, "code=\"429\"") < 1.0 {
        assert!(Instant::now() < deadline, "the source was never answered 429");
        assert!(cluster.api_reachable(), "a 429 read as unreachable");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cluster.api_reachable(), "a 429 read as unreachable");
    flooding.store(false, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(60), cluster.wait_synced())
        .await
        .expect("synced after the flood");
    assert!(cluster.lock().node("node-a").is_some());
    assert!(cluster.api_reachable());
    eprintln!(
        "429s answered to the source's watches: {}",
        tideway_tests::metrics::sum(&registry, "code=\"429\"")
    );
    // The server says so too: 429s to that user in its audit log.
    let audit = std::fs::read_to_string(standalone.cp.layout().audit_log()).unwrap();
    let throttled = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == USER && e["responseStatus"]["code"] == 429)
        .count();
    assert!(throttled > 0, "no 429 in the audit log");
    eprintln!("429s to {USER} in the audit log: {throttled}");
    task.abort();
}
