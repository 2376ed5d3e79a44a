//! kube-proxy's nftables packet-flow tests, ported: every table its nftables proxier tests run
//! through `runPacketFlowTests` (`pkg/proxy/nftables/proxier_test.go`), with the same node,
//! Services, endpoints and rows, and each row's expected output and masquerade as kube-proxy
//! writes them (`"10.180.0.1:80, 10.180.2.1:80"`, `"DROP"`, `"REJECT"`, or `""` for a packet
//! let through untouched).
//!
//! kube-proxy's tracer reads kube-proxy's rule text, which cannot match our layout (verdict maps
//! keyed by frontend, one chain per endpoint count), so the rows go through our packet tracer
//! and the nftables program Tideway would load. A row whose expectation differs says why.
//!
//! Two subtests are ours: kube-proxy's masquerade table again with pods told apart by the
//! interface they arrive on (`detectLocalMode: BridgeInterface` and `InterfaceNamePrefix`),
//! which must give exactly the rows of its source-CIDR detector.

mod masquerade;
mod policies;
mod services;

use std::net::IpAddr;

use tideway_core::cluster::ClusterState;
use tideway_core::config::{NodePortAddresses, ProxyMode, ProxySettings};
use tideway_core::model::{EndpointSlice, Service};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::plan::{NodeContext, compile};
use tideway_core::render;
use tideway_core::testing::{ip, net};
use tideway_core::trace::{Origin, Packet, TraceEnv, Verdict, render_trace, trace};

/// The fake proxier's node (`NewFakeProxier`): `testNodeIP`, `testNodeIPAlt`, `testExternalIP`
/// (an externalIP that is also a node address), `testNodeIPv6`, `testNodeIPv6Alt`.
const NODE_IPS: [&str; 5] = ["192.168.0.2", "192.168.1.2", "192.168.99.11", "2001:db8::1", "2001:db8:1::2"];
const NODE_IP: &str = "192.168.0.2";
const CLIENT: &str = "203.0.113.2";
const CLIENT_BLOCKED: &str = "203.0.113.130";
/// The pod network of the fake proxier's local detector.
const POD_CIDRS: [&str; 2] = ["10.0.0.0/8", "fd00:10::/64"];

/// One row of a kube-proxy flow table.
#[derive(Debug, Clone)]
pub struct Flow {
    name: &'static str,
    src: &'static str,
    proto: Protocol,
    dst: &'static str,
    port: u16,
    output: String,
    masq: bool,
}

/// A TCP row.
pub fn flow(
    name: &'static str,
    src: &'static str,
    dst: &'static str,
    port: u16,
    output: &str,
    masq: bool,
) -> Flow {
    Flow { name, src, proto: Protocol::Tcp, dst, port, output: output.into(), masq }
}

impl Flow {
    fn proto(self, proto: Protocol) -> Flow {
        Flow { proto, ..self }
    }
}

/// `NewFakeProxier(family)`'s settings: nftables mode, the pod network as the cluster CIDRs,
/// NodePorts on the primary addresses only, Service CIDRs `172.30.0.0/16` and
/// `fd00:10:96::/112`.
pub fn node() -> NodeContext {
    let settings = ProxySettings {
        mode: ProxyMode::Nftables,
        cluster_cidrs: POD_CIDRS.iter().map(|c| net(c)).collect(),
        node_port_addresses: NodePortAddresses::Cidrs(vec![net("192.168.0.2/32"), net("2001:db8::1/128")]),
        ..ProxySettings::default()
    };
    NodeContext {
        name: "test-node".into(),
        zone: None,
        ips: NODE_IPS.iter().map(|a| ip(a)).collect(),
        pod_cidrs: Vec::new(),
        settings,
        service_cidrs: vec![net("172.30.0.0/16"), net("fd00:10:96::/112")],
        node_dns: None,
    }
}

/// A cluster of `services` and `slices`.
pub fn cluster(services: Vec<Service>, slices: Vec<EndpointSlice>) -> ClusterState {
    let mut c = ClusterState::new();
    for s in services {
        c.apply(s);
    }
    for s in slices {
        c.apply(s);
    }
    c
}

/// Where kube-proxy's tracer takes a packet to come from: a node address is the node, the pod
/// network a pod, anything else outside.
fn origin(node: &NodeContext, src: IpAddr) -> Origin {
    if node.ips.contains(&src) {
        Origin::Node
    } else if POD_CIDRS.iter().any(|c| net(c).contains(&src)) {
        Origin::Pod
    } else {
        Origin::External
    }
}

/// A verdict as kube-proxy's tracer writes it: endpoints (sorted) or DROP / REJECT / nothing,
/// and whether it masquerades.
fn kube_proxy_output(v: &Verdict) -> (String, bool) {
    match v {
        Verdict::Dnat { endpoints, masquerade } => (endpoints.join(", "), *masquerade),
        Verdict::Drop => ("DROP".into(), false),
        Verdict::Reject => ("REJECT".into(), false),
        Verdict::Local | Verdict::Forward { masquerade: false } => (String::new(), false),
        other => (format!("{other}"), false),
    }
}

fn sorted(output: &str) -> String {
    let mut parts: Vec<&str> = output.split(", ").filter(|p| !p.is_empty()).collect();
    parts.sort();
    parts.join(", ")
}

/// Traces every row through the nftables program of `node` for `cluster`; the failures, each
/// with its trace.
pub fn failures(test: &str, cluster: &ClusterState, node: &NodeContext, flows: &[Flow]) -> Vec<String> {
    let ruleset = compile(cluster, node);
    let mut out = Vec::new();
    for f in flows {
        let (src, dst) = (ip(f.src), ip(f.dst));
        let family = IpFamily::of(&dst);
        let program = render::Renderer::new(ProxyMode::Nftables, &ruleset).lower(family);
        let env = TraceEnv::for_node(ruleset.family(family));
        let packet =
            Packet { src, dst, protocol: f.proto, dport: f.port, sport: None, origin: origin(node, src) };
        let t = trace(&program, &packet, &env);
        let (output, masq) = kube_proxy_output(&t.verdict());
        if (sorted(&output), masq) != (sorted(&f.output), f.masq) {
            out.push(format!(
                "{test} / {}: want {:?} masq {}, got {output:?} masq {masq}\n{}",
                f.name,
                f.output,
                f.masq,
                render_trace(&t)
            ));
        }
    }
    out
}

/// [`failures`], asserted empty.
pub fn run(test: &str, cluster: &ClusterState, node: &NodeContext, flows: &[Flow]) {
    let failed = failures(test, cluster, node, flows);
    assert!(failed.is_empty(), "{} of {} rows failed:\n{}", failed.len(), flows.len(), failed.join("\n"));
}
