//! Services and the names that identify them and their ports.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, IpNet, Protocol};

/// Label naming the proxy that should handle a Service (kube-proxy skips Services carrying it).
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Label the EndpointSlice controller puts on slices (and users on Services) of headless Services.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Annotation asking for specific LoadBalancer IPs (comma-separated; one per family for
/// dual-stack), the successor of the deprecated `spec.loadBalancerIP`.
pub const ANNOTATION_LOAD_BALANCER_IPS: &str = "tideway.io/load-balancer-ips";
/// Annotation naming the `LoadBalancerPool` to allocate from.
pub const ANNOTATION_ADDRESS_POOL: &str = "tideway.io/address-pool";
/// Annotation with a sharing key: Services with the same key may share one LoadBalancer IP.
pub const ANNOTATION_ALLOW_SHARED_IP: &str = "tideway.io/allow-shared-ip";

/// MetalLB's spellings of the same three requests, read beside Tideway's so that a Service
/// moving from MetalLB keeps its pinned addresses, pool and sharing key: each Tideway
/// annotation, then MetalLB's current (`metallb.io/`, v0.15+) and older
/// (`metallb.universe.tf/`) keys, in the order they win when they disagree.
pub const LOAD_BALANCER_ANNOTATIONS: [[&str; 3]; 3] = [
    [ANNOTATION_LOAD_BALANCER_IPS, "metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"],
    [ANNOTATION_ADDRESS_POOL, "metallb.io/address-pool", "metallb.universe.tf/address-pool"],
    [ANNOTATION_ALLOW_SHARED_IP, "metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"],
];

/// Annotation choosing how a Service's connections are spread over its endpoints: `random`,
/// `maglev`, or (IPVS mode) an IPVS scheduler; see [`crate::config::LoadBalancing`].
pub const ANNOTATION_LOAD_BALANCING: &str = "tideway.io/load-balancing";

/// The label selector a service proxy's Service and EndpointSlice watches use: kube-proxy's
/// `!service-proxy-name,!headless` for the default proxy. A named proxy also programs
/// unlabelled Services, which no selector can say together with "or labelled with my name", so
/// its watches only leave out headless objects and [`Service::is_proxied_by`] decides.
pub fn service_watch_selector(proxy_name: Option<&str>) -> String {
    match proxy_name {
        None => format!("!{LABEL_SERVICE_PROXY_NAME},!{LABEL_HEADLESS}"),
        Some(_) => format!("!{LABEL_HEADLESS}"),
    }
}

/// A namespaced Service name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServiceName {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ServiceName {
    /// Builds a name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceName { namespace: namespace.into(), name: name.into() }
    }

    /// The Service's name in the cluster DNS zone `zone` (the Kubernetes DNS specification):
    /// `<name>.<namespace>.svc.<zone>`, without the final dot.
    pub fn dns_name(&self, zone: &str) -> String {
        format!("{}.{}.svc.{}", self.name, self.namespace, zone.trim_end_matches('.'))
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of one Service: the unit kube-proxy programs (`ns/svc:port` + protocol).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServicePortName {
    /// The Service.
    pub service: ServiceName,
    /// The port's name (empty for a single unnamed port).
    pub port: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// `ns/svc:port`, or `ns/svc` for an unnamed port — the string kube-proxy hashes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

/// `spec.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceType {
    /// ClusterIP (including headless).
    ClusterIp,
    /// NodePort.
    NodePort,
    /// LoadBalancer.
    LoadBalancer,
    /// ExternalName (DNS only).
    ExternalName,
}

/// `externalTrafficPolicy` / `internalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrafficPolicy {
    /// Any ready endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on the receiving node.
    Local,
}

/// `status.loadBalancer.ingress[].ipMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpMode {
    /// The load balancer delivers packets with the LB IP as destination: proxies capture it.
    #[default]
    Vip,
    /// The load balancer proxies: the LB IP must not be short-circuited on nodes.
    Proxy,
}

/// One `status.loadBalancer.ingress[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancerIngress {
    /// The ingress IP, if any.
    pub ip: Option<IpAddr>,
    /// The ingress hostname, if any.
    pub hostname: Option<String>,
    /// How the load balancer delivers traffic.
    pub ip_mode: IpMode,
}

