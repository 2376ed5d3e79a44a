//! The layer-2 announcer on a real link (root): a node and a client namespace on a veth pair.
//! The client resolves announced addresses to the node's MAC (ARP for IPv4, neighbour
//! discovery for IPv6), and an announcer taking an address over moves the client's existing
//! entries (gratuitous ARP, unsolicited neighbour advertisement).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tideway_node_agent::announcer::Announcer;
use tideway_tests::netns::Netns;

const V4: &str = "172.18.255.200";
const V6: &str = "fd00:18::c8";

fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// An announcer living in `ns`, driven from the test thread.
fn announcer_in(ns: &Netns, node_ip: &str) -> mpsc::Sender<Option<BTreeSet<IpAddr>>> {
    let node_ip: IpAddr = node_ip.parse().unwrap();
    announcer_with(ns, move || Announcer::start(node_ip).expect("announcer"))
}

/// An announcer on `interface` of `ns` (as a pool's `l2.interfaces` asks).
fn announcer_on(ns: &Netns, interface: &'static str) -> mpsc::Sender<Option<BTreeSet<IpAddr>>> {
    announcer_with(ns, move || Announcer::start_on(interface).expect("announcer"))
}

fn announcer_with(
    ns: &Netns,
    start: impl FnOnce() -> Announcer + Send + 'static,
) -> mpsc::Sender<Option<BTreeSet<IpAddr>>> {
    let (tx, rx) = mpsc::channel::<Option<BTreeSet<IpAddr>>>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("namespace");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let a = start();
        ready_tx.send(()).unwrap();
        while let Ok(Some(set)) = rx.recv() {
            a.set(set);
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).expect("announcer started");
    tx
}

/// A UDP datagram from inside `ns` to `ip`: makes the kernel resolve its link-layer address.
fn send_to(ns: &Netns, ip: &str) {
    let addr: IpAddr = ip.parse().unwrap();
    ns.run(move || {
        let any: IpAddr = if addr.is_ipv4() { [0u8; 4].into() } else { [0u16; 8].into() };
        let s = std::net::UdpSocket::bind((any, 0)).expect("udp socket");
        let _ = s.send_to(b"who has it", (addr, 9));
    });
}

fn neighbour(client: &Netns, ip: &str) -> String {
    client.sh(&format!("ip neigh show {ip}"))
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn arp_and_neighbour_discovery_answer_for_announced_addresses_only() {
    tideway_tests::netns::require_root("the announcer");
    let tag = std::process::id();
    let node = Netns::create(&format!("twann{tag}-node"));
    let client = Netns::create(&format!("twann{tag}-client"));
    node.sh(&format!("ip link add eth0 type veth peer name eth0 netns {}", client.name));
    for (ns, v4, v6) in [(&node, "172.18.0.2", "fd00:18::2"), (&client, "172.18.0.100", "fd00:18::100")] {
        ns.sh(&format!(
            "ip addr add {v4}/16 dev eth0 && ip -6 addr add {v6}/64 dev eth0 nodad && ip link set eth0 up"
        ));
    }
    let node_mac = node.sh("cat /sys/class/net/eth0/address").trim().to_string();
    let a = announcer_in(&node, "172.18.0.2");
    a.send(Some(ips(&[V4, V6]))).unwrap();

    // Asked: a datagram from the client resolves both addresses to the node's MAC (the
    // datagrams themselves go nowhere: the node does not own the addresses, as MetalLB's
    // speaker does not).
    send_to(&client, V4);
    send_to(&client, V6);
    wait_for("ARP answered", || neighbour(&client, V4).contains(&node_mac));
    wait_for("neighbour solicitation answered", || neighbour(&client, V6).contains(&node_mac));

    // Not announced: unanswered.
    send_to(&client, "172.18.255.201");
    send_to(&client, "fd00:18::c9");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!neighbour(&client, "172.18.255.201").contains(&node_mac));
    assert!(!neighbour(&client, "fd00:18::c9").contains(&node_mac));

    // Taken over: existing entries pointing elsewhere move without being asked.
    a.send(Some(BTreeSet::new())).unwrap();
    for ip in [V4, V6] {
        client.sh(&format!("ip neigh replace {ip} lladdr 02:00:00:00:00:99 dev eth0 nud stale"));
    }
    std::thread::sleep(Duration::from_millis(1100)); // past ARP's locktime
    a.send(Some(ips(&[V4, V6]))).unwrap();
    wait_for("gratuitous ARP moved the IPv4 entry", || neighbour(&client, V4).contains(&node_mac));
    wait_for("an unsolicited advertisement moved the IPv6 entry", || {
        neighbour(&client, V6).contains(&node_mac)
    });
    a.send(None).unwrap();
}

#[test]
fn an_announcer_on_a_listed_interface_answers_there_only() {
    tideway_tests::netns::require_root("the announcer");
    let tag = std::process::id();
    let node = Netns::create(&format!("twanl{tag}-node"));
    let home = Netns::create(&format!("twanl{tag}-home"));
    let other = Netns::create(&format!("twanl{tag}-other"));
    // eth0 holds the node address (its home network); eth1 is another segment the pool lists.
    node.sh(&format!("ip link add eth0 type veth peer name eth0 netns {}", home.name));
    node.sh(&format!("ip link add eth1 type veth peer name eth0 netns {}", other.name));
    node.sh("ip addr add 172.18.0.2/16 dev eth0 && ip link set eth0 up && ip link set eth1 up");
    for ns in [&home, &other] {
        let client = if ns.name == home.name { "172.18.0.100" } else { "172.18.0.101" };
        ns.sh(&format!("ip addr add {client}/16 dev eth0 && ip link set eth0 up"));
    }
    let eth1_mac = node.sh("cat /sys/class/net/eth1/address").trim().to_string();
    let a = announcer_on(&node, "eth1");
    a.send(Some(ips(&[V4]))).unwrap();
    send_to(&other, V4);
    wait_for("ARP answered on the listed interface", || neighbour(&other, V4).contains(&eth1_mac));
    // The node-network interface is not listed: asked there, the node stays silent.
    send_to(&home, V4);
    std::thread::sleep(Duration::from_millis(500));
    let seen = neighbour(&home, V4);
    assert!(!seen.contains("lladdr"), "answered on an interface the pool does not list: {seen}");
    a.send(None).unwrap();
    // An interface the node does not have is an error, named.
    let missing = node.run(|| Announcer::start_on("bond7").err().map(|e| e.to_string()));
    assert_eq!(missing.as_deref(), Some("interface bond7 not found on this node"));
}
