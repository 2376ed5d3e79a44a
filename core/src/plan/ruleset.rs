//! The backend-neutral plan: one [`ServicePortPlan`] per (family, service port).

use std::collections::BTreeMap;

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::balancing::{Balancing, BalancingChoice};
use super::node::{LocalTraffic, NodeContext, NodeDnsPlan, NodePortDestinations};
use super::tally::Tally;
use crate::model::{ServiceName, ServicePortName};
use crate::net::{IpFamily, IpNet, Protocol, join_host_port};

/// Identifies a plan: the family first, so one family's plans form a contiguous range.
pub type PlanKey = (IpFamily, ServicePortName);

/// Every Service port's plan, by key, in key order. A persistent map (as are the ruleset's
/// indexes by frontend and by Service): a copy shares every node with the original and a
/// change copies only the path to it, so the plan published to the API's readers costs
/// nothing to keep while the next sync changes its own copy (a deep copy took hundreds of
/// milliseconds a sync at 100,000 Services).
pub type Plans = imbl::OrdMap<PlanKey, ServicePortPlan>;

/// A persistent hash map, as [`Plans`], for the ruleset's own indexes.
type Index<K, V> = imbl::GenericHashMap<K, V, FxBuildHasher, imbl::shared_ptr::DefaultSharedPtr>;

/// What [`Ruleset::update`] changed: each key whose plan changed, with its plan before
/// (`None` when it is new; a key whose plan is gone is no longer in the ruleset).
pub type Changed = BTreeMap<PlanKey, Option<ServicePortPlan>>;

/// One endpoint as the dataplane sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Backend {
    /// Endpoint address.
    pub ip: IpAddr,
    /// Endpoint port.
    pub port: u16,
    /// On this node.
    pub local: bool,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&join_host_port(&self.ip, self.port))
    }
}

/// Where a class of traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// Spread over the cluster-wide endpoint set.
    Cluster,
    /// Spread over this node's endpoints.
    Local,
    /// No endpoints anywhere: reject (ICMP unreachable / TCP reset) so clients fail fast.
    Reject,
    /// Local policy without local endpoints: drop, so clients retry elsewhere.
    Drop,
}

/// An address a Service captures traffic on; at most one service port may own each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Frontend {
    /// A ClusterIP, externalIP or LB IP with protocol and port.
    Ip {
        /// Address.
        ip: IpAddr,
        /// Protocol.
        protocol: Protocol,
        /// Port.
        port: u16,
    },
    /// A NodePort of one family.
    NodePort {
        /// Family.
        family: IpFamily,
        /// Protocol.
        protocol: Protocol,
        /// Port.
        port: u16,
    },
}

/// The frontends a plan asked for, before conflicts between Services are resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Requested {
    pub(crate) cluster_ip: Option<IpAddr>,
    pub(crate) external_ips: Vec<IpAddr>,
    pub(crate) load_balancer_ips: Vec<IpAddr>,
    pub(crate) node_port: Option<u16>,
}

/// Every decision for one service port in one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicePortPlan {
    /// `ns/svc:port` + protocol.
    pub name: ServicePortName,
    /// Address family.
    pub family: IpFamily,
    /// Service port.
    pub port: u16,
    /// ClusterIP frontend (None only when another Service owns the same IP and port).
    pub cluster_ip: Option<IpAddr>,
    /// NodePort frontend.
    pub node_port: Option<u16>,
    /// externalIP frontends.
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs (ipMode VIP) of this family.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges` of this family.
    pub source_ranges: Vec<IpNet>,
    /// A node IP lies inside the source ranges: LB IPs are also allowed as sources.
    pub allow_from_node: bool,
    /// ClientIP affinity timeout.
    pub affinity_timeout: Option<u32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local` on an externally reachable Service.
    pub external_local: bool,
    /// Some usable endpoint exists anywhere in the cluster.
    pub has_endpoints: bool,
    /// Endpoints for Cluster policy (ready, topology-filtered; else serving+terminating).
    pub cluster_endpoints: Vec<Backend>,
    /// Endpoints for Local policy (local ready; else local serving+terminating).
    pub local_endpoints: Vec<Backend>,
    /// `healthCheckNodePort`.
    pub health_check_node_port: Option<u16>,
    /// Frontends lost to another service port that claimed them first.
    pub shadowed: Vec<Frontend>,
    /// How connections are spread over the endpoints, and why not as asked.
    #[serde(default)]
    pub balancing: BalancingChoice,
    pub(crate) requested: Requested,
}

