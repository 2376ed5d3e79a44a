//! The control plane over the built-in demo.

use super::*;

fn demo() -> LabSpec {
    LabSpec::parse("demo.yaml", include_str!("../../../examples/demo.yaml")).expect("the demo parses")
}

fn objects<'a>(w: &'a World, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    w.objects.iter().filter(move |o| o["kind"] == kind)
}

#[test]
fn the_demo_becomes_a_cluster() {
    let (plan, mut alloc) = (Plan::default(), Allocations::default());
    let w = build(&demo(), &plan, &mut alloc, &Health::default()).expect("builds");
    let nodes: Vec<(String, String)> = w.nodes.iter().map(|n| (n.name.clone(), n.ip.to_string())).collect();
    assert_eq!(nodes[0], ("myk8s-control-plane".into(), "172.18.0.2".into()));
    assert_eq!(nodes[3], ("myk8s-worker3".into(), "172.18.0.3".into()));
    let dns = w.pods.iter().find(|p| p.is_dns()).expect("the cluster DNS pod");
    assert_eq!((dns.node.as_str(), dns.ip.to_string()), ("myk8s-control-plane", "10.10.0.2".to_string()));
    let web1 = w.pods.iter().find(|p| p.name == "webpod1").unwrap();
    assert_eq!(web1.ip.to_string(), "10.10.1.2", "myk8s-worker is node 1: 10.10.1.0/24");
    let kube_dns = w.services.iter().find(|s| s.metadata.name.as_deref() == Some("kube-dns")).unwrap();
    assert_eq!(kube_dns.spec.as_ref().unwrap().cluster_ip.as_deref(), Some("10.200.1.10"));
    let svc1 =
        w.services.iter().find(|s| s.metadata.name.as_deref() == Some("svc1")).unwrap().spec.clone().unwrap();
    assert_eq!(svc1.cluster_ip.as_deref(), Some("10.200.1.2"));
    assert_eq!(svc1.ports.unwrap()[0].node_port, Some(30000));
    let slice = objects(&w, "EndpointSlice")
        .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "svc1")
        .unwrap();
    assert_eq!(slice["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(slice["ports"][0]["port"], 80);
    let pc = objects(&w, "ProxyConfig").next().unwrap();
    assert_eq!(
        (pc["spec"]["mode"].as_str(), pc["metadata"]["generation"].as_i64()),
        (Some("iptables"), Some(1))
    );
    let ns: Vec<&str> = objects(&w, "Namespace").filter_map(|n| n["metadata"]["name"].as_str()).collect();
    assert_eq!(ns, vec!["default", "kube-system"]);
}

#[test]
fn reapplying_keeps_allocations_and_bumps_changed_generations() {
    let (plan, mut alloc) = (Plan::default(), Allocations::default());
    let spec = demo();
    let first = build(&spec, &plan, &mut alloc, &Health::default()).unwrap();
    let mut changed = spec.clone();
    changed.proxy_configs[0].spec.mode = Some("nftables".into());
    changed.pods.retain(|p| p.metadata.name.as_deref() != Some("webpod1"));
    let down = Health { nodes_down: ["myk8s-worker3".to_string()].into(), ..Default::default() };
    let second = build(&changed, &plan, &mut alloc, &down).unwrap();
    let ips = |w: &World| {
        w.services.iter().map(|s| s.spec.as_ref().unwrap().cluster_ip.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ips(&first), ips(&second), "ClusterIPs are kept");
    let pc = objects(&second, "ProxyConfig").next().unwrap();
    assert_eq!(pc["metadata"]["generation"], 2);
    let slice = objects(&second, "EndpointSlice")
        .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "svc1")
        .unwrap();
    assert_eq!(slice["endpoints"].as_array().unwrap().len(), 1, "webpod1 is gone");
    let w3 = objects(&second, "Node").find(|n| n["metadata"]["name"] == "myk8s-worker3").unwrap();
    assert_eq!(w3["status"]["conditions"][0]["status"], "False", "its agent is down");
}

#[test]
fn conflicts_are_errors() {
    let (plan, mut alloc) = (Plan::default(), Allocations::default());
    let mut spec = demo();
    let mut svc = spec.services[0].clone();
    svc.metadata.name = Some("clash".into());
    svc.spec.as_mut().unwrap().cluster_ip = Some("10.200.1.10".into());
    spec.services.push(svc);
    assert_eq!(
        build(&spec, &plan, &mut alloc, &Health::default()).unwrap_err(),
        ControlError::Taken("ClusterIP 10.200.1.10".into())
    );
}

#[test]
fn pods_are_ready_once_their_servers_listen() {
    let (plan, mut alloc) = (Plan::default(), Allocations::default());
    let ready = |w: &World| {
        let slice = objects(w, "EndpointSlice")
            .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "svc1")
            .unwrap()
            .clone();
        slice["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["conditions"]["ready"] == true)
            .collect::<Vec<_>>()
    };
    let starting = build(&demo(), &plan, &mut alloc, &Health::default()).unwrap();
    assert_eq!(ready(&starting), [false, false], "listed, not ready");
    assert!(starting.pods.iter().find(|p| p.is_dns()).unwrap().ready, "the DNS pod is ready at once");
    assert_eq!(starting.ready_endpoints[&("default".to_string(), "svc1".to_string())], 0);
    let one = Health {
        pods_started: [("default".to_string(), "webpod1".to_string())].into(),
        ..Default::default()
    };
    let started = build(&demo(), &plan, &mut alloc, &one).unwrap();
    assert_eq!(ready(&started), [true, false]);
    assert_eq!(started.ready_endpoints[&("default".to_string(), "svc1".to_string())], 1);
    // A pod declared not ready stays so, started or not.
    let mut spec = demo();
    let web1 = spec.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some("webpod1")).unwrap();
    web1.status =
        Some(serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "False"}]})).unwrap());
    assert_eq!(ready(&build(&spec, &plan, &mut alloc, &one).unwrap()), [false, false]);
}

