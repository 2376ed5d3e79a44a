//! TestNoEndpointsReject, TestClusterIPGeneral (with the Service CIDR checks), TestLoadBalancer
//! and TestNodePorts.

use tideway_core::config::NodePortAddresses;
use tideway_core::net::Protocol::{Sctp, Tcp, Udp};
use tideway_core::testing::{mk_service, mk_slice, net};

use super::{CLIENT, CLIENT_BLOCKED, NODE_IP, cluster, flow, node, run};

#[test]
fn no_endpoints_reject() {
    let svc = mk_service("ns1", "svc1")
        .cluster_ip("172.30.0.41")
        .port("p80", Tcp, 80)
        .node_port(3001)
        .external_ip("192.168.99.11")
        .lb_ip("1.2.3.4")
        .build();
    let c = cluster(vec![svc], vec![]);
    let rows = [
        flow("pod to cluster IP with no endpoints", "10.0.0.2", "172.30.0.41", 80, "REJECT", false),
        flow("external to external IP with no endpoints", CLIENT, "192.168.99.11", 80, "REJECT", false),
        flow("pod to NodePort with no endpoints", "10.0.0.2", NODE_IP, 3001, "REJECT", false),
        flow("external to NodePort with no endpoints", CLIENT, NODE_IP, 3001, "REJECT", false),
        flow("pod to LoadBalancer IP with no endpoints", "10.0.0.2", "1.2.3.4", 80, "REJECT", false),
        flow("external to LoadBalancer IP with no endpoints", CLIENT, "1.2.3.4", 80, "REJECT", false),
    ];
    run("TestNoEndpointsReject", &c, &node(), &rows);
}

#[test]
fn cluster_ip_general() {
    let svc1 = mk_service("ns1", "svc1").cluster_ip("172.30.0.41").port("http", Tcp, 80).build();
    let svc2 = mk_service("ns2", "svc2")
        .cluster_ip("172.30.0.42")
        .port("http", Tcp, 80)
        .port("https", Tcp, 443)
        .port("dns-udp", Udp, 53)
        .port("dns-tcp", Tcp, 53)
        .port("dns-sctp", Sctp, 53)
        .build();
    let slice1 = mk_slice("ns1", "svc1").port("http", Tcp, 80).ready("10.180.0.1", "test-node").build();
    let slice2 = mk_slice("ns2", "svc2")
        .port("http", Tcp, 80)
        .port("https", Tcp, 8443)
        .port("dns-udp", Udp, 53)
        .port("dns-tcp", Tcp, 5353)
        .port("dns-sctp", Sctp, 53)
        .ready("10.180.0.1", "test-node")
        .ready("10.180.2.1", "node2")
        .build();
    let c = cluster(vec![svc1, svc2], vec![slice1, slice2]);
    let both = |port: u16| format!("10.180.0.1:{port}, 10.180.2.1:{port}");
    let rows = [
        flow("simple clusterIP", "10.180.0.2", "172.30.0.41", 80, "10.180.0.1:80", false),
        flow("hairpin to cluster IP", "10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", true),
        flow("clusterIP with multiple endpoints", "10.180.0.2", "172.30.0.42", 80, &both(80), false),
        flow("clusterIP with TargetPort", "10.180.0.2", "172.30.0.42", 443, &both(8443), false),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (TCP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            &both(5353),
            false,
        ),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (UDP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            &both(53),
            false,
        )
        .proto(Udp),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (SCTP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            &both(53),
            false,
        )
        .proto(Sctp),
        flow("TCP-only port does not match UDP traffic", "10.180.0.2", "172.30.0.42", 80, "REJECT", false)
            .proto(Udp),
        flow("svc1 does not accept svc2's ports", "10.180.0.2", "172.30.0.41", 443, "REJECT", false),
        flow("packet to unallocated cluster ip", "10.180.0.2", "172.30.0.50", 80, "DROP", false),
    ];
    run("TestClusterIPGeneral", &c, &node(), &rows);

    // Not kube-proxy's rows: without ServiceCIDRs an unallocated address is let through (there
    // is nothing to tell it from any other), and the node's own packets are checked after
    // their DNAT too.
    let mut no_cidrs = node();
    no_cidrs.service_cidrs.clear();
    let ours = [
        flow(
            "without ServiceCIDRs, an unallocated address passes",
            "10.180.0.2",
            "172.30.0.50",
            80,
            "",
            false,
        ),
        flow("an undefined port is still rejected", "10.180.0.2", "172.30.0.41", 443, "REJECT", false),
    ];
    run("TestClusterIPGeneral, no ServiceCIDR", &c, &no_cidrs, &ours);
    let from_node = [
        flow("node to an undefined port", NODE_IP, "172.30.0.41", 443, "REJECT", false),
        flow("node to an unallocated address", NODE_IP, "172.30.0.50", 80, "DROP", false),
        flow("node to a defined port", NODE_IP, "172.30.0.41", 80, "10.180.0.1:80", true),
    ];
    run("TestClusterIPGeneral, from the node", &c, &node(), &from_node);
}

