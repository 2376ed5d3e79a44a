//! TestExternalTrafficPolicyLocal / Cluster, TestInternalTrafficPolicy and
//! TestTerminatingEndpointsTrafficPolicyLocal / Cluster.

use tideway_core::model::{EndpointSlice, Service};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};

use super::{CLIENT, Flow, NODE_IP, cluster, flow, node, run};

fn external_policy_service(local: bool) -> (Service, EndpointSlice) {
    let mut svc = mk_service("ns1", "svc1")
        .cluster_ip("172.30.0.41")
        .external_ip("192.168.99.11")
        .port("p80", Tcp, 80)
        .node_port(3001)
        .lb_ip("1.2.3.4");
    if local {
        svc = svc.etp_local().health_check_node_port(30000);
    }
    let slice = mk_slice("ns1", "svc1")
        .port("p80", Tcp, 80)
        .ready("10.180.0.1", "node2")
        .ready("10.180.2.1", "test-node")
        .build();
    (svc.build(), slice)
}

#[test]
fn external_traffic_policy_local() {
    let (svc, slice) = external_policy_service(true);
    let c = cluster(vec![svc], vec![slice]);
    let both = "10.180.0.1:80, 10.180.2.1:80";
    let local = "10.180.2.1:80";
    let rows = [
        flow(
            "pod to cluster IP hits both endpoints, unmasqueraded",
            "10.0.0.2",
            "172.30.0.41",
            80,
            both,
            false,
        ),
        flow(
            "pod to external IP hits both endpoints, unmasqueraded",
            "10.0.0.2",
            "192.168.99.11",
            80,
            both,
            false,
        ),
        flow(
            "external to external IP hits only local endpoint, unmasqueraded",
            CLIENT,
            "192.168.99.11",
            80,
            local,
            false,
        ),
        flow("pod to LB IP hits only both endpoints, unmasqueraded", "10.0.0.2", "1.2.3.4", 80, both, false),
        flow(
            "external to LB IP hits only local endpoint, unmasqueraded",
            CLIENT,
            "1.2.3.4",
            80,
            local,
            false,
        ),
        flow("pod to NodePort hits both endpoints, unmasqueraded", "10.0.0.2", NODE_IP, 3001, both, false),
        flow(
            "external to NodePort hits only local endpoint, unmasqueraded",
            CLIENT,
            NODE_IP,
            3001,
            local,
            false,
        ),
    ];
    run("TestExternalTrafficPolicyLocal", &c, &node(), &rows);
}

#[test]
fn external_traffic_policy_cluster() {
    let (svc, slice) = external_policy_service(false);
    let c = cluster(vec![svc], vec![slice]);
    let both = "10.180.0.1:80, 10.180.2.1:80";
    let rows = [
        flow(
            "pod to cluster IP hits both endpoints, unmasqueraded",
            "10.0.0.2",
            "172.30.0.41",
            80,
            both,
            false,
        ),
        flow(
            "pod to external IP hits both endpoints, masqueraded",
            "10.0.0.2",
            "192.168.99.11",
            80,
            both,
            true,
        ),
        flow(
            "external to external IP hits both endpoints, masqueraded",
            CLIENT,
            "192.168.99.11",
            80,
            both,
            true,
        ),
        flow("pod to LB IP hits both endpoints, masqueraded", "10.0.0.2", "1.2.3.4", 80, both, true),
        flow("external to LB IP hits both endpoints, masqueraded", CLIENT, "1.2.3.4", 80, both, true),
        flow("pod to NodePort hits both endpoints, masqueraded", "10.0.0.2", NODE_IP, 3001, both, true),
        flow("external to NodePort hits both endpoints, masqueraded", CLIENT, NODE_IP, 3001, both, true),
    ];
    run("TestExternalTrafficPolicyCluster", &c, &node(), &rows);
}

/// Runs `rows`, then deletes the slice and runs the rows kube-proxy expects after that.
fn with_and_without_slice(test: &str, svc: Service, slice: EndpointSlice, rows: &[Flow], after: &[Flow]) {
    let (ns, name) = (slice.namespace.clone(), slice.name.clone());
    let mut c = cluster(vec![svc], vec![slice]);
    run(test, &c, &node(), rows);
    c.delete::<EndpointSlice>(&ns, &name);
    run(&format!("{test}, after the endpoints are deleted"), &c, &node(), after);
}

/// A subtest of TestInternalTrafficPolicy: name, iTP Local, endpoints (address, node), output.
type ItpCase = (&'static str, bool, [(&'static str, &'static str); 3], &'static str);

