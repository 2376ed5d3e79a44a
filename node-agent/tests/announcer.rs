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
    let (tx, rx) = mpsc::channel::<Option<BTreeSet<IpAddr>>>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let path = format!("/run/netns/{}", ns.name);
    let node_ip: IpAddr = node_ip.parse().unwrap();
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("namespace");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let a = Announcer::start(node_ip).expect("announcer");
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