#[test]
fn load_balancer() {
    let svc = mk_service("ns1", "svc1")
        .cluster_ip("172.30.0.41")
        .port("p80", Tcp, 80)
        .node_port(3001)
        .lb_ip("1.2.3.4")
        .lb_ip("5.6.7.8")
        .source_range("192.168.0.0/24")
        .source_range("203.0.113.0/25")
        .build();
    let slice = mk_slice("ns1", "svc1").port("p80", Tcp, 80).ready("10.180.0.1", "node2").build();
    let c = cluster(vec![svc], vec![slice]);
    let ep = "10.180.0.1:80";
    let rows = [
        flow("pod to cluster IP", "10.0.0.2", "172.30.0.41", 80, ep, false),
        flow("external to nodePort", CLIENT, NODE_IP, 3001, ep, true),
        flow("nodePort bypasses LoadBalancerSourceRanges", CLIENT_BLOCKED, NODE_IP, 3001, ep, true),
        flow("accepted external to LB1", CLIENT, "1.2.3.4", 80, ep, true),
        flow("accepted external to LB2", CLIENT, "5.6.7.8", 80, ep, true),
        flow("blocked external to LB1", CLIENT_BLOCKED, "1.2.3.4", 80, "DROP", false),
        flow("blocked external to LB2", CLIENT_BLOCKED, "5.6.7.8", 80, "DROP", false),
        flow("pod to LB1 (blocked by LoadBalancerSourceRanges)", "10.0.0.2", "1.2.3.4", 80, "DROP", false),
        flow("pod to LB2 (blocked by LoadBalancerSourceRanges)", "10.0.0.2", "5.6.7.8", 80, "DROP", false),
        flow("node to LB1 (allowed by LoadBalancerSourceRanges)", NODE_IP, "1.2.3.4", 80, ep, true),
        flow("node to LB2 (allowed by LoadBalancerSourceRanges)", NODE_IP, "5.6.7.8", 80, ep, true),
        flow("same node to LB1, SNATted to LB1 (implicitly allowed)", "1.2.3.4", "1.2.3.4", 80, ep, true),
        flow("same node to LB2, SNATted to LB2 (implicitly allowed)", "5.6.7.8", "5.6.7.8", 80, ep, true),
    ];
    run("TestLoadBalancer", &c, &node(), &rows);
}

/// One family of TestNodePorts: its addresses, and whether NodePorts are served on the
/// secondary node address too.
struct NodePortCase {
    name: &'static str,
    svc_ip: &'static str,
    endpoints: [&'static str; 2],
    node_ip: &'static str,
    pod_ip: &'static str,
    client: &'static str,
    alt_node_ip: &'static str,
    addresses: Option<Vec<&'static str>>,
}

#[test]
fn node_ports() {
    let v4 = |name, addresses| NodePortCase {
        name,
        svc_ip: "172.30.0.41",
        endpoints: ["10.180.0.1", "10.180.2.1"],
        node_ip: NODE_IP,
        pod_ip: "10.0.0.2",
        client: CLIENT,
        alt_node_ip: "192.168.1.2",
        addresses,
    };
    let v6 = |name, addresses| NodePortCase {
        name,
        svc_ip: "fd00:172:30::41",
        endpoints: ["fd00:10:180::1", "fd00:10:180::2:1"],
        node_ip: "2001:db8::1",
        pod_ip: "fd00:10::2",
        client: "2600:5200::1",
        alt_node_ip: "2001:db8:1::2",
        addresses,
    };
    let cases = [
        v4("ipv4", None),
        v4(
            "ipv4, multiple nodeport-addresses",
            Some(vec!["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
        ),
        v6("ipv6", None),
        v6(
            "ipv6, multiple nodeport-addresses",
            Some(vec!["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64", "2001:db8:1::2/128"]),
        ),
    ];
    for case in cases {
        node_ports_case(&case);
    }
}

fn node_ports_case(t: &NodePortCase) {
    let svc = mk_service("ns1", "svc1").cluster_ip(t.svc_ip).port("p80", Tcp, 80).node_port(3001).build();
    let slice = mk_slice("ns1", "svc1")
        .port("p80", Tcp, 80)
        .ready(t.endpoints[0], "node2")
        .ready(t.endpoints[1], "test-node")
        .build();
    let c = cluster(vec![svc], vec![slice]);
    let mut n = node();
    if let Some(cidrs) = &t.addresses {
        n.settings.node_port_addresses = NodePortAddresses::Cidrs(cidrs.iter().map(|c| net(c)).collect());
    }
    let join = |a: &str| if a.contains(':') { format!("[{a}]:80") } else { format!("{a}:80") };
    let output = format!("{}, {}", join(t.endpoints[0]), join(t.endpoints[1]));
    let mut rows = vec![
        flow("pod to cluster IP", t.pod_ip, t.svc_ip, 80, &output, false),
        flow("external to nodePort", t.client, t.node_ip, 3001, &output, true),
        flow("node to nodePort", t.node_ip, t.node_ip, 3001, &output, true),
    ];
    if t.addresses.is_some() {
        rows.push(flow("external to nodePort on secondary IP", t.client, t.alt_node_ip, 3001, &output, true));
    } else {
        rows.push(flow("secondary nodeIP ignores NodePorts", t.client, t.alt_node_ip, 3001, "", false));
    }
    run(&format!("TestNodePorts / {}", t.name), &c, &n, &rows);
}
