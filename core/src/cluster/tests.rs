//! ClusterState: change tracking, the slice index, relists.

use super::*;
use crate::model::{Endpoint, EndpointSlice, Service, ServiceName};
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
    assert!(state.apply(svc("a")));
    assert_eq!(state.take_changes().services.len(), 1);
    assert!(!state.apply(svc("a")));
    assert!(state.take_changes().is_empty());
}

#[test]
fn slices_mark_their_service_and_move_between_services() {
    let mut state = ClusterState::new();
    state.apply(slice("a-1", "a", "10.0.0.1"));
    state.apply(slice("a-2", "a", "10.0.0.2"));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 2);
    state.take_changes();
    // Relabelled to another Service: both are marked.
    state.apply(slice("a-2", "b", "10.0.0.2"));
    let changed = state.take_changes().services;
    assert!(changed.contains(&ServiceName::new("ns", "a")) && changed.contains(&ServiceName::new("ns", "b")));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 1);
    assert!(state.delete::<EndpointSlice>("ns", "a-1"));
    assert_eq!(state.endpoint_slices_for(&ServiceName::new("ns", "a")).count(), 0);
}

#[test]
fn services_with_slices_walks_what_per_service_lookups_find() {
    let mut state = ClusterState::new();
    let mut in_ns = |ns: &str, svc_name: &str, slice_name: &str| {
        let mut s = slice(slice_name, svc_name, "10.0.0.1");
        s.namespace = ns.into();
        state.apply(s);
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
        state.apply(Service::new(ServiceName::new(name.0, name.1)));
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

/// One object of every kind a snapshot holds.
fn one_of_each() -> Snapshot {
    use crate::config::{ProxyConfig, ProxySettings};
    use crate::model::bgp::BgpPeer;
    use crate::model::{
        L2Advertisement, L2Announcement, L2Settings, LoadBalancerPool, MetalLbPool, Namespace,
        NodeProxyState, Pod, PoolOrigin, ServiceCidr, ServiceL2Status,
    };
    use crate::testing::{mk_node, net};
    let pool = |name: &str| crate::model::Pool::new(name, &["192.168.10.0/24"]);
    Snapshot {
        services: vec![svc("web")],
        endpoint_slices: vec![slice("web-1", "web", "10.0.0.1")],
        nodes: vec![mk_node("node-a", "172.18.0.2", "z")],
        pods: vec![Pod {
            namespace: "ns".into(),
            name: "web-0".into(),
            ips: vec!["10.0.0.1".parse().unwrap()],
            hostname: None,
            subdomain: None,
            node_name: None,
            labels: Default::default(),
        }],
        proxy_configs: vec![ProxyConfig::every_node("default", 1, ProxySettings::default())],
        namespaces: vec![Namespace { name: "ns".into(), labels: Default::default() }],
        node_states: vec![NodeProxyState { node: "node-a".into(), ..Default::default() }],
        announcements: vec![L2Announcement {
            service: ServiceName::new("ns", "web"),
            ips: vec![],
            node: None,
            eligible: vec![],
            interfaces: vec![],
        }],
        pools: vec![LoadBalancerPool {
            pool: pool("mine"),
            l2: L2Settings::default(),
            generation: 1,
            origin: PoolOrigin::Tideway,
        }],
        metallb_pools: vec![MetalLbPool {
            namespace: "metallb-system".into(),
            labels: Default::default(),
            pool: pool("theirs"),
            generation: 1,
        }],
        l2_advertisements: vec![L2Advertisement {
            namespace: "metallb-system".into(),
            name: "ad".into(),
            ..Default::default()
        }],
        service_l2_statuses: vec![ServiceL2Status {
            namespace: "metallb-system".into(),
            name: "l2-c54z5".into(),
            service: ServiceName::new("ns", "web"),
            node: "node-a".into(),
        }],
        service_cidrs: vec![ServiceCidr { name: "kubernetes".into(), cidrs: vec![net("10.96.0.0/16")] }],
        bgp: vec![BgpObject::tideway(
            "peer",
            BgpSpec::Peer(BgpPeer::new("peer", 64512, 64513, "172.30.0.1".parse().unwrap())),
        )],
        bgp_secrets: vec![BgpSecret { name: "peer-password".into(), password: "x".into() }],
        // The kinds kept by type: their own test is below.
        extra: Default::default(),
    }
}

/// Every object the state holds, read back through the registry.
fn read_back(state: &ClusterState) -> Snapshot {
    struct Read<'a>(&'a ClusterState, Snapshot);
    impl KindVisitor for Read<'_> {
        fn visit<K: StateKind>(&mut self) {
            K::listed(&mut self.1).extend(K::held(self.0).cloned());
        }
    }
    let mut read = Read(state, Snapshot::default());
    for_each_kind(&mut read);
    read.1
}

