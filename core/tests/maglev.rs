//! Maglev Services through the planner, the nftables renderer and the tracer: the tracer names
//! the one endpoint a flow's hash picks, and an endpoint change rewrites only the buckets
//! Maglev moves.

use std::net::IpAddr;

use tideway_core::cluster::ClusterState;
use tideway_core::config::ProxyMode;
use tideway_core::maglev::{self, MaglevTable};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::compile;
use tideway_core::program::diff;
use tideway_core::render;
use tideway_core::testing::*;
use tideway_core::trace::{Origin, Packet, TraceEnv, Verdict, trace};

const TCP: Protocol = Protocol::Tcp;

fn cluster(endpoints: usize, algorithm: &str) -> ClusterState {
    let mut c = ClusterState::default();
    c.apply(mk_node("node-a", NODE_A, "zone-a"));
    c.apply(
        mk_service("ns1", "web")
            .cluster_ip("10.96.0.10")
            .port("http", TCP, 80)
            .load_balancing(algorithm)
            .build(),
    );
    let mut s = mk_slice("ns1", "web").port("http", TCP, 8080);
    for i in 0..endpoints {
        s = s
            .ready(&format!("10.244.{}.{}", 1 + i % 2, 10 + i), if i % 2 == 0 { "node-a" } else { "node-b" });
    }
    c.apply(s.build());
    c
}

fn packet(sport: Option<u16>) -> Packet {
    Packet {
        src: ip("10.244.1.99"),
        dst: ip("10.96.0.10"),
        protocol: TCP,
        dport: 80,
        sport,
        origin: Origin::Pod,
    }
}

fn endpoints(c: &ClusterState) -> Vec<(IpAddr, u16)> {
    let ruleset = compile(c, &mk_node_context());
    let plan = ruleset.plans(IpFamily::V4).next().expect("plan");
    plan.cluster_endpoints.iter().map(|b| (b.ip, b.port)).collect()
}

#[test]
fn the_tracer_names_the_endpoint_the_flows_hash_picks() {
    let c = cluster(10, "maglev");
    let ruleset = compile(&c, &mk_node_context());
    let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(IpFamily::V4);
    let env = TraceEnv::for_node(ruleset.family(IpFamily::V4));
    let eps = endpoints(&c);
    let names: Vec<Vec<u8>> = eps.iter().map(|(ip, port)| maglev::backend_name(ip, *port)).collect();
    let table = MaglevTable::build(&names, maglev::DEFAULT_TABLE_SIZE);
    let mut seen = std::collections::BTreeSet::new();
    for sport in (40_000u16..).step_by(7).take(200) {
        let t = trace(&program, &packet(Some(sport)), &env);
        let bucket = maglev::flow_bucket(&ip("10.244.1.99"), sport, false, table.size());
        let (ip, port) = eps[table.get(bucket).expect("bucket") as usize];
        let want = tideway_core::net::join_host_port(&ip, port);
        match t.verdict() {
            Verdict::Dnat { endpoints, .. } => {
                assert_eq!(endpoints, std::slice::from_ref(&want), "sport {sport}")
            }
            other => panic!("sport {sport}: {other}"),
        }
        let note = t.paths[0].steps.iter().filter_map(|s| s.note.clone()).find(|n| n.contains("jhash"));
        assert!(note.is_some_and(|n| n.contains(&format!("bucket {bucket} of 4093"))), "sport {sport}");
        seen.insert(want);
    }
    assert_eq!(seen.len(), 10, "200 flows reach every endpoint");
    // Without a source port, every endpoint is possible: one path each, not one per bucket.
    let t = trace(&program, &packet(None), &env);
    assert_eq!(t.paths.len(), 10);
    assert!(matches!(t.verdict(), Verdict::Dnat { endpoints, .. } if endpoints.len() == 10));
}

#[test]
fn an_endpoint_change_rewrites_only_the_buckets_maglev_moves() {
    let before = cluster(10, "maglev");
    let mut after = before.clone();
    let mut s = mk_slice("ns1", "web").port("http", TCP, 8080);
    for i in 1..10 {
        s = s
            .ready(&format!("10.244.{}.{}", 1 + i % 2, 10 + i), if i % 2 == 0 { "node-a" } else { "node-b" });
    }
    after.apply(s.build());
    let node = mk_node_context();
    let lower =
        |c: &ClusterState| render::Renderer::new(ProxyMode::Nftables, &compile(c, &node)).lower(IpFamily::V4);
    let change = diff(&lower(&before), &lower(&after));
    assert!(!change.full && change.add_chains.is_empty() && change.flush_chains.is_empty());
    let size = f64::from(maglev::DEFAULT_TABLE_SIZE);
    let moved = change.add_elements.iter().filter(|(set, _)| &*set.name == "cluster-endpoints").count();
    assert_eq!(
        moved,
        change.delete_elements.iter().filter(|(set, _)| &*set.name == "cluster-endpoints").count()
    );
    assert!(moved as f64 <= (0.1 + 0.03) * size, "{moved} buckets rewritten");
    assert!(moved as f64 >= 0.09 * size, "the removed endpoint's buckets are rewritten ({moved})");
}