/// `spec.sessionAffinity` with its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SessionAffinity {
    /// No affinity.
    #[default]
    None,
    /// ClientIP affinity for `timeout_seconds` (default 10800).
    ClientIp {
        /// Affinity timeout in seconds.
        timeout_seconds: u32,
    },
}

/// Default ClientIP affinity timeout (3 hours), as the API server defaults it.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

/// `spec.trafficDistribution`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrafficDistribution {
    /// `PreferClose` (deprecated alias of `PreferSameZone`).
    PreferClose,
    /// `PreferSameZone`.
    PreferSameZone,
    /// `PreferSameNode`.
    PreferSameNode,
    /// A value this version does not know.
    Other(String),
}

/// `spec.ports[].targetPort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetPort {
    /// A port number.
    Number(u16),
    /// A named container port.
    Name(String),
}

/// One `spec.ports[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePort {
    /// Port name (may be empty when the Service has one port).
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// The Service port.
    pub port: u16,
    /// The target port, informational (EndpointSlices carry the resolved port).
    pub target_port: Option<TargetPort>,
    /// The NodePort, if allocated.
    pub node_port: Option<u16>,
}

/// What a LoadBalancer Service asks of the address allocator (kept for type LoadBalancer only,
/// boxed so other Services pay one pointer).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LoadBalancerRequest {
    /// `spec.loadBalancerClass`.
    pub class: Option<String>,
    /// Requested addresses: `spec.loadBalancerIP` and [`ANNOTATION_LOAD_BALANCER_IPS`].
    pub ips: Vec<IpAddr>,
    /// [`ANNOTATION_ADDRESS_POOL`].
    pub pool: Option<String>,
    /// [`ANNOTATION_ALLOW_SHARED_IP`].
    pub sharing_key: Option<String>,
    /// `spec.selector` (sharing without `Cluster` policy needs identical selectors).
    pub selector: BTreeMap<String, String>,
    /// Why the request could not be read (an unparsable annotation); the allocator reports it
    /// instead of allocating, while proxies still program the Service.
    pub error: Option<String>,
    /// Spellings of one request that disagree (Tideway's and MetalLB's annotations), each
    /// naming both and the one used; the operator records them as Events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// A Service, converted once at the edge and validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    /// Namespace and name.
    pub name: ServiceName,
    /// `spec.type`.
    pub service_type: ServiceType,
    /// `spec.clusterIPs` (primary first); empty for headless and ExternalName Services.
    pub cluster_ips: Vec<IpAddr>,
    /// True when `spec.clusterIP` is `None`.
    pub headless: bool,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress`.
    pub load_balancer_ingress: Vec<LoadBalancerIngress>,
    /// `spec.loadBalancerSourceRanges`.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// `spec.sessionAffinity` (+ `sessionAffinityConfig`).
    pub session_affinity: SessionAffinity,
    /// `spec.externalTrafficPolicy` (only meaningful for NodePort/LoadBalancer).
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.internalTrafficPolicy`.
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<u16>,
    /// `spec.trafficDistribution`.
    pub traffic_distribution: Option<TrafficDistribution>,
    /// `spec.externalName`.
    pub external_name: Option<String>,
    /// `spec.publishNotReadyAddresses`.
    pub publish_not_ready_addresses: bool,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.generation` (0 when the source has none): what agents report as programmed.
    pub generation: i64,
    /// `metadata.resourceVersion`, when it is an integer (Kubernetes 1.35 and later guarantee
    /// it: KEP-5504); `None` when the source has none or it does not compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<u64>,
    /// The version at which `generation` took its value, set by the
    /// [`ClusterState`](crate::cluster::ClusterState) that holds the Service: a node whose
    /// [`programmed_version`](super::NodeProxyState::programmed_version) reaches it has
    /// programmed this spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_version: Option<u64>,
    /// The allocator's view of a LoadBalancer Service.
    pub load_balancer: Option<Box<LoadBalancerRequest>>,
    /// [`ANNOTATION_LOAD_BALANCING`], as written (the planner decides what the node's mode
    /// can do with it, and says so when it cannot).
    #[serde(default)]
    pub load_balancing: Option<String>,
}

impl Service {
    /// The names the cluster DNS answers for the Service in `zone`: its own
    /// ([`ServiceName::dns_name`]) and, for each named port, the SRV name
    /// `_<port>._<protocol>.<its own>`.
    pub fn dns_names(&self, zone: &str) -> Vec<String> {
        let own = self.name.dns_name(zone);
        let srv = self.ports.iter().filter(|p| !p.name.is_empty()).map(|p| {
            let protocol = p.protocol.to_string().to_ascii_lowercase();
            format!("_{}._{protocol}.{own}", p.name)
        });
        let srv: Vec<String> = srv.collect();
        std::iter::once(own).chain(srv).collect()
    }

    /// A minimal ClusterIP Service, for builders and tests.
    pub fn new(name: ServiceName) -> Self {
        Service {
            name,
            service_type: ServiceType::ClusterIp,
            cluster_ips: Vec::new(),
            headless: false,
            ports: Vec::new(),
            external_ips: Vec::new(),
            load_balancer_ingress: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            session_affinity: SessionAffinity::None,
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            health_check_node_port: None,
            traffic_distribution: None,
            external_name: None,
            publish_not_ready_addresses: false,
            labels: BTreeMap::new(),
            generation: 0,
            resource_version: None,
            spec_version: None,
            load_balancer: None,
            load_balancing: None,
        }
    }

    /// The ClusterIP of `family`, if the Service has one.
    pub fn cluster_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.cluster_ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }

    /// The value of the `service-proxy-name` label, if present.
    pub fn proxy_name(&self) -> Option<&str> {
        self.labels.get(LABEL_SERVICE_PROXY_NAME).map(String::as_str)
    }

    /// True when a service proxy named `ours` (None = the default proxy) should program this
    /// Service: kube-proxy's informer selector `!service-proxy-name,!headless`.
    pub fn is_proxied_by(&self, ours: Option<&str>) -> bool {
        if self.labels.contains_key(LABEL_HEADLESS) {
            return false;
        }
        match (self.proxy_name(), ours) {
            (None, _) => true,
            (Some(theirs), Some(ours)) => theirs == ours,
            (Some(_), None) => false,
        }
    }

    /// True when the Service has a virtual IP to program (not headless, not ExternalName).
    pub fn has_cluster_ip(&self) -> bool {
        !self.headless && self.service_type != ServiceType::ExternalName && !self.cluster_ips.is_empty()
    }

    /// True for NodePort and LoadBalancer Services, which may have Local external policy.
    pub fn external_policy_applies(&self) -> bool {
        matches!(self.service_type, ServiceType::NodePort | ServiceType::LoadBalancer)
    }

    /// The LB ingress IPs proxies must capture: ipMode VIP only.
    pub fn load_balancer_vips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.load_balancer_ingress.iter().filter(|i| i.ip_mode == IpMode::Vip).filter_map(|i| i.ip)
    }

    /// The name of one of this Service's ports.
    pub fn port_name(&self, port: &ServicePort) -> ServicePortName {
        ServicePortName { service: self.name.clone(), port: port.name.clone(), protocol: port.protocol }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> Service {
        Service::new(ServiceName::new("ns1", "svc1"))
    }

    #[test]
    fn service_port_name_formats_like_kube_proxy() {
        let s = svc();
        let named = ServicePortName { service: s.name.clone(), port: "p80".into(), protocol: Protocol::Tcp };
        assert_eq!(named.to_string(), "ns1/svc1:p80");
        let unnamed = ServicePortName { port: String::new(), ..named };
        assert_eq!(unnamed.to_string(), "ns1/svc1");
    }

    #[test]
    fn proxy_name_label_selects_the_proxy() {
        let mut s = svc();
        assert!(s.is_proxied_by(None));
        s.labels.insert(LABEL_SERVICE_PROXY_NAME.into(), "other".into());
        assert!(!s.is_proxied_by(None));
        assert!(s.is_proxied_by(Some("other")));
        assert!(!s.is_proxied_by(Some("tideway")));
        let mut h = svc();
        h.labels.insert(LABEL_HEADLESS.into(), String::new());
        assert!(!h.is_proxied_by(None));
    }
}

/// A `networking.k8s.io/v1` ServiceCIDR: ranges the API server allocates ClusterIPs from
/// (KEP-1880). An address in one that no Service holds is dropped in nftables mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceCidr {
    /// Object name (the API server's own is `kubernetes`).
    pub name: String,
    /// `spec.cidrs`: one per family at most.
    pub cidrs: Vec<IpNet>,
}
