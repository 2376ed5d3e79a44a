//! Shared pieces of the real-client tests: the cluster, an in-process server, a tiny upstream
//! DNS server on loopback, and `dig`.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use tideway_core::cluster::Snapshot;
use tideway_core::model::{Namespace, Service, ServiceType};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};
use tideway_dns::config::Settings;
use tideway_dns::server::{Server, ServerConfig, Sockets};
use tideway_dns::view::ClusterView;
use tideway_sources::SharedCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::runtime::Runtime;

/// The test cluster: namespace `ns1` with a ClusterIP Service, a headless Service with two
/// ready endpoints (and one terminating), a large and a middling headless Service for
/// truncation, a LoadBalancer Service, and an ExternalName pointing at the test upstream;
/// namespace `quiet` is empty.
pub fn snapshot() -> Snapshot {
    let mut ext = mk_service("ns1", "ext").build();
    ext.service_type = ServiceType::ExternalName;
    ext.external_name = Some("ext.upstream.test".into());
    // Six SRV rows fit 512 bytes; with their targets' addresses they do not.
    let mut mid = mk_slice("ns1", "mid").port("http", Tcp, 80);
    for i in 0..6 {
        mid = mid.ready(&format!("10.244.8.{i}"), "node-a");
    }
    let mut big = mk_slice("ns1", "big").port("http", Tcp, 80);
    for i in 0..120 {
        big = big.ready(&format!("10.244.9.{i}"), "node-a");
    }
    let services: Vec<Service> = vec![
        mk_service("ns1", "web").cluster_ip("10.96.0.10").port("http", Tcp, 80).build(),
        mk_service("ns1", "hl").headless().port("http", Tcp, 80).build(),
        mk_service("ns1", "big").headless().port("http", Tcp, 80).build(),
        mk_service("ns1", "mid").headless().port("http", Tcp, 80).build(),
        mk_service("ns1", "lb").cluster_ip("10.96.0.11").port("http", Tcp, 80).lb_ip("192.0.2.100").build(),
        mk_service("kube-system", "kube-dns").cluster_ip("10.96.0.53").build(),
        ext,
    ];
    Snapshot {
        services,
        endpoint_slices: vec![
            mk_slice("ns1", "hl")
                .port("http", Tcp, 8080)
                .ready("10.244.1.5", "node-a")
                .ready("10.244.2.5", "node-b")
                .endpoint("10.244.2.6", "node-b", false, true, true)
                .build(),
            big.build(),
            mid.build(),
        ],
        namespaces: ["ns1", "kube-system", "quiet"]
            .map(|name| Namespace { name: name.into(), labels: Default::default() })
            .into(),
        ..Default::default()
    }
}

/// A synced shared cluster holding [`snapshot`].
pub fn cluster() -> SharedCluster<ClusterView> {
    let cluster = SharedCluster::<ClusterView>::default();
    cluster.update(|s| s.reset(snapshot()));
    cluster.mark_synced();
    cluster
}

/// Settings for tests: no lameduck, the given upstreams.
pub fn settings(upstreams: &[SocketAddr]) -> Settings {
    let mut s = Settings::new("cluster.local").unwrap();
    s.lameduck = Duration::ZERO;
    s.forward.upstreams = upstreams.to_vec();
    s.forward.timeout = Duration::from_secs(1);
    s
}

/// A multi-threaded runtime for the server; the test thread stays free to run clients.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Starts a server on loopback (port 0) for `cluster`, with ops listeners.
pub fn start(rt: &Runtime, cluster: SharedCluster<ClusterView>, settings: Settings) -> Server {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), settings);
    config.health = Some("127.0.0.1:0".parse().unwrap());
    config.ready = Some("127.0.0.1:0".parse().unwrap());
    config.metrics = Some("127.0.0.1:0".parse().unwrap());
    config.api = Some("127.0.0.1:0".parse().unwrap());
    config.udp_sockets = 2;
    rt.block_on(Server::start(config, cluster)).expect("server starts")
}

/// Starts a server on pre-bound sockets.
pub fn start_with(
    rt: &Runtime,
    cluster: SharedCluster<ClusterView>,
    settings: Settings,
    sockets: Sockets,
) -> Server {
    let config = ServerConfig::new(sockets.tcp.local_addr().unwrap(), settings);
    rt.block_on(Server::start_with(config, cluster, sockets)).expect("server starts")
}

/// Fails the calling test unless `dig` is installed (`make deps` installs dnsutils).
pub fn require_dig() {
    assert!(
        Command::new("dig").arg("-v").output().is_ok(),
        "dig is not installed: `make deps` installs dnsutils"
    );
}

