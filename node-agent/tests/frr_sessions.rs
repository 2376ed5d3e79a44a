//! The rendered FRR configurations in real FRR: two nodes' decisions rendered by
//! [`tideway_core::bgp::frr::render`] and loaded into FRR in the nodes' network namespaces,
//! peering over one segment with a router namespace running FRR too
//! ([`tideway_tests::frr::BgpBed`]). The router's kernel routes are what is checked: a `Cluster`
//! Service's address over both nodes (ECMP), a `Local` one over the node with its endpoint
//! only, a changed decision applied with [`FrrReload`] (FRR's `frr-reload.py`) without
//! resetting the session, and a node whose link goes down withdrawn by BFD (100 ms × 3) long
//! before the hold time.

use std::time::{Duration, Instant};

use tideway_core::announce::LocalEndpoints;
use tideway_core::model::TrafficPolicy;
use tideway_node_agent::frr::{FrrReload, Routing};
use tideway_tests::frr::{self, BgpBed};
use tideway_tests::netns::{eventually, require_root};

const CLUSTER_VIP: &str = "203.0.113.10";
const LOCAL_VIP: &str = "203.0.113.20";
const NODE_A: &str = "172.30.0.11";
const NODE_B: &str = "172.30.0.12";

/// What `node` (at `addr`, with `local` endpoints of the Local Service) advertises, rendered.
fn node_config(node: &str, addr: &str, local: LocalEndpoints) -> String {
    let services = [
        ("web", CLUSTER_VIP, TrafficPolicy::Cluster, LocalEndpoints::Absent),
        ("api", LOCAL_VIP, TrafficPolicy::Local, local),
    ];
    frr::node_config(node, addr, &services)
}

#[test]
fn real_frr_spreads_addresses_over_the_nodes_reloads_without_a_reset_and_bfd_withdraws_a_dead_node() {
    require_root("FRR in network namespaces");
    let bed = BgpBed::start(
        &(std::process::id() % 100_000).to_string(),
        &[
            (NODE_A, node_config("node-a", NODE_A, LocalEndpoints::Ready)),
            (NODE_B, node_config("node-b", NODE_B, LocalEndpoints::Absent)),
        ],
    );
    let router = &bed.router;

    // Cluster: both nodes; Local: only the node with the endpoint.
    let both = vec![NODE_A.to_string(), NODE_B.to_string()];
    eventually(Duration::from_secs(30), || {
        let (cluster, local) = (router.next_hops(CLUSTER_VIP), router.next_hops(LOCAL_VIP));
        if cluster == both && local == [NODE_A] { Ok(()) } else { Err(format!("{cluster:?} {local:?}")) }
    })
    .unwrap_or_else(|e| panic!("the router's routes: {e}\n{}", bed.logs()));
    // Both BFD sessions up (they start once BGP is established, after any collision).
    eventually(Duration::from_secs(15), || if router.bfd_up() == 2 { Ok(()) } else { Err("BFD".into()) })
        .unwrap_or_else(|e| panic!("{e} sessions not up\n{}", bed.logs()));

    // An endpoint of the Local Service starts on node-b: its agent renders the new decision and
    // FRR's reload applies the difference; the session stays up and forwarding as it was.
    let established = || {
        router.json(&format!("show bgp neighbors {NODE_B} json"))[NODE_B]["connectionsEstablished"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = established();
    let forwarding = || bed.nodes[1].ns.sh("sysctl -n net.ipv4.ip_forward net.ipv6.conf.all.forwarding");
    let forwarding_before = forwarding();
    let reload =
        FrrReload { pathspace: Some(bed.nodes[1].ns.name.clone()), ..FrrReload::new(&bed.nodes[1].dir) };
    reload
        .apply(&node_config("node-b", NODE_B, LocalEndpoints::Ready))
        .unwrap_or_else(|e| panic!("frr-reload.py: {e}\n{}", bed.logs()));
    eventually(Duration::from_secs(10), || {
        let local = router.next_hops(LOCAL_VIP);
        if local == both { Ok(()) } else { Err(format!("{local:?}")) }
    })
    .unwrap_or_else(|e| panic!("the Local address after the reload: {e}\n{}", bed.logs()));
    assert!(before >= 1, "node-b's session was up");
    assert_eq!(established(), before, "the reload kept node-b's session");
    assert_eq!(forwarding(), forwarding_before, "the reload left the node's forwarding alone");

    // node-b's link goes down: BFD (3 × 100 ms) withdraws it, not the 90 s hold time.
    let down = Instant::now();
    bed.link(1, false);
    eventually(Duration::from_secs(5), || {
        let hops = router.next_hops(CLUSTER_VIP);
        if hops == [NODE_A] { Ok(()) } else { Err(format!("{hops:?}")) }
    })
    .unwrap_or_else(|e| panic!("node-b still a next hop: {e}\n{}", bed.logs()));
    let took = down.elapsed();
    assert!(took < Duration::from_secs(2), "withdrawn after {took:?}: BFD, not the hold time");
}
