//! An index updated in place against one built whole: a random walk of changes to Services,
//! slices, pods, namespaces and the DNS Service itself, each step's updated index read back
//! record by record and compared with a full build of the same view.

use std::collections::BTreeMap;

use tideway_core::model::{Namespace as NamespaceObject, Pod, ServiceName, ServiceType};
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::testing::{mk_service, mk_slice};

use super::super::{ExternalZone, IndexSettings, PodsMode, RecordIndex};
use crate::view::{ClusterView, Touched};

use crate::walk::Rng;

const NAMESPACES: u64 = 5;
const SERVICES: u64 = 120;
/// The walk's index is cut in 8 parts, as one of 3,000 Services would be.
const PART_BITS: u32 = 3;

fn names(rng: &mut Rng) -> (String, String) {
    (format!("ns-{}", rng.below(NAMESPACES)), format!("svc-{}", rng.below(SERVICES)))
}

fn service(rng: &mut Rng, ns: &str, name: &str) -> tideway_core::model::Service {
    let svc = mk_service(ns, name).port("http", Tcp, 80 + rng.below(2) as u16).port("dns", Udp, 53);
    let mut svc = match rng.below(6) {
        0 => svc.headless().build(),
        1 => {
            let mut svc = svc.build();
            svc.service_type = ServiceType::ExternalName;
            svc.external_name = Some(format!("db{}.example.org", rng.below(3)));
            svc
        }
        _ => svc.cluster_ip(&format!("10.96.{}.{}", rng.below(8), rng.below(250) + 1)).build(),
    };
    svc.publish_not_ready_addresses = rng.below(5) == 0;
    if rng.below(4) == 0 {
        svc.external_ips = vec![format!("192.0.2.{}", rng.below(20) + 1).parse().unwrap()];
    }
    svc
}

fn slice(rng: &mut Rng, ns: &str, svc: &str) -> tideway_core::model::EndpointSlice {
    // Named after its Service, as the controller names slices; in two namespaces now and then
    // after another, so that a slice moves between Services and is found by a whole scan.
    let irregular = (ns == "ns-0" || ns == "ns-1") && rng.below(3) == 0;
    let owner = if irregular { format!("svc-{}", rng.below(SERVICES)) } else { svc.to_string() };
    let name = format!("{owner}-{}", rng.below(2));
    let mut s = mk_slice(ns, svc).name(&name).port("http", Tcp, 8080 + rng.below(2) as u16);
    // A slice holds one family: now and then IPv6, whose addresses the index keeps apart.
    let v6 = rng.below(4) == 0;
    for i in 0..rng.below(5) {
        let addr = if v6 {
            format!("fd00::{:x}:{}", rng.below(3), i + 1)
        } else {
            format!("10.{}.{}.{}", rng.below(3), rng.below(4), i + 1)
        };
        s = match rng.below(5) {
            0 => s.endpoint(&addr, "n", false, false, false).pod(&format!("p{i}")),
            1 => s.ready(&addr, "n").hostname(&format!("h{i}")),
            2 => s.ready(&addr, "n").pod(&format!("p{}", rng.below(4))),
            _ => s.ready(&addr, "n"),
        };
    }
    s.build()
}

fn pod(rng: &mut Rng, ns: &str) -> Pod {
    Pod {
        namespace: ns.into(),
        name: format!("p{}", rng.below(4)),
        ips: vec![format!("10.0.0.{}", rng.below(5) + 1).parse().unwrap()],
        hostname: Some(format!("host-{}", rng.below(3))),
        subdomain: Some(format!("svc-{}", rng.below(SERVICES))),
        node_name: None,
        labels: Default::default(),
    }
}

/// One random change.
fn step(view: &mut ClusterView, rng: &mut Rng) {
    let (ns, name) = names(rng);
    match rng.below(20) {
        0..=5 => view.apply_service(service(rng, &ns, &name)),
        6..=7 => view.delete_service(&ServiceName::new(&ns, &name)),
        8..=13 => view.apply_endpoint_slice(slice(rng, &ns, &name)),
        14..=15 => {
            let slice = format!("svc-{}-{}", rng.below(SERVICES), rng.below(2));
            view.delete_endpoint_slice(&ns, &slice);
        }
        16 => view.apply_pod(pod(rng, &ns)),
        17 => view.apply_namespace(NamespaceObject { name: ns, labels: Default::default() }),
        18 => view.delete_namespace(&ns),
        _ => {
            let dns = mk_service("kube-system", "kube-dns").port("dns", Udp, 53);
            match rng.below(2) {
                0 => view.apply_service(dns.cluster_ip(&format!("10.96.9.{}", rng.below(3) + 1)).build()),
                _ => view.delete_service(&ServiceName::new("kube-system", "kube-dns")),
            }
        }
    }
}

