//! The liveness gossip at cluster scale, simulated in one process (`tideway_sources::gossip::sim`):
//! messages and bytes each node sends per second, false failovers in a fault-free run, and how
//! long every member takes to learn that one agent died.
//!
//! `cargo bench -p tideway-sources --bench gossip` (`NODES=100,1000,5000` by default,
//! `SECONDS=10` of fault-free simulated time).

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use tideway_core::liveness::{AFTER_DETECTION, TIMINGS};
use tideway_sources::gossip::sim::{Options, simulate};

fn main() {
    let nodes: Vec<usize> = std::env::var("NODES")
        .unwrap_or_else(|_| "100,1000,5000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let seconds: u64 = std::env::var("SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    println!(
        "| nodes | messages / node / s (busiest) | bytes / node / s | false downs | first / every member knows a death | budget | wall time |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in nodes {
        let started = Instant::now();
        let r = simulate(Options {
            nodes: n,
            timings: TIMINGS,
            fault_free: Duration::from_secs(seconds),
            latency: Duration::from_micros(200),
            seed: 7,
        });
        let ms = |d: Option<Duration>| d.map_or("never".to_string(), |d| format!("{} ms", d.as_millis()));
        println!(
            "| {} | {:.1} ({:.1}) | {:.0} | {} | {} / {} | {} ms | {:.1} s |",
            r.nodes,
            r.messages_per_node_second,
            r.busiest_messages_per_node_second,
            r.bytes_per_node_second,
            r.false_downs,
            ms(r.first_detection),
            ms(r.all_detected),
            (TIMINGS.worst_detection() + AFTER_DETECTION).as_millis(),
            started.elapsed().as_secs_f64()
        );
    }
}
