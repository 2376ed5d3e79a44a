//! DNS over TCP as a client sees it: pipelined queries on one connection, the connection cap
//! (a client beyond it waits in the backlog until a slot frees), and the idle timeout.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{cluster, runtime, settings};
use tideway_dns::server::{Server, ServerConfig};
use tideway_dns::tcp::TcpLimits;

/// A query for `name` (A, RD) framed for TCP.
fn framed_query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    framed
}

/// Reads one framed reply: its ID and answer count, or `None` on timeout or close.
fn read_reply(s: &mut TcpStream, wait: Duration) -> Option<(u16, u16)> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).ok()?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut msg).ok()?;
    Some((u16::from_be_bytes([msg[0], msg[1]]), u16::from_be_bytes([msg[6], msg[7]])))
}

fn start(limits: TcpLimits) -> (tokio::runtime::Runtime, Server) {
    let rt = runtime();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), settings(&[]));
    config.tcp = limits;
    let server = rt.block_on(Server::start(config, cluster())).expect("server starts");
    (rt, server)
}

fn connect(at: SocketAddr) -> TcpStream {
    TcpStream::connect_timeout(&at, Duration::from_secs(2)).expect("connect")
}

#[test]
fn queries_on_one_connection_are_answered_in_turn() {
    let (rt, server) = start(TcpLimits::default());
    let mut s = connect(server.dns_addr);
    let mut both = framed_query(1, "web.ns1.svc.cluster.local");
    both.extend(framed_query(2, "hl.ns1.svc.cluster.local"));
    // Sent in two writes that cut the second query in half.
    s.write_all(&both[..both.len() - 5]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(&both[both.len() - 5..]).unwrap();
    assert_eq!(read_reply(&mut s, Duration::from_secs(2)), Some((1, 1)));
    assert_eq!(read_reply(&mut s, Duration::from_secs(2)), Some((2, 2)));
    rt.block_on(server.shutdown());
}

#[test]
fn beyond_the_cap_a_client_waits_until_a_connection_closes() {
    let (rt, server) = start(TcpLimits { max_clients: 4, idle: Duration::from_secs(30) });
    let at = server.dns_addr;
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(at)).collect();
    for (i, s) in held.iter_mut().enumerate() {
        s.write_all(&framed_query(i as u16, "web.ns1.svc.cluster.local")).unwrap();
        assert_eq!(read_reply(s, Duration::from_secs(2)), Some((i as u16, 1)), "connection {i}");
    }
    // The fifth completes its handshake in the backlog, but nobody reads its query.
    let mut fifth = connect(at);
    fifth.write_all(&framed_query(5, "web.ns1.svc.cluster.local")).unwrap();
    assert_eq!(read_reply(&mut fifth, Duration::from_millis(500)), None, "answered beyond the cap");
    let closed = Instant::now();
    drop(held.pop());
    assert_eq!(read_reply(&mut fifth, Duration::from_secs(5)), Some((5, 1)), "answered once a slot freed");
    assert!(closed.elapsed() < Duration::from_secs(5));
    rt.block_on(server.shutdown());
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let (rt, server) = start(TcpLimits { max_clients: 8, idle: Duration::from_millis(300) });
    let mut s = connect(server.dns_addr);
    // Half a length prefix, then nothing.
    s.write_all(&[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1];
    assert_eq!(s.read(&mut buf).ok(), Some(0), "closed by the server");
    assert!(started.elapsed() < Duration::from_secs(5));
    rt.block_on(server.shutdown());
}
