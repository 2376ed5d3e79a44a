//! The liveness gossip against a hostile neighbour on its network: members on loopback
//! addresses (node-a, node-b and the operator), and a sender that is none of them crafting
//! well-formed SWIM messages. A forged `Announce` at node-b's address (an identity that wins
//! the address) makes the operator probe a member that never answers and declare node-b down;
//! a forged `Announce` in node-c's name makes a node without an agent count as alive. The
//! members seal their datagrams with the cluster's key, so neither is taken; nor is a genuine
//! datagram sent again.

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use foca::{Codec, Header, Message, PostcardCodec};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tideway_core::liveness::TIMINGS;
use tideway_core::testing::mk_node;
use tideway_sources::SharedCluster;

use tideway_sources::gossip::{Join, Keys, Members, Refusals, Role, start};
use tideway_tests::eventually;
use tokio::sync::watch;

const NODES: [(&str, &str); 3] = [("node-a", "127.0.0.2"), ("node-b", "127.0.0.3"), ("node-c", "127.0.0.4")];
const OPERATOR: &str = "127.0.0.1";
const ATTACKER: &str = "127.0.0.9";
const KEY: &str = "a-test-key-of-the-cluster-0123456789";

/// A member's identity as it travels (the same fields, in the same order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Wire {
    addr: SocketAddr,
    node: String,
    role: WireRole,
    bump: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum WireRole {
    Agent,
    #[allow(dead_code)]
    Operator,
}

impl foca::Identity for Wire {
    type Addr = SocketAddr;
    fn renew(&self) -> Option<Self> {
        None
    }
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}

/// A well-formed `Announce` from `src` to whoever listens at `to`.
fn announce(src: Wire, to: SocketAddr) -> Vec<u8> {
    let dst = Wire { addr: to, node: String::new(), role: WireRole::Agent, bump: 0 };
    let header = Header { src, src_incarnation: 0, dst, message: Message::Announce };
    let mut buf = Vec::new();
    PostcardCodec.encode_header(&header, &mut buf).expect("encodes");
    buf
}

fn cluster() -> SharedCluster {
    let cluster = SharedCluster::new();
    cluster.update(|s| {
        for (name, ip) in NODES {
            s.apply(mk_node(name, ip, "z1"));
        }
    });
    cluster.mark_synced();
    cluster
}

/// A port free on every address the test uses.
fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let first = NEXT.fetch_add(100, std::sync::atomic::Ordering::Relaxed);
    (first..first + 100)
        .map(|i| 21_000 + (std::process::id() % 20_000) as u16 + i * 11)
        .find(|p| {
            NODES
                .iter()
                .map(|(_, ip)| *ip)
                .chain([OPERATOR, ATTACKER])
                .all(|ip| UdpSocket::bind((ip, *p)).is_ok())
        })
        .expect("a free UDP port on the loopback addresses")
}

fn join(ip: &str, port: u16, node: &str, role: Role, refusals: Arc<Refusals>) -> Join<'static> {
    let node: &'static str = Box::leak(node.to_string().into_boxed_str());
    Join {
        bind: format!("{ip}:{port}").parse().unwrap(),
        advertise: ip.parse().unwrap(),
        node,
        role,
        timings: TIMINGS,
        keys: Some(Keys::parse(KEY).unwrap()),
        refusals,
    }
}

/// The operator's member and node-a's and node-b's agents; returns the operator's view once
/// it sees both agents.
async fn members(port: u16, cluster: &SharedCluster) -> watch::Receiver<Members> {
    members_counting(port, cluster, Arc::default()).await
}

/// The same, the operator's refusals counted in `refusals`.
async fn members_counting(
    port: u16,
    cluster: &SharedCluster,
    refusals: Arc<Refusals>,
) -> watch::Receiver<Members> {
    let view =
        start(join(OPERATOR, port, "op-0", Role::Operator, refusals), cluster.clone()).await.expect("binds");
    for (node, ip) in &NODES[..2] {
        start(join(ip, port, node, Role::Agent, Arc::default()), cluster.clone()).await.expect("binds");
    }
    let both: BTreeSet<String> = ["node-a", "node-b"].map(String::from).into();
    let v = view.clone();
    eventually("the operator sees node-a and node-b", move || (v.borrow().active == both).then_some(()))
        .await;
    view
}

