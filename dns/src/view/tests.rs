//! The view against the cluster model: the same source events written into both through
//! [`Holds`] leave the view holding exactly the facts of the model's objects.

use k8s_openapi::api::core::v1::{Namespace as K8sNamespace, Pod as K8sPod, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use tideway_api::crd::NodeProxyState as K8sNodeState;
use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::{Namespace, NodeProxyState, Pod};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};
use tideway_sources::kube::{Holds, Kind};
use tideway_sources::{ObjectKey, Store};

use super::*;

use crate::walk::Rng;

fn namespace(i: u64) -> String {
    format!("ns-{}", i % 3)
}

fn service(rng: &mut Rng) -> tideway_core::model::Service {
    let (ns, name) = (namespace(rng.below(3)), format!("svc-{}", rng.below(4)));
    let svc = mk_service(&ns, &name).port("http", Tcp, 80 + rng.below(2) as u16);
    match rng.below(3) {
        0 => svc.headless().build(),
        1 => svc.cluster_ip(&format!("10.96.0.{}", rng.below(9) + 1)).build(),
        _ => {
            let mut svc = svc.headless().build();
            svc.publish_not_ready_addresses = true;
            svc
        }
    }
}

fn slice(rng: &mut Rng) -> tideway_core::model::EndpointSlice {
    let ns = namespace(rng.below(3));
    let svc = format!("svc-{}", rng.below(4));
    let mut s = mk_slice(&ns, &svc).name(&format!("slice-{}", rng.below(6))).port("http", Tcp, 8080);
    for i in 0..rng.below(4) {
        let addr = format!("10.0.{}.{}", rng.below(3), i + 1);
        s = match rng.below(4) {
            0 => s.endpoint(&addr, "n", false, false, false).pod(&format!("p{i}")),
            1 => s.ready(&addr, "n").hostname(&format!("h{i}")).pod(&format!("p{i}")),
            _ => s.ready(&addr, "n"),
        };
    }
    s.build()
}

fn pod(rng: &mut Rng) -> Pod {
    let i = rng.below(4);
    Pod {
        namespace: namespace(rng.below(3)),
        name: format!("p{i}"),
        ips: vec![format!("10.1.0.{}", rng.below(9) + 1).parse().unwrap()],
        hostname: (rng.below(2) == 0).then(|| format!("h{i}")),
        subdomain: (rng.below(2) == 0).then(|| format!("svc-{}", rng.below(4))),
        node_name: Some(format!("node-{}", rng.below(2))),
        labels: Default::default(),
    }
}

fn key(kind: &str, ns: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey::new(kind, ns, name)
}

/// One source event of a random kind, written into `s`.
fn step<S>(s: &mut S, rng: &mut Rng)
where
    S: Holds<K8sService> + Holds<K8sSlice> + Holds<K8sPod> + Holds<K8sNamespace> + Holds<K8sNodeState>,
{
    let kind = rng.below(5);
    let op = rng.below(8);
    match (kind, op) {
        (0, 0) => Holds::<K8sService>::delete(
            s,
            &key("Service", Some(&namespace(rng.below(3))), &format!("svc-{}", rng.below(4))),
        ),
        (0, 1) => {
            let all = (0..rng.below(4)).map(|_| service(rng)).collect();
            let keep = [key("Service", Some(&namespace(rng.below(3))), &format!("svc-{}", rng.below(4)))];
            Holds::<K8sService>::replace(s, dedup_services(all), &keep);
        }
        (0, _) => Holds::<K8sService>::apply(s, service(rng)),
        (1, 0) => Holds::<K8sSlice>::delete(
            s,
            &key("EndpointSlice", Some(&namespace(rng.below(3))), &format!("slice-{}", rng.below(6))),
        ),
        (1, 1) => {
            let all = (0..rng.below(4)).map(|_| slice(rng)).collect();
            let keep =
                [key("EndpointSlice", Some(&namespace(rng.below(3))), &format!("slice-{}", rng.below(6)))];
            Holds::<K8sSlice>::replace(s, dedup_slices(all), &keep);
        }
        (1, _) => Holds::<K8sSlice>::apply(s, slice(rng)),
        (2, 0) => Holds::<K8sPod>::delete(
            s,
            &key("Pod", Some(&namespace(rng.below(3))), &format!("p{}", rng.below(4))),
        ),
        (2, _) => Holds::<K8sPod>::apply(s, pod(rng)),
        (3, 0) => Holds::<K8sNamespace>::delete(s, &key("Namespace", None, &namespace(rng.below(4)))),
        (3, 1) => {
            let all = vec![Namespace { name: namespace(rng.below(3)), labels: Default::default() }];
            Holds::<K8sNamespace>::replace(s, all, &[key("Namespace", None, &namespace(rng.below(3)))]);
        }
        (3, _) => Holds::<K8sNamespace>::apply(
            s,
            Namespace { name: namespace(rng.below(4)), labels: Default::default() },
        ),
        (_, 0) => Holds::<K8sNodeState>::delete(
            s,
            &key(&K8sNodeState::watch_name(), None, &format!("node-{}", rng.below(2))),
        ),
        (_, _) => {
            let report = NodeProxyState {
                node: format!("node-{}", rng.below(2)),
                programmed_version: Some(rng.below(3)),
                ..Default::default()
            };
            Holds::<K8sNodeState>::apply(s, report);
        }
    }
}

