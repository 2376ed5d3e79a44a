//! The layer-2 speaker on a task of its own (root; a node and a client namespace on a veth
//! pair): an address moved to this node is answered for at once, and the fence silences it at
//! once, while the proxy's sync loop waits out its `minSyncPeriod` with a change pending.
//! The ARP is real (a client namespace resolves the address); the loop programs an in-memory
//! dataplane, since what is under test is the speaker's timing beside the loop, not the rules
//! (the lab's failover tests run both on the kernel).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::config::{ProxyConfig, ProxyMode, ProxySettings};
use tideway_core::model::{L2Announcement, ServiceName};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_node, mk_service, mk_slice};
use tideway_node_agent::agent::{Agent, AgentOptions, AgentStatus};
use tideway_node_agent::dataplane::memory::SharedKernel;
use tideway_node_agent::effects::MemoryEffects;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::l2_speaker::L2Speaker;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tideway_tests::netns::Netns;

const LB: &str = "172.18.255.200";
const MIN_SYNC: Duration = Duration::from_secs(30);

fn web(n: u16) -> tideway_core::model::Service {
    mk_service("demo", &format!("web{n}")).cluster_ip(&format!("10.96.0.{n}")).port("http", Tcp, 80).build()
}

/// node-a at 172.18.0.2, one Service, nftables with a 30 s `minSyncPeriod`.
fn cluster() -> SharedCluster {
    let settings =
        ProxySettings { mode: ProxyMode::Nftables, min_sync_period: MIN_SYNC, ..Default::default() };
    let cluster = SharedCluster::new();
    let snapshot = Snapshot {
        nodes: vec![mk_node("node-a", "172.18.0.2", "zone-a")],
        services: vec![web(1)],
        endpoint_slices: vec![
            mk_slice("demo", "web1").port("http", Tcp, 8080).ready("10.244.1.5", "node-a").build(),
        ],
        proxy_configs: vec![ProxyConfig::every_node("default", 1, settings)],
        ..Default::default()
    };
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

fn announced_here() -> L2Announcement {
    L2Announcement {
        service: ServiceName::new("demo", "web1"),
        ips: vec![LB.parse().unwrap()],
        node: Some("node-a".into()),
        eligible: vec!["node-a".into()],
        interfaces: vec![],
    }
}

/// The agent's loop (an in-memory dataplane) and its layer-2 speaker, run in `ns` until the
/// returned sender is dropped.
fn agent_in(
    ns: &Netns,
    cluster: SharedCluster,
    status: Arc<RwLock<AgentStatus>>,
    fence: Arc<AtomicBool>,
) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("namespace");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let metrics = Arc::new(Metrics::new(&mut Registry::default()));
            let health = Arc::new(ProxyHealth::new(Duration::from_secs(30)));
            let kernel = SharedKernel::default();
            let agent = Agent::new(
                AgentOptions::for_node("node-a"),
                cluster.clone(),
                status.clone(),
                metrics.clone(),
                health,
            )
            .with_dataplanes(Box::new(move |s: &ProxySettings| kernel.dataplane(s)))
            .with_effects(Box::new(MemoryEffects::default()));
            let speaker = L2Speaker::new("node-a", cluster, status, metrics, fence);
            tokio::spawn(speaker.run(std::future::pending()));
            agent
                .run(async move {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    stop
}

/// A UDP datagram from inside `ns` to `ip`: makes the kernel resolve its link-layer address.
fn send_to(ns: &Netns, ip: &str) {
    let addr: std::net::IpAddr = ip.parse().unwrap();
    ns.run(move || {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).expect("udp socket");
        let _ = s.send_to(b"who has it", (addr, 9));
    });
}

fn wait_for(what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "timed out after {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[test]
fn an_address_moved_here_is_answered_without_waiting_for_min_sync_period() {
    tideway_tests::netns::require_root("the layer-2 speaker");
    let tag = std::process::id();
    let node = Netns::create(&format!("twl2s{tag}-node"));
    let client = Netns::create(&format!("twl2s{tag}-client"));
    node.sh(&format!("ip link add eth0 type veth peer name eth0 netns {}", client.name));
    node.sh("ip addr add 172.18.0.2/16 dev eth0 && ip link set eth0 up");
    client.sh("ip addr add 172.18.0.100/16 dev eth0 && ip link set eth0 up");
    let node_mac = node.sh("cat /sys/class/net/eth0/address").trim().to_string();
    let resolved = || client.sh(&format!("ip neigh show {LB}")).contains(&node_mac);

    let cluster = cluster();
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let fence = Arc::new(AtomicBool::new(false));
    let stop = agent_in(&node, cluster.clone(), status.clone(), fence.clone());
    let read = || status.read().unwrap().clone();
    wait_for("the first sync", Duration::from_secs(10), || read().service_ports == 1);

    // A Service change the loop may program only 30 s after its first sync, then the move.
    cluster.update(|s| s.apply(web(2)));
    cluster.update(|s| s.apply(announced_here()));
    let took = wait_for("ARP answered for the moved address", Duration::from_secs(5), || {
        send_to(&client, LB);
        resolved()
    });
    let s = read();
    assert_eq!(s.announcing, [LB.parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(s.service_ports, 1, "the loop still waits out minSyncPeriod: {took:?}");

    // The fence silences the speaker at once too.
    fence.store(true, Ordering::Relaxed);
    cluster.poke();
    wait_for("fenced: answering for nothing", Duration::from_secs(2), || {
        let s = read();
        s.fenced && s.announcing.is_empty()
    });
    assert_eq!(read().service_ports, 1, "still before the loop's next sync");
    drop(stop);
}