/// The operator's member and node-a's agent, on a free port: (the cluster, the port, the
/// operator's view), node-b left to the test.
async fn operator_and_node_a() -> (SharedCluster, u16, watch::Receiver<Members>) {
    let cluster = cluster();
    let port = free_port();
    let view = start(join(OPERATOR, port, "op-0", Role::Operator, Arc::default()), cluster.clone())
        .await
        .expect("binds");
    let a = NODES[0];
    start(join(a.1, port, a.0, Role::Agent, Arc::default()), cluster.clone()).await.expect("binds");
    (cluster, port, view)
}

fn send(datagram: &[u8], to: SocketAddr) {
    let s = UdpSocket::bind((ATTACKER, 0)).expect("the attacker's socket");
    s.send_to(datagram, to).expect("sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_announce_declares_no_live_agent_down() {
    let cluster = cluster();
    let port = free_port();
    let view = members(port, &cluster).await;
    let operator: SocketAddr = format!("{OPERATOR}:{port}").parse().unwrap();
    let b: SocketAddr = format!("{}:{port}", NODES[1].1).parse().unwrap();
    // An identity at node-b's address that wins it: node-b's own messages then lose to it.
    let forged = Wire { addr: b, node: "node-b".into(), role: WireRole::Agent, bump: u64::MAX };
    send(&announce(forged, operator), operator);
    tokio::time::sleep(TIMINGS.worst_detection() * 3).await;
    let seen = view.borrow().clone();
    assert!(seen.active.contains("node-b") && seen.down.is_empty(), "node-b moved: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_announce_brings_no_agent_to_life() {
    let cluster = cluster();
    let port = free_port();
    let view = members(port, &cluster).await;
    let operator: SocketAddr = format!("{OPERATOR}:{port}").parse().unwrap();
    let attacker = UdpSocket::bind((ATTACKER, 0)).expect("the attacker's socket");
    let mine = attacker.local_addr().unwrap();
    let forged = Wire { addr: mine, node: "node-c".into(), role: WireRole::Agent, bump: 1 };
    attacker.send_to(&announce(forged, operator), operator).expect("sent");
    tokio::time::sleep(TIMINGS.probe_period * 2).await;
    let seen = view.borrow().clone();
    assert!(!seen.active.contains("node-c"), "node-c counted alive without an agent: {seen:?}");
}

/// A genuine datagram, captured on its way and sent again, is refused: the attacker listens at
/// node-c's address (the agents announce themselves to every Node), forwards a captured
/// datagram to node-c's member once it runs there, then sends it again, each time from the
/// sender's own address (on a shared network, a source address is easily spoofed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_datagram_is_refused() {
    let cluster = cluster();
    let port = free_port();
    let view = members(port, &cluster).await;
    let c: SocketAddr = format!("{}:{port}", NODES[2].1).parse().unwrap();
    let tap = UdpSocket::bind(c).expect("the tap at node-c's address");
    tap.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = tap.recv_from(&mut buf).expect("an agent announces itself to node-c");
    let captured = buf[..n].to_vec();
    drop(tap);
    let refusals = Arc::new(Refusals::default());
    start(join(NODES[2].1, port, "node-c", Role::Agent, refusals.clone()), cluster.clone())
        .await
        .expect("binds");
    let three: BTreeSet<String> = NODES.map(|(n, _)| n.to_string()).into();
    let v = view.clone();
    eventually("node-c's agent joins", move || (v.borrow().active == three).then_some(())).await;
    let before = refusals.get("replayed");
    let spoofed = UdpSocket::bind((from.ip(), 0)).expect("a socket at the sender's address");
    for _ in 0..3 {
        spoofed.send_to(&captured, c).expect("sent");
    }
    let r = refusals.clone();
    eventually("the copies are refused as replayed", move || (r.get("replayed") >= before + 2).then_some(()))
        .await;
    eprintln!("captured {n} bytes from {from}; refusals at node-c: {:?}", refusals.all());
    let mut registry = prometheus_client::registry::Registry::default();
    refusals.register(&mut registry);
    let exported = "tideway_gossip_refused_datagrams_total{reason=\"replayed\"}";
    assert_eq!(tideway_tests::metrics::sum(&registry, exported), refusals.get("replayed") as f64, "exported");
    tokio::time::sleep(TIMINGS.worst_detection()).await;
    let seen = view.borrow().clone();
    assert_eq!(seen.active.len(), 3, "{seen:?}");
    assert!(seen.down.is_empty(), "{seen:?}");
}

/// The forged datagrams of the tests above are counted, by why they were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_datagrams_are_counted_as_unsealed() {
    let cluster = cluster();
    let port = free_port();
    let refusals = Arc::new(Refusals::default());
    members_counting(port, &cluster, refusals.clone()).await;
    let operator: SocketAddr = format!("{OPERATOR}:{port}").parse().unwrap();
    let b: SocketAddr = format!("{}:{port}", NODES[1].1).parse().unwrap();
    let forged = Wire { addr: b, node: "node-b".into(), role: WireRole::Agent, bump: u64::MAX };
    send(&announce(forged, operator), operator);
    let r = refusals.clone();
    eventually("the forgery refused", move || (r.get("malformed") == 1).then_some(())).await;
}

