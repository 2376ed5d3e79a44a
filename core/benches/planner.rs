//! Planner benchmarks: compile + render of 10,000 Services x 10 endpoints, full and after a
//! one-endpoint change, per backend; and the copy of such a plan.
//!
//! `cargo bench -p tideway-core --bench planner`

use std::hint::black_box;

// The tideway binary runs with mimalloc; measure with the same allocator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::plan::compile;
use tideway_core::program::ProgramState;
use tideway_core::render;
use tideway_core::testing::{mk_node_context, synthetic_cluster, synthetic_slice};

const SERVICES: usize = 10_000;
const ENDPOINTS: usize = 10;

fn full(c: &mut Criterion) {
    let cluster = synthetic_cluster(SERVICES, ENDPOINTS);
    let node = mk_node_context();
    let mut g = c.benchmark_group("full_sync_10k_x10");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("compile", |b| b.iter(|| black_box(compile(&cluster, &node))));
    for mode in ProxyMode::ALL {
        g.bench_function(format!("compile+render/{mode}"), |b| {
            b.iter(|| {
                let ruleset = compile(&cluster, &node);
                let program = render::Renderer::new(mode, &ruleset).lower(IpFamily::V4);
                black_box(render::program_text(&program).len())
            })
        });
    }
    g.finish();
}

fn one_change(c: &mut Criterion) {
    let node = mk_node_context();
    let mut g = c.benchmark_group("one_endpoint_change_10k_x10");
    g.sample_size(50);
    for mode in ProxyMode::ALL {
        let mut cluster = synthetic_cluster(SERVICES, ENDPOINTS);
        let mut ruleset = compile(&cluster, &node);
        let mut state = ProgramState::new(&render::Renderer::new(mode, &ruleset).lower(IpFamily::V4));
        let mut flip = false;
        let mut ops = 0;
        let mut bytes = 0;
        g.bench_function(format!("compile+diff/{mode}"), |b| {
            b.iter(|| {
                // Swap one endpoint of one Service back and forth: event -> plan -> diff -> text.
                flip = !flip;
                cluster.apply(synthetic_slice(4242, ENDPOINTS, flip.then_some(3)));
                let changes = cluster.take_changes();
                let changed = ruleset.update(&cluster, &changes.services);
                let cs = render::Renderer::new(mode, &ruleset)
                    .update(&mut state, &changed)
                    .expect("the base is unchanged");
                ops = cs.operations();
                bytes = render::changes_text(state.skeleton(), &cs).len();
                black_box(bytes)
            })
        });
        eprintln!("  {mode}: one endpoint change = {ops} kernel operations, {bytes} bytes of kernel input");
    }
    g.finish();
}

/// What an incremental sync pays while the agent's REST API holds the plan published before
/// it: one copy of the plan (copy on write), next to the sync's own plan and diff above.
fn published_copy(c: &mut Criterion) {
    let ruleset = compile(&synthetic_cluster(SERVICES, ENDPOINTS), &mk_node_context());
    let mut g = c.benchmark_group("published_plan_10k_x10");
    g.sample_size(20);
    g.bench_function("copy", |b| b.iter(|| black_box(ruleset.clone())));
    g.finish();
}

criterion_group!(benches, full, one_change, published_copy);
criterion_main!(benches);
