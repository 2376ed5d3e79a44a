//! The agent's REST API against the real sync loop over an in-memory kernel (no root): every
//! endpoint's status codes and JSON shape, bad bodies answered with problem details naming the
//! field, and the OpenAPI document listing every operation.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tideway_core::cluster::Snapshot;
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_node, mk_service, mk_slice};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus, query};
use tideway_node_agent::dataplane::memory::SharedKernel;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tower::ServiceExt;

fn cluster() -> SharedCluster {
    let cluster = SharedCluster::new();
    let settings = ProxySettings { mode: ProxyMode::Nftables, ..Default::default() };
    let config = ProxyConfig::every_node("default", 1, settings);
    let snapshot = Snapshot {
        nodes: vec![mk_node("node-a", "192.168.0.10", "zone-a")],
        services: vec![mk_service("demo", "web").cluster_ip("10.96.0.1").port("http", Tcp, 80).build()],
        endpoint_slices: vec![
            mk_slice("demo", "web").port("http", Tcp, 8080).ready("10.244.1.5", "node-a").build(),
        ],
        proxy_configs: vec![config],
        ..Default::default()
    };
    cluster.update(|s| s.reset(snapshot));
    cluster
}

/// The metrics port's router over a running agent; the cluster is marked synced when `sync`.
fn api(sync: bool) -> (axum::Router, SharedCluster) {
    let (router, cluster, _kernel) = api_on_kernel(sync);
    (router, cluster)
}

/// [`api`], with the in-memory kernel the agent programs.
fn api_on_kernel(sync: bool) -> (axum::Router, SharedCluster, SharedKernel) {
    let cluster = cluster();
    if sync {
        cluster.mark_synced();
    }
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let health = Arc::new(ProxyHealth::new(Duration::from_secs(30)));
    let opts = AgentOptions::for_node("node-a");
    let kernel = SharedKernel::default();
    let (publisher, programmed) = query::channel();
    let k = kernel.clone();
    let agent = Agent::new(opts, cluster.clone(), status.clone(), metrics, health)
        .with_dataplanes(Box::new(move |s: &ProxySettings| k.dataplane(s)))
        .answering(publisher);
    tokio::spawn(agent.run(std::future::pending()));
    let router = tideway_node_agent::http::metrics_router(Arc::new(registry), status, programmed);
    (router, cluster, kernel)
}

async fn call(router: &axum::Router, method: &str, uri: &str, body: &str) -> (StatusCode, String, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("answer");
    let status = resp.status();
    let kind = resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("").to_string());
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.expect("body");
    (status, kind.unwrap_or_default(), String::from_utf8_lossy(&bytes).into_owned())
}

async fn json_call(router: &axum::Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let (status, kind, text) = call(router, method, uri, body).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{uri}: {e}: {text}"));
    if !status.is_success() {
        assert_eq!(kind, "application/problem+json", "{uri}: {text}");
        assert_eq!(v["status"], status.as_u16(), "{text}");
    }
    (status, v)
}

