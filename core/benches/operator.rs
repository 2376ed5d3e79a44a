//! Operator benchmarks: LoadBalancer IP allocation for 10,000 Services from empty over two
//! pools (and the steady-state pass that keeps them), the layer-2 announcer of 10,000
//! addresses over 100 nodes, Cluster and Local Services mixed, and the whole reconciler
//! (addresses, eligibility, announcers, writes) for 10,000 Services over 100 nodes from empty
//! and for one endpoint change.
//!
//! `cargo bench -p tideway-core --bench operator`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

// The tideway binary runs with mimalloc; measure with the same allocator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use tideway_core::announce::{LocalEndpoints, NodeInfo, ServiceTraffic, decide};
use tideway_core::cluster::ClusterState;
use tideway_core::config::LabelSelector;
use tideway_core::ipam::{Allocator, LbRequest, Pool, ServiceAllocation};
use tideway_core::model::{
    AgentLiveness, EndpointSlice, L2Settings, LoadBalancerPool, ServiceName, TrafficPolicy,
};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::operator::{Reconciler, Refused};
use tideway_core::testing::{mk_node, mk_service, mk_slice};

const SERVICES: usize = 10_000;
const NODES: usize = 100;

/// A pinned pool for namespaces ns0-ns4 (1,016 addresses: it fills up, the rest spills over)
/// and a large dual-stack pool.
fn pools() -> Vec<Pool> {
    let pinned = ServiceAllocation {
        priority: Some(1),
        namespaces: (0..5).map(|i| format!("ns{i}")).collect(),
        ..ServiceAllocation::default()
    };
    vec![
        Pool { allocation: Some(pinned), avoid_buggy_ips: true, ..Pool::new("pinned", &["10.0.0.0/22"]) },
        Pool::new("shared", &["10.16.0.0/16", "fd00:10::/64"]),
    ]
}

/// One Service in ten dual-stack; one in five in a TCP/UDP pair sharing a key.
fn requests() -> Vec<LbRequest> {
    (0..SERVICES)
        .map(|i| {
            let name = ServiceName::new(format!("ns{}", i % 10), format!("svc{i}"));
            let families =
                if i.is_multiple_of(10) { vec![IpFamily::V4, IpFamily::V6] } else { vec![IpFamily::V4] };
            let mut r = LbRequest::new(name, families);
            if i % 5 == 1 || i % 5 == 2 {
                r.sharing_key = Some(format!("dns-{}", i / 5));
                r.ports = vec![(if i % 5 == 1 { Protocol::Tcp } else { Protocol::Udp }, 53)];
            } else {
                r.ports = vec![(Protocol::Tcp, 80), (Protocol::Tcp, 443)];
            }
            r
        })
        .collect()
}

fn ipam(c: &mut Criterion) {
    let reqs = requests();
    let assign_all = || {
        let mut a = Allocator::new();
        a.set_pools(pools());
        for r in &reqs {
            a.assign(r).expect("room for every Service");
        }
        a
    };
    let full = assign_all();
    for s in full.pool_status() {
        eprintln!("  pool {}: {:?}", s.name, s.stats);
    }
    let mut g = c.benchmark_group("ipam_10k_services_2_pools");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("assign_from_empty", |b| b.iter(|| black_box(assign_all().pool_stats("shared"))));
    let mut steady = full.clone();
    g.bench_function("reassign_unchanged", |b| {
        b.iter(|| {
            for r in &reqs {
                black_box(steady.assign(r).expect("kept"));
            }
        })
    });
    g.bench_function("pool_status", |b| b.iter(|| black_box(full.pool_status())));
    g.finish();
}

/// 50 layouts of the nodes: every node ready in one of 4 zones; Local Services have serving
/// endpoints on 3 nodes.
fn layouts() -> Vec<Vec<NodeInfo>> {
    (0..50)
        .map(|l| {
            (0..NODES)
                .map(|n| NodeInfo {
                    name: format!("node-{n:03}"),
                    ready: n % 37 != 5,
                    agent: AgentLiveness::Unknown,
                    network_unavailable: false,
                    to_be_deleted: false,
                    labels: BTreeMap::from([("zone".to_string(), format!("z{}", n % 4))]),
                    local: if (n + l).is_multiple_of(33) {
                        LocalEndpoints::Ready
                    } else {
                        LocalEndpoints::Absent
                    },
                    lacks_interfaces: false,
                })
                .collect()
        })
        .collect()
}

