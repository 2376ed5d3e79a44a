//! The operator's read API over its cluster view (no API server): each ProxyConfig with its
//! rollout, each node's NodeProxyState, one Service with its announcement and DNS names,
//! problem details for what does not exist, and the OpenAPI document.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use tideway_core::cluster::Snapshot;
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::model::{L2Announcement, NodeProxyState, ServiceName};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{ip, mk_node, mk_service};
use tideway_operator::reconcile::OperatorStatus;
use tideway_sources::SharedCluster;
use tower::ServiceExt;

fn cluster() -> SharedCluster {
    let settings = ProxySettings { mode: ProxyMode::Nftables, ..Default::default() };
    let config = ProxyConfig {
        name: "default".into(),
        generation: 3,
        node_selector: Default::default(),
        priority: 0,
        settings,
    };
    let programmed = NodeProxyState {
        node: "node-a".into(),
        mode: Some(ProxyMode::Nftables),
        proxy_config: Some("default".into()),
        proxy_config_generation: Some(3),
        ready: true,
        ..Default::default()
    };
    let web = ServiceName::new("demo", "web");
    let snapshot = Snapshot {
        nodes: vec![mk_node("node-a", "172.18.0.2", "zone-a"), mk_node("node-b", "172.18.0.3", "zone-b")],
        services: vec![
            mk_service("demo", "web")
                .cluster_ip("10.96.0.10")
                .port("http", Tcp, 80)
                .lb_ip("172.18.255.200")
                .build(),
        ],
        proxy_configs: vec![config],
        node_states: vec![programmed],
        announcements: vec![L2Announcement {
            service: web,
            ips: vec![ip("172.18.255.200")],
            node: Some("node-a".into()),
            eligible: vec!["node-a".into(), "node-b".into()],
            interfaces: vec![],
        }],
        ..Default::default()
    };
    let cluster = SharedCluster::new();
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

async fn get(path: &str) -> (StatusCode, Value) {
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let router = tideway_operator::http::router(Arc::new(Registry::default()), status, cluster());
    let req = Request::builder().uri(path).body(Body::empty()).expect("request");
    let resp = router.oneshot(req).await.expect("answer");
    let code = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}")))
}

#[tokio::test]
async fn proxyconfigs_carry_their_rollout() {
    let (code, all) = get("/api/v1/proxyconfigs").await;
    assert_eq!(code, StatusCode::OK, "{all}");
    let c = &all[0];
    assert_eq!(c["name"], "default");
    assert_eq!(
        (c["spec"]["mode"].as_str(), c["spec"]["syncPeriod"].as_str()),
        (Some("nftables"), Some("30s")),
        "{c}"
    );
    // Both nodes are selected; node-a reports generation 3 programmed, node-b nothing yet.
    let status = &c["status"];
    assert_eq!(
        (status["nodesSelected"].as_u64(), status["nodesProgrammed"].as_u64()),
        (Some(2), Some(1)),
        "{c}"
    );
    let ready =
        status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").expect("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("NotAllNodesProgrammed"))
    );
    let (code, one) = get("/api/v1/proxyconfigs/default").await;
    assert_eq!((code, &one["name"]), (StatusCode::OK, &Value::from("default")));
    let (code, p) = get("/api/v1/proxyconfigs/nope").await;
    assert_eq!((code, p["status"].as_u64()), (StatusCode::NOT_FOUND, Some(404)), "{p}");
}

#[tokio::test]
async fn nodes_and_services_as_the_cluster_sees_them() {
    let (code, nodes) = get("/api/v1/nodes").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(nodes[0]["name"], "node-a");
    assert_eq!(nodes[0]["nodeProxyState"]["ready"], true, "{nodes}");
    assert!(nodes[1]["nodeProxyState"].is_null(), "node-b has not reported: {nodes}");
    let (code, s) = get("/api/v1/services/demo/web").await;
    assert_eq!(code, StatusCode::OK, "{s}");
    assert_eq!(s["announcement"]["node"], "node-a", "{s}");
    assert_eq!(s["announcement"]["eligible"].as_array().map(Vec::len), Some(2), "{s}");
    assert_eq!(s["dns_names"][0], "web.demo.svc.cluster.local");
    assert_eq!(s["dns_names"][1], "_http._tcp.web.demo.svc.cluster.local", "{s}");
    let (code, _) = get("/api/v1/services/demo/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = get("/api/v1/nowhere").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, doc) = get("/openapi.json").await;
    assert_eq!((code, doc["openapi"].as_str()), (StatusCode::OK, Some("3.1.0")));
    for path in [
        "/api/v1/proxyconfigs",
        "/api/v1/proxyconfigs/{name}",
        "/api/v1/nodes",
        "/api/v1/services/{namespace}/{name}",
    ] {
        assert!(doc["paths"][path]["get"].is_object(), "{path}");
    }
}
