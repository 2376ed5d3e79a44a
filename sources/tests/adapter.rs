//! Watcher events fed straight into the Kubernetes adapter: what lands in the cluster state,
//! which changes the planner sees, and what happens to invalid objects.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;
use serde_json::json;
use tideway_core::model::ServiceName;
use tideway_sources::SharedCluster;
use tideway_sources::kube::{KindAdapter, Outcome};

fn svc(name: &str, ip: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "generation": 2},
        "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}))
    .expect("service")
}

fn slice(name: &str, svc: Option<&str>, address_type: &str, ip: &str) -> EndpointSlice {
    let labels = svc.map(|s| json!({"kubernetes.io/service-name": s})).unwrap_or(json!({}));
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "labels": labels},
        "addressType": address_type, "endpoints": [{"addresses": [ip]}], "ports": [{"port": 8080}]}))
    .expect("slice")
}

fn changed(cluster: &SharedCluster) -> BTreeSet<String> {
    cluster.lock().take_changes().services.into_iter().map(|s| s.name).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_list_lands_at_init_done_and_later_events_change_one_object_each() {
    let cluster = SharedCluster::new();
    let mut a = KindAdapter::<Service>::new(cluster.clone());
    assert_eq!(a.handle(Event::Init), Outcome::Listing);
    assert_eq!(a.handle(Event::InitApply(svc("a", "10.96.0.1"))), Outcome::Listing);
    a.handle(Event::InitApply(svc("b", "10.96.0.2")));
    assert_eq!(cluster.lock().service_count(), 0, "nothing is visible before the list completes");
    assert_eq!(a.handle(Event::InitDone), Outcome::Listed { first: true });
    assert_eq!(changed(&cluster), set(&["a", "b"]));
    let a_svc = cluster.lock().service(&ServiceName::new("ns", "a")).cloned().unwrap();
    assert_eq!(a_svc.generation, 2);

    assert_eq!(a.handle(Event::Apply(svc("a", "10.96.0.9"))), Outcome::Changed);
    assert_eq!(changed(&cluster), set(&["a"]));
    a.handle(Event::Apply(svc("a", "10.96.0.9")));
    assert!(changed(&cluster).is_empty(), "a no-op update is dropped");
    a.handle(Event::Delete(svc("b", "10.96.0.2")));
    assert_eq!(changed(&cluster), set(&["b"]));
    assert_eq!(cluster.lock().service_count(), 1);
}

#[test]
fn a_relist_replaces_the_kind_with_only_its_differences() {
    let cluster = SharedCluster::new();
    let mut a = KindAdapter::<Service>::new(cluster.clone());
    for e in [
        Event::Init,
        Event::InitApply(svc("a", "10.96.0.1")),
        Event::InitApply(svc("b", "10.96.0.2")),
        Event::InitDone,
    ] {
        a.handle(e);
    }
    changed(&cluster);
    // After a 410 Gone: the same "a", a changed "b", no "c" yet, then "c".
    a.handle(Event::Init);
    a.handle(Event::InitApply(svc("a", "10.96.0.1")));
    a.handle(Event::InitApply(svc("c", "10.96.0.3")));
    assert_eq!(cluster.lock().service_count(), 2, "the old state serves during the relist");
    assert_eq!(a.handle(Event::InitDone), Outcome::Listed { first: false });
    assert_eq!(changed(&cluster), set(&["b", "c"]), "a is untouched");
}

#[test]
fn an_invalid_update_keeps_the_last_valid_version_even_across_a_relist() {
    let cluster = SharedCluster::new();
    let mut a = KindAdapter::<Service>::new(cluster.clone());
    for e in [Event::Init, Event::InitApply(svc("a", "10.96.0.1")), Event::InitDone] {
        a.handle(e);
    }
    changed(&cluster);
    assert_eq!(a.handle(Event::Apply(svc("a", "10.96.0.300"))), Outcome::Invalid);
    assert!(changed(&cluster).is_empty());
    assert_eq!(
        cluster.lock().service(&ServiceName::new("ns", "a")).unwrap().cluster_ips[0].to_string(),
        "10.96.0.1"
    );
    let errors = cluster.errors();
    assert!(errors[0].contains("Service ns/a") && errors[0].contains("10.96.0.300"), "{errors:?}");
    // Still invalid in the relist: still kept, still reported.
    for e in [Event::Init, Event::InitApply(svc("a", "10.96.0.300")), Event::InitDone] {
        a.handle(e);
    }
    assert!(changed(&cluster).is_empty());
    assert_eq!(cluster.errors().len(), 1);
    // Fixed: applied, and no longer reported.
    a.handle(Event::Apply(svc("a", "10.96.0.5")));
    assert_eq!(changed(&cluster), set(&["a"]));
    assert!(cluster.errors().is_empty());
    // Deleted while invalid: gone, not reported.
    a.handle(Event::Apply(svc("a", "bad")));
    a.handle(Event::Delete(svc("a", "bad")));
    assert_eq!(cluster.lock().service_count(), 0);
    assert!(cluster.errors().is_empty());
}

#[test]
fn slices_the_model_ignores_remove_their_previous_version() {
    let cluster = SharedCluster::new();
    let mut a = KindAdapter::<EndpointSlice>::new(cluster.clone());
    for e in [
        Event::Init,
        Event::InitApply(slice("web-1", Some("web"), "IPv4", "10.244.1.5")),
        Event::InitApply(slice("fqdn", Some("web"), "FQDN", "example.com")),
        Event::InitApply(slice("orphan", None, "IPv4", "10.244.1.6")),
        Event::InitDone,
    ] {
        a.handle(e);
    }
    assert_eq!(cluster.lock().endpoint_slices().count(), 1, "FQDN and orphan slices are not kept");
    assert_eq!(changed(&cluster), set(&["web"]));
    // The slice loses its Service label: it is no longer the Service's.
    a.handle(Event::Apply(slice("web-1", None, "IPv4", "10.244.1.5")));
    assert_eq!(cluster.lock().endpoint_slices().count(), 0);
    assert_eq!(changed(&cluster), set(&["web"]));
}
