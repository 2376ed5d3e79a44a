//! The one accept loop every HTTP listener runs (REST, metrics, health, health-check
//! NodePorts; plain or HTTPS), so that a neighbour holding connections open cannot run a
//! component out of memory.
//!
//! ```text
//!  TcpListener --accept--> permit free? --no--> close at once (refused += 1)
//!                                       --yes-> task: [TLS handshake within header_read_timeout]
//!                                               --> hyper HTTP/1.1 (header_read_timeout,
//!                                                   closed after idle_timeout without progress)
//!                                               --> axum router; permit returned on close
//! ```
//!
//! * A client that has not sent a whole request head within `header_read_timeout` is closed;
//!   hyper's timer runs from the first poll for a head, so a keep-alive connection waiting for
//!   its next request is bounded by it too.
//! * A connection on which no byte moved either way for `idle_timeout` (a body trickled, an
//!   answer never read) is closed.
//! * At most `max_connections` connections per listener; the next ones are closed as soon
//!   as accepted, which costs a descriptor for a moment and nothing else.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::tls::{Tls, TlsAccept};

/// What one listener allows its clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A connection that has not sent a whole request head (or finished its TLS handshake)
    /// within this is closed.
    pub header_read_timeout: Duration,
    /// A connection on which nothing was read or written for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Counts the connections closed because `max_connections` were open (by default the
    /// process's counter, [`register`]ed as `tideway_http_connections_refused_total`).
    pub refused: Counter,
}

/// A whole request head within this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Some byte moved within this (longer than [`crate::http::CALL_TIMEOUT`], so a slow answer
/// is not cut by it).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections per listener.
pub const MAX_CONNECTIONS: usize = 256;

/// Connections refused by every listener of the process whose limits count there (the
/// default ones).
static REFUSED: std::sync::LazyLock<Counter> = std::sync::LazyLock::new(Counter::default);

/// Registers `tideway_http_connections_refused_total`: connections the process's listeners
/// closed at once because they were full.
pub fn register(registry: &mut prometheus_client::registry::Registry) {
    registry.register(
        "tideway_http_connections_refused",
        "HTTP connections closed as soon as accepted because their listener held its maximum",
        REFUSED.clone(),
    );
}

impl Default for Limits {
    /// The limits every component serves with, counting refusals in the process's counter.
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            refused: REFUSED.clone(),
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves: HTTPS with `tls`,
/// else plain HTTP. Then it stops accepting, asks every connection to finish its call in
/// flight and close, and returns when all have.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut tls = tls.map(TlsAccept::new);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while conns.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors and the like: wait rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            limits.refused.inc();
            tracing::debug!(%peer, max = limits.max_connections, "connection refused: the listener is full");
            drop(stream);
            continue;
        };
        if let Some(t) = tls.as_mut() {
            t.reload_if_due().await;
        }
        let handshake = tls.as_ref().map(TlsAccept::acceptor);
        let (router, limits, stop) = (router.clone(), limits.clone(), stop.clone());
        conns.spawn(async move {
            let _permit = permit;
            match handshake {
                None => connection(stream, router, &limits, stop).await,
                Some(acceptor) => {
                    if let Some(tls) = acceptor.handshake(stream, peer, limits.header_read_timeout).await {
                        connection(tls, router, &limits, stop).await;
                    }
                }
            }
        });
    }
    drop(listener);
    stop_tx.send_replace(true);
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection until the client closes it, it breaks a limit, or the server stops
/// (then after the call in flight).
async fn connection<S>(io: S, router: Router, limits: &Limits, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let progress = Arc::new(Progress::new());
    let io = Watched { inner: io, progress: Arc::clone(&progress) };
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "HTTP connection ended");
                }
                return;
            }
            () = progress.stalled(limits.idle_timeout) => {
                tracing::debug!(idle = ?limits.idle_timeout, "HTTP connection closed: nothing moved");
                return;
            }
            changed = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// When a byte last moved on a connection, in milliseconds after its start.
struct Progress {
    start: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    fn new() -> Self {
        Progress { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    fn moved(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `idle`.
    async fn stalled(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            if last.elapsed() >= idle {
                return;
            }
            tokio::time::sleep_until(last + idle).await;
        }
    }
}

/// A stream that notes in [`Progress`] every read or write that moved bytes.
struct Watched<S> {
    inner: S,
    progress: Arc<Progress>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.progress.moved();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.moved();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.moved();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
