//! TestInternalExternalMasquerade: 27 rows under four settings (kube-proxy's), and under two
//! interface detectors (ours), which must agree with kube-proxy's source-CIDR detector row for
//! row.

use std::collections::BTreeMap;

use tideway_core::cluster::ClusterState;
use tideway_core::config::DetectLocal;
use tideway_core::net::Protocol::Tcp;
use tideway_core::plan::NodeContext;
use tideway_core::testing::{mk_service, mk_slice};

use super::{CLIENT, Flow, NODE_IP, cluster, flow, node, run};

fn setup() -> ClusterState {
    let lb = |ns: &str, name: &str, cip: &str, node_port: u16, hc: u16, lb: &str| {
        mk_service(ns, name)
            .cluster_ip(cip)
            .port("p80", Tcp, 80)
            .node_port(node_port)
            .health_check_node_port(hc)
            .lb_ip(lb)
    };
    let services = vec![
        lb("ns1", "svc1", "172.30.0.41", 3001, 30001, "1.2.3.4").build(),
        lb("ns2", "svc2", "172.30.0.42", 3002, 30002, "5.6.7.8").etp_local().build(),
        lb("ns3", "svc3", "172.30.0.43", 3003, 30003, "9.10.11.12").itp_local().build(),
    ];
    let slice = |ns: &str, svc: &str, local: &str, remote: &str| {
        mk_slice(ns, svc).port("p80", Tcp, 80).ready(local, "test-node").ready(remote, "remote").build()
    };
    let slices = vec![
        slice("ns1", "svc1", "10.180.0.1", "10.180.1.1"),
        slice("ns2", "svc2", "10.180.0.2", "10.180.1.2"),
        slice("ns3", "svc3", "10.180.0.3", "10.180.1.3"),
    ];
    cluster(services, slices)
}

fn base_rows() -> Vec<Flow> {
    let (pod, svc1, svc2, svc3) = (
        "10.0.0.2",
        "10.180.0.1:80, 10.180.1.1:80",
        "10.180.0.2:80, 10.180.1.2:80",
        "10.180.0.3:80, 10.180.1.3:80",
    );
    vec![
        flow("pod to ClusterIP", pod, "172.30.0.41", 80, svc1, false),
        flow("pod to NodePort", pod, NODE_IP, 3001, svc1, true),
        flow("pod to LB", pod, "1.2.3.4", 80, svc1, true),
        flow("node to ClusterIP", NODE_IP, "172.30.0.41", 80, svc1, true),
        flow("node to NodePort", NODE_IP, NODE_IP, 3001, svc1, true),
        flow("node to LB", NODE_IP, "1.2.3.4", 80, svc1, true),
        flow("external to ClusterIP", CLIENT, "172.30.0.41", 80, svc1, true),
        flow("external to NodePort", CLIENT, NODE_IP, 3001, svc1, true),
        flow("external to LB", CLIENT, "1.2.3.4", 80, svc1, true),
        flow("pod to ClusterIP with eTP:Local", pod, "172.30.0.42", 80, svc2, false),
        flow("pod to NodePort with eTP:Local", pod, NODE_IP, 3002, svc2, false),
        flow("pod to LB with eTP:Local", pod, "5.6.7.8", 80, svc2, false),
        flow("node to ClusterIP with eTP:Local", NODE_IP, "172.30.0.42", 80, svc2, true),
        // kube-proxy's row sends this one to svc1's NodePort (3001), as written.
        flow("node to NodePort with eTP:Local", NODE_IP, NODE_IP, 3001, svc1, true),
        flow("node to LB with eTP:Local", NODE_IP, "5.6.7.8", 80, svc2, true),
        flow("external to ClusterIP with eTP:Local", CLIENT, "172.30.0.42", 80, svc2, true),
        flow("external to NodePort with eTP:Local", CLIENT, NODE_IP, 3002, "10.180.0.2:80", false),
        flow("external to LB with eTP:Local", CLIENT, "5.6.7.8", 80, "10.180.0.2:80", false),
        flow("pod to ClusterIP with iTP:Local", pod, "172.30.0.43", 80, "10.180.0.3:80", false),
        flow("pod to NodePort with iTP:Local", pod, NODE_IP, 3003, svc3, true),
        flow("pod to LB with iTP:Local", pod, "9.10.11.12", 80, svc3, true),
        flow("node to ClusterIP with iTP:Local", NODE_IP, "172.30.0.43", 80, "10.180.0.3:80", true),
        flow("node to NodePort with iTP:Local", NODE_IP, NODE_IP, 3003, svc3, true),
        flow("node to LB with iTP:Local", NODE_IP, "9.10.11.12", 80, svc3, true),
        flow("external to ClusterIP with iTP:Local", CLIENT, "172.30.0.43", 80, "10.180.0.3:80", true),
        flow("external to NodePort with iTP:Local", CLIENT, NODE_IP, 3003, svc3, true),
        flow("external to LB with iTP:Local", CLIENT, "9.10.11.12", 80, svc3, true),
    ]
}

