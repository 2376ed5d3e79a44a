//! Forwarding when upstreams misbehave: one upstream dead beside a working one, one client
//! flooding a domain whose servers never answer, an upstream gone after an answer was cached,
//! a burst of identical questions, and answers whose question is not in the case sent (0x20).
//! Loopback only; every upstream here is a socket of the test's.

mod common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Upstream, cluster, runtime, settings, start};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// One UDP query from `from` (a loopback address): the reply, or `None` within `wait`.
fn lookup_from(from: IpAddr, server: SocketAddr, name: &str, wait: Duration) -> Option<Message> {
    let socket = UdpSocket::bind((from, 0)).unwrap();
    socket.set_read_timeout(Some(wait)).unwrap();
    let id: u16 = rand::random();
    let mut q = Message::new(id, MessageType::Query, OpCode::Query);
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    socket.send_to(&q.to_vec().unwrap(), server).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).ok()?;
        match Message::from_vec(&buf[..n]) {
            Ok(m) if m.metadata.id == id => return Some(m),
            _ => {}
        }
    }
}

fn lookup(server: SocketAddr, name: &str) -> Option<Message> {
    lookup_from([127, 0, 0, 1].into(), server, name, Duration::from_secs(5))
}

/// An upstream that reads every query and never answers; it counts the queries that are
/// not health checks (`.`).
struct BlackHole {
    addr: SocketAddr,
    lookups: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl BlackHole {
    fn start() -> BlackHole {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let addr = socket.local_addr().unwrap();
        let (lookups, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (l, s) = (Arc::clone(&lookups), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buf)
                    && n > 12
                    && buf[12] != 0
                {
                    l.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        BlackHole { addr, lookups, stop }
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::Relaxed)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn with_one_upstream_dead_lookups_answer_within_half_a_second_once_it_is_found_out() {
    let rt = runtime();
    let live = Upstream::start(&rt);
    let dead = BlackHole::start();
    let mut s = settings(&[dead.addr, live.addr]);
    // CoreDNS's read timeout.
    s.forward.timeout = Duration::from_secs(2);
    let server = start(&rt, cluster(), s);
    // Five seconds of lookups, each a name not asked before (no cache).
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(5) {
        i += 1;
        lookup(server.dns_addr, &format!("warm{i}.example.test"));
    }
    let dead_before = dead.lookups();
    let mut times = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        let reply = lookup(server.dns_addr, &format!("after{i}.example.test"));
        let rcode = reply.map(|m| m.metadata.response_code);
        times.push((t.elapsed(), rcode));
    }
    let fast = times
        .iter()
        .filter(|(t, rcode)| *t <= Duration::from_millis(500) && *rcode == Some(ResponseCode::NXDomain))
        .count();
    eprintln!("{fast} of 20 answered within 500 ms after 5 s: {times:?}");
    assert!(fast >= 18, "{fast} of 20 answered within 500 ms: {times:?}");
    assert_eq!(dead.lookups(), dead_before, "the dead upstream got none of the 20 lookups");
    rt.block_on(server.shutdown());
}

#[test]
fn one_client_flooding_a_black_holed_domain_does_not_get_the_others_refused() {
    let rt = runtime();
    let up = Upstream::start(&rt);
    let server = start(&rt, cluster(), settings(&[up.addr]));
    let at = server.dns_addr;
    // 127.0.0.2 asks for names nobody answers, 2,000 a second for 4 s; each waits for the
    // upstream's timeout.
    let flooding = Arc::new(AtomicBool::new(true));
    let flooder = {
        let flooding = Arc::clone(&flooding);
        std::thread::spawn(move || {
            let socket = UdpSocket::bind("127.0.0.2:0").unwrap();
            socket.set_nonblocking(true).unwrap();
            let (mut refused, mut buf) = (0usize, [0u8; 512]);
            for i in 0..8000u32 {
                if !flooding.load(Ordering::Relaxed) {
                    break;
                }
                let mut q = Message::new(i as u16, MessageType::Query, OpCode::Query);
                q.add_query(Query::query(
                    Name::from_ascii(format!("r{i}.blackhole.test.")).unwrap(),
                    RecordType::A,
                ));
                let _ = socket.send_to(&q.to_vec().unwrap(), at);
                while let Ok(n) = socket.recv(&mut buf) {
                    refused += usize::from(n >= 4 && buf[3] & 0x0f == 5);
                }
                if i % 100 == 99 {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            refused
        })
    };
    // Once the flood has filled what it may, another pod looks names up.
    std::thread::sleep(Duration::from_millis(1500));
    let mut codes = Vec::new();
    for i in 0..30 {
        let reply =
            lookup_from([127, 0, 0, 3].into(), at, &format!("b{i}.example.test"), Duration::from_secs(5));
        codes.push(reply.map(|m| m.metadata.response_code));
    }
    flooding.store(false, Ordering::Relaxed);
    let flood_refused = flooder.join().unwrap();
    eprintln!("the flooding client was refused {flood_refused} times; the other got {codes:?}");
    assert!(
        codes.iter().all(|c| *c == Some(ResponseCode::NXDomain)),
        "the other client's lookups: {codes:?}"
    );
    assert!(flood_refused > 0, "the flooding client is held to its share");
    rt.block_on(server.shutdown());
}

#[test]
fn an_answer_cached_before_the_upstream_died_is_served_stale() {
    let rt = runtime();
    let up = Upstream::start(&rt);
    let dead = BlackHole::start();
    let mut s = settings(&[up.addr]);
    s.cache.success_max_ttl = 1;
    s.cache.min_ttl = 1;
    let server = start(&rt, cluster(), s.clone());
    let fresh = lookup(server.dns_addr, "www.example.test").expect("answered");
    assert_eq!(fresh.answers.len(), 1);
    s.forward.upstreams = vec![dead.addr];
    server.apply(s).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let stale = lookup(server.dns_addr, "www.example.test").expect("answered");
    assert_eq!(stale.metadata.response_code, ResponseCode::NoError, "{stale:?}");
    assert_eq!(stale.answers.len(), 1, "{stale:?}");
    assert_eq!(stale.answers[0].data, fresh.answers[0].data);
    assert_eq!(stale.answers[0].ttl, 0, "a stale answer goes out with TTL 0, as CoreDNS's");
    rt.block_on(server.shutdown());
}

/// How a [`Recorder`] answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Manner {
    /// After a delay, with the question as asked.
    Slowly,
    /// With the question in lower case only.
    Lowered,
    /// First a forged answer (question in lower case, 6.6.6.6), then the real one.
    Forged,
}

/// An upstream that records the names it is asked, in their case, and answers every A query
/// with 192.0.2.1.
struct Recorder {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    fn start(manner: Manner) -> Recorder {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let addr = socket.local_addr().unwrap();
        let (asked, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (a, s) = (Arc::clone(&asked), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buf) else { continue };
                let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
                let Some(question) = q.queries.first().cloned() else { continue };
                if question.name().is_root() {
                    let reply = answer(&q, question.name(), None);
                    let _ = socket.send_to(&reply, from);
                    continue;
                }
                a.lock().unwrap().push(question.name().to_string());
                let lowered = question.name().to_lowercase();
                let socket = socket.try_clone().unwrap();
                std::thread::spawn(move || match manner {
                    Manner::Slowly => {
                        std::thread::sleep(Duration::from_millis(300));
                        let _ = socket.send_to(&answer(&q, question.name(), Some([192, 0, 2, 1])), from);
                    }
                    Manner::Lowered => {
                        let _ = socket.send_to(&answer(&q, &lowered, Some([192, 0, 2, 1])), from);
                    }
                    Manner::Forged => {
                        let _ = socket.send_to(&answer(&q, &lowered, Some([6, 6, 6, 6])), from);
                        std::thread::sleep(Duration::from_millis(20));
                        let _ = socket.send_to(&answer(&q, question.name(), Some([192, 0, 2, 1])), from);
                    }
                });
            }
        });
        Recorder { addr, asked, stop }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A reply to `q` whose question is `name`, with one A record for it when `address` is given.
fn answer(q: &Message, name: &Name, address: Option<[u8; 4]>) -> Vec<u8> {
    let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
    r.metadata.recursion_desired = true;
    r.metadata.recursion_available = true;
    let question = q.queries[0].clone();
    r.add_query(Query::query(name.clone(), question.query_type()));
    if let Some(ip) = address {
        r.add_answer(Record::from_rdata(name.clone(), 60, RData::A(A(ip.into()))));
    }
    r.to_vec().unwrap()
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers.iter().map(|r| r.data.to_string()).collect()
}

#[test]
fn identical_questions_in_flight_share_one_upstream_query() {
    let rt = runtime();
    let up = Recorder::start(Manner::Slowly);
    let server = start(&rt, cluster(), settings(&[up.addr]));
    let at = server.dns_addr;
    let askers: Vec<_> = (0..20)
        .map(|_| std::thread::spawn(move || lookup(at, "same.example.test").map(|m| addresses(&m))))
        .collect();
    for a in askers {
        assert_eq!(a.join().unwrap(), Some(vec!["192.0.2.1".to_string()]));
    }
    assert_eq!(up.asked().len(), 1, "the upstream was asked {:?}", up.asked());
    rt.block_on(server.shutdown());
}

#[test]
fn forwarded_questions_go_in_random_case_and_come_back_in_the_askers() {
    let rt = runtime();
    let up = Recorder::start(Manner::Slowly);
    let server = start(&rt, cluster(), settings(&[up.addr]));
    for i in 0..8 {
        let name = format!("Case{i}.Example.TEST.");
        let reply = lookup(server.dns_addr, &name).expect("answered");
        assert_eq!(reply.queries[0].name().to_string(), name, "the question in the asker's case");
        assert_eq!(reply.answers[0].name.to_string(), name, "the owner in the asker's case");
    }
    let asked = up.asked();
    let changed = asked.iter().enumerate().filter(|(i, n)| **n != format!("Case{i}.Example.TEST.")).count();
    assert!(changed >= 6, "the upstream was asked {asked:?}");
    rt.block_on(server.shutdown());
}

#[test]
fn an_answer_whose_question_is_in_another_case_is_not_taken() {
    let rt = runtime();
    let up = Recorder::start(Manner::Forged);
    let server = start(&rt, cluster(), settings(&[up.addr]));
    for i in 0..5 {
        let reply = lookup(server.dns_addr, &format!("forged{i}.example.test")).expect("answered");
        assert_eq!(addresses(&reply), ["192.0.2.1"], "the real answer, not the forged one");
    }
    rt.block_on(server.shutdown());
}

#[test]
fn an_upstream_that_lowers_the_case_is_asked_in_the_askers_case_from_then_on() {
    let rt = runtime();
    let up = Recorder::start(Manner::Lowered);
    let server = start(&rt, cluster(), settings(&[up.addr]));
    let first = lookup(server.dns_addr, "lower0.example.test").expect("answered");
    assert_eq!(addresses(&first), ["192.0.2.1"]);
    let t = Instant::now();
    let second = lookup(server.dns_addr, "Lower1.Example.test").expect("answered");
    assert_eq!(addresses(&second), ["192.0.2.1"]);
    assert_eq!(second.answers[0].name.to_string(), "Lower1.Example.test.");
    assert!(t.elapsed() < Duration::from_millis(500), "no wait once known: {:?}", t.elapsed());
    rt.block_on(server.shutdown());
}