/// Runs `dig @addr -p port <args>` with a bounded timeout and returns stdout.
pub fn dig(server: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .args(["+time=2", "+tries=2"])
        .args(args)
        .output()
        .expect("dig runs");
    // Tabs and runs of spaces become one space, so records read like zone-file lines.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `GET http://addr/path`: status code and body (plain HTTP/1.0 over a socket, bounded).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// A tiny authoritative upstream: fixed A records, NXDOMAIN (with an SOA) for the rest,
/// truncation over UDP when the answer is larger than the client's buffer, and no answer at
/// all for names under `blackhole.test` (a domain whose servers are unreachable).
pub struct Upstream {
    /// Its address (UDP and TCP).
    pub addr: SocketAddr,
    /// Queries received.
    pub queries: Arc<AtomicUsize>,
}

fn zone() -> HashMap<LowerName, Vec<Record>> {
    let mut z: HashMap<LowerName, Vec<Record>> = HashMap::new();
    let mut add = |name: &str, ip: [u8; 4]| {
        let n = Name::from_ascii(name).unwrap();
        z.entry(LowerName::new(&n)).or_default().push(Record::from_rdata(n, 60, RData::A(A(ip.into()))));
    };
    add("ext.upstream.test.", [192, 0, 2, 10]);
    add("www.example.test.", [192, 0, 2, 80]);
    // Names inside cluster zones that only the upstream has (`fallthrough`).
    add("legacy.ns1.svc.cluster.local.", [192, 0, 2, 20]);
    add("db.example.local.", [192, 0, 2, 21]);
    for i in 0..100 {
        add("many.example.test.", [192, 0, 2, i]);
    }
    z
}

fn respond(zone: &HashMap<LowerName, Vec<Record>>, bytes: &[u8], udp: bool) -> Option<Vec<u8>> {
    let req = Message::from_vec(bytes).ok()?;
    let q = req.queries.first()?.clone();
    if Name::from_ascii("blackhole.test.").unwrap().zone_of(q.name()) {
        return None;
    }
    let mut resp = Message::new(req.metadata.id, MessageType::Response, req.metadata.op_code);
    resp.metadata.authoritative = true;
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.add_query(q.clone());
    match zone.get(&LowerName::new(q.name())) {
        Some(records) if q.query_type() == RecordType::A => resp.add_answers(records.iter().cloned()),
        Some(_) => &mut resp,
        None => {
            resp.metadata.response_code = ResponseCode::NXDomain;
            let zone = Name::from_ascii("test.").unwrap();
            let soa = SOA::new(zone.clone(), zone.clone(), 1, 60, 60, 60, 30);
            resp.add_authority(Record::from_rdata(zone, 30, RData::SOA(soa)))
        }
    };
    if let Some(theirs) = &req.edns {
        let mut e = Edns::new();
        e.set_max_payload(theirs.max_payload());
        resp.set_edns(e);
    }
    let full = resp.to_vec().ok()?;
    let limit = req.edns.as_ref().map_or(512, |e| usize::from(e.max_payload().max(512)));
    if udp && full.len() > limit {
        let mut tc = resp.clone();
        tc.answers.clear();
        tc.metadata.truncation = true;
        return tc.to_vec().ok();
    }
    Some(full)
}

impl Upstream {
    /// Starts on 127.0.0.1, on a port free for both UDP and TCP (a UDP port the kernel hands
    /// out may be taken for TCP by another process: a few tries find one free for both).
    pub fn start(rt: &Runtime) -> Upstream {
        for _ in 0..50 {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            if let Ok(tcp) = std::net::TcpListener::bind(udp.local_addr().unwrap()) {
                return Self::start_with(rt, udp, tcp);
            }
        }
        panic!("no port on 127.0.0.1 free for both UDP and TCP in 50 tries");
    }

    /// Starts on pre-bound sockets.
    pub fn start_with(rt: &Runtime, udp: std::net::UdpSocket, tcp: std::net::TcpListener) -> Upstream {
        let addr = udp.local_addr().unwrap();
        let queries = Arc::new(AtomicUsize::new(0));
        let zone = Arc::new(zone());
        udp.set_nonblocking(true).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let (z, q) = (Arc::clone(&zone), Arc::clone(&queries));
        rt.spawn(async move {
            let udp = UdpSocket::from_std(udp).unwrap();
            let mut buf = vec![0u8; 4096];
            while let Ok((n, src)) = udp.recv_from(&mut buf).await {
                q.fetch_add(1, Ordering::Relaxed);
                if let Some(out) = respond(&z, &buf[..n], true) {
                    let _ = udp.send_to(&out, src).await;
                }
            }
        });
        let (z, q) = (zone, Arc::clone(&queries));
        rt.spawn(async move {
            let tcp = TcpListener::from_std(tcp).unwrap();
            while let Ok((mut s, _)) = tcp.accept().await {
                let (z, q) = (Arc::clone(&z), Arc::clone(&q));
                tokio::spawn(async move {
                    let mut len = [0u8; 2];
                    while s.read_exact(&mut len).await.is_ok() {
                        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
                        if s.read_exact(&mut buf).await.is_err() {
                            return;
                        }
                        q.fetch_add(1, Ordering::Relaxed);
                        let Some(out) = respond(&z, &buf, false) else { return };
                        let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                        framed.extend_from_slice(&out);
                        if s.write_all(&framed).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Upstream { addr, queries }
    }

    /// Queries received so far.
    pub fn count(&self) -> usize {
        self.queries.load(Ordering::Relaxed)
    }
}