impl ServicePortPlan {
    /// Reachable from outside via NodePort, externalIPs or LB IPs.
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty() || !self.load_balancer_ips.is_empty()
    }

    /// Traffic to the ClusterIP.
    pub fn internal_target(&self) -> Target {
        match (self.has_endpoints, self.internal_local) {
            (false, _) => Target::Reject,
            (true, true) if self.local_endpoints.is_empty() => Target::Drop,
            (true, true) => Target::Local,
            (true, false) => Target::Cluster,
        }
    }

    /// Traffic to NodePort, externalIPs and LB IPs arriving from outside the cluster. Pod- and
    /// node-originated traffic short-circuits to the cluster set under Local policy.
    pub fn external_target(&self) -> Target {
        match (self.has_endpoints, self.external_local) {
            (false, _) => Target::Reject,
            (true, true) if self.local_endpoints.is_empty() => Target::Drop,
            (true, true) => Target::Local,
            (true, false) => Target::Cluster,
        }
    }

    /// True when LB source ranges apply (`KUBE-FW-*` in kube-proxy).
    pub fn uses_firewall(&self) -> bool {
        self.has_endpoints && !self.load_balancer_ips.is_empty() && !self.source_ranges.is_empty()
    }

    /// The Maglev table of `endpoints` (one of this plan's pools) when the plan uses Maglev:
    /// built on demand, a pure function of the endpoints' addresses and the table size.
    pub fn maglev_table(&self, endpoints: &[Backend]) -> Option<crate::maglev::MaglevTable> {
        let Balancing::Maglev { table_size } = self.balancing.balancing else { return None };
        let names: Vec<Vec<u8>> =
            endpoints.iter().map(|b| crate::maglev::backend_name(&b.ip, b.port)).collect();
        Some(crate::maglev::MaglevTable::build(&names, table_size))
    }

    /// Every endpoint this node may DNAT to (cluster set plus local set, deduplicated, sorted).
    pub fn reachable_endpoints(&self) -> Vec<Backend> {
        let mut all: Vec<Backend> =
            self.cluster_endpoints.iter().chain(&self.local_endpoints).copied().collect();
        all.sort();
        all.dedup_by_key(|b| (b.ip, b.port));
        all
    }

    /// How many endpoints [`reachable_endpoints`](Self::reachable_endpoints) lists, counted
    /// without listing them.
    pub fn reachable_count(&self) -> usize {
        let mut all: SmallVec<[(IpAddr, u16); 16]> =
            self.cluster_endpoints.iter().chain(&self.local_endpoints).map(|b| (b.ip, b.port)).collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }

    /// Every frontend this plan owns.
    pub fn frontends(&self) -> Vec<Frontend> {
        frontends_of(
            &self.name,
            self.family,
            self.port,
            self.cluster_ip,
            &self.external_ips,
            &self.load_balancer_ips,
            self.node_port,
        )
    }

    /// Requested frontends (a frontend listed twice appears twice).
    pub(super) fn requested_frontends(&self) -> impl Iterator<Item = Frontend> + '_ {
        let r = &self.requested;
        let (protocol, port, family) = (self.name.protocol, self.port, self.family);
        r.cluster_ip
            .iter()
            .chain(&r.external_ips)
            .chain(&r.load_balancer_ips)
            .map(move |ip| Frontend::Ip { ip: *ip, protocol, port })
            .chain(r.node_port.map(|port| Frontend::NodePort { family, protocol, port }))
    }

    pub(super) fn restrict_to(&mut self, owns: impl Fn(&Frontend) -> bool) {
        let (p, proto, family) = (self.port, self.name.protocol, self.family);
        let ip_owned = |ip: &IpAddr| owns(&Frontend::Ip { ip: *ip, protocol: proto, port: p });
        let r = &self.requested;
        self.cluster_ip = r.cluster_ip.filter(ip_owned);
        self.external_ips = r.external_ips.iter().copied().filter(ip_owned).collect();
        self.load_balancer_ips = r.load_balancer_ips.iter().copied().filter(ip_owned).collect();
        self.node_port =
            r.node_port.filter(|np| owns(&Frontend::NodePort { family, protocol: proto, port: *np }));
        let mut shadowed: Vec<Frontend> = self.requested_frontends().filter(|f| !owns(f)).collect();
        shadowed.sort();
        shadowed.dedup();
        self.shadowed = shadowed;
    }
}

