//! Resident memory of each stage a node agent holds, for 10,000 Services x 10 endpoints (or
//! `SERVICES`): `cargo run --release -p tideway-core --example memory [MODE]`.

#![allow(clippy::print_stdout)]

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::compile;
use tideway_core::program::{Program, ProgramState};
use tideway_core::render;
use tideway_core::testing::{mk_node_context, synthetic_cluster};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident bytes (run with `MIMALLOC_PURGE_DELAY=0` so freed pages go back at once).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<usize>().ok()).unwrap_or(0) * 4096
}

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() {
    let mode: ProxyMode = std::env::args().nth(1).map(|s| s.parse().expect("mode")).unwrap_or_default();
    let base = rss();
    let services = std::env::var("SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let cluster = synthetic_cluster(services, 10);
    let c = rss();
    println!("cluster state:   {}", mib(c - base));
    let ruleset = compile(&cluster, &mk_node_context());
    let r = rss();
    println!("ruleset:         {}", mib(r - c));
    let programs: Vec<Program> =
        IpFamily::ALL.into_iter().map(|f| render::Renderer::new(mode, &ruleset).lower(f)).collect();
    let p = rss();
    println!("programs ({mode}): {} (rendered for a full sync, then dropped)", mib(p - r));
    let kept: Vec<ProgramState> = programs.iter().map(ProgramState::new).collect();
    drop(programs);
    let k = rss();
    println!("kept between syncs: {}", mib(k.saturating_sub(r)));
    std::hint::black_box((&cluster, &ruleset, &kept));
}
