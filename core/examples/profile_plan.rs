//! Runs compile + lower + print in a loop, for profiling: `profile_plan MODE ITERATIONS`.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::compile;
use tideway_core::render;
use tideway_core::testing::{mk_node_context, synthetic_cluster};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode: ProxyMode = args.get(1).map(|s| s.parse().expect("mode")).unwrap_or_default();
    let n: usize = args.get(2).map(|s| s.parse().expect("n")).unwrap_or(3);
    if mode == ProxyMode::Nftables && std::env::var_os("PLAN_ONLY").is_some() {
        plan_only();
        plan_only();
        return;
    }
    let cluster = synthetic_cluster(10_000, 10);
    let node = mk_node_context();
    let mut total = 0;
    for _ in 0..n {
        let t = std::time::Instant::now();
        let rs = compile(&cluster, &node);
        let t1 = t.elapsed();
        let p = render::Renderer::new(mode, &rs).lower(IpFamily::V4);
        let t2 = t.elapsed();
        let text = render::program_text(&p);
        let t3 = t.elapsed();
        total += text.len();
        eprintln!("compile {t1:?} lower {:?} print {:?} ({} bytes)", t2 - t1, t3 - t2, text.len());
    }
    std::hint::black_box(total);
}

#[allow(dead_code)]
fn plan_only() {
    use tideway_core::plan::plan_service;
    let cluster = synthetic_cluster(10_000, 10);
    let node = mk_node_context();
    let t = std::time::Instant::now();
    let mut n = 0;
    for svc in cluster.services() {
        let (plans, _) = plan_service(svc, cluster.endpoint_slices_for(&svc.name), &node);
        n += plans.len();
    }
    eprintln!("plan_service only: {:?} for {n} plans", t.elapsed());
}