fn frontends_of(
    name: &ServicePortName,
    family: IpFamily,
    port: u16,
    cluster_ip: Option<IpAddr>,
    external_ips: &[IpAddr],
    lb_ips: &[IpAddr],
    node_port: Option<u16>,
) -> Vec<Frontend> {
    let protocol = name.protocol;
    let mut out: Vec<Frontend> = cluster_ip
        .iter()
        .chain(external_ips)
        .chain(lb_ips)
        .map(|ip| Frontend::Ip { ip: *ip, protocol, port })
        .collect();
    out.extend(node_port.map(|port| Frontend::NodePort { family, protocol, port }));
    out.sort();
    out.dedup();
    out
}

/// Node-level facts per family that every renderer needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// Family.
    pub family: IpFamily,
    /// Node addresses of this family.
    pub node_ips: Vec<IpAddr>,
    /// How pod traffic is told from the rest.
    pub local: LocalTraffic,
    /// The cluster's Service CIDRs of this family (`ServiceCIDR` objects).
    pub service_cidrs: Vec<IpNet>,
    /// Where NodePorts are captured.
    pub node_ports: NodePortDestinations,
    /// NodePorts are served on 127.0.0.1 too ([`NodeContext::localhost_node_ports`]).
    pub localhost_node_ports: bool,
    /// Masquerade every ClusterIP connection.
    pub masquerade_all: bool,
    /// The masquerade mark bit.
    pub masquerade_mark: u32,
    /// The node-local DNS listener's addresses of this family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_dns: Option<NodeDnsPlan>,
}

/// The health-check NodePort server a Service needs (`externalTrafficPolicy: Local`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// The Service.
    pub service: ServiceName,
    /// `healthCheckNodePort`.
    pub port: u16,
    /// Local ready endpoints (distinct addresses); serving-but-terminating ones do not count.
    pub local_endpoints: usize,
}

/// A planning problem worth reporting (the rest of the ruleset is still planned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanWarning {
    /// The affected service port.
    pub service_port: ServicePortName,
    /// What happened.
    pub message: String,
}

/// The compiled plan for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ruleset {
    /// The node planned for.
    pub node: NodeContext,
    /// Node facts per family.
    pub families: BTreeMap<IpFamily, NodePlan>,
    /// Service port plans.
    pub services: Plans,
    /// Health-check servers.
    pub health_checks: BTreeMap<ServiceName, HealthCheck>,
    /// Endpoints reachable from this node, summed over plans, per family.
    pub(super) endpoint_totals: BTreeMap<IpFamily, usize>,
    /// The figures of every plan, kept current by `update`.
    #[serde(default)]
    pub(super) tally: Tally,
    /// Every plan claiming each frontend, sorted: the first one owns it.
    pub(super) claims: Index<Frontend, SmallVec<[PlanKey; 1]>>,
    pub(super) by_service: Index<ServiceName, Vec<PlanKey>>,
}

impl Ruleset {
    /// Where health-check NodePort servers listen: the NodePort addresses of every family
    /// (every local address is the IPv4 wildcard; an IPv6 wildcard would claim IPv4 too).
    pub fn health_check_addresses(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for np in self.families.values() {
            match &np.node_ports {
                NodePortDestinations::Ips(ips) => out.extend(ips.iter().copied()),
                NodePortDestinations::AllLocal if np.family == IpFamily::V4 => {
                    out.push(IpAddr::from([0u8, 0, 0, 0]));
                }
                NodePortDestinations::AllLocal => {}
            }
        }
        out
    }

