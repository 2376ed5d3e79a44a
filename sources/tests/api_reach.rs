//! Whether the Kubernetes source reaches the API server, as self-fencing reads it
//! (`SharedCluster::api_reachable`): through the real `kube::Client` against a stand-in API
//! server that goes through an outage (every request answered 503, watches closed at once) or
//! falls silent (requests hang, as behind a partition),
//! which the real server does not do on cue. The writes' side (a 5xx, refused connections, an
//! RBAC denial) and a killed API server are tested against the real one, in
//! `lab/tests/api_faults.rs`.

use serde_json::json;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, Role, failing_fast_client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::{Account, FakeApi};

/// A client of `api` as the node agent makes it (its kubeconfig is read at once, then removed).
async fn kube_client(api: &FakeApi, tag: &str) -> kube::Client {
    let dir = std::env::temp_dir().join(format!("tideway-api-reach-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let c = failing_fast_client(Some(&api.kubeconfig(&dir, Account::Agent)))
        .await
        .expect("client from kubeconfig");
    let _ = std::fs::remove_dir_all(&dir);
    c
}

/// An agent's Kubernetes source for node-a, the one Node `api` holds, synced: (the API, its
/// cluster, the running source).
async fn synced_agent_source(tag: &str) -> (FakeApi, SharedCluster, tokio::task::JoinHandle<()>) {
    let api = FakeApi::start().await;
    api.preload([json!({"kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})]);
    let cluster = SharedCluster::new();
    let role = Role::Agent { node: "node-a".into(), service_cidrs: true };
    let source = KubeSource::new(kube_client(&api, tag).await, role, SourceMetrics::default());
    let task = tokio::spawn(source.run(cluster.clone()));
    eventually("synced", || cluster.is_synced().then_some(())).await;
    (api, cluster, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_and_lists_that_fail_make_the_api_unreachable_until_one_succeeds() {
    let (api, cluster, task) = synced_agent_source("watch").await;
    assert!(cluster.api_reachable());

    // The API server restarts: its watches close and every relist is answered 503.
    api.outage(Some(503));
    eventually("unreachable during the outage", || (!cluster.api_reachable()).then_some(())).await;
    assert!(cluster.lock().node("node-a").is_some(), "the last good state keeps serving");
    api.outage(None);
    eventually("reachable after the next successful list", || cluster.api_reachable().then_some(())).await;

    // A watch that ends with 410 Gone was answered by a working server.
    api.expire_watches("Node");
    api.preload([json!({"kind": "Node", "metadata": {"name": "node-a", "labels": {"relisted": "yes"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})]);
    eventually("relisted", || {
        cluster.lock().node("node-a").is_some_and(|n| n.labels.contains_key("relisted")).then_some(())
    })
    .await;
    assert!(cluster.api_reachable());
    task.abort();
}

/// Behind a partition the watches' connections hang without failing, and nothing says the API
/// server is gone. Only a consumer's doubt (an agent whose gossip reaches a minority) has the
/// source ask it: unanswered, it counts as unreachable and the view as stale; answering again,
/// every watch lists again, and it is reachable and fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_api_server_counts_as_unreachable_once_doubted() {
    let (api, cluster, task) = synced_agent_source("silent").await;

    api.hang(Account::Agent.token());
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert!(cluster.api_reachable(), "nothing failed and nobody doubted: nothing was asked");
    cluster.doubt_api(true);
    eventually("unreachable once doubted", || (!cluster.api_reachable()).then_some(())).await;
    assert!(cluster.is_stale(), "the watches may have hung: the view may be stale");
    api.release(Account::Agent.token());
    eventually("reachable once it answers", || cluster.api_reachable().then_some(())).await;
    eventually("fresh once every watch listed again", || (!cluster.is_stale()).then_some(())).await;
    task.abort();
}