#[test]
fn endpoint_slices_carry_the_time_their_endpoints_last_changed() {
    use std::time::{Duration, SystemTime};
    let trigger = |w: &World| {
        objects(w, "EndpointSlice")
            .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "svc1")
            .map(|s| s["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"].clone())
            .unwrap()
    };
    let (plan, spec) = (Plan::default(), demo());
    let mut alloc = Allocations::default();
    let started = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_428_000 + secs);
    let all_started = || Health {
        nodes_down: Default::default(),
        pods_started: spec
            .pods
            .iter()
            .map(|p| (namespace(&p.metadata), p.metadata.name.clone().unwrap()))
            .collect(),
    };
    alloc.set_clock(started(0));
    let w = build(&spec, &plan, &mut alloc, &Health::default()).unwrap();
    assert_eq!(trigger(&w), "2026-11-23T10:00:00Z");
    // Nothing changed: the time stays.
    alloc.set_clock(started(5));
    assert_eq!(
        trigger(&build(&spec, &plan, &mut alloc, &Health::default()).unwrap()),
        "2026-11-23T10:00:00Z"
    );
    // The pods became ready: the endpoints changed at the new time.
    alloc.set_clock(started(9));
    assert_eq!(trigger(&build(&spec, &plan, &mut alloc, &all_started()).unwrap()), "2026-11-23T10:00:09Z");
    // Without a clock (a pure build), no annotation.
    let w = build(&spec, &plan, &mut Allocations::default(), &Health::default()).unwrap();
    assert!(trigger(&w).is_null());
}

#[test]
fn declared_taints_and_conditions_reach_the_node() {
    let (plan, mut alloc) = (Plan::default(), Allocations::default());
    let mut spec = demo();
    let worker = spec.nodes.iter_mut().find(|n| n.metadata.name.as_deref() == Some("myk8s-worker")).unwrap();
    worker.spec = Some(
        serde_json::from_value(
            json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}),
        )
        .unwrap(),
    );
    let conditions =
        json!([{"type": "NetworkUnavailable", "status": "True"}, {"type": "Ready", "status": "False"}]);
    worker.status.get_or_insert_default().conditions = Some(serde_json::from_value(conditions).unwrap());
    let w = build(&spec, &plan, &mut alloc, &Health::default()).unwrap();
    let node = |name: &str| {
        let v = objects(&w, "Node").find(|n| n["metadata"]["name"] == name).unwrap().clone();
        tideway_api::convert::node(&serde_json::from_value(v).unwrap()).unwrap()
    };
    let worker = node("myk8s-worker");
    assert!(worker.to_be_deleted() && worker.network_unavailable);
    assert!(worker.ready, "Ready is the lab's to say, not the spec's");
    let other = node("myk8s-worker2");
    assert!(!other.to_be_deleted() && !other.network_unavailable && other.ready);
}
