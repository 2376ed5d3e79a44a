//! `externalTrafficPolicy: Local` over BGP with the agents in the loop: how long after a
//! Service's last local endpoint leaves a node the router's route to its address stops using
//! that node. Two agents' BGP speakers (each on its own task, as in the agent) drive the FRR
//! of their node namespaces through `frr-reload.py`; the router runs FRR too
//! ([`tideway_tests::frr::BgpBed`]). Each of `TRIALS` trials (default 20) moves the Service's
//! one endpoint to the other node, in both agents' views at once, and times the router's
//! kernel route (polled every 5 ms) until it holds only the new node; trials are 1.5 s apart
//! (they were when the speakers ran in the sync loop, so that no change waited for its
//! `minSyncPeriod`; they stay so for comparable figures).
//!
//! `cargo bench -p tideway-node-agent --bench bgp_withdraw` (root; FRR installed)

#![allow(clippy::print_stdout)]

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use tideway_core::model::EndpointSlice;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};
use tideway_node_agent::agent::AgentStatus;
use tideway_node_agent::bgp_speaker::BgpSpeaker;
use tideway_node_agent::frr::FrrReload;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tideway_tests::frr::{BgpBed, bgp_snapshot};
use tideway_tests::netns::eventually;

const VIP: &str = "203.0.113.20";
const NODES: [(&str, &str); 2] = [("node-a", "172.30.0.11"), ("node-b", "172.30.0.12")];

fn slice_on(node: &str) -> EndpointSlice {
    mk_slice("demo", "api").port("http", Tcp, 8080).ready("10.244.9.5", node).build()
}

/// One agent's view: the two nodes, the bed's BGP objects, a Local Service with its endpoint
/// on `node`.
fn cluster(node: &str) -> SharedCluster {
    let api = mk_service("demo", "api")
        .cluster_ip("10.96.0.20")
        .port("http", Tcp, 80)
        .lb_ip(VIP)
        .etp_local()
        .build();
    let snapshot = bgp_snapshot(&NODES, vec![api], vec![slice_on(node)]);
    let cluster = SharedCluster::new();
    cluster.update(|s| s.reset(snapshot));
    cluster.mark_synced();
    cluster
}

fn main() {
    let trials: usize = std::env::var("TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let empty = "frr defaults traditional\n!\n".to_string();
    let bed = BgpBed::start(
        &format!("w{}", std::process::id() % 100_000),
        &[(NODES[0].1, empty.clone()), (NODES[1].1, empty)],
    );
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let clusters: Vec<SharedCluster> = (0..2).map(|_| cluster(NODES[0].0)).collect();
    for (i, (node, _)) in NODES.iter().enumerate() {
        let frr = FrrReload {
            pathspace: Some(bed.nodes[i].ns.name.clone()),
            ..FrrReload::new(&bed.nodes[i].dir.join("tideway"))
        };
        let speaker = BgpSpeaker::new(
            node,
            clusters[i].clone(),
            Arc::new(RwLock::new(AgentStatus::default())),
            Arc::new(Metrics::new(&mut Registry::default())),
            Arc::new(AtomicBool::new(false)),
            Arc::new(frr),
        );
        rt.spawn(speaker.run(std::future::pending()));
    }
    let only = |i: usize| vec![NODES[i].1.to_string()];
    eventually(Duration::from_secs(30), || {
        let hops = bed.router.next_hops(VIP);
        if hops == only(0) { Ok(()) } else { Err(format!("{hops:?}")) }
    })
    .unwrap_or_else(|e| panic!("the route never reached node-a: {e}\n{}", bed.logs()));

    let mut took = Vec::new();
    for trial in 0..trials {
        let (from, to) = (trial % 2, (trial + 1) % 2);
        std::thread::sleep(Duration::from_millis(1500));
        let moved = Instant::now();
        for c in &clusters {
            c.update(|s| s.apply(slice_on(NODES[to].0)));
        }
        let deadline = moved + Duration::from_secs(10);
        while bed.router.next_hops(VIP) != only(to) {
            assert!(
                Instant::now() < deadline,
                "trial {trial}: {} still a next hop after 10 s",
                NODES[from].0
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        took.push(moved.elapsed());
    }
    took.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    println!(
        "ETP Local over BGP, {trials} trials: endpoint moved to the router's route on the new node only: \
         min {:.0} ms, median {:.0} ms, max {:.0} ms",
        ms(&took[0]),
        ms(&took[took.len() / 2]),
        ms(&took[took.len() - 1]),
    );
    // The agents' loops never end: the bed is taken down, then the process exits without
    // waiting for them.
    drop(bed);
    std::process::exit(0);
}
