//! ClusterState: change tracking, the slice index, relists.

use super::*;
use crate::model::Endpoint;
use crate::net::IpFamily;

fn svc(name: &str) -> Service {
    Service::new(ServiceName::new("ns", name))
}

fn slice(name: &str, svc: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        namespace: "ns".into(),
        name: name.into(),
        service: svc.into(),
        family: IpFamily::V4,
        ports: vec![],
        endpoints: vec![Endpoint::ready(ip.parse().unwrap())],
        labels: Default::default(),
        trigger_time: None,
    }
}

#[test]
fn no_op_updates_are_dropped() {
    let mut state = ClusterState::new();
    assert!(state.apply_service(svc("a")));
    assert_eq!(state.take_changes().services.len(), 1);
    assert!(!state.apply_service(svc("a")));
    assert!(state.take_changes().is_empty());
}

#[test]
fn slices_mark_their_service_and_move_between_services() {
    let mut state = ClusterState::new();
    state.apply_endpoint_slice(slice("a-1", "a", "10.0.0.1"));
    state.apply_endpoint_slice(slice("a-2", "a", "10.0.0.2"));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 2);
    state.take_changes();
    // Relabelled to another Service: both are marked.
    state.apply_endpoint_slice(slice("a-2", "b", "10.0.0.2"));
    let changed = state.take_changes().services;
    assert!(changed.contains(&ServiceName::new("ns", "a")) && changed.contains(&ServiceName::new("ns", "b")));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 1);
    assert!(state.delete_endpoint_slice("ns", "a-1"));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 0);
}

#[test]
fn services_with_slices_walks_what_per_service_lookups_find() {
    let mut state = ClusterState::new();
    let mut in_ns = |ns: &str, svc_name: &str, slice_name: &str| {
        let mut s = slice(slice_name, svc_name, "10.0.0.1");
        s.namespace = ns.into();
        state.apply_endpoint_slice(s);
    };
    // Slices without a Service before, between and after the Services; a Service without
    // slices; Services of several namespaces, one namespace without slices.
    in_ns("a", "orphan", "orphan-1");
    in_ns("ns", "b", "b-2");
    in_ns("ns", "b", "b-1");
    in_ns("ns", "c", "c-1");
    in_ns("ns", "zz", "zz-1");
    in_ns("other", "b", "other-b");
    for name in [("ns", "a"), ("ns", "b"), ("ns", "d"), ("other", "b"), ("quiet", "x")] {
        state.apply_service(Service::new(ServiceName::new(name.0, name.1)));
    }
    let walked: Vec<(String, Vec<String>)> = state
        .services_with_slices()
        .map(|(svc, slices)| (svc.name.to_string(), slices.map(|s| s.name.clone()).collect()))
        .collect();
    let looked_up: Vec<(String, Vec<String>)> = state
        .services()
        .map(|svc| {
            (svc.name.to_string(), state.endpoint_slices_for(&svc.name).map(|s| s.name.clone()).collect())
        })
        .collect();
    assert_eq!(walked, looked_up);
    assert_eq!(walked[1], ("ns/b".to_string(), vec!["b-1".to_string(), "b-2".to_string()]));
    assert_eq!(walked[3], ("other/b".to_string(), vec!["other-b".to_string()]));
}

#[test]
fn reset_records_only_differences() {
    let mut state =
        ClusterState::from_snapshot(Snapshot { services: vec![svc("a"), svc("b")], ..Default::default() });
    state.take_changes();
    state.reset(Snapshot { services: vec![svc("a"), svc("c")], ..Default::default() });
    let changed: Vec<String> = state.take_changes().services.into_iter().map(|s| s.name).collect();
    assert_eq!(changed, vec!["b".to_string(), "c".to_string()]);
}
