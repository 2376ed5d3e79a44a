//! HTTP pieces every component mounts: `/metrics` (Prometheus text), health endpoints, serving.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// `GET /metrics` serving `registry` in the Prometheus text format.
pub fn metrics_router(registry: Arc<Registry>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(registry)
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// How long a REST call may take before it is answered 503 (the agent's sync loop answers
/// between syncs, and a large full sync is seconds).
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(40);

/// `router` with every call bounded by [`CALL_TIMEOUT`]: a call still running then is
/// answered with a 503 problem (and its work dropped).
pub fn with_timeout(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(bounded))
}

async fn bounded(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match tokio::time::timeout(CALL_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => crate::problem::Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
        )
        .into_response(),
    }
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_hangs_is_answered_503() {
        let slow = Router::new()
            .route("/slow", get(|| async { tokio::time::sleep(std::time::Duration::from_secs(3600)).await }))
            .route("/fast", get(|| async { "ok" }));
        let router = with_timeout(slow);
        let call = |path: &str| {
            let req = axum::http::Request::builder().uri(path).body(axum::body::Body::empty()).unwrap();
            router.clone().oneshot(req)
        };
        let r = call("/slow").await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/problem+json");
        assert_eq!(call("/fast").await.unwrap().status(), StatusCode::OK);
    }
}