/// The registry lists every kind a snapshot holds: a kind missing from it would not be read
/// back, relisted or carried over. Objects named kept survive a relist without them (each
/// under its own kind's name), the others go.
#[test]
fn the_registry_lists_every_kind_and_carries_over_the_kept() {
    let all = one_of_each();
    let mut state = ClusterState::from_snapshot(all.clone());
    assert_eq!(format!("{:?}", read_back(&state)), format!("{all:?}"));
    state.take_changes();
    state.reset_keeping(Snapshot::default(), &|_, _, _| true);
    assert!(!state.has_changes(), "everything kept: {:?}", state.changes());
    assert_eq!(format!("{:?}", read_back(&state)), format!("{all:?}"));
    let kept = |kind: &str, ns: Option<&str>, name: &str| match kind {
        "Service" => ns == Some("ns") && name == "web",
        "BGPPeer" => ns.is_none() && name == "peer",
        _ => false,
    };
    state.reset_keeping(Snapshot::default(), &kept);
    let left = read_back(&state);
    assert_eq!((left.services, left.bgp), (all.services, all.bgp));
    assert!(left.nodes.is_empty() && left.endpoint_slices.is_empty() && left.bgp_secrets.is_empty());
    state.reset(Snapshot::default());
    assert_eq!(format!("{:?}", read_back(&state)), format!("{:?}", Snapshot::default()));
}

/// A kind defined here, outside the registry's list, with [`extra_kind!`](crate::extra_kind)
/// and nothing else: applied, read, deleted, relisted and carried over like the listed kinds,
/// its changes marked under its name.
#[derive(Debug, Clone, PartialEq)]
struct Widget {
    namespace: String,
    name: String,
    size: u32,
}

crate::extra_kind!(Widget, "Widget", namespace: namespace, name: name);

fn widget(name: &str, size: u32) -> Widget {
    Widget { namespace: "ns".into(), name: name.into(), size }
}

#[test]
fn a_kind_defined_outside_the_registry_is_kept_relisted_and_carried_over() {
    let mut state = ClusterState::new();
    assert!(state.apply(widget("a", 1)));
    assert!(!state.apply(widget("a", 1)), "no change, none marked");
    assert_eq!(state.take_changes().extra, ["Widget"].into());
    assert_eq!(state.get::<Widget>("ns", "a"), Some(&widget("a", 1)));
    assert!(state.delete::<Widget>("ns", "a") && !state.delete::<Widget>("ns", "a"));
    assert!(state.take_changes().extra.contains("Widget"));

    let mut snapshot = Snapshot { services: vec![svc("web")], ..Default::default() };
    Widget::listed(&mut snapshot).extend([widget("a", 1), widget("b", 2)]);
    state.reset(snapshot.clone());
    assert_eq!(Widget::held(&state).count(), 2);
    state.take_changes();
    state.reset(snapshot);
    assert!(!state.has_changes(), "the same relist: {:?}", state.changes());

    // An invalid new version of b keeps b's current one; a goes; a relist without the kind
    // empties it.
    let kept = |kind: &str, ns: Option<&str>, name: &str| kind == "Widget" && ns == Some("ns") && name == "b";
    state.reset_keeping(Snapshot::default(), &kept);
    assert_eq!(Widget::held(&state).cloned().collect::<Vec<_>>(), [widget("b", 2)]);
    assert!(state.take_changes().extra.contains("Widget"));
    state.reset(Snapshot::default());
    assert_eq!(Widget::held(&state).count(), 0);
    assert!(state.changes().extra.contains("Widget"));
}