    /// A ruleset with no Services.
    pub fn empty(node: &NodeContext) -> Self {
        let families = IpFamily::ALL
            .into_iter()
            .map(|family| {
                let plan = NodePlan {
                    family,
                    node_ips: node.ips_of(family),
                    local: node.local_traffic(family),
                    service_cidrs: node.service_cidrs_of(family),
                    node_ports: node.node_port_destinations(family),
                    localhost_node_ports: node.localhost_node_ports(family),
                    masquerade_all: node.settings.masquerade_all,
                    masquerade_mark: node.settings.masquerade_mark(),
                    node_dns: node.node_dns.as_ref().and_then(|d| d.plan(family)),
                };
                (family, plan)
            })
            .collect();
        Ruleset {
            node: node.clone(),
            families,
            services: Plans::new(),
            health_checks: BTreeMap::new(),
            endpoint_totals: IpFamily::ALL.into_iter().map(|f| (f, 0)).collect(),
            tally: Tally::default(),
            claims: Index::default(),
            by_service: Index::default(),
        }
    }

    /// Node facts for `family`.
    pub fn family(&self, family: IpFamily) -> &NodePlan {
        &self.families[&family]
    }

    /// Endpoints this node can reach in `family`, over every plan (kube-proxy's
    /// large-cluster criterion).
    pub fn endpoint_total(&self, family: IpFamily) -> usize {
        self.endpoint_totals.get(&family).copied().unwrap_or(0)
    }

    /// The figures of every plan (ports, endpoints, Local policies without a local endpoint,
    /// UDP ports, shadowed frontends), without walking them.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// Plans of one family, in key order.
    pub fn plans(&self, family: IpFamily) -> impl Iterator<Item = &ServicePortPlan> {
        self.services.values().filter(move |p| p.family == family)
    }

    /// Frontend conflicts and other problems, for status reporting.
    pub fn warnings(&self) -> Vec<PlanWarning> {
        let fallbacks = self.services.values().filter_map(|p| {
            let message = p.balancing.fallback.clone()?;
            Some(PlanWarning { service_port: p.name.clone(), message })
        });
        self.services
            .values()
            .flat_map(|p| {
                p.shadowed.iter().map(move |f| {
                    let owner = self.claims.get(f).and_then(|s| s.first()).map(|k| k.1.to_string());
                    PlanWarning {
                        service_port: p.name.clone(),
                        message: format!(
                            "frontend {} is already used by {}; not programmed for this Service",
                            describe(f),
                            owner.unwrap_or_else(|| "another Service".into())
                        ),
                    }
                })
            })
            .chain(fallbacks)
            .collect()
    }
}

fn describe(f: &Frontend) -> String {
    match f {
        Frontend::Ip { ip, protocol, port } => format!("{}/{protocol}", join_host_port(ip, *port)),
        Frontend::NodePort { family, protocol, port } => format!("NodePort {port}/{protocol} ({family})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NodePortAddresses, ProxySettings};
    use crate::testing::{mk_node, net};

    fn addresses(setting: NodePortAddresses) -> Vec<String> {
        let mut node = mk_node("node-a", "192.168.0.10", "zone-a");
        node.ips.push("fd00::10".parse().unwrap());
        let settings = ProxySettings { node_port_addresses: setting, ..Default::default() };
        let ruleset = Ruleset::empty(&NodeContext::from_node(&node, settings));
        ruleset.health_check_addresses().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn health_checks_listen_where_node_ports_are_served() {
        assert_eq!(
            addresses(NodePortAddresses::All),
            ["0.0.0.0"],
            "one wildcard: IPv6's would take IPv4 too"
        );
        assert_eq!(addresses(NodePortAddresses::Primary), ["192.168.0.10", "fd00::10"]);
        assert_eq!(addresses(NodePortAddresses::Cidrs(vec![net("fd00::/64")])), ["fd00::10"]);
    }
}
