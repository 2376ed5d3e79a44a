//! The operator through the real `kube::Client` against the imitation API server, for what the
//! real one cannot do on cue: a 409 answered to the first status write, which the writer
//! retries. Everything else the operator writes, its leader election, its reviewed REST
//! changes and MetalLB's objects run against the real API server in
//! `lab/tests/operator_api/`.

use std::sync::{Arc, RwLock};

use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KubeSource, KubeWriter, Role, client};
use tideway_sources::metrics::SourceMetrics;
use tideway_tests::eventually;
use tideway_tests::fake_api::{Account, FakeApi};
use tokio::sync::watch;

async fn kube_client(api: &FakeApi, tag: &str) -> kube::Client {
    let dir = std::env::temp_dir().join(format!("tideway-op-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = client(Some(&api.kubeconfig(&dir, Account::Operator))).await.expect("client");
    // The client holds the token now; the file with it goes.
    std::fs::remove_dir_all(&dir).unwrap();
    c
}

fn cluster_objects() -> Vec<Value> {
    let node = |name: &str, ip: &str| {
        json!({"kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    vec![
        node("node-a", "172.18.0.2"),
        node("node-b", "172.18.0.3"),
        json!({"kind": "Namespace", "metadata": {"name": "demo"}}),
        json!({"kind": "LoadBalancerPool", "metadata": {"name": "default", "generation": 1},
            "spec": {"addresses": ["172.18.255.200-172.18.255.250"]}}),
        json!({"kind": "ProxyConfig", "metadata": {"name": "default", "generation": 1}, "spec": {"mode": "nftables"}}),
        json!({"kind": "Service", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        json!({"kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "demo",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.10.1.5"], "nodeName": "node-a", "conditions": {"ready": true}}]}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_answered_409_is_retried() {
    let api = FakeApi::start().await;
    api.preload(cluster_objects());
    // The first status write of the Service meets a conflict; the write is retried.
    api.fail_next("PATCH", "/api/v1/namespaces/demo/services/web/status", 409);
    let c = kube_client(&api, "writes").await;
    let cluster = SharedCluster::new();
    tokio::spawn(KubeSource::new(c.clone(), Role::Operator, SourceMetrics::default()).run(cluster.clone()));
    let metrics = Arc::new(Metrics::new(&mut Registry::default()));
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let (_leader_tx, leader) = watch::channel(Lead::Always);
    let writer = Arc::new(KubeWriter::new(c, Some("op-0".into())));
    let run = tideway_operator::reconcile::run(
        cluster,
        writer,
        leader,
        LoopOptions::default(),
        metrics,
        status.clone(),
        std::future::pending(),
    );
    tokio::spawn(run);

    let svc = eventually("the Service's address", || {
        let s = api.get("Service", Some("demo"), "web")?;
        s["status"]["loadBalancer"]["ingress"][0]["ip"].is_string().then_some(s)
    })
    .await;
    assert_eq!(svc["status"]["loadBalancer"]["ingress"][0], json!({"ip": "172.18.255.200", "ipMode": "VIP"}));
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/namespaces/demo/services/web/status")
        .collect();
    assert_eq!(patches.len(), 2, "the 409 was retried once");
    assert_eq!(patches[1].content_type.as_deref(), Some("application/apply-patch+yaml"));
    assert_eq!(patches[1].query.get("fieldManager").map(String::as_str), Some("tideway-operator"));
}
