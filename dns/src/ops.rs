//! Operations endpoints, as CoreDNS serves them on separate listeners: `/health` (`:8080`,
//! 200 "OK" while the process lives, also during lameduck), `/ready` (`:8181`, 200 "OK" once
//! the cluster zone is synced, every UDP worker is up and not in lameduck, else 503 naming
//! what is not ready) and `/metrics` (`:9153`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// What `/ready` reports.
#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    lameduck: AtomicBool,
    /// UDP workers down after a panic, waiting to start again.
    workers_down: AtomicUsize,
}

impl Readiness {
    /// Records that the cluster zone has seen a full sync.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Records that shutdown started.
    pub fn set_lameduck(&self) {
        self.lameduck.store(true, Ordering::Relaxed);
    }

    /// Records that a UDP worker is down (it panicked) until [`Readiness::worker_up`].
    pub fn worker_down(&self) {
        self.workers_down.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that a UDP worker that was down starts again.
    pub fn worker_up(&self) {
        self.workers_down.fetch_sub(1, Ordering::Relaxed);
    }

    /// True when ready to take traffic.
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
            && !self.lameduck.load(Ordering::Relaxed)
            && self.workers_down.load(Ordering::Relaxed) == 0
    }
}

/// `GET /health`.
pub fn health_router() -> Router {
    Router::new().route("/health", get(|| async { "OK" }))
}

/// `GET /ready`.
pub fn ready_router(readiness: Arc<Readiness>) -> Router {
    Router::new().route("/ready", get(ready)).with_state(readiness)
}

async fn ready(State(r): State<Arc<Readiness>>) -> (StatusCode, &'static str) {
    if r.is_ready() {
        (StatusCode::OK, "OK")
    } else if r.lameduck.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    } else if r.workers_down.load(Ordering::Relaxed) > 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "udp workers")
    } else {
        // CoreDNS lists the plugins that are not ready.
        (StatusCode::SERVICE_UNAVAILABLE, "kubernetes")
    }
}
