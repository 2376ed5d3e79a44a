//! UDP workers that fail: a worker thread that panics is restarted, and `/ready` does not say
//! 200 while one is down.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::{cluster, http_get, runtime, settings};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tideway_dns::server::{Server, ServerConfig};

/// The answer count of a UDP reply to an A query for `name`, or `None` without a reply.
fn ask(server: SocketAddr, name: &str) -> Option<usize> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut q = Message::new(0x5151, MessageType::Query, OpCode::Query);
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    socket.send_to(&q.to_vec().unwrap(), server).unwrap();
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).ok()?;
    Some(Message::from_vec(&buf[..n]).ok()?.answers.len())
}

/// Polls `f` every 50 ms until it holds, for at most `within`.
fn until(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_udp_worker_that_panics_is_restarted_and_ready_fails_while_it_is_down() {
    let rt = runtime();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), settings(&[]));
    config.ready = Some("127.0.0.1:0".parse().unwrap());
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    // One worker: every UDP query reaches it.
    config.udp_sockets = 1;
    let server = rt.block_on(Server::start(config, cluster())).expect("server starts");
    let (at, ready) = (server.dns_addr, server.ready_addr.unwrap());
    assert_eq!(http_get(ready, "/ready").0, 200);
    assert_eq!(ask(at, "web.ns1.svc.cluster.local."), Some(1));

    // The worker panics, and again each time it starts, while asked to.
    server.fail_udp_worker(0, true);
    until(Duration::from_secs(5), "/ready says 503 while the worker is down", || {
        http_get(ready, "/ready").0 == 503
    });
    let (_, body) = http_get(ready, "/ready");
    assert!(body.contains("udp"), "/ready names what is down: {body}");
    assert_eq!(ask(at, "web.ns1.svc.cluster.local."), None, "nobody reads the socket");

    server.fail_udp_worker(0, false);
    // The pause before a restart grows to 5 s while the worker keeps panicking.
    until(Duration::from_secs(20), "the worker is back and answers", || {
        ask(at, "web.ns1.svc.cluster.local.") == Some(1)
    });
    until(Duration::from_secs(5), "/ready says 200 again", || http_get(ready, "/ready").0 == 200);
    let (_, metrics) = http_get(server.metrics_addr.unwrap(), "/metrics");
    let panics: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("coredns_panics_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(panics >= 1.0, "panics counted: {panics}");
    rt.block_on(server.shutdown());
}
