//! Every HTTP listener against clients that hold connections open: real TCP on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tideway_serve::listen::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

async fn start(limits: Option<Limits>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = std::future::pending();
    tokio::spawn(async move {
        let _ = match limits {
            Some(l) => tideway_serve::listen::serve(listener, None, router(), l, stop).await,
            None => tideway_serve::http::serve(listener, None, router(), stop).await,
        };
    });
    addr
}

/// A connection that sent half a request line and stops there.
async fn half_open(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET / HT").await.unwrap();
    c
}

/// Whether the server closed `c` within `within` (end of stream or reset).
async fn closed_within(c: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let read = async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

async fn get_ok(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), c.read_to_string(&mut answer)).await;
    answer
}

fn short(max_connections: usize) -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(30),
        max_connections,
        refused: Default::default(),
    }
}

#[tokio::test]
async fn connections_without_a_whole_request_head_are_closed_after_the_header_timeout() {
    let addr = start(Some(short(64))).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(half_open(addr).await);
    }
    // Still open well before the timeout...
    assert!(!closed_within(&mut held[0], Duration::from_millis(100)).await, "closed before the timeout");
    // ...and every one closed soon after it.
    for c in &mut held {
        assert!(closed_within(c, Duration::from_secs(3)).await, "a half-open connection is still held");
    }
    assert!(get_ok(addr).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_counted() {
    let limits = short(4);
    limits.refused.inc(); // the counter is shared with the listener: start from 1
    let refused = limits.refused.clone();
    let addr = start(Some(Limits { header_read_timeout: Duration::from_secs(30), ..limits })).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(half_open(addr).await);
    }
    // The server takes the 4 before the next ones.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let mut extra = half_open(addr).await;
        assert!(
            closed_within(&mut extra, Duration::from_secs(1)).await,
            "a connection past the cap is served"
        );
    }
    assert_eq!(refused.get(), 4, "3 refused");
    assert!(!closed_within(&mut held[0], Duration::from_millis(100)).await, "the 4 within the cap are kept");
    // One closes: its place is free again.
    drop(held.pop());
    let mut answer = String::new();
    for _ in 0..100 {
        answer = get_ok(addr).await;
        if !answer.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn a_connection_on_which_nothing_moves_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_millis(300),
        max_connections: 8,
        ..Limits::default()
    };
    let addr = start(Some(limits)).await;
    // A whole head promising a body that never comes.
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nab").await.unwrap();
    assert!(closed_within(&mut c, Duration::from_secs(3)).await, "a stalled body is held");
}

/// The defaults every component runs with: 10 s for a head, 256 connections (time paused, so
/// the wait costs nothing).
#[tokio::test(start_paused = true)]
async fn the_default_listener_closes_half_open_connections_after_10_s_and_holds_at_most_256() {
    let addr = start(None).await;
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..256 {
        held.push(half_open(addr).await);
    }
    let mut extra = half_open(addr).await;
    assert!(closed_within(&mut extra, Duration::from_secs(1)).await, "the 257th connection is served");
    for c in &mut held {
        assert!(closed_within(c, Duration::from_secs(15)).await, "a half-open connection is still held");
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(10) && took < Duration::from_secs(12), "{took:?}");
}
