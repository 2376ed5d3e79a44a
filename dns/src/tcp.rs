//! DNS over TCP: the listener, with a cap on connections and a pause when descriptors run out.
//!
//! hickory-server's TCP listener accepts without limit and, when `accept` fails because the
//! process is out of file descriptors, tries again at once: the listening socket stays
//! readable (the connection waits in the backlog), so a full descriptor table turns into a
//! core spinning on `EMFILE`. Here, as Knot's `tcp-max-clients`, at most
//! [`TcpLimits::max_clients`] connections are open at once: at the cap the listener stops
//! accepting, and the kernel's backlog holds new connections until one closes. An `accept`
//! that fails (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`, or anything else) is retried after a
//! pause that doubles from [`PAUSE_MIN`] to [`PAUSE_MAX`], as Knot and Go's `net/http` do.
//!
//! A connection carries length-prefixed queries one after another (RFC 7766), each answered
//! through the same request path as UDP ([`wire::handle`]) before the next is read, as
//! hickory-server does; it is closed when a query, or the writing of a reply, takes longer
//! than [`TcpLimits::idle`]. A query's bytes are read as they arrive, so a client announcing a
//! 64 KiB query and sending it slowly holds only what it sent.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::handler::Core;
use crate::handler::wire::{self, Handled};
use crate::metrics::Proto;

/// The first pause after a failed `accept`.
pub const PAUSE_MIN: Duration = Duration::from_millis(10);
/// The longest pause after failed `accept`s in a row.
pub const PAUSE_MAX: Duration = Duration::from_secs(1);

/// How many TCP clients, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLimits {
    /// Connections open at once (Knot's `tcp-max-clients`).
    pub max_clients: usize,
    /// How long a connection may take to send a query or to take a reply.
    pub idle: Duration,
}

impl Default for TcpLimits {
    fn default() -> Self {
        TcpLimits { max_clients: DEFAULT_MAX_CLIENTS, idle: Duration::from_secs(10) }
    }
}

/// The default cap: BIND's `tcp-clients` is 150, PowerDNS Recursor's `max-tcp-clients` 128.
/// A cluster's clients use TCP only after a truncated answer, for one or two queries.
pub const DEFAULT_MAX_CLIENTS: usize = 256;

/// The pause before the next `accept` after `failures` failed ones in a row.
pub fn pause_after(failures: u32) -> Duration {
    PAUSE_MIN.saturating_mul(1 << failures.saturating_sub(1).min(10)).min(PAUSE_MAX)
}

/// Accepts connections on `listener` and answers them until `shutdown` says so; then every
/// open connection is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    core: Arc<Core>,
    limits: TcpLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_clients.max(1)));
    let mut connections = JoinSet::new();
    let mut failures = 0u32;
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &slots) => accepted,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        // Reap the ended connections so that the set does not grow with them.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer, slot)) => {
                failures = 0;
                let core = Arc::clone(&core);
                connections.spawn(async move {
                    let _slot = slot;
                    if let Err(e) = answer(stream, peer, &core, limits.idle).await {
                        tracing::debug!(%peer, error = %e, "TCP connection closed");
                    }
                });
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let pause = pause_after(failures);
                if failures == 1 {
                    tracing::warn!(error = %e, ?pause, "cannot accept a TCP connection; pausing");
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.wait_for(|s| *s) => break,
                }
            }
        }
    }
    connections.shutdown().await;
}

/// Waits for a free slot, then for a connection.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> io::Result<(TcpStream, SocketAddr, tokio::sync::OwnedSemaphorePermit)> {
    let slot = Arc::clone(slots).acquire_owned().await.map_err(io::Error::other)?;
    let (stream, peer) = listener.accept().await?;
    Ok((stream, peer, slot))
}

/// Answers the queries of one connection until it closes, errs or idles.
async fn answer(mut stream: TcpStream, peer: SocketAddr, core: &Arc<Core>, idle: Duration) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut query = Vec::new();
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        let len = u64::from(u16::from_be_bytes(len));
        query.clear();
        let mut body = (&mut stream).take(len);
        match tokio::time::timeout(idle, body.read_to_end(&mut query)).await {
            Ok(Ok(n)) if n as u64 == len => {}
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        let reply = match wire::handle_bytes(core, &query, peer, Proto::Tcp) {
            Handled::Respond(bytes) => bytes,
            Handled::Later(pending) => match pending.finish(core).await {
                Some(bytes) => bytes,
                None => continue,
            },
            // Not a query (no header, or a response): nothing to say, and nothing more to hear.
            Handled::Drop => return Ok(()),
        };
        let Ok(n) = u16::try_from(reply.len()) else { continue };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&n.to_be_bytes());
        framed.extend_from_slice(&reply);
        tokio::time::timeout(idle, stream.write_all(&framed))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the client takes no reply"))??;
        // A large query's buffer is not kept for the next one.
        if query.capacity() > 4096 {
            query = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_up_to_a_second() {
        let pauses: Vec<u128> = (1..=9).map(|n| pause_after(n).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(pause_after(u32::MAX), PAUSE_MAX);
        assert_eq!(pause_after(0), PAUSE_MIN);
    }
}