/// A row's changed output or masquerade (kube-proxy's `packetFlowTestOverride`).
#[derive(Clone, Copy)]
struct Override {
    output: Option<&'static str>,
    masq: Option<bool>,
}

const MASQ: Override = Override { output: None, masq: Some(true) };
const NO_MASQ: Override = Override { output: None, masq: Some(false) };
const LOCAL_ONLY: Override = Override { output: Some("10.180.0.2:80"), masq: None };

/// The base rows with `overrides` applied; each override must name a row and change it.
fn rows_with(overrides: &[(&str, Override)]) -> Vec<Flow> {
    let mut rows = base_rows();
    let by_name: BTreeMap<&str, Override> = overrides.iter().copied().collect();
    for (name, o) in &by_name {
        let row = rows.iter_mut().find(|r| r.name == *name).unwrap_or_else(|| panic!("no row {name:?}"));
        let before = (row.output.clone(), row.masq);
        if let Some(output) = o.output {
            row.output = output.into();
        }
        if let Some(masq) = o.masq {
            row.masq = masq;
        }
        assert_ne!(before, (row.output.clone(), row.masq), "override of {name:?} changes nothing");
    }
    rows
}

fn masquerade_all_node(detector: bool) -> NodeContext {
    let mut n = node();
    n.settings.masquerade_all = true;
    if !detector {
        n.settings.cluster_cidrs.clear();
    }
    n
}

#[test]
fn internal_external_masquerade() {
    let c = setup();
    let no_detector_masq = [
        ("node to ClusterIP", NO_MASQ),
        ("node to ClusterIP with eTP:Local", NO_MASQ),
        ("node to ClusterIP with iTP:Local", NO_MASQ),
        ("external to ClusterIP", NO_MASQ),
        ("external to ClusterIP with eTP:Local", NO_MASQ),
        ("external to ClusterIP with iTP:Local", NO_MASQ),
    ];
    let no_short_circuit =
        [("pod to NodePort with eTP:Local", LOCAL_ONLY), ("pod to LB with eTP:Local", LOCAL_ONLY)];
    let pods_masqueraded = [
        ("pod to ClusterIP", MASQ),
        ("pod to ClusterIP with eTP:Local", MASQ),
        ("pod to ClusterIP with iTP:Local", MASQ),
    ];

    run("TestInternalExternalMasquerade / base", &c, &node(), &rows_with(&[]));

    let mut no_detector = node();
    no_detector.settings.cluster_cidrs.clear();
    let overrides: Vec<_> = no_detector_masq.iter().chain(&no_short_circuit).copied().collect();
    run("TestInternalExternalMasquerade / no LocalTrafficDetector", &c, &no_detector, &rows_with(&overrides));

    run(
        "TestInternalExternalMasquerade / masqueradeAll",
        &c,
        &masquerade_all_node(true),
        &rows_with(&pods_masqueraded),
    );

    let overrides: Vec<_> = pods_masqueraded.iter().chain(&no_short_circuit).copied().collect();
    run(
        "TestInternalExternalMasquerade / masqueradeAll, no LocalTrafficDetector",
        &c,
        &masquerade_all_node(false),
        &rows_with(&overrides),
    );
}

/// Ours: pods told apart by the interface their packets arrive on give kube-proxy's base rows,
/// with and without a cluster CIDR (an interface detector needs none).
#[test]
fn interface_detectors_agree_with_the_source_detector() {
    let c = setup();
    for detect in
        [DetectLocal::BridgeInterface("cbr0".into()), DetectLocal::InterfaceNamePrefix("veth".into())]
    {
        let mut n = node();
        n.settings.detect_local = detect.clone();
        run(&format!("TestInternalExternalMasquerade / {detect:?}"), &c, &n, &rows_with(&[]));
        n.settings.cluster_cidrs.clear();
        run(
            &format!("TestInternalExternalMasquerade / {detect:?}, no cluster CIDR"),
            &c,
            &n,
            &rows_with(&[]),
        );
    }
}
