//! HTTP pieces every component mounts: `/metrics` (Prometheus text), health endpoints, serving
//! (plain or, with [`crate::tls`], HTTPS).

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

/// Serves `router` on `listener` until `shutdown` resolves: HTTPS with `tls`, else plain HTTP,
/// within the default [`crate::listen::Limits`].
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<crate::tls::Tls>>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::listen::serve(listener, tls, router, crate::listen::Limits::default(), shutdown).await
}

/// HTTP servers that stop together: each serves until [`Servers::stop`], which stops them
/// accepting and lets the calls in flight finish, for at most a grace period.
pub struct Servers {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: tokio::task::JoinSet<std::io::Result<()>>,
}

impl Default for Servers {
    fn default() -> Self {
        Servers { stop: tokio::sync::watch::channel(false).0, tasks: tokio::task::JoinSet::new() }
    }
}

impl Servers {
    /// No servers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `router` on `listener` ([`serve`]) until [`Servers::stop`].
    pub fn serve(&mut self, listener: TcpListener, tls: Option<Arc<crate::tls::Tls>>, router: Router) {
        self.serve_within(listener, tls, router, crate::listen::Limits::default());
    }

    /// Serves `router` on `listener` within `limits` until [`Servers::stop`].
    pub fn serve_within(
        &mut self,
        listener: TcpListener,
        tls: Option<Arc<crate::tls::Tls>>,
        router: Router,
        limits: crate::listen::Limits,
    ) {
        let mut stop = self.stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        self.tasks.spawn(crate::listen::serve(listener, tls, router, limits, stopped));
    }

    /// Serves `router` at `addr` once it can be bound: a port another process holds (kube-proxy's
    /// 10256 and 10249, while both run during a migration) is retried every
    /// [`BIND_RETRY`] until it is free or [`Servers::stop`]. `conflict` hears why the port
    /// cannot be bound (`Some`, once per distinct error) and that it is bound (`None`).
    pub fn serve_when_bound(
        &mut self,
        addr: std::net::SocketAddr,
        tls: Option<Arc<crate::tls::Tls>>,
        router: Router,
        conflict: impl Fn(Option<String>) + Send + Sync + 'static,
    ) {
        let mut stop = self.stop.subscribe();
        let mut stop_serving = stop.clone();
        self.tasks.spawn(async move {
            let listener = tokio::select! {
                l = bind_retrying(addr, &conflict) => l,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            conflict(None);
            let stopped = async move {
                let _ = stop_serving.wait_for(|s| *s).await;
            };
            crate::listen::serve(listener, tls, router, crate::listen::Limits::default(), stopped).await
        });
    }

    /// Stops accepting everywhere and waits for the calls in flight, at most `grace`; returns
    /// how many servers still had calls running then (they are dropped).
    pub async fn stop(mut self, grace: std::time::Duration) -> usize {
        self.stop.send_replace(true);
        let finished = tokio::time::timeout(grace, async {
            while let Some(ended) = self.tasks.join_next().await {
                if let Ok(Err(e)) = ended {
                    tracing::warn!(error = %e, "an HTTP server failed while stopping");
                }
            }
        })
        .await;
        if finished.is_ok() { 0 } else { self.tasks.len() }
    }
}

/// How often [`Servers::serve_when_bound`] tries a port it could not bind.
pub const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds `addr`, retrying every [`BIND_RETRY`]; each new reason it fails is logged and told to
/// `conflict`.
async fn bind_retrying(addr: std::net::SocketAddr, conflict: &impl Fn(Option<String>)) -> TcpListener {
    let mut told = None;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                if told.is_some() {
                    tracing::info!(%addr, "bound at last");
                }
                return l;
            }
            Err(e) => {
                let why = format!("{addr}: {e}");
                if told.as_ref() != Some(&why) {
                    tracing::warn!(%addr, error = %e, retry = ?BIND_RETRY, "cannot bind; another process may hold the port (kube-proxy?); retrying");
                    conflict(Some(why.clone()));
                    told = Some(why);
                }
                tokio::time::sleep(BIND_RETRY).await;
            }
        }
    }
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

    #[tokio::test(start_paused = true)]
    async fn a_port_held_by_another_process_is_retried_until_it_is_free() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let mut servers = Servers::new();
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        servers.serve_when_bound(addr, None, router, move |c| tx.send(c).unwrap());
        let first = heard.recv().await.unwrap().expect("a conflict");
        assert!(first.starts_with(&format!("{addr}: ")) && first.contains("in use"), "{first}");
        tokio::time::sleep(BIND_RETRY * 3).await;
        assert!(heard.try_recv().is_err(), "the same conflict is told once");
        drop(holder);
        assert_eq!(heard.recv().await.unwrap(), None, "bound once the port is free");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        assert_eq!(servers.stop(std::time::Duration::from_secs(1)).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_ends_the_retries() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut servers = Servers::new();
        servers.serve_when_bound(holder.local_addr().unwrap(), None, Router::new(), |_| {});
        tokio::time::sleep(BIND_RETRY * 2).await;
        assert_eq!(servers.stop(std::time::Duration::from_secs(1)).await, 0);
    }

    /// A server whose `/slow` answers when the test says so; the test is told when it started.
    async fn slow_server()
    -> (Servers, std::net::SocketAddr, tokio::sync::mpsc::Receiver<()>, Arc<tokio::sync::Notify>) {
        let (started_tx, started) = tokio::sync::mpsc::channel(4);
        let release = Arc::new(tokio::sync::Notify::new());
        let r = release.clone();
        let slow = Router::new().route(
            "/slow",
            get(move || {
                let (started_tx, r) = (started_tx.clone(), r.clone());
                async move {
                    let _ = started_tx.send(()).await;
                    r.notified().await;
                    "done"
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut servers = Servers::new();
        servers.serve(listener, None, slow);
        (servers, addr, started, release)
    }

    async fn get_slow(addr: std::net::SocketAddr) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_refuses_new_calls_and_lets_the_calls_in_flight_finish() {
        let (servers, addr, mut started, release) = slow_server().await;
        let call = tokio::spawn(get_slow(addr));
        started.recv().await.unwrap();
        let stopping = tokio::spawn(servers.stop(std::time::Duration::from_secs(60)));
        // The listener closes (bounded: 500 tries).
        let mut refused = false;
        for _ in 0..500 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(refused, "no new connection once stopping");
        assert!(!stopping.is_finished(), "waits for the call in flight");
        release.notify_one();
        let answer = call.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("done"), "{answer}");
        assert_eq!(stopping.await.unwrap(), 0, "every server finished");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_never_ends_is_cut_after_the_grace_period() {
        let (servers, addr, mut started, _release) = slow_server().await;
        let call = tokio::spawn(get_slow(addr));
        started.recv().await.unwrap();
        assert_eq!(servers.stop(std::time::Duration::from_millis(200)).await, 1, "one server cut");
        call.abort();
    }
}
