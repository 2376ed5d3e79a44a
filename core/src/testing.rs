//! Test vocabulary: `mk_*` builders and one address plan, shared by every crate's tests.
//!
//! Address plan (IPv4 / IPv6):
//!
//! | what                         | IPv4              | IPv6             |
//! |------------------------------|-------------------|------------------|
//! | node network                 | 192.168.0.0/24    | fd00:192::/64    |
//! | node-a / node-b              | .10 / .11         | ::10 / ::11      |
//! | external client              | 192.168.0.100     | fd00:192::100    |
//! | client outside source ranges | 203.0.113.5       | -                |
//! | allowed LB source range      | 192.168.0.0/24    | -                |
//! | cluster (pod) CIDR           | 10.244.0.0/16     | fd00:244::/32    |
//! | node-a pods / node-b pods    | 10.244.1.0/24 / 10.244.2.0/24 | fd00:244:1::/64 / fd00:244:2::/64 |
//! | Service CIDR                 | 10.96.0.0/16      | fd00:96::/112    |
//! | externalIPs                  | 192.168.0.150+    | fd00:192::150+   |
//! | LoadBalancer IPs             | 192.168.0.200+    | fd00:192::200+   |

pub mod random;

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{NodePortAddresses, ProxySettings};
use crate::model::{
    Endpoint, EndpointPort, EndpointSlice, IpMode, LABEL_ZONE, LoadBalancerIngress, LoadBalancerRequest,
    Node, Service, ServiceName, ServicePort, ServiceType, SessionAffinity, TrafficPolicy,
};
use crate::net::{IpFamily, IpNet, Protocol};
use crate::plan::NodeContext;

/// node-a's IPv4 address.
pub const NODE_A: &str = "192.168.0.10";
/// node-a's IPv6 address.
pub const NODE_A6: &str = "fd00:192::10";
/// node-b's IPv4 address.
pub const NODE_B: &str = "192.168.0.11";
/// The external client.
pub const CLIENT: &str = "192.168.0.100";
/// A client outside every LoadBalancer source range.
pub const BLOCKED_CLIENT: &str = "203.0.113.5";
/// The cluster CIDR.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The IPv6 cluster CIDR.
pub const CLUSTER_CIDR6: &str = "fd00:244::/32";

/// Parses an address literal.
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|_| panic!("bad test address {s}"))
}

/// Parses a CIDR literal.
pub fn net(s: &str) -> IpNet {
    s.parse().unwrap_or_else(|_| panic!("bad test CIDR {s}"))
}

/// Default settings for tests: cluster CIDRs of the address plan, NodePorts on the primary IP.
pub fn mk_settings() -> ProxySettings {
    ProxySettings {
        cluster_cidrs: vec![net(CLUSTER_CIDR), net(CLUSTER_CIDR6)],
        node_port_addresses: NodePortAddresses::Primary,
        ..ProxySettings::default()
    }
}

/// node-a (dual-stack, zone-a) with [`mk_settings`].
pub fn mk_node_context() -> NodeContext {
    NodeContext {
        name: "node-a".into(),
        zone: Some("zone-a".into()),
        ips: vec![ip(NODE_A), ip(NODE_A6)],
        pod_cidrs: vec![net("10.244.1.0/24"), net("fd00:244:1::/64")],
        settings: mk_settings(),
        service_cidrs: Vec::new(),
        node_dns: None,
    }
}

/// A Node object for `name` with one IPv4 address.
pub fn mk_node(name: &str, addr: &str, zone: &str) -> Node {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_ZONE.to_string(), zone.to_string());
    Node {
        name: name.into(),
        labels,
        ips: vec![ip(addr)],
        pod_cidrs: vec![],
        deleting: false,
        ready: true,
        network_unavailable: false,
        taints: vec![],
    }
}

/// Fluent Service builder.
#[derive(Debug, Clone)]
pub struct ServiceBuilder(Service);

/// Starts a ClusterIP Service `ns/name`.
pub fn mk_service(ns: &str, name: &str) -> ServiceBuilder {
    ServiceBuilder(Service::new(ServiceName::new(ns, name)))
}