/// Waits (bounded) until the first sync has programmed something.
async fn programmed(router: &axum::Router) {
    for _ in 0..200 {
        if call(router, "GET", "/api/v1/ruleset", "").await.0 == StatusCode::OK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the agent never answered with a ruleset");
}

#[tokio::test]
async fn before_the_first_sync_questions_are_503_problems() {
    let (router, _cluster) = api(false);
    let (status, p) = json_call(&router, "GET", "/api/v1/ruleset", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(p["detail"].as_str().unwrap().contains("first sync"), "{p}");
}

#[tokio::test]
async fn ruleset_trace_and_service_answer_from_what_is_programmed() {
    let (router, _cluster) = api(true);
    programmed(&router).await;
    let (status, kind, text) = call(&router, "GET", "/api/v1/ruleset", "").await;
    assert_eq!((status, kind.as_str()), (StatusCode::OK, "text/plain; charset=utf-8"));
    assert!(text.contains("table ip tideway") && text.contains("10.96.0.1 . tcp . 80"), "{text}");
    let (status, _, v6) = call(&router, "GET", "/api/v1/ruleset?family=ipv6", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(v6.contains("table ip6 tideway"), "{v6}");

    let body = json!({"src": "10.244.1.9", "dst": "10.96.0.1", "port": 80}).to_string();
    let (status, t) = json_call(&router, "POST", "/api/v1/trace", &body).await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!((t["node"].as_str(), t["mode"].as_str()), (Some("node-a"), Some("nftables")));
    assert!(t["verdict"].as_str().unwrap().starts_with("DNAT to 10.244.1.5:8080"), "{t}");
    assert!(!t["paths"].as_array().unwrap().is_empty() && t["text"].as_str().unwrap().contains("10.96.0.1"));
    let body = json!({"src": "192.168.0.99", "dst": "10.96.0.2", "port": 80, "from": "external"}).to_string();
    let (_, t) = json_call(&router, "POST", "/api/v1/trace", &body).await;
    assert!(!t["verdict"].as_str().unwrap().starts_with("DNAT"), "no Service there: {t}");

    let (status, s) = json_call(&router, "GET", "/api/v1/services/demo/web", "").await;
    assert_eq!(status, StatusCode::OK, "{s}");
    let port = &s["ports"][0];
    assert_eq!(port["cluster_ip"], "10.96.0.1", "{s}");
    assert_eq!(port["cluster_endpoints"].as_array().unwrap().len(), 1, "{s}");
    let (status, p) = json_call(&router, "GET", "/api/v1/services/demo/nope", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{p}");

    let (status, st) = json_call(&router, "GET", "/api/v1/status", "").await;
    assert_eq!((status, st["node"].as_str()), (StatusCode::OK, Some("node-a")));
}

/// A sync stuck in the kernel (its apply blocked) holds up no question: the ruleset and the
/// trace are answered at once from what was last programmed, and the new plan once programmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_answered_while_the_sync_loop_is_blocked() {
    let (router, cluster, kernel) = api_on_kernel(true);
    programmed(&router).await;
    // A thread holds the kernel: the next apply blocks until it lets go.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (locked, is_locked) = std::sync::mpsc::channel::<()>();
    let k = kernel.clone();
    let holder = std::thread::spawn(move || {
        let _held = k.lock();
        let _ = locked.send(());
        let _ = released.recv_timeout(Duration::from_secs(30));
    });
    is_locked.recv().expect("the kernel held");
    cluster
        .update(|s| s.apply(mk_service("demo", "api").cluster_ip("10.96.0.2").port("http", Tcp, 80).build()));
    // Past the minimum sync period: the next sync is blocked in the kernel.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let within = Duration::from_secs(2);
    let ruleset = tokio::time::timeout(within, call(&router, "GET", "/api/v1/ruleset", "")).await;
    let (status, _, text) = ruleset.expect("the ruleset answered while a sync is blocked");
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("10.96.0.1") && !text.contains("10.96.0.2"), "what was programmed: {text}");
    let body = json!({"src": "10.244.1.9", "dst": "10.96.0.1", "port": 80}).to_string();
    let traced = tokio::time::timeout(within, json_call(&router, "POST", "/api/v1/trace", &body)).await;
    assert_eq!(traced.expect("the trace answered while a sync is blocked").0, StatusCode::OK);
    release.send(()).expect("let go of the kernel");
    holder.join().expect("the holder");
    let mut text = String::new();
    for _ in 0..200 {
        text = call(&router, "GET", "/api/v1/ruleset", "").await.2;
        if text.contains("10.96.0.2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(text.contains("10.96.0.2"), "the new plan once programmed: {text}");
    // Later syncs change their own copy of the plan, never the one answered from.
    cluster.update(|s| s.delete::<tideway_core::model::Service>("demo", "api"));
    for _ in 0..200 {
        text = call(&router, "GET", "/api/v1/ruleset", "").await.2;
        if !text.contains("10.96.0.2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!text.contains("10.96.0.2") && text.contains("10.96.0.1"), "the Service gone: {text}");
}

/// The REST API on loopback, over real TCP: no token, no answer (any local process reaches
/// loopback), unless the agent runs with `--api-anonymous-reads`; `/metrics` stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loopback_the_api_needs_a_token_unless_anonymous_reads() {
    use tideway_serve::auth::StaticToken;
    let (router, _cluster) = api(true);
    programmed(&router).await;
    let serve = |anonymous: bool| {
        let auth = Arc::new(StaticToken::new("t0k", "me"));
        let router = tideway_node_agent::http::guarded(router.clone(), anonymous, auth);
        async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(tideway_serve::http::serve(listener, None, router, std::future::pending()));
            addr
        }
    };
    let guarded = serve(false).await;
    assert_eq!(http_get(guarded, "/api/v1/ruleset", None).await, 401);
    assert_eq!(http_get(guarded, "/api/v1/status", None).await, 401);
    assert_eq!(http_get(guarded, "/api/v1/ruleset", Some("nope")).await, 401);
    assert_eq!(http_get(guarded, "/api/v1/ruleset", Some("t0k")).await, 200);
    assert_eq!(http_get(guarded, "/metrics", None).await, 200);
    let open = serve(true).await;
    assert_eq!(http_get(open, "/api/v1/ruleset", None).await, 200);
}

/// The status code of `GET path` over TCP, with `token` as the bearer if given.
async fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).await.unwrap();
    answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn bad_input_is_a_problem_naming_the_field_never_a_500() {
    let (router, _cluster) = api(true);
    programmed(&router).await;
    let cases = [
        (
            json!({"src": "10.0.0.1", "dst": "10.96.0.1", "port": 80, "protocol": "icmp"}).to_string(),
            400,
            "protocol",
        ),
        (json!({"src": "10.0.0.1", "dst": "10.96.0.1", "port": "http"}).to_string(), 400, "port"),
        (json!({"src": "10.0.0.1", "dst": "10.96.0.1", "port": 70000}).to_string(), 400, "port"),
        (json!({"src": "ten", "dst": "10.96.0.1", "port": 80}).to_string(), 400, "src"),
        (json!({"src": "10.0.0.1", "dst": "fd00::1", "port": 80}).to_string(), 400, "src"),
        (json!({"src": "10.0.0.1", "dst": "10.96.0.1", "port": 80, "ttl": 3}).to_string(), 400, "ttl"),
        (json!({"src": "10.0.0.1", "dst": "10.96.0.1"}).to_string(), 400, "."),
        ("{not json".to_string(), 400, "."),
    ];
    for (body, code, field) in cases {
        let (status, p) = json_call(&router, "POST", "/api/v1/trace", &body).await;
        assert_eq!(status.as_u16(), code, "{body}: {p}");
        assert_eq!(p["errors"][0]["field"], field, "{body}: {p}");
    }
    let huge = format!("{{\"src\": \"{}\"}}", "1".repeat(20_000));
    let (status, _) = json_call(&router, "POST", "/api/v1/trace", &huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, p) = json_call(&router, "GET", "/api/v1/ruleset?family=ipx", "").await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("family")));
    let (status, _) = json_call(&router, "GET", "/api/v1/nothing-here", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = call(&router, "GET", "/api/v1/trace", "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn the_openapi_document_lists_every_operation_with_its_schemas() {
    let (router, _cluster) = api(false);
    let (status, doc) = json_call(&router, "GET", "/openapi.json", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    for (path, method) in [
        ("/api/v1/status", "get"),
        ("/api/v1/ruleset", "get"),
        ("/api/v1/trace", "post"),
        ("/api/v1/services/{namespace}/{name}", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{path} {method}: {doc}");
    }
    let schemas = &doc["components"]["schemas"];
    for name in ["TraceRequest", "TraceAnswer", "ServiceAnswer", "Problem", "TraceProtocol"] {
        assert!(schemas[name].is_object(), "{name}: {schemas}");
    }
    // Every reference resolves within the document.
    let text = doc.to_string();
    for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = r.split('"').next().unwrap();
        assert!(schemas[name].is_object(), "dangling reference {name}");
    }
}

#[tokio::test]
async fn metrics_carry_kube_proxys_names() {
    let (router, _cluster) = api(true);
    programmed(&router).await;
    let (status, _, text) = call(&router, "GET", "/metrics", "").await;
    assert_eq!(status, StatusCode::OK);
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
    };
    for histogram in [
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
    ] {
        sample(&format!("{histogram}_count"));
        sample(&format!("{histogram}_bucket"));
    }
    assert!(sample("kubeproxy_sync_proxy_rules_last_timestamp_seconds") > 1.7e9);
    // One Service and one EndpointSlice arrived before the first sync.
    assert_eq!(sample("kubeproxy_sync_proxy_rules_service_changes_total"), 1.0);
    assert_eq!(sample("kubeproxy_sync_proxy_rules_endpoint_changes_total"), 1.0);
    for name in [
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "kubeproxy_conntrack_reconciler_deleted_entries_total",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "tideway_drift_checks_total",
        "kubeproxy_network_programming_duration_seconds_count",
        "kubeproxy_network_programming_duration_seconds_bucket",
    ] {
        sample(name);
    }
    assert_eq!(sample("kubeproxy_sync_proxy_rules_service_changes_pending"), 0.0, "all programmed");
    assert_eq!(sample("kubeproxy_sync_proxy_rules_endpoint_changes_pending"), 0.0, "all programmed");
}
