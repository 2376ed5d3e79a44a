//! The agent's HTTP endpoints, where kube-proxy has them: `:10256` `/healthz` and `/livez`
//! (and `/readyz`, saying what the agent waits for),
//! `:10249` `/metrics`, `/proxyMode`, `/healthz`, plus the REST API under `/api/v1`.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tideway_sources::SharedCluster;

use crate::agent::AgentStatus;
use crate::health::ProxyHealth;
use crate::metrics::{CodeLabel, Metrics};

#[derive(Clone)]
struct HealthState {
    health: Arc<ProxyHealth>,
    metrics: Arc<Metrics>,
    status: Arc<RwLock<AgentStatus>>,
    cluster: SharedCluster,
}

async fn healthz(State(s): State<HealthState>) -> impl IntoResponse {
    let code = if s.health.healthy() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    s.metrics.healthz.get_or_create(&CodeLabel { code: code.as_u16().to_string() }).inc();
    (code, axum::Json(s.health.body()))
}

/// `/livez`: 503 when a change waited too long, or a child process hangs past its deadline
/// (named, with how long it ran), queued change or not.
async fn livez(State(s): State<HealthState>) -> impl IntoResponse {
    let stuck = crate::exec::stuck();
    let live = s.health.live() && stuck.is_none();
    let code = if live { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    s.metrics.livez.get_or_create(&CodeLabel { code: code.as_u16().to_string() }).inc();
    let mut body = s.health.body();
    if let Some(stuck) = stuck {
        body["stuck"] = serde_json::Value::String(stuck);
    }
    (code, axum::Json(body))
}

/// `/readyz`: 200 once this node is programmed; else 503 naming what the agent waits for
/// (the source's first lists, its Node), and 503 while a source task that panicked lists again.
async fn readyz(State(s): State<HealthState>) -> (StatusCode, String) {
    let faults = s.cluster.faults();
    if !faults.is_empty() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the cluster source restarted: {}\n", faults.join("; ")),
        );
    }
    let status = s.status.read().unwrap_or_else(|e| e.into_inner());
    match (status.synced, status.waiting_for.as_slice()) {
        (true, []) => (StatusCode::OK, "ok\n".into()),
        (false, []) => (StatusCode::SERVICE_UNAVAILABLE, "waiting for the first sync\n".into()),
        (_, what) => (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for {}\n", what.join(", "))),
    }
}

/// `/healthz` and `/livez` (the LB health check for `externalTrafficPolicy: Cluster`), and
/// `/readyz`.
pub fn health_router(
    health: Arc<ProxyHealth>,
    metrics: Arc<Metrics>,
    status: Arc<RwLock<AgentStatus>>,
    cluster: SharedCluster,
) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(HealthState { health, metrics, status, cluster })
}

async fn proxy_mode(State(status): State<Arc<RwLock<AgentStatus>>>) -> String {
    status.read().unwrap_or_else(|e| e.into_inner()).mode.map(|m| m.to_string()).unwrap_or_default()
}

/// `/metrics`, `/proxyMode`, `/healthz`, and the REST API ([`crate::api`]) with
/// `/openapi.json`; unknown paths are problem details.
pub fn metrics_router(
    registry: Arc<Registry>,
    agent: Arc<RwLock<AgentStatus>>,
    programmed: crate::agent::query::Programmed,
) -> Router {
    let plain = Router::new()
        .route("/proxyMode", get(proxy_mode))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(agent.clone())
        .merge(tideway_serve::http::metrics_router(registry))
        .merge(crate::api::router(programmed, agent));
    tideway_serve::http::with_timeout(crate::api::fallback(plain))
}

/// `router` with its REST API (`/api/v1/...`) answering only to tokens `auth` admits, on
/// loopback too (any local process reaches loopback), unless `anonymous_reads`. `/metrics`,
/// `/proxyMode` and `/healthz` stay open.
pub fn guarded(
    router: Router,
    anonymous_reads: bool,
    auth: Arc<dyn tideway_serve::auth::Authorizer>,
) -> Router {
    if anonymous_reads {
        return router;
    }
    tideway_serve::auth::require_tokens(router, auth, crate::api::access_of)
}