/// Everything the index answers with, by name: each Service's records, each namespace, each
/// address's PTR targets, the name servers and the serial.
fn read_back(ix: &RecordIndex) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut addresses = Vec::new();
    for part in &ix.parts {
        for rec in &part.services {
            let svc = super::super::Svc { ix, part, rec };
            let ports = |ports: &[super::super::Port]| -> Vec<String> {
                ports
                    .iter()
                    .map(|p| format!("{}/{:?}/{}", svc.part.text(p.name).escape_ascii(), p.protocol, p.port))
                    .collect()
            };
            let endpoints: Vec<String> = svc
                .endpoints()
                .iter()
                .map(|e| {
                    format!("{} {} {:?}", svc.host(e).escape_ascii(), svc.ip(e), ports(svc.endpoint_ports(e)))
                })
                .collect();
            addresses.extend(svc.endpoints().iter().map(|e| svc.ip(e)));
            addresses.extend(svc.cluster_ips().iter().chain(svc.external_ips()).copied());
            let line = format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                svc.external_name().map(ToString::to_string),
                svc.cluster_ips(),
                svc.external_ips(),
                ports(svc.ports()),
                endpoints,
                svc.spec_version(),
                std::mem::discriminant(&svc.kind()),
            );
            assert!(out.insert(svc.fqdn().to_string(), line).is_none(), "{} twice", svc.fqdn());
        }
    }
    for (ns, namespace) in ix.namespaces.iter() {
        out.insert(format!("namespace {}", ns.escape_ascii()), format!("{:?}", namespace.pod_ips));
    }
    addresses.push("10.255.0.1".parse().unwrap());
    for ip in addresses {
        let targets = ix.reverse(&ip).map(|t| t.iter().map(ToString::to_string).collect::<Vec<_>>());
        out.insert(format!("ptr {ip}"), format!("{targets:?}"));
    }
    out.insert("ns".into(), format!("{:?} {:?}", ix.ns_addrs, ix.external.as_ref().map(|e| &e.ns_addrs)));
    out.insert("soa".into(), format!("{:?} {}", ix.soa, ix.serial));
    out
}

/// Fails on the first name whose records differ (the whole maps are too large to print).
fn same(updated: &BTreeMap<String, String>, whole: &BTreeMap<String, String>, at: &str) {
    let names = updated.keys().chain(whole.keys());
    if let Some(name) = names.into_iter().find(|n| updated.get(*n) != whole.get(*n)) {
        panic!("{at}: {name}: updated {:?}, built whole {:?}", updated.get(name), whole.get(name));
    }
}

fn settings(rng: &mut Rng) -> IndexSettings {
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.pods = PodsMode::Verified;
    settings.external = Some(ExternalZone::new("example.org").unwrap());
    settings.endpoint_pod_names = rng.below(2) == 0;
    settings.fallback_ns_addrs = vec!["10.96.0.10".parse().unwrap()];
    settings
}

#[test]
fn an_index_updated_in_place_answers_as_one_built_whole() {
    let mut updates = 0;
    for seed in 1..=3u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let settings = settings(&mut rng);
        let mut view = ClusterView::new();
        for i in 0..SERVICES {
            let (ns, name) = (format!("ns-{}", i % NAMESPACES), format!("svc-{i}"));
            view.apply_service(service(&mut rng, &ns, &name));
            view.apply_endpoint_slice(slice(&mut rng, &ns, &name));
        }
        view.take_changes();
        let mut ix = RecordIndex::build_in_parts(&view, &settings, 1, PART_BITS);
        for at in 0..200u32 {
            step(&mut view, &mut rng);
            let serial = at + 2;
            ix = match view.take_changes().touched {
                Touched::Services(services) => match ix.updated(&view, &settings, serial, &services) {
                    Some(updated) => {
                        updates += 1;
                        updated
                    }
                    None => RecordIndex::build_in_parts(&view, &settings, serial, PART_BITS),
                },
                Touched::Everything => RecordIndex::build_in_parts(&view, &settings, serial, PART_BITS),
            };
            // Whole: one part, as a cluster this size is built.
            let whole = RecordIndex::build(&view, &settings, serial);
            assert_eq!(whole.part_count(), 1);
            same(&read_back(&ix), &read_back(&whole), &format!("seed {seed}, step {at}"));
        }
    }
    assert!(updates > 350, "most steps update in place ({updates} of 600)");
}

#[test]
fn one_service_changed_rebuilds_its_part_and_shares_the_others() {
    let mut rng = Rng(7);
    let settings = settings(&mut rng);
    let mut view = ClusterView::new();
    for i in 0..SERVICES {
        let (ns, name) = (format!("ns-{}", i % NAMESPACES), format!("svc-{i}"));
        view.apply_service(service(&mut rng, &ns, &name));
    }
    view.take_changes();
    let ix = RecordIndex::build_in_parts(&view, &settings, 1, PART_BITS);
    view.apply_service(mk_service("ns-3", "svc-8").cluster_ip("10.96.200.1").build());
    let Touched::Services(touched) = view.take_changes().touched else { panic!("one Service touched") };
    let updated = ix.updated(&view, &settings, 2, &touched).expect("updated in place");
    let shared = ix.parts.iter().zip(&updated.parts).filter(|(a, b)| std::sync::Arc::ptr_eq(a, b)).count();
    assert_eq!(shared, ix.part_count() - 1, "every part but the Service's is shared");
    assert_eq!(updated.service_count(), ix.service_count());
}