impl ServiceBuilder {
    /// Adds a ClusterIP (call twice for dual-stack).
    pub fn cluster_ip(mut self, addr: &str) -> Self {
        self.0.cluster_ips.push(ip(addr));
        self
    }
    /// Makes it headless.
    pub fn headless(mut self) -> Self {
        self.0.headless = true;
        self.0.cluster_ips.clear();
        self
    }
    /// Adds a port.
    pub fn port(mut self, name: &str, protocol: Protocol, port: u16) -> Self {
        self.0.ports.push(ServicePort {
            name: name.into(),
            protocol,
            port,
            target_port: None,
            node_port: None,
        });
        self
    }
    /// Makes it a NodePort Service, giving the last port a NodePort.
    pub fn node_port(mut self, port: u16) -> Self {
        if self.0.service_type == ServiceType::ClusterIp {
            self.0.service_type = ServiceType::NodePort;
        }
        if let Some(p) = self.0.ports.last_mut() {
            p.node_port = Some(port);
        }
        self
    }
    /// Makes it a LoadBalancer Service with an ingress IP (VIP mode).
    pub fn lb_ip(mut self, addr: &str) -> Self {
        self.0.service_type = ServiceType::LoadBalancer;
        self.0.load_balancer_ingress.push(LoadBalancerIngress {
            ip: Some(ip(addr)),
            hostname: None,
            ip_mode: IpMode::Vip,
        });
        self
    }
    /// Makes it a LoadBalancer Service asking the address allocator for an address.
    pub fn load_balancer(mut self) -> Self {
        self.0.service_type = ServiceType::LoadBalancer;
        self.0.load_balancer.get_or_insert_with(Box::default);
        self
    }
    /// Makes it a LoadBalancer Service and edits what it asks of the allocator.
    pub fn lb_request(self, f: impl FnOnce(&mut LoadBalancerRequest)) -> Self {
        let mut b = self.load_balancer();
        f(b.0.load_balancer.as_mut().expect("set by load_balancer"));
        b
    }
    /// Adds an LB ingress IP in Proxy mode.
    pub fn lb_ip_proxy_mode(mut self, addr: &str) -> Self {
        self.0.service_type = ServiceType::LoadBalancer;
        self.0.load_balancer_ingress.push(LoadBalancerIngress {
            ip: Some(ip(addr)),
            hostname: None,
            ip_mode: IpMode::Proxy,
        });
        self
    }
    /// Adds an externalIP.
    pub fn external_ip(mut self, addr: &str) -> Self {
        self.0.external_ips.push(ip(addr));
        self
    }
    /// Adds a loadBalancerSourceRanges entry.
    pub fn source_range(mut self, cidr: &str) -> Self {
        self.0.load_balancer_source_ranges.push(net(cidr));
        self
    }
    /// externalTrafficPolicy: Local.
    pub fn etp_local(mut self) -> Self {
        self.0.external_traffic_policy = TrafficPolicy::Local;
        self
    }
    /// internalTrafficPolicy: Local.
    pub fn itp_local(mut self) -> Self {
        self.0.internal_traffic_policy = TrafficPolicy::Local;
        self
    }
    /// ClientIP session affinity.
    pub fn affinity(mut self, seconds: u32) -> Self {
        self.0.session_affinity = SessionAffinity::ClientIp { timeout_seconds: seconds };
        self
    }
    /// healthCheckNodePort.
    pub fn health_check_node_port(mut self, port: u16) -> Self {
        self.0.health_check_node_port = Some(port);
        self
    }
    /// The `tideway.io/load-balancing` annotation.
    pub fn load_balancing(mut self, algorithm: &str) -> Self {
        self.0.load_balancing = Some(algorithm.into());
        self
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    /// The Service (its lists sized exactly, as the Kubernetes conversion sizes them).
    pub fn build(mut self) -> Service {
        self.0.cluster_ips.shrink_to_fit();
        self.0.ports.shrink_to_fit();
        self.0.external_ips.shrink_to_fit();
        self.0
    }
}

/// Fluent EndpointSlice builder.
#[derive(Debug, Clone)]
pub struct SliceBuilder(EndpointSlice);

/// Starts an EndpointSlice for Service `ns/svc` of the family of its first endpoint.
pub fn mk_slice(ns: &str, svc: &str) -> SliceBuilder {
    SliceBuilder(EndpointSlice {
        namespace: ns.into(),
        name: format!("{svc}-abcde"),
        service: svc.into(),
        family: IpFamily::V4,
        ports: Vec::new(),
        endpoints: Vec::new(),
        labels: BTreeMap::new(),
        trigger_time: None,
    })
}

impl SliceBuilder {
    /// Renames the slice (for several slices of one Service).
    pub fn name(mut self, n: &str) -> Self {
        self.0.name = n.into();
        self
    }
    /// Adds a port.
    pub fn port(mut self, name: &str, protocol: Protocol, port: u16) -> Self {
        self.0.ports.push(EndpointPort { name: name.into(), protocol, port });
        self
    }
    /// Adds a ready endpoint on `node`.
    pub fn ready(self, addr: &str, node: &str) -> Self {
        self.endpoint(addr, node, true, true, false)
    }
    /// Adds an endpoint with explicit conditions.
    pub fn endpoint(mut self, addr: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Self {
        let a = ip(addr);
        self.0.family = IpFamily::of(&a);
        let mut ep = Endpoint::ready(a);
        ep.ready = ready;
        ep.serving = serving;
        ep.terminating = terminating;
        ep.node_name = Some(node.into());
        self.0.endpoints.push(ep);
        self
    }
    /// Sets zone hints on the last endpoint.
    pub fn zone_hint(mut self, zone: &str) -> Self {
        if let Some(ep) = self.0.endpoints.last_mut() {
            let mut hints = ep.hints().cloned().unwrap_or_default();
            hints.for_zones.push(zone.into());
            ep.set_hints(Some(hints));
        }
        self
    }
    /// Sets the pod the last endpoint targets (`targetRef.name`).
    pub fn pod(mut self, name: &str) -> Self {
        if let Some(ep) = self.0.endpoints.last_mut() {
            ep.pod_name = Some(name.into());
        }
        self
    }
    /// Sets the hostname of the last endpoint.
    pub fn hostname(mut self, h: &str) -> Self {
        if let Some(ep) = self.0.endpoints.last_mut() {
            ep.set_hostname(Some(h.into()));
        }
        self
    }
    /// The slice (its vectors sized exactly, as the conversion from Kubernetes makes them).
    pub fn build(mut self) -> EndpointSlice {
        self.0.endpoints.shrink_to_fit();
        self.0.ports.shrink_to_fit();
        self.0
    }
}

/// A synthetic cluster for benchmarks: `services` ClusterIP Services (`ns-N/svc-M`, 100 per
/// namespace) with `endpoints` ready endpoints each, spread over node-a and node-b.
pub fn synthetic_cluster(services: usize, endpoints: usize) -> crate::cluster::ClusterState {
    let mut c = crate::cluster::ClusterState::new();
    for i in 0..services {
        let (ns, name) = (format!("ns-{}", i / 100), format!("svc-{}", i % 100));
        c.apply(
            mk_service(&ns, &name)
                .cluster_ip(&format!("10.{}.{}.{}", 96 + i / 62500, i / 250 % 250, i % 250 + 1))
                .port("http", Protocol::Tcp, 80)
                .build(),
        );
        c.apply(synthetic_slice(i, endpoints, None));
    }
    c.take_changes();
    c
}

/// The EndpointSlice of synthetic Service `i`; `replace` swaps endpoint j for a new address.
pub fn synthetic_slice(i: usize, endpoints: usize, replace: Option<usize>) -> EndpointSlice {
    let (ns, name) = (format!("ns-{}", i / 100), format!("svc-{}", i % 100));
    let mut s = mk_slice(&ns, &name).port("http", Protocol::Tcp, 8080);
    for j in 0..endpoints {
        let k = i * endpoints + j;
        let addr = if replace == Some(j) {
            format!("10.250.{}.{}", k / 250 % 250, k % 250 + 1)
        } else {
            format!("10.{}.{}.{}", 128 + k / 62500, k / 250 % 250, k % 250 + 1)
        };
        s = s.ready(&addr, if j % 2 == 0 { "node-a" } else { "node-b" });
    }
    s.build()
}

/// A node as the announcer and BGP decisions see it: Ready, its agent alive, no endpoint of
/// the Service there, labelled `rack=RACK`.
pub fn mk_node_info(name: &str, rack: &str) -> crate::announce::NodeInfo {
    crate::announce::NodeInfo {
        name: name.into(),
        ready: true,
        agent: crate::model::AgentLiveness::Alive,
        network_unavailable: false,
        to_be_deleted: false,
        labels: [("rack".to_string(), rack.to_string())].into(),
        local: crate::announce::LocalEndpoints::Absent,
        lacks_interfaces: false,
    }
}

/// The selector `rack=RACK`.
pub fn rack(rack: &str) -> crate::config::LabelSelector {
    crate::config::LabelSelector {
        match_labels: [("rack".to_string(), rack.to_string())].into(),
        match_expressions: vec![],
    }
}

/// `default/SVC`'s LoadBalancer address `addr` from `pool`, seen on `node` with `local`
/// endpoints there.
pub fn mk_service_address(
    svc: &str,
    addr: &str,
    pool: &str,
    policy: TrafficPolicy,
    node: &crate::announce::NodeInfo,
    local: crate::announce::LocalEndpoints,
) -> crate::bgp::ServiceAddress {
    crate::bgp::ServiceAddress {
        service: ServiceName::new("default", svc),
        ip: ip(addr),
        pool: pool.into(),
        traffic: crate::announce::ServiceTraffic { policy, serving_endpoints: true },
        node: crate::announce::NodeInfo { local, ..node.clone() },
    }
}
