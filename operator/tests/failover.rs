//! Failover when only an agent dies: the operator against the test API server, Nodes that
//! stay Ready and never change. The agents' failure detector reaches the operator as
//! `ClusterState::set_agent_liveness` on the state the operator decides from; this test feeds
//! it there (the operator boundary) and watches the L2Announcement move in the API.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::model::AgentLiveness;
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::FakeApi;
use tokio::sync::watch;

fn objects() -> Vec<Value> {
    let node = |name: &str, ip: &str| {
        json!({"kind": "Node", "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    vec![
        node("node-a", "172.18.0.2"),
        node("node-b", "172.18.0.3"),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "default", "generation": 1},
            "spec": {"addresses": ["172.18.255.200-172.18.255.250"]}}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "demo",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.10.1.5"], "nodeName": "node-a", "conditions": {"ready": true}}]}),
    ]
}

fn announcer(api: &FakeApi) -> Option<String> {
    api.get("L2Announcement", Some("demo"), "web")?["spec"]["node"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_agent_moves_the_address_while_its_node_stays_ready() {
    let api = FakeApi::start().await;
    api.preload(objects());
    let dir = std::env::temp_dir().join(format!("tideway-op-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = client(Some(&api.kubeconfig(&dir))).await.expect("client");
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    let (_leader_tx, leader) = watch::channel(Lead::Always);
    tokio::spawn(tideway_operator::reconcile::run(
        cluster.clone(),
        Arc::new(KubeWriter::new(c, Some("op-0".into()))),
        leader,
        LoopOptions::default(),
        Arc::new(Metrics::new(&mut Registry::default())),
        Arc::new(RwLock::new(OperatorStatus::default())),
        std::future::pending(),
    ));
    let first = eventually("the first announcer", || announcer(&api)).await;
    let nodes_before: Vec<Value> = ["node-a", "node-b"].map(|n| api.get("Node", None, n).unwrap()).to_vec();

    // Both agents alive: nothing moves. Then the announcing agent dies; its Node stays Ready.
    cluster.update(|s| {
        s.set_agent_liveness("node-a", AgentLiveness::Alive);
        s.set_agent_liveness("node-b", AgentLiveness::Alive);
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(announcer(&api).as_deref(), Some(first.as_str()));
    let died = tokio::time::Instant::now();
    cluster.update(|s| s.set_agent_liveness(&first, AgentLiveness::Dead));
    let second = eventually("the address moves", || announcer(&api).filter(|n| *n != first)).await;
    assert!(died.elapsed() < Duration::from_secs(2), "moved in {:?}", died.elapsed());
    let ann = api.get("L2Announcement", Some("demo"), "web").unwrap();
    assert_eq!(ann["spec"]["eligibleNodes"], json!([second]));
    eventually("the Event saying why", || {
        let events = api.list("Event");
        events
            .iter()
            .find(|e| e["reason"] == "AnnouncerChanged" && e["related"]["name"] == json!(second))
            .filter(|e| e["note"].as_str().is_some_and(|m| m.contains("agent is down")))
            .map(|_| ())
    })
    .await;
    let nodes_after: Vec<Value> = ["node-a", "node-b"].map(|n| api.get("Node", None, n).unwrap()).to_vec();
    assert_eq!(nodes_before, nodes_after, "the Nodes never changed");

    // The agent comes back: the address stays where it went.
    cluster.update(|s| s.set_agent_liveness(&first, AgentLiveness::Alive));
    eventually("eligible again", || {
        let ann = api.get("L2Announcement", Some("demo"), "web")?;
        (ann["spec"]["eligibleNodes"].as_array()?.len() == 2).then_some(())
    })
    .await;
    assert_eq!(announcer(&api), Some(second));
}
