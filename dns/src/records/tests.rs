//! The index's own layout: records, lookups and the reverse map.

use crate::view::ClusterView;
use tideway_core::cluster::Snapshot;
use tideway_core::testing::{mk_service, mk_slice};

use super::*;

fn index() -> RecordIndex {
    let services = ["a", "b"]
        .iter()
        .flat_map(|ns| ["web", "db", "cache"].map(|n| mk_service(ns, n).cluster_ip("10.96.0.1").build()))
        .collect();
    let state = ClusterView::from_snapshot(Snapshot { services, ..Default::default() });
    RecordIndex::build(&state, &IndexSettings::new("cluster.local").unwrap(), 1)
}

fn found(ix: &RecordIndex, ns: &str, name: &str) -> bool {
    ix.namespace(ns.as_bytes()).is_some()
        && ix
            .service(ns.as_bytes(), name.as_bytes())
            .is_some_and(|s| s.fqdn().to_string() == format!("{name}.{ns}.svc.cluster.local."))
}

#[test]
fn an_endpoint_record_is_twelve_bytes_and_reads_back_both_families() {
    assert_eq!(size_of::<EndpointRecord>(), 12);
    let mut state = ClusterView::new();
    state.apply_service(mk_service("ns", "web").headless().build());
    state.apply_endpoint_slice(mk_slice("ns", "web").ready("fd00::7", "n").hostname("Web-0").build());
    state.apply_endpoint_slice(mk_slice("ns", "web").name("web-v4").ready("10.0.0.7", "n").build());
    let ix = RecordIndex::build(&state, &IndexSettings::new("cluster.local").unwrap(), 1);
    let svc = ix.service(b"ns", b"web").unwrap();
    let got: Vec<(String, IpAddr)> = svc
        .endpoints()
        .iter()
        .map(|e| (String::from_utf8(svc.host(e).to_vec()).unwrap(), svc.ip(e)))
        .collect();
    let want = [("10-0-0-7", "10.0.0.7"), ("web-0", "fd00::7")];
    assert_eq!(got, want.map(|(h, ip)| (h.to_string(), ip.parse().unwrap())));
}

#[test]
fn an_endpoint_address_names_the_service_it_is_stored_under() {
    let mut state = ClusterView::new();
    // Services without endpoints before, between and after those with some.
    for (name, ips) in [
        ("a", vec![]),
        ("b", vec!["10.0.0.1", "10.0.0.2"]),
        ("c", vec![]),
        ("d", vec!["10.0.0.3"]),
        ("e", vec![]),
    ] {
        state.apply_service(mk_service("ns", name).headless().build());
        let slice = ips.iter().fold(mk_slice("ns", name), |s, ip| s.ready(ip, "n"));
        state.apply_endpoint_slice(slice.build());
    }
    let ix = RecordIndex::build(&state, &IndexSettings::new("cluster.local").unwrap(), 1);
    for (ip, name) in [("10.0.0.1", "10-0-0-1.b"), ("10.0.0.2", "10-0-0-2.b"), ("10.0.0.3", "10-0-0-3.d")] {
        let names = ix.reverse(&ip.parse().unwrap()).unwrap();
        assert_eq!(
            names.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [format!("{name}.ns.svc.cluster.local.")]
        );
    }
    assert!(ix.reverse(&"10.0.0.4".parse().unwrap()).is_none());
}

#[test]
fn services_are_found_by_hash_and_by_search_when_hashes_collide() {
    let mut ix = index();
    for ix in [ix.clone(), {
        // Every hash marked as shared: the namespace's sorted list is searched instead.
        for part in &mut ix.parts {
            Arc::make_mut(part).by_hash.values_mut().for_each(|v| *v = u32::MAX);
        }
        ix
    }] {
        for ns in ["a", "b"] {
            for name in ["web", "db", "cache"] {
                assert!(found(&ix, ns, name), "{name}.{ns}");
            }
            assert!(!found(&ix, ns, "nope"));
        }
        assert!(!found(&ix, "c", "web"));
    }
}