/// An agent reading only its own Node from the API server (as in a cluster) still takes the
/// other agents' sealed messages (their Nodes unknown to it), so nobody is declared down, and
/// counts them as reached (its self-fencing's majority).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_knowing_only_its_own_node_hears_the_others() {
    let (_cluster, port, view) = operator_and_node_a().await;
    let (a, b) = (NODES[0], NODES[1]);
    let own = SharedCluster::new();
    own.update(|s| s.apply(mk_node(b.0, b.1, "z1")));
    own.mark_synced();
    let refusals = Arc::new(Refusals::default());
    let b_view = start(join(b.1, port, b.0, Role::Agent, refusals.clone()), own).await.expect("binds");
    let both: BTreeSet<String> = [a.0, b.0].map(String::from).into();
    let v = view.clone();
    eventually("the operator sees both agents", move || (v.borrow().active == both).then_some(())).await;
    tokio::time::sleep(TIMINGS.worst_detection() * 3).await;
    let seen = view.borrow().clone();
    assert_eq!(seen.active.len(), 2, "{seen:?}");
    assert!(seen.down.is_empty(), "{seen:?}");
    assert_eq!(refusals.all(), Default::default(), "node-b refused datagrams");
    let b_sees = b_view.borrow().active.clone();
    assert_eq!(
        b_sees,
        [a.0.to_string(), b.0.to_string()].into(),
        "node-b counts node-a, vouched for by the seal"
    );
}

/// A process whose runtime is busy for longer than the suspicion (its workers held by other
/// work) is not declared down: its member answers from a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_answers_while_its_process_is_busy() {
    let (cluster, port, view) = operator_and_node_a().await;
    let (a, b) = (NODES[0], NODES[1]);
    let busy = TIMINGS.worst_detection() * 4;
    let (go, told) = tokio::sync::oneshot::channel::<()>();
    let c = cluster.clone();
    let process = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let member = start(join(b.1, port, b.0, Role::Agent, Arc::default()), c).await.expect("binds");
            let _ = told.await;
            // The process's only worker, busy: nothing else on this runtime runs meanwhile.
            std::thread::sleep(busy);
            drop(member);
        });
        // The process lives on (its member dies with its runtime).
        runtime
    });
    let both: BTreeSet<String> = [a.0, b.0].map(String::from).into();
    let v = view.clone();
    eventually("the operator sees both agents", move || (v.borrow().active == both).then_some(())).await;
    go.send(()).expect("the process waits");
    let mut downs = BTreeSet::new();
    let polls = (busy + TIMINGS.worst_detection()).as_millis() / 10;
    for _ in 0..polls {
        downs.extend(view.borrow().down.iter().cloned());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let process = process.join().expect("the busy spell ends");
    assert!(downs.is_empty(), "declared down while its process was busy: {downs:?}");
    process.shutdown_background();
}