/// A relist holds each object once: the last of a name wins.
fn dedup_services(all: Vec<tideway_core::model::Service>) -> Vec<tideway_core::model::Service> {
    let mut by: std::collections::BTreeMap<_, _> = Default::default();
    all.into_iter().for_each(|s| {
        by.insert(s.name.clone(), s);
    });
    by.into_values().collect()
}

fn dedup_slices(all: Vec<tideway_core::model::EndpointSlice>) -> Vec<tideway_core::model::EndpointSlice> {
    let mut by: std::collections::BTreeMap<_, _> = Default::default();
    all.into_iter().for_each(|s| {
        by.insert((s.namespace.clone(), s.name.clone()), s);
    });
    by.into_values().collect()
}

/// What the model holds of the kinds the DNS server reads.
fn facts_of(state: &ClusterState) -> ClusterView {
    ClusterView::from_snapshot(Snapshot {
        services: state.services().cloned().collect(),
        endpoint_slices: state.endpoint_slices().cloned().collect(),
        pods: state.pods().cloned().collect(),
        namespaces: state.namespaces().cloned().collect(),
        node_states: state.node_states().cloned().collect(),
        ..Default::default()
    })
}

#[test]
fn random_walks_leave_the_view_with_the_facts_of_the_model() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut state, mut view) = (ClusterState::new(), ClusterView::new());
        for at in 0..200 {
            let mut copy = Rng(rng.0);
            step(&mut state, &mut copy);
            step(&mut view, &mut rng);
            let want = facts_of(&state);
            assert_eq!(view.namespaces, want.namespaces, "seed {seed}, step {at}");
            assert_eq!(view.reports, want.reports, "seed {seed}, step {at}");
            assert_eq!(view.service_count(), state.service_count(), "seed {seed}, step {at}");
        }
    }
}

#[test]
fn changes_are_counted_only_when_facts_change() {
    let mut view = ClusterView::new();
    let svc = mk_service("ns", "web").cluster_ip("10.96.0.1").port("http", Tcp, 80).build();
    view.apply_service(svc.clone());
    assert!(view.take_changes().objects > 0);
    // A label or a field the records do not read changes nothing.
    let mut relabelled = svc.clone();
    relabelled.labels.insert("team".into(), "a".into());
    view.apply_service(relabelled);
    Holds::<K8sService>::replace(&mut view, vec![svc.clone()], &[]);
    assert!(!view.has_changes(), "{:?}", view.take_changes());
    Holds::<K8sService>::replace(&mut view, vec![], &[]);
    assert!(view.take_changes().objects > 0);
    assert_eq!(view.service_count(), 0);
}

#[test]
fn a_reset_keeps_the_objects_invalid_in_the_new_snapshot() {
    let mut view = ClusterView::new();
    view.apply_service(mk_service("ns", "web").cluster_ip("10.96.0.1").build());
    view.apply_service(mk_service("ns", "db").cluster_ip("10.96.0.2").build());
    let snapshot = Snapshot { services: vec![mk_service("ns", "api").build()], ..Default::default() };
    let keep = [tideway_api::manifest::ObjectRef {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: Some("ns".into()),
        name: "web".into(),
    }];
    view.reset_keeping(snapshot, &keep);
    let names: Vec<&str> = view.namespaces["ns"].services.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["api", "web"]);
    assert_eq!(view.service_count(), 2);
    assert!(view.has_changes());
}

#[test]
fn reloading_the_same_objects_changes_nothing_and_keeps_spec_versions() {
    let versioned = |version: u64, generation: i64| {
        let mut svc = mk_service("ns", "web").cluster_ip("10.96.0.1").build();
        svc.resource_version = Some(version);
        svc.generation = generation;
        svc
    };
    let snapshot = |svc| Snapshot {
        services: vec![svc],
        endpoint_slices: vec![mk_slice("ns", "web").ready("10.0.0.1", "n").build()],
        ..Default::default()
    };
    let mut view = ClusterView::from_snapshot(snapshot(versioned(10, 1)));
    view.take_changes();
    view.reset(snapshot(versioned(10, 1)));
    assert!(!view.has_changes(), "the same objects again");
    // A status-only write (same generation) keeps the spec version: no change for the records.
    view.reset(snapshot(versioned(12, 1)));
    assert!(!view.has_changes());
    assert_eq!(view.service("ns", "web").unwrap().read().spec_version, 10);
    view.reset(snapshot(versioned(15, 2)));
    assert!(view.take_changes().objects > 0);
    assert_eq!(view.service("ns", "web").unwrap().read().spec_version, 15);
}

#[test]
fn a_relist_that_keeps_an_invalid_object_changes_nothing_else() {
    let mut view = ClusterView::new();
    let web = mk_service("ns", "web").cluster_ip("10.96.0.1").build();
    let db = mk_service("ns", "db").cluster_ip("10.96.0.2").build();
    view.apply_service(web.clone());
    view.apply_service(db);
    view.take_changes();
    // `db` is invalid in the relist: it keeps its facts, and nothing changed.
    Holds::<K8sService>::replace(&mut view, vec![web], &[key("Service", Some("ns"), "db")]);
    assert!(!view.has_changes(), "{:?}", view.take_changes());
    assert_eq!(view.service_count(), 2);
}