#[test]
fn modes_that_cannot_hash_keep_random_and_say_so() {
    let c = cluster(3, "maglev");
    let mut node = mk_node_context();
    node.settings.mode = ProxyMode::Iptables;
    let ruleset = compile(&c, &node);
    let w = ruleset.warnings();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].message, "load-balancing maglev is not available in iptables mode; using random");
    let c = cluster(3, "lc");
    let ruleset = compile(&c, &mk_node_context());
    assert!(ruleset.warnings()[0].message.contains("lc is not available in nftables mode"));
    let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(IpFamily::V4);
    let text = render::nftables::text::program(&program);
    assert!(text.contains("numgen random mod 3") && !text.contains("jhash"));
}

#[test]
fn with_client_ip_affinity_a_client_is_hashed_by_its_address_alone() {
    let mut c = cluster(6, "maglev");
    let mut svc = c.service(&tideway_core::model::ServiceName::new("ns1", "web")).cloned().expect("web");
    svc.session_affinity = mk_service("ns1", "web").affinity(600).build().session_affinity;
    c.apply(svc);
    let ruleset = compile(&c, &mk_node_context());
    let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(IpFamily::V4);
    let env = TraceEnv::for_node(ruleset.family(IpFamily::V4));
    let eps = endpoints(&c);
    let names: Vec<Vec<u8>> = eps.iter().map(|(ip, port)| maglev::backend_name(ip, *port)).collect();
    let plan = ruleset.plans(IpFamily::V4).next().expect("plan");
    let tideway_core::plan::Balancing::Maglev { table_size } = plan.balancing.balancing else {
        panic!("maglev: {:?}", plan.balancing)
    };
    let table = MaglevTable::build(&names, table_size);
    let bucket = maglev::flow_bucket(&ip("10.244.1.99"), 0, true, table.size());
    let (eip, eport) = eps[table.get(bucket).expect("bucket") as usize];
    let want = vec![tideway_core::net::join_host_port(&eip, eport)];
    // Without a source port, and with any: one endpoint, the table's for the address.
    for sport in [None, Some(40_000), Some(51_234)] {
        match trace(&program, &packet(sport), &env).verdict() {
            Verdict::Dnat { endpoints, .. } => assert_eq!(endpoints, want, "sport {sport:?}"),
            other => panic!("sport {sport:?}: {other}"),
        }
    }
}

#[test]
fn when_every_endpoint_terminates_the_table_holds_those_still_serving() {
    let mut c = cluster(0, "maglev");
    let slice = mk_slice("ns1", "web")
        .port("http", TCP, 8080)
        .endpoint("10.244.1.10", "node-a", false, true, true)
        .endpoint("10.244.2.11", "node-b", false, true, true)
        .endpoint("10.244.2.12", "node-b", false, false, true)
        .build();
    c.apply(slice);
    let ruleset = compile(&c, &mk_node_context());
    let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(IpFamily::V4);
    let env = TraceEnv::for_node(ruleset.family(IpFamily::V4));
    let eps = endpoints(&c);
    assert_eq!(eps.len(), 2, "the serving ones: {eps:?}");
    let names: Vec<Vec<u8>> = eps.iter().map(|(ip, port)| maglev::backend_name(ip, *port)).collect();
    let table = MaglevTable::build(&names, maglev::DEFAULT_TABLE_SIZE);
    for sport in (40_000u16..).step_by(11).take(50) {
        let bucket = maglev::flow_bucket(&ip("10.244.1.99"), sport, false, table.size());
        let (eip, eport) = eps[table.get(bucket).expect("bucket") as usize];
        match trace(&program, &packet(Some(sport)), &env).verdict() {
            Verdict::Dnat { endpoints, .. } => {
                assert_eq!(endpoints, [tideway_core::net::join_host_port(&eip, eport)], "sport {sport}")
            }
            other => panic!("sport {sport}: {other}"),
        }
    }
}

#[test]
fn behind_affinity_an_endpoint_change_rewrites_the_services_table_in_place() {
    let sticky = |c: &mut ClusterState| {
        let name = tideway_core::model::ServiceName::new("ns1", "web");
        let mut svc = c.service(&name).cloned().expect("web");
        svc.session_affinity = mk_service("ns1", "web").affinity(600).build().session_affinity;
        c.apply(svc);
    };
    let mut before = cluster(4, "maglev");
    sticky(&mut before);
    let mut after = cluster(5, "maglev");
    sticky(&mut after);
    let node = mk_node_context();
    let lower =
        |c: &ClusterState| render::Renderer::new(ProxyMode::Nftables, &compile(c, &node)).lower(IpFamily::V4);
    let change = diff(&lower(&before), &lower(&after));
    assert!(change.add_sets.iter().all(|s| !s.name.contains("-maglev-")), "the table is kept, not recreated");
    let table: Vec<_> = change.element_sets.iter().map(|s| s.name.to_string()).collect();
    assert_eq!(table.len(), 1, "{table:?}");
    assert!(table[0].starts_with("service-maglev-"), "{table:?}");
    let rewritten = change.add_elements.iter().filter(|(s, _)| *s.name == *table[0]).count();
    assert!(rewritten > 0 && rewritten < maglev::DEFAULT_TABLE_SIZE as usize / 3, "{rewritten} buckets");
}
