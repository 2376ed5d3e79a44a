//! The UDP receive loop.
//!
//! hickory-server's own UDP path spawns a task per datagram and sends replies through a
//! channel to a sender task; for a cluster DNS server, where nearly every query is answered
//! synchronously from memory, that bookkeeping costs more than the answer. This loop drains
//! the socket with non-blocking reads and answers in place through the same request path
//! ([`wire::handle_bytes`]: hickory's `Request` parsing, [`Core::decide`], hickory's
//! `MessageResponse` encoding); only queries that need the network get a task. One loop per
//! socket; several sockets share the port with `SO_REUSEPORT` so the kernel spreads clients
//! over the runtime's workers.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::sync::watch;

use crate::handler::Core;
use crate::handler::wire::{self, Handled};
use crate::metrics::Proto;

/// Datagrams handled before yielding to other tasks on this worker.
const BUDGET: usize = 256;

/// Serves `socket` until `shutdown` turns true.
pub(crate) async fn serve(socket: Arc<UdpSocket>, core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    // The largest datagram a client can send.
    let mut buf = vec![0u8; 65535];
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            ready = socket.readable() => {
                if let Err(e) = ready {
                    tracing::error!(error = %e, "UDP socket failed");
                    return;
                }
            }
        }
        for _ in 0..BUDGET {
            let (n, src) = match socket.try_recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // ICMP errors from earlier sends surface here; they concern other peers.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "UDP receive error");
                    break;
                }
            };
            if src.port() == 0 || src.ip().is_unspecified() {
                continue;
            }
            match wire::handle_bytes(&core, &buf[..n], src, Proto::Udp) {
                Handled::Respond(bytes) => send(&socket, &bytes, src).await,
                Handled::Later(pending) => {
                    let (socket, core) = (Arc::clone(&socket), Arc::clone(&core));
                    tokio::spawn(async move {
                        if let Some(bytes) = pending.finish(&core).await {
                            send(&socket, &bytes, src).await;
                        }
                    });
                }
                Handled::Drop => {}
            }
        }
        tokio::task::yield_now().await;
    }
}

async fn send(socket: &UdpSocket, bytes: &[u8], to: SocketAddr) {
    let result = match socket.try_send_to(bytes, to) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => socket.send_to(bytes, to).await,
        other => other,
    };
    if let Err(e) = result {
        tracing::debug!(%to, error = %e, "UDP send failed");
    }
}