fn announce(c: &mut Criterion) {
    let layouts = layouts();
    let zone = |z: &str| LabelSelector {
        match_labels: BTreeMap::from([("zone".to_string(), z.to_string())]),
        match_expressions: vec![],
    };
    let selectors = [vec![], vec![zone("z0"), zone("z1")]];
    let ips: Vec<IpAddr> =
        (0..SERVICES as u32).map(|i| IpAddr::from((0x0a10_0000 + i).to_be_bytes())).collect();
    let traffic = |i: usize| ServiceTraffic {
        policy: if i.is_multiple_of(2) { TrafficPolicy::Cluster } else { TrafficPolicy::Local },
        serving_endpoints: true,
    };
    let pass = |current: &[Option<String>]| -> Vec<Option<String>> {
        (0..SERVICES)
            .map(|i| {
                let d = decide(
                    ips[i],
                    &traffic(i),
                    &layouts[i % 50],
                    &selectors[i % 3 / 2],
                    current[i].as_deref(),
                );
                d.announcer
            })
            .collect()
    };
    let first = pass(&vec![None; SERVICES]);
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for n in first.iter().flatten() {
        *per_node.entry(n).or_default() += 1;
    }
    let (lo, hi) = (per_node.values().min().unwrap(), per_node.values().max().unwrap());
    eprintln!("  announcers: {} nodes in use, {lo}..{hi} addresses each", per_node.len());
    let mut g = c.benchmark_group("announce_10k_ips_100_nodes");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    let none = vec![None; SERVICES];
    g.bench_function("first_choice", |b| b.iter(|| black_box(pass(&none))));
    g.bench_function("steady_state", |b| b.iter(|| black_box(pass(&first))));
    g.finish();
}

/// 10,000 LoadBalancer Services (half `Local`) with 3 endpoints each over 100 nodes, one pool.
fn lb_cluster() -> ClusterState {
    let mut state = ClusterState::new();
    for n in 0..NODES {
        state.apply(mk_node(&format!("node-{n:03}"), "192.168.0.10", &format!("z{}", n % 4)));
    }
    let pool = Pool::new("pool", &["10.16.0.0/16"]);
    state.apply(LoadBalancerPool {
        pool,
        l2: L2Settings::default(),
        generation: 1,
        origin: Default::default(),
    });
    for i in 0..SERVICES {
        let name = format!("svc{i}");
        let cip = format!("10.96.{}.{}", i / 250, i % 250 + 1);
        let mut b = mk_service("ns", &name).cluster_ip(&cip).port("http", Protocol::Tcp, 80).load_balancer();
        if i % 2 == 1 {
            b = b.etp_local();
        }
        state.apply(b.build());
        state.apply(slice_of(i, 0));
    }
    state
}

/// Service `i`'s slice, its endpoints moved by `shift` nodes.
fn slice_of(i: usize, shift: usize) -> EndpointSlice {
    (0..3)
        .fold(mk_slice("ns", &format!("svc{i}")).port("http", Protocol::Tcp, 8080), |s, k| {
            let node = format!("node-{:03}", (i * 7 + k * 31 + shift) % NODES);
            s.ready(&format!("10.{}.{}.{}", 128 + k, i / 250, i % 250 + 1), &node)
        })
        .build()
}

fn reconcile(c: &mut Criterion) {
    let none = Refused::default();
    let mut g = c.benchmark_group("operator_10k_lb_services_100_nodes");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    let state = lb_cluster();
    let all = state.clone().take_changes();
    g.bench_function("decide_everything_from_empty", |b| {
        b.iter(|| black_box(Reconciler::new(None).reconcile(&state, &all, &none).len()))
    });
    let mut state = state;
    let mut rec = Reconciler::new(None);
    let first = rec.reconcile(&state, &state.clone().take_changes(), &none);
    eprintln!("  first reconcile: {} writes", first.len());
    state.take_changes();
    let mut flip = false;
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            flip = !flip;
            state.apply(slice_of(4_321, usize::from(flip)));
            let changes = state.take_changes();
            black_box(rec.reconcile(&state, &changes, &none).len())
        })
    });
    g.finish();
}

criterion_group!(benches, ipam, announce, reconcile);
criterion_main!(benches);
