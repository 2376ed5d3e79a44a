//! The DNS server's REST API over HTTP: what it would answer for a name and why, its stats,
//! problem details for bad parameters, and the OpenAPI document.

mod common;

use common::{cluster, http_get, runtime, settings, start};
use serde_json::Value;

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = http_get(addr, path);
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
}

#[test]
fn records_say_what_the_server_would_answer_and_why() {
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let api = server.api_addr.expect("API listener");

    let (status, a) = get(api, "/api/v1/records?name=web.ns1.svc.cluster.local");
    assert_eq!(status, 200, "{a}");
    assert_eq!((a["rcode"].as_str(), a["type"].as_str()), (Some("NOERROR"), Some("A")), "{a}");
    assert_eq!(a["answers"][0]["data"], "10.96.0.10", "{a}");
    assert_eq!(a["answers"][0]["name"], "web.ns1.svc.cluster.local.", "{a}");
    assert!(a["why"].as_str().unwrap().contains("cluster zone"), "{a}");

    let (_, srv) = get(api, "/api/v1/records?name=_http._tcp.web.ns1.svc.cluster.local.&type=srv");
    assert_eq!(srv["answers"][0]["type"], "SRV", "{srv}");
    assert!(srv["answers"][0]["data"].as_str().unwrap().ends_with("80 web.ns1.svc.cluster.local."), "{srv}");
    assert!(!srv["additionals"].as_array().unwrap().is_empty(), "SRV targets' addresses: {srv}");

    let (_, nx) = get(api, "/api/v1/records?name=nothing.ns1.svc.cluster.local");
    assert_eq!(nx["rcode"], "NXDOMAIN", "{nx}");
    assert_eq!(nx["authority"][0]["type"], "SOA", "{nx}");

    let (_, fwd) = get(api, "/api/v1/records?name=example.com");
    assert!(fwd["rcode"].is_null() && fwd["why"].as_str().unwrap().contains("forwarded"), "{fwd}");

    let (status, stats) = get(api, "/api/v1/stats");
    assert_eq!((status, stats["synced"].as_bool()), (200, Some(true)), "{stats}");
    assert!(stats["services"].as_u64().unwrap() > 0 && stats["zone"] == "cluster.local.", "{stats}");
}

#[test]
fn bad_parameters_are_problems_naming_them() {
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let api = server.api_addr.expect("API listener");
    for (path, field) in [
        ("/api/v1/records", "name"),
        ("/api/v1/records?name=web.ns1.svc.cluster.local&type=BOGUS", "type"),
        ("/api/v1/records?name=a..b", "name"),
    ] {
        let (status, p) = get(api, path);
        assert_eq!((status, p["errors"][0]["field"].as_str()), (400, Some(field)), "{path}: {p}");
    }
    let (status, p) = get(api, "/api/v1/nothing");
    assert_eq!((status, p["status"].as_u64()), (404, Some(404)), "{p}");
    let (status, doc) = get(api, "/openapi.json");
    assert_eq!((status, doc["openapi"].as_str()), (200, Some("3.1.0")));
    for path in ["/api/v1/records", "/api/v1/stats"] {
        assert!(doc["paths"][path]["get"].is_object(), "{path}: {doc}");
    }
    assert!(doc["components"]["schemas"]["RecordsAnswer"].is_object(), "{doc}");
}
