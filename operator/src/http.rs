//! The operator's HTTP endpoints: `/healthz` (alive), `/readyz` (the source synced, else what it
//! waits for),
//! `/metrics` and `/api/v1/status`.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use tideway_sources::SharedCluster;

use crate::reconcile::OperatorStatus;

type Status = Arc<RwLock<OperatorStatus>>;

/// `/readyz`: 200 once the source synced, else 503 naming what it waits for (the kinds whose
/// first list has not arrived), and 503 while a source task that panicked lists again.
async fn readyz(State((s, cluster)): State<(Status, SharedCluster)>) -> (StatusCode, String) {
    let faults = cluster.faults();
    if !faults.is_empty() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the cluster source restarted: {}", faults.join("; ")),
        );
    }
    if s.read().unwrap_or_else(|e| e.into_inner()).synced {
        return (StatusCode::OK, "ok".into());
    }
    let waiting = cluster.waiting_for();
    let what =
        if waiting.is_empty() { "the cluster source's first sync".to_string() } else { waiting.join(", ") };
    (StatusCode::SERVICE_UNAVAILABLE, format!("the cluster source has not synced yet: waiting for {what}"))
}

async fn status(State(s): State<Status>) -> impl IntoResponse {
    axum::Json(s.read().unwrap_or_else(|e| e.into_inner()).clone())
}

/// Every endpoint, on one listener; unknown paths are problem details.
/// `/api/v1/...` reads need a token unless `api.open_reads`.
pub fn router(registry: Arc<Registry>, status_: Status, api: crate::api::ApiState) -> Router {
    let guard = (!api.open_reads).then(|| api.auth.clone());
    let ready =
        Router::new().route("/readyz", get(readyz)).with_state((status_.clone(), api.cluster.clone()));
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/v1/status", get(status))
        .with_state(status_)
        .merge(ready)
        .merge(tideway_serve::http::metrics_router(registry))
        .merge(crate::api::router(api))
        .fallback(tideway_serve::problem::not_found);
    let router = tideway_serve::http::with_timeout(router);
    match guard {
        Some(auth) => tideway_serve::auth::require_tokens(router, auth, crate::api::read_access_of),
        None => router,
    }
}
