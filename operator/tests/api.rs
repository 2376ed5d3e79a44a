//! The operator's REST API over its cluster view (no API server): each ProxyConfig with its
//! rollout, each node's NodeProxyState, one Service with its announcement and DNS names,
//! problem details for what does not exist, the OpenAPI document, and PATCH of a
//! ProxyConfig's spec (bearer token, bad bodies, body limit, a source that takes no writes).

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::{Arc, RwLock};
use tideway_core::cluster::Snapshot;
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::model::{L2Announcement, NodeProxyState, ServiceName};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{ip, mk_node, mk_service};
use tideway_operator::api::ApiState;
use tideway_operator::reconcile::OperatorStatus;
use tideway_serve::auth::StaticToken;
use tideway_sources::SharedCluster;
use tideway_sources::status::{MemoryWriter, WriteError};
use tower::ServiceExt;

fn cluster() -> SharedCluster {
    let settings = ProxySettings { mode: ProxyMode::Nftables, ..Default::default() };
    let config = ProxyConfig::every_node("default", 3, settings);
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

const TOKEN: &str = "lab-token-0123";

/// The operator's HTTP endpoints over [`cluster`], writing to `writer`, admitting [`TOKEN`].
fn router(writer: MemoryWriter, open_reads: bool) -> axum::Router {
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let api = ApiState {
        cluster: cluster(),
        writer: Arc::new(writer),
        auth: Arc::new(StaticToken::new(TOKEN, "lab-admin")),
        open_reads,
    };
    tideway_operator::http::router(Arc::new(Registry::default()), status, api)
}

async fn call(router: axum::Router, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let resp = router.oneshot(req).await.expect("answer");
    let (code, headers) = (resp.status(), resp.headers().clone());
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (code, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn get(path: &str) -> (StatusCode, Value) {
    let req = Request::builder().uri(path).body(Body::empty()).expect("request");
    let (code, _, body) = call(router(MemoryWriter::default(), true), req).await;
    assert!(!body.is_null(), "{path}: not JSON");
    (code, body)
}

fn patch(token: Option<&str>, content_type: &str, body: &str) -> Request<Body> {
    let mut req = Request::builder()
        .method("PATCH")
        .uri("/api/v1/proxyconfigs/default")
        .header("content-type", content_type);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.body(Body::from(body.to_string())).expect("request")
}

const MERGE: &str = "application/merge-patch+json";

#[tokio::test]
async fn a_patch_with_the_token_changes_the_mode() {
    let writer = MemoryWriter::default();
    let req = patch(Some(TOKEN), MERGE, r#"{"spec": {"mode": "iptables"}}"#);
    let (code, _, body) = call(router(writer.clone(), true), req).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (body["spec"]["mode"].as_str(), body["basedOnGeneration"].as_i64()),
        (Some("iptables"), Some(3))
    );
    let patches = writer.patches();
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].0, "default");
    assert_eq!(patches[0].1.patch, serde_json::json!({"spec": {"mode": "iptables"}}));
    assert_eq!(patches[0].1.spec.sync_period.as_deref(), Some("30s"), "the rest of the spec is kept");
}

#[tokio::test]
async fn changes_without_a_good_token_are_refused() {
    let writer = MemoryWriter::default();
    let body = r#"{"spec": {"mode": "iptables"}}"#;
    for (token, want) in [(None, StatusCode::UNAUTHORIZED), (Some("wrong"), StatusCode::UNAUTHORIZED)] {
        let (code, headers, p) = call(router(writer.clone(), true), patch(token, MERGE, body)).await;
        assert_eq!(code, want, "{p}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(p["status"], 401);
    }
    // A bad body is not even looked at without a token.
    let (code, _, _) = call(router(writer.clone(), true), patch(None, MERGE, "{not json")).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert!(writer.patches().is_empty(), "nothing was written");
}

#[tokio::test]
async fn bad_changes_are_problems_naming_the_field() {
    let writer = MemoryWriter::default();
    let cases = [
        (r#"{"spec": {"mode": "ipvz"}}"#, StatusCode::BAD_REQUEST, "spec.mode"),
        (r#"{"spec": {"mode": 4}}"#, StatusCode::BAD_REQUEST, "spec.mode"),
        (r#"{"spec": {"mdoe": "iptables"}}"#, StatusCode::BAD_REQUEST, "spec.mdoe"),
        (r#"{"status": {}}"#, StatusCode::BAD_REQUEST, "status"),
        ("{not json", StatusCode::BAD_REQUEST, "."),
    ];
    for (body, want, field) in cases {
        let (code, _, p) = call(router(writer.clone(), true), patch(Some(TOKEN), MERGE, body)).await;
        assert_eq!(code, want, "{body}: {p}");
        assert_eq!(p["errors"][0]["field"], field, "{body}: {p}");
    }
    let (code, _, _) = call(router(writer.clone(), true), patch(Some(TOKEN), "text/plain", "{}")).await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = format!(r#"{{"spec": {{"serviceProxyName": "{}"}}}}"#, "x".repeat(20_000));
    let (code, _, _) = call(router(writer.clone(), true), patch(Some(TOKEN), MERGE, &big)).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let mut req = patch(Some(TOKEN), MERGE, r#"{"spec": {}}"#);
    *req.uri_mut() = "/api/v1/proxyconfigs/nope".parse().unwrap();
    let (code, _, _) = call(router(writer.clone(), true), req).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(writer.patches().is_empty(), "nothing was written");
}

#[tokio::test]
async fn a_source_that_takes_no_writes_says_so() {
    let writer = MemoryWriter::default();
    writer.fail_next(vec![WriteError::ReadOnly("this source takes no writes")]);
    let req = patch(Some(TOKEN), MERGE, r#"{"spec": {"mode": "iptables"}}"#);
    let (code, _, p) = call(router(writer.clone(), true), req).await;
    assert_eq!(code, StatusCode::CONFLICT, "{p}");
    writer.fail_next(vec![WriteError::Transport("connection refused".into())]);
    let req = patch(Some(TOKEN), MERGE, r#"{"spec": {"mode": "iptables"}}"#);
    let (code, _, _) = call(router(writer.clone(), true), req).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn reads_off_loopback_need_the_token() {
    let get_with = |token: Option<&str>, path: &str| {
        let mut req = Request::builder().uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        req.body(Body::empty()).unwrap()
    };
    for path in ["/api/v1/proxyconfigs", "/api/v1/nodes", "/api/v1/services/demo/web"] {
        let (code, _, _) = call(router(MemoryWriter::default(), false), get_with(None, path)).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{path}");
        let (code, _, _) = call(router(MemoryWriter::default(), false), get_with(Some(TOKEN), path)).await;
        assert_eq!(code, StatusCode::OK, "{path}");
    }
    let (code, _, _) = call(router(MemoryWriter::default(), false), get_with(None, "/openapi.json")).await;
    assert_eq!(code, StatusCode::OK, "the document is public");
    let (code, _, _) = call(router(MemoryWriter::default(), false), get_with(None, "/healthz")).await;
    assert_eq!(code, StatusCode::OK, "probes need no token");
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
    assert_eq!(s["dnsNames"][0], "web.demo.svc.cluster.local");
    assert_eq!(s["dnsNames"][1], "_http._tcp.web.demo.svc.cluster.local", "{s}");
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
    assert!(doc["paths"]["/api/v1/proxyconfigs/{name}"]["patch"]["requestBody"].is_object());
}

#[tokio::test]
async fn readyz_names_what_the_source_waits_for_and_heads_need_a_token() {
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let waiting = SharedCluster::new();
    waiting.set_unlisted(vec!["Service".into(), "Node".into()]);
    let api_cluster = waiting.clone();
    let api = ApiState {
        cluster: waiting,
        writer: Arc::new(MemoryWriter::default()),
        auth: Arc::new(StaticToken::new(TOKEN, "lab-admin")),
        open_reads: false,
    };
    let router = tideway_operator::http::router(Arc::new(Registry::default()), status.clone(), api);
    let readyz = || Request::builder().uri("/readyz").body(Body::empty()).expect("request");
    let resp = router.clone().oneshot(readyz()).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.expect("body");
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("the first list of Service, the first list of Node"), "{body}");
    status.write().unwrap().synced = true;
    let (code, _, _) = call(router.clone(), readyz()).await;
    assert_eq!(code, StatusCode::OK);
    // A watch that panicked lists again: not ready until it has.
    api_cluster.set_fault("Service", "the Service watch panicked (boom) and lists again".into());
    let resp = router.clone().oneshot(readyz()).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.expect("body");
    assert!(String::from_utf8_lossy(&body).contains("the Service watch panicked (boom)"));
    api_cluster.clear_fault("Service");
    let (code, _, _) = call(router.clone(), readyz()).await;
    assert_eq!(code, StatusCode::OK);
    let head = Request::builder().method("HEAD").uri("/api/v1/nodes").body(Body::empty()).expect("request");
    let (code, _, _) = call(router, head).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "HEAD is a read");
}
