//! Maglev figures: imbalance across endpoints (largest share / ideal share) for N = 2..100 and
//! the buckets that move when one of N endpoints leaves or joins, at the default table size;
//! the table's size and map elements per frontend; planning and rendering 10,000 Services with
//! 10 % of them Maglev against all random; one endpoint change on a Maglev Service (p99).
//!
//! `cargo bench -p tideway-core --bench maglev`

// A benchmark that prints its figures.
#![allow(clippy::print_stdout)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::maglev::{DEFAULT_TABLE_SIZE, MaglevTable, backend_name};
use tideway_core::net::IpFamily;
use tideway_core::plan::{Ruleset, compile};
use tideway_core::program::ProgramState;
use tideway_core::render;
use tideway_core::testing::{mk_node_context, synthetic_cluster, synthetic_slice};

/// Bytes one element of a frontend-and-bucket DNAT map costs in the kernel: 409,300 elements
/// loaded into a fresh namespace raised the slab's SUnreclaim by 25.7 MB.
const KERNEL_BYTES_PER_ELEMENT: f64 = 63.0;

fn names(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            backend_name(&IpAddr::V4(Ipv4Addr::new(10, 244, (i / 200) as u8, (i % 200) as u8 + 1)), 8080)
        })
        .collect()
}

fn moved(a: &MaglevTable, an: &[Vec<u8>], b: &MaglevTable, bn: &[Vec<u8>]) -> f64 {
    let n = a.entries().iter().zip(b.entries()).filter(|(x, y)| an[**x as usize] != bn[**y as usize]).count();
    n as f64 / f64::from(a.size())
}

fn imbalance() {
    println!("imbalance at {DEFAULT_TABLE_SIZE} buckets (largest share / ideal share):");
    let mut line = String::new();
    for n in [2usize, 3, 5, 10, 20, 30, 50, 70, 100] {
        let t = MaglevTable::build(&names(n), DEFAULT_TABLE_SIZE);
        let mut c = vec![0u32; n];
        t.entries().iter().for_each(|e| c[*e as usize] += 1);
        let ideal = f64::from(DEFAULT_TABLE_SIZE) / n as f64;
        line.push_str(&format!(" N={n}: {:.3}", f64::from(*c.iter().max().unwrap_or(&0)) / ideal));
    }
    let worst = (2..=100usize)
        .map(|n| {
            let t = MaglevTable::build(&names(n), DEFAULT_TABLE_SIZE);
            let mut c = vec![0u32; n];
            t.entries().iter().for_each(|e| c[*e as usize] += 1);
            f64::from(*c.iter().max().unwrap_or(&0)) * n as f64 / f64::from(DEFAULT_TABLE_SIZE)
        })
        .fold(0.0f64, f64::max);
    println!("{line}\n  worst over N = 2..100: {worst:.3}");
}

fn disruption() {
    println!(
        "buckets moved by one of N endpoints leaving / joining at {DEFAULT_TABLE_SIZE} buckets (worst leaver; bound 1/N + 3 %):"
    );
    for n in [2usize, 3, 4, 5, 8, 10, 15, 20] {
        let all = names(n + 1);
        let base = &all[..n];
        let t = MaglevTable::build(base, DEFAULT_TABLE_SIZE);
        let leave = (0..n)
            .map(|g| {
                let rest: Vec<Vec<u8>> =
                    base.iter().enumerate().filter(|(i, _)| *i != g).map(|(_, b)| b.clone()).collect();
                moved(&t, base, &MaglevTable::build(&rest, DEFAULT_TABLE_SIZE), &rest)
            })
            .fold(0.0f64, f64::max);
        let join = moved(&t, base, &MaglevTable::build(&all, DEFAULT_TABLE_SIZE), &all);
        println!(
            "  N={n:>2}: leave {:.1} % (1/N = {:.1} %), join {:.1} % (1/(N+1) = {:.1} %)",
            leave * 100.0,
            100.0 / n as f64,
            join * 100.0,
            100.0 / (n + 1) as f64
        );
    }
    let kib = f64::from(DEFAULT_TABLE_SIZE) * KERNEL_BYTES_PER_ELEMENT / 1024.0;
    println!(
        "table: {DEFAULT_TABLE_SIZE} buckets = {DEFAULT_TABLE_SIZE} map elements per frontend, about {kib:.0} KiB of kernel memory (at {KERNEL_BYTES_PER_ELEMENT} B per element)"
    );
}

fn cluster(maglev_every: usize) -> ClusterState {
    let mut c = synthetic_cluster(10_000, 10);
    if maglev_every > 0 {
        let names: Vec<_> = c.services().map(|s| s.name.clone()).collect();
        for (i, name) in names.iter().enumerate().filter(|(i, _)| i % maglev_every == 0) {
            let mut s = c.service(name).expect("service").clone();
            s.load_balancing = Some("maglev".into());
            c.apply(s);
            let _ = i;
        }
        c.take_changes();
    }
    c
}

fn full(label: &str, c: &ClusterState) -> Ruleset {
    let node = mk_node_context();
    let start = Instant::now();
    let ruleset = compile(c, &node);
    let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(IpFamily::V4);
    let text = render::nftables::text::program(&program);
    let took = start.elapsed();
    let elements: usize = program.fragments().map(|f| f.elements.len()).sum();
    println!(
        "  {label}: compile + render {:.0} ms, {elements} map elements (about {:.0} MiB of kernel memory at {KERNEL_BYTES_PER_ELEMENT} B each), {:.1} MiB of nft text",
        took.as_secs_f64() * 1000.0,
        elements as f64 * KERNEL_BYTES_PER_ELEMENT / (1024.0 * 1024.0),
        text.len() as f64 / (1024.0 * 1024.0)
    );
    ruleset
}

fn one_change(c: &ClusterState) {
    let node = mk_node_context();
    let before = compile(c, &node);
    let program = render::Renderer::new(ProxyMode::Nftables, &before).lower(IpFamily::V4);
    let mut times = Vec::new();
    let mut ops = 0;
    for round in 0..200usize {
        let mut next = c.clone();
        next.apply(synthetic_slice(0, 10, Some(round % 10)));
        let changed_services: Vec<_> = next.take_changes().services.into_iter().collect();
        let mut ruleset = before.clone();
        let mut state = ProgramState::new(&program);
        // The agent's incremental path: replan the Service, lower its fragments, diff them.
        let start = Instant::now();
        let changed = ruleset.update(&next, &changed_services);
        let change = render::Renderer::new(ProxyMode::Nftables, &ruleset)
            .update(&mut state, &changed)
            .expect("incremental");
        times.push(start.elapsed());
        ops = change.operations();
    }
    times.sort();
    println!(
        "  one endpoint change on a Maglev Service (replan + lower + diff, the agent's incremental path): p50 {:.2} ms, p99 {:.2} ms, {ops} kernel operations",
        times[100].as_secs_f64() * 1000.0,
        times[197].as_secs_f64() * 1000.0
    );
}

fn main() {
    imbalance();
    disruption();
    println!("10,000 Services x 10 endpoints, nftables:");
    full("all random", &cluster(0));
    let mixed = cluster(10);
    full("10 % Maglev", &mixed);
    one_change(&mixed);
}
