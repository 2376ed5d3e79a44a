//! The operator's HTTP endpoints: `/healthz` (alive), `/readyz` (the source synced),
//! `/metrics` and `/api/v1/status`.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::reconcile::OperatorStatus;

type Status = Arc<RwLock<OperatorStatus>>;

async fn readyz(State(s): State<Status>) -> impl IntoResponse {
    if s.read().unwrap_or_else(|e| e.into_inner()).synced {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the cluster source has not synced yet")
    }
}

async fn status(State(s): State<Status>) -> impl IntoResponse {
    axum::Json(s.read().unwrap_or_else(|e| e.into_inner()).clone())
}

/// Every endpoint, on one listener; unknown paths are problem details.
/// `/api/v1/...` reads need a token unless `api.open_reads`.
pub fn router(registry: Arc<Registry>, status_: Status, api: crate::api::ApiState) -> Router {
    let guard = (!api.open_reads).then(|| api.auth.clone());
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/status", get(status))
        .with_state(status_)
        .merge(tideway_api::http::metrics_router(registry))
        .merge(crate::api::router(api))
        .fallback(tideway_api::problem::not_found);
    let router = tideway_api::http::with_timeout(router);
    match guard {
        Some(auth) => tideway_api::auth::require_tokens(router, auth, crate::api::read_access_of),
        None => router,
    }
}