#[test]
fn internal_traffic_policy() {
    let cases: [ItpCase; 4] = [
        (
            "internalTrafficPolicy is cluster",
            false,
            [("10.0.1.1", "test-node"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
            "10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80",
        ),
        (
            "internalTrafficPolicy is local and there is one local endpoint",
            true,
            [("10.0.1.1", "test-node"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
            "10.0.1.1:80",
        ),
        (
            "internalTrafficPolicy is local and there are multiple local endpoints",
            true,
            [("10.0.1.1", "test-node"), ("10.0.1.2", "test-node"), ("10.0.1.3", "node2")],
            "10.0.1.1:80, 10.0.1.2:80",
        ),
        (
            "internalTrafficPolicy is local and there are no local endpoints",
            true,
            [("10.0.1.1", "node0"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
            "DROP",
        ),
    ];
    for (name, local, endpoints, output) in cases {
        let mut svc = mk_service("ns1", "svc1").cluster_ip("172.30.1.1").port("", Tcp, 80);
        if local {
            svc = svc.itp_local();
        }
        let mut slice = mk_slice("ns1", "svc1").port("", Tcp, 80);
        for (addr, node) in endpoints {
            slice = slice.ready(addr, node);
        }
        let row = flow("pod to ClusterIP", "10.0.0.2", "172.30.1.1", 80, output, false);
        let deleted = flow("endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT", false);
        with_and_without_slice(name, svc.build(), slice.build(), &[row], &[deleted]);
    }
}

/// An endpoint: address, ready, serving, terminating, node.
type Ep = (&'static str, bool, bool, bool, &'static str);

/// A subtest of the terminating-endpoints tests: name, endpoints, and the output and masquerade
/// of a pod to the ClusterIP and of an outside client to the LoadBalancer IP.
type TerminatingCase = (&'static str, Vec<Ep>, [(&'static str, bool); 2]);

fn terminating_service(local: bool) -> Service {
    let svc = mk_service("ns1", "svc1")
        .cluster_ip("172.30.1.1")
        .port("", Tcp, 80)
        .lb_ip("1.2.3.4")
        .health_check_node_port(30000);
    if local { svc.etp_local().build() } else { svc.build() }
}

fn terminating_slice(endpoints: &[Ep]) -> EndpointSlice {
    let mut slice = mk_slice("ns1", "svc1").port("", Tcp, 80);
    for &(addr, ready, serving, terminating, node) in endpoints {
        slice = slice.endpoint(addr, node, ready, serving, terminating);
    }
    slice.build()
}

/// Each case's two rows with its endpoints, then kube-proxy's rows once they are deleted.
fn run_terminating(test: &str, local: bool, cases: [TerminatingCase; 4]) {
    for (name, endpoints, [(to_cluster_ip, m1), (to_lb, m2)]) in cases {
        let rows = [
            flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, to_cluster_ip, m1),
            flow("external to LB", CLIENT, "1.2.3.4", 80, to_lb, m2),
        ];
        let (svc, slice) = (terminating_service(local), terminating_slice(&endpoints));
        with_and_without_slice(&format!("{test} / {name}"), svc, slice, &rows, &terminating_after());
    }
}

fn terminating_after() -> [Flow; 2] {
    [
        flow("pod to clusterIP after endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT", false),
        flow("external to LB after endpoints deleted", CLIENT, "1.2.3.4", 80, "REJECT", false),
    ]
}

#[test]
fn terminating_endpoints_traffic_policy_local() {
    let (t, f) = (true, false);
    let cases: [TerminatingCase; 4] = [
        (
            "ready endpoints exist",
            vec![
                ("10.0.1.1", t, t, f, "test-node"),
                ("10.0.1.2", t, t, f, "test-node"),
                ("10.0.1.3", f, t, t, "test-node"),
                ("10.0.1.4", f, f, t, "test-node"),
                ("10.0.1.5", t, t, f, "node-1"),
            ],
            [("10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", false), ("10.0.1.1:80, 10.0.1.2:80", false)],
        ),
        (
            "only terminating endpoints exist",
            vec![
                ("10.0.1.2", f, t, t, "test-node"),
                ("10.0.1.3", f, t, t, "test-node"),
                ("10.0.1.4", f, f, t, "test-node"),
                ("10.0.1.5", t, t, f, "node-1"),
            ],
            [("10.0.1.5:80", false), ("10.0.1.2:80, 10.0.1.3:80", false)],
        ),
        (
            "terminating endpoints on remote node",
            vec![("10.0.1.5", f, t, t, "node-1")],
            [("10.0.1.5:80", false), ("DROP", false)],
        ),
        (
            "no usable endpoints on any node",
            vec![("10.0.1.5", f, f, t, "test-node"), ("10.0.1.5", f, f, t, "node-1")],
            [("REJECT", false), ("REJECT", false)],
        ),
    ];
    run_terminating("TestTerminatingEndpointsTrafficPolicyLocal", true, cases);
}

#[test]
fn terminating_endpoints_traffic_policy_cluster() {
    let (t, f) = (true, false);
    let cases: [TerminatingCase; 4] = [
        (
            "ready endpoints exist",
            vec![
                ("10.0.1.1", t, t, f, "test-node"),
                ("10.0.1.2", t, t, f, "test-node"),
                ("10.0.1.3", f, t, t, "another-node"),
                ("10.0.1.4", f, f, t, "another-node"),
                ("10.0.1.5", t, t, f, "another-node"),
            ],
            [
                ("10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", false),
                ("10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", true),
            ],
        ),
        (
            "only terminating endpoints exist",
            vec![
                ("10.0.1.2", f, t, t, "test-node"),
                ("10.0.1.3", f, t, t, "test-node"),
                ("10.0.1.4", f, f, t, "another-node"),
                ("10.0.1.5", f, t, t, "another-node"),
            ],
            [
                ("10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", false),
                ("10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", true),
            ],
        ),
        (
            "terminating endpoints on remote node",
            vec![("10.0.1.5", f, t, t, "node-1")],
            [("10.0.1.5:80", false), ("10.0.1.5:80", true)],
        ),
        (
            "no usable endpoints on any node",
            vec![("10.0.1.5", f, f, t, "test-node"), ("10.0.1.5", f, f, t, "node-1")],
            [("REJECT", false), ("REJECT", false)],
        ),
    ];
    run_terminating("TestTerminatingEndpointsTrafficPolicyCluster", false, cases);
}
