//! Connections first (root, real kernel): a full sync onto a namespace whose nftables table is
//! gone while conntrack tracks a connection to one Service programs that Service in a
//! transaction of its own, then the whole program; with the table in place, or with nothing
//! tracked, a full sync is one transaction. The ruleset generation, which every committed
//! nf_tables transaction moves on by one, counts them.

use std::net::IpAddr;

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::compile;
use tideway_core::program::ProgramState;
use tideway_core::render;
use tideway_core::testing::*;
use tideway_node_agent::dataplane::{Dataplane, Desired, Nftables, Update};
use tideway_node_agent::netlink::conntrack::Conntrack;
use tideway_node_agent::netlink::nft::NftNetlink;
use tideway_tests::netns::{Netns, require_root};

const SERVICES: usize = 40;

/// Full applies of the synthetic cluster in `ns` with one backend, as a restarted agent
/// would (each apply a fresh [`Nftables`]): the transactions each committed.
fn full_applies(ns: &Netns, times: usize) -> Vec<u32> {
    ns.run(move || {
        let ruleset = compile(&synthetic_cluster(SERVICES, 2), &mk_node_context());
        let mode = ProxyMode::Nftables;
        let skeletons =
            IpFamily::ALL.map(|f| ProgramState::start(&render::Renderer::new(mode, &ruleset).skeleton(f)));
        let mut nl = NftNetlink::open().expect("netlink");
        (0..times)
            .map(|_| {
                let desired = Desired::new(mode, &ruleset, skeletons.each_ref());
                let before = nl.generation().expect("generation");
                Nftables::new().apply(&desired, Update::Full).expect("full apply");
                nl.generation().expect("generation").wrapping_sub(before)
            })
            .collect()
    })
}

/// The ClusterIP of the synthetic cluster's Service `i`.
fn cluster_ip(i: usize) -> IpAddr {
    let c: ClusterState = synthetic_cluster(SERVICES, 2);
    let name = c.services().nth(i).expect("a Service").name.clone();
    c.service(&name).and_then(|s| s.cluster_ip(IpFamily::V4)).expect("a ClusterIP")
}

/// A tracked, established TCP connection from a client to `dst`:80, answered by a pod.
fn track_connection(ns: &Netns, dst: IpAddr) {
    ns.sh(&format!(
        "conntrack -I -p tcp -s 192.168.0.100 -d {dst} --sport 40000 --dport 80 \
         -r 10.244.1.5 -q 192.168.0.100 --reply-port-src 8080 --reply-port-dst 40000 \
         --state ESTABLISHED -u SEEN_REPLY -t 120"
    ));
}

fn service_ips(ns: &Netns) -> String {
    ns.sh("nft list set ip tideway to-cluster-ip")
}

#[test]
fn a_table_gone_under_tracked_connections_gets_their_services_first() {
    require_root("nftables and conntrack in a namespace");
    let ns = Netns::create(&format!("twcf-{}", std::process::id()));
    let used = cluster_ip(7);
    track_connection(&ns, used);
    assert!(ns.sh("conntrack -L -p tcp").contains(&format!("dst={used}")), "the connection is tracked");

    // No table: the connection's Service first, then everything; then, the table in place,
    // one transaction that replaces it.
    assert_eq!(full_applies(&ns, 2), vec![2, 1], "transactions of each full apply");
    let map = service_ips(&ns);
    assert!(map.contains(&format!("{used} . tcp . 80")), "the Service in use is programmed\n{map}");
    let last = cluster_ip(SERVICES - 1);
    assert!(map.contains(&format!("{last} . tcp . 80")), "so is every other\n{map}");

    // Only the IPv4 table deleted: again in two, the first leaving the IPv6 table alone.
    ns.sh("nft delete table ip tideway");
    assert_eq!(full_applies(&ns, 1), vec![2], "after the IPv4 table was deleted");
    assert!(service_ips(&ns).contains(&format!("{last} . tcp . 80")), "everything is back");
}

#[test]
fn with_nothing_tracked_a_full_apply_is_one_transaction() {
    require_root("nftables and conntrack in a namespace");
    let ns = Netns::create(&format!("twcf0-{}", std::process::id()));
    assert_eq!(full_applies(&ns, 2), vec![1, 1]);
    // A connection to something that is not a Service changes nothing.
    track_connection(&ns, "192.168.7.7".parse().expect("address"));
    ns.sh("nft delete table ip tideway && nft delete table ip6 tideway");
    assert_eq!(full_applies(&ns, 1), vec![1]);
}

/// The count that lets a node with nothing tracked skip the dump: this namespace's entries.
#[test]
fn conntrack_counts_the_entries_of_its_namespace() {
    require_root("conntrack in a namespace");
    let ns = Netns::create(&format!("twcfn-{}", std::process::id()));
    let count =
        |ns: &Netns| ns.run(|| Conntrack::open().and_then(|mut c| c.count()).expect("conntrack count"));
    assert_eq!(count(&ns), 0);
    track_connection(&ns, "10.96.0.1".parse().expect("address"));
    assert_eq!(count(&ns), 1);
    let flows = ns.run(|| Conntrack::open().and_then(|mut c| c.every_flow(IpFamily::V4)).expect("dump"));
    assert_eq!(flows.len(), 1, "{flows:?}");
    assert_eq!(flows[0].0, tideway_core::net::Protocol::Tcp);
}
