//! BGP failover with BFD: how long after a node's link goes down the router's route to a
//! `Cluster` Service's address stops using it. Two nodes advertise the address with the
//! configuration Tideway renders (BFD profile 100 ms × 3, hold time 90 s) to a router running
//! FRR in network namespaces ([`tideway_tests::frr::BgpBed`]); each of `TRIALS` trials (default
//! 20) waits for both next hops and both BFD sessions, takes node-b's link down, times the
//! router's kernel route losing it (polled every 5 ms), and brings the link back.
//!
//! `cargo bench -p tideway-node-agent --bench bfd` (root; FRR installed)

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use tideway_core::announce::LocalEndpoints;
use tideway_core::model::TrafficPolicy;
use tideway_tests::frr::{self, BgpBed};
use tideway_tests::netns::eventually;

const VIP: &str = "203.0.113.10";
const NODES: [&str; 2] = ["172.30.0.11", "172.30.0.12"];

fn config(node: &str, addr: &str) -> String {
    frr::node_config(node, addr, &[("web", VIP, TrafficPolicy::Cluster, LocalEndpoints::Absent)])
}

fn main() {
    let trials: usize = std::env::var("TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let bed = BgpBed::start(
        &format!("b{}", std::process::id() % 100_000),
        &[(NODES[0], config("node-a", NODES[0])), (NODES[1], config("node-b", NODES[1]))],
    );
    let both: Vec<String> = NODES.iter().map(ToString::to_string).collect();
    let mut took = Vec::new();
    for trial in 0..trials {
        eventually(Duration::from_secs(30), || {
            let hops = bed.router.next_hops(VIP);
            if hops == both && bed.router.bfd_up() == 2 { Ok(()) } else { Err(format!("{hops:?}")) }
        })
        .unwrap_or_else(|e| panic!("trial {trial}: not both next hops and BFD up: {e}\n{}", bed.logs()));
        let down = Instant::now();
        bed.link(1, false);
        let deadline = down + Duration::from_secs(10);
        while bed.router.next_hops(VIP) != [NODES[0]] {
            assert!(Instant::now() < deadline, "trial {trial}: node-b still a next hop after 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        took.push(down.elapsed());
        bed.link(1, true);
    }
    took.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    println!(
        "BFD 100 ms x 3, hold time 90 s, {trials} trials: link down to the router's route without the node: \
         min {:.0} ms, median {:.0} ms, max {:.0} ms; within 1 s: {}/{trials}",
        ms(&took[0]),
        ms(&took[took.len() / 2]),
        ms(&took[took.len() - 1]),
        took.iter().filter(|d| **d <= Duration::from_secs(1)).count()
    );
}
