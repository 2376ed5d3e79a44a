//! Micro-benchmarks of the query path on the benchmark zone (10,000 ClusterIP Services, 1,000
//! headless Services x 5 endpoints): the pure answer rules, the whole bytes-to-bytes path,
//! a full index rebuild, and an update of the index after one Service's slice changed.
//! `cargo bench -p tideway-dns --bench answer`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use hickory_proto::op::{LowerQuery, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use prometheus_client::registry::Registry;
use tideway_core::cluster::Snapshot;
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};
use tideway_dns::answer::answer;
use tideway_dns::forward::cache::{Cache, CacheSettings};
use tideway_dns::forward::{ForwardSettings, Forwarder};
use tideway_dns::handler::wire::{Handled, handle_bytes};
use tideway_dns::handler::{Core, Options};
use tideway_dns::metrics::{Metrics, Proto};
use tideway_dns::records::{IndexSettings, RecordIndex};
use tideway_dns::view::{ClusterView, Touched};

/// The cluster of `bench/dns/gen_cluster.py`.
fn cluster() -> ClusterView {
    let mut snap = Snapshot::default();
    let mut n = 0u32;
    for m in 0..100 {
        for s in 0..100 {
            let ip = format!("10.96.{}.{}", n >> 8, n & 255);
            let svc =
                mk_service(&format!("ns-{m}"), &format!("svc-{s}")).cluster_ip(&ip).port("http", Tcp, 80);
            snap.services.push(svc.build());
            n += 1;
        }
    }
    let mut k = 0u32;
    for m in 0..100 {
        for h in 0..10 {
            let (ns, name) = (format!("ns-{m}"), format!("hl-{h}"));
            snap.services.push(mk_service(&ns, &name).headless().port("http", Tcp, 8080).build());
            let mut slice = mk_slice(&ns, &name).port("http", Tcp, 8080);
            for _ in 0..5 {
                slice = slice.ready(&format!("10.244.{}.{}", (k >> 8) & 255, k & 255), "node-a");
                k += 1;
            }
            snap.endpoint_slices.push(slice.build());
        }
    }
    ClusterView::from_snapshot(snap)
}

fn query(name: &str, qtype: RecordType) -> LowerQuery {
    LowerQuery::query(Query::query(Name::from_ascii(name).unwrap(), qtype))
}

fn wire(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::new(7, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

fn benches(c: &mut Criterion) {
    let state = cluster();
    let settings = IndexSettings::new("cluster.local").unwrap();
    c.bench_function("index/build_11k_services", |b| {
        b.iter(|| RecordIndex::build(black_box(&state), &settings, 1))
    });
    let index = RecordIndex::build(&state, &settings, 1);
    c.bench_function("index/update_one_service", |b| {
        let mut view = state.clone();
        view.take_changes();
        let versions = [1, 2].map(|last| {
            let slice = mk_slice("ns-17", "hl-3").port("http", Tcp, 8080).ready("10.244.200.1", "node-a");
            slice.ready(&format!("10.244.200.{}", last + 1), "node-a").build()
        });
        let mut at = 0;
        b.iter(|| {
            at += 1;
            view.apply_endpoint_slice(versions[at % 2].clone());
            let Touched::Services(touched) = view.take_changes().touched else { panic!("one Service") };
            index.updated(black_box(&view), &settings, 2, &touched).expect("updated in place")
        })
    });
    let cases = [
        ("clusterip_a", "svc-42.ns-17.svc.cluster.local.", RecordType::A),
        ("srv", "_http._tcp.svc-42.ns-17.svc.cluster.local.", RecordType::SRV),
        ("headless_a", "hl-3.ns-17.svc.cluster.local.", RecordType::A),
        ("nxdomain_search_path", "svc-1.ns-2.ns-17.svc.cluster.local.", RecordType::A),
        ("nxdomain_external", "www.example5.com.ns-17.svc.cluster.local.", RecordType::A),
        ("ptr_clusterip", "42.10.96.10.in-addr.arpa.", RecordType::PTR),
        ("ptr_endpoint", "7.1.244.10.in-addr.arpa.", RecordType::PTR),
    ];
    for (label, name, qtype) in cases {
        let q = query(name, qtype);
        c.bench_function(&format!("answer/{label}"), |b| b.iter(|| answer(black_box(&index), black_box(&q))));
    }
    let metrics = Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut Registry::default()));
    let core = Core::new(
        index,
        Forwarder::new(ForwardSettings::default(), Arc::clone(&metrics)),
        Cache::new(CacheSettings::default(), Arc::clone(&metrics)),
        Options::default(),
        metrics,
    );
    let src = "127.0.0.1:40000".parse().unwrap();
    for (label, name, qtype) in cases {
        let bytes = wire(name, qtype);
        c.bench_function(&format!("wire/{label}"), |b| {
            b.iter(|| match handle_bytes(&core, black_box(&bytes), src, Proto::Udp) {
                Handled::Respond(out) => out,
                _ => panic!("answered in place"),
            })
        });
    }
}

criterion_group!(dns, benches);
criterion_main!(dns);
