//! What the planner needs to know about the node it plans for.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::config::{DetectLocal, NodePortAddresses, ProxyMode, ProxySettings};

/// `127.0.0.1`, where localhost NodePorts are served.
const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
use crate::cluster::ClusterState;
use crate::model::{Node, ServiceName};
use crate::net::{IpFamily, IpNet};

/// The node a ruleset is compiled for, plus the proxy settings that apply to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeContext {
    /// Node name (compared with `endpoints[].nodeName`).
    pub name: String,
    /// Topology zone (label `topology.kubernetes.io/zone`).
    pub zone: Option<String>,
    /// Node addresses, primary first per family.
    pub ips: Vec<IpAddr>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<IpNet>,
    /// Proxy settings resolved for this node.
    pub settings: ProxySettings,
    /// The cluster's Service CIDRs (every `ServiceCIDR` object's), sorted.
    #[serde(default)]
    pub service_cidrs: Vec<IpNet>,
    /// The node-local DNS listener the agent runs, when it runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_dns: Option<NodeDns>,
}

/// The mark bit of pods' DNS queries the node-local listener takes: policy routing delivers
/// them to the node itself (`ip rule fwmark 0x2000/0x2000 lookup 53`, a `local` default route
/// in that table). Clear of kube-proxy's masquerade (0x4000) and drop (0x8000) bits.
pub const NODE_DNS_MARK: u32 = 0x2000;

/// The node-local DNS listener: where pods' queries reach it without conntrack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDns {
    /// The link-local address held on the node's `lo` (`169.254.20.10`), for pods whose
    /// resolv.conf names it.
    pub address: IpAddr,
    /// The cluster DNS Service's ClusterIPs: pods' queries to them are the listener's while
    /// it is up (a transparent socket takes them), the Service's otherwise. Not in IPVS mode,
    /// where IPVS takes the ClusterIP's packets at LOCAL_IN before any socket sees them.
    pub service_ips: Vec<IpAddr>,
}

impl NodeDns {
    /// The listener on `address` for the cluster DNS Service `service` as `state` holds it
    /// (no Service yet: the link-local address alone).
    pub fn of(address: IpAddr, service: &ServiceName, state: &ClusterState) -> NodeDns {
        let service_ips = state.service(service).map(|s| s.cluster_ips.clone()).unwrap_or_default();
        NodeDns { address, service_ips }
    }

    /// What the rules of `family` need.
    pub fn plan(&self, family: IpFamily) -> Option<NodeDnsPlan> {
        let of = |ips: &[IpAddr]| -> Vec<IpAddr> {
            ips.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect()
        };
        let (local, diverted) = (of(&[self.address]), of(&self.service_ips));
        (!local.is_empty() || !diverted.is_empty()).then_some(NodeDnsPlan {
            local,
            diverted,
            mark: NODE_DNS_MARK,
        })
    }
}

/// The node-local DNS listener's addresses of one family, as the rules see them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDnsPlan {
    /// Held on `lo`: queries to them are exempt from conntrack.
    pub local: Vec<IpAddr>,
    /// The cluster DNS Service's: queries to them are marked for local delivery and exempt
    /// from conntrack only while the listener's transparent socket is there.
    pub diverted: Vec<IpAddr>,
    /// [`NODE_DNS_MARK`].
    pub mark: u32,
}

/// How a node tells pod traffic from the rest, for one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalTraffic {
    /// It cannot (no cluster CIDR, or no pod CIDR, of the family): only external frontends
    /// masquerade.
    Undetected,
    /// Sources inside these networks (`ClusterCIDR`, `NodeCIDR`).
    Sources(Vec<IpNet>),
    /// Packets that came in through the interface `name`, or (`prefix`) through any interface
    /// whose name starts with it (`BridgeInterface`, `InterfaceNamePrefix`). A node's own
    /// packets come in through none, so they are not local, as with the source networks.
    Interface {
        /// The bridge, or the prefix of the pods' interfaces.
        name: String,
        /// `name` is a prefix.
        prefix: bool,
    },
}

impl LocalTraffic {
    /// The interface pod traffic arrives on, when the detector is by interface (for the packet
    /// tracer: the bridge, or the prefix's first interface).
    pub fn pod_interface(&self) -> Option<String> {
        match self {
            LocalTraffic::Interface { name, prefix: false } => Some(name.clone()),
            LocalTraffic::Interface { name, prefix: true } => Some(format!("{name}0")),
            _ => None,
        }
    }
}

/// Where NodePorts are captured for one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodePortDestinations {
    /// Any local address except loopback.
    AllLocal,
    /// Only these addresses.
    Ips(Vec<IpAddr>),
}

impl NodeContext {
    /// Builds the context from a Node object and the settings that apply to it.
    pub fn from_node(node: &Node, settings: ProxySettings) -> Self {
        NodeContext {
            name: node.name.clone(),
            zone: node.zone().map(str::to_string),
            ips: node.ips.clone(),
            pod_cidrs: node.pod_cidrs.clone(),
            settings,
            service_cidrs: Vec::new(),
            node_dns: None,
        }
    }

    /// The context with the cluster's Service CIDRs.
    pub fn with_service_cidrs(self, service_cidrs: Vec<IpNet>) -> Self {
        NodeContext { service_cidrs, ..self }
    }

    /// The context with a node-local DNS listener.
    pub fn with_node_dns(self, node_dns: Option<NodeDns>) -> Self {
        NodeContext { node_dns, ..self }
    }

    /// The Service CIDRs of `family`.
    pub fn service_cidrs_of(&self, family: IpFamily) -> Vec<IpNet> {
        family.nets_of(&self.service_cidrs)
    }

    /// The node's primary address of `family`.
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.ips.iter().copied().find(|ip| IpFamily::of(ip) == family)
    }

    /// Node addresses of `family`.
    pub fn ips_of(&self, family: IpFamily) -> Vec<IpAddr> {
        self.ips.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect()
    }

    /// How pod traffic of `family` is told from the rest (kube-proxy's local-traffic detector).
    pub fn local_traffic(&self, family: IpFamily) -> LocalTraffic {
        let nets = match &self.settings.detect_local {
            DetectLocal::ClusterCidr => &self.settings.cluster_cidrs,
            DetectLocal::NodeCidr => &self.pod_cidrs,
            DetectLocal::BridgeInterface(name) => {
                return LocalTraffic::Interface { name: name.clone(), prefix: false };
            }
            DetectLocal::InterfaceNamePrefix(name) => {
                return LocalTraffic::Interface { name: name.clone(), prefix: true };
            }
        };
        let nets = family.nets_of(nets);
        if nets.is_empty() { LocalTraffic::Undetected } else { LocalTraffic::Sources(nets) }
    }

    /// Where NodePorts of `family` are served.
    pub fn node_port_destinations(&self, family: IpFamily) -> NodePortDestinations {
        let s = &self.settings;
        match s.node_port_addresses.for_mode(s.mode) {
            NodePortAddresses::All => NodePortDestinations::AllLocal,
            // `for_mode` never answers Unset.
            NodePortAddresses::Primary | NodePortAddresses::Unset => {
                NodePortDestinations::Ips(self.primary_ip(family).into_iter().collect())
            }
            NodePortAddresses::Cidrs(cidrs) => {
                let mut ips: Vec<IpAddr> = self
                    .ips_of(family)
                    .into_iter()
                    .filter(|ip| cidrs.iter().any(|c| c.contains(ip)))
                    .collect();
                if self.localhost_node_ports(family) {
                    ips.push(LOCALHOST);
                }
                NodePortDestinations::Ips(ips)
            }
        }
    }

    /// True when NodePorts of `family` are also served on 127.0.0.1 (kube-proxy's iptables
    /// mode: `route_localnet` and the `KUBE-FIREWALL` anti-martian rule come with it). The
    /// nftables and IPVS modes never do it, nor does IPv6 (`::1` cannot be routed).
    pub fn localhost_node_ports(&self, family: IpFamily) -> bool {
        let s = &self.settings;
        let takes_loopback = match s.node_port_addresses.for_mode(s.mode) {
            NodePortAddresses::All => true,
            NodePortAddresses::Primary | NodePortAddresses::Unset => false,
            NodePortAddresses::Cidrs(cidrs) => cidrs.iter().any(|c| c.contains(&LOCALHOST)),
        };
        s.localhost_node_ports && s.mode == ProxyMode::Iptables && family == IpFamily::V4 && takes_loopback
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{mk_node, net};

    fn context(mode: ProxyMode, addresses: NodePortAddresses, localhost: bool) -> NodeContext {
        let mut node = mk_node("node-a", "192.168.0.10", "zone-a");
        node.ips.push("fd00::10".parse().unwrap());
        let settings = ProxySettings {
            mode,
            node_port_addresses: addresses,
            localhost_node_ports: localhost,
            ..Default::default()
        };
        NodeContext::from_node(&node, settings)
    }

    #[test]
    fn localhost_node_ports_follow_kube_proxys_iptables_mode() {
        use NodePortAddresses::{All, Cidrs, Primary};
        use ProxyMode::{Iptables, Ipvs, Nftables};
        let loopback = || Cidrs(vec![net("127.0.0.0/8"), net("192.168.0.0/24")]);
        let cases = [
            (Iptables, All, true, true),
            (Iptables, All, false, false),
            (Iptables, Primary, true, false),
            (Iptables, loopback(), true, true),
            (Iptables, Cidrs(vec![net("192.168.0.0/24")]), true, false),
            (Nftables, All, true, false),
            (Ipvs, All, true, false),
        ];
        for (mode, addresses, setting, want) in cases {
            let c = context(mode, addresses.clone(), setting);
            assert_eq!(c.localhost_node_ports(IpFamily::V4), want, "{mode} {addresses:?} {setting}");
            assert!(!c.localhost_node_ports(IpFamily::V6), "never IPv6");
        }
        // A CIDR holding 127.0.0.1 puts it among the NodePort addresses in iptables mode only.
        let ips = |mode| match context(mode, loopback(), true).node_port_destinations(IpFamily::V4) {
            NodePortDestinations::Ips(ips) => ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
            NodePortDestinations::AllLocal => vec!["all".into()],
        };
        assert_eq!(ips(Iptables), ["192.168.0.10", "127.0.0.1"]);
        assert_eq!(ips(Nftables), ["192.168.0.10"]);
    }

    /// Unset, `nodePortAddresses` is kube-proxy's default for the mode: every local address
    /// in iptables mode (127.0.0.1 included) and IPVS mode, the primary IPs in nftables mode.
    #[test]
    fn unset_node_port_addresses_are_kube_proxys_default_per_mode() {
        use NodePortAddresses::Unset;
        use ProxyMode::{Iptables, Ipvs, Nftables};
        let served = |mode| context(mode, Unset, true).node_port_destinations(IpFamily::V4);
        assert_eq!(served(Iptables), NodePortDestinations::AllLocal);
        assert_eq!(served(Ipvs), NodePortDestinations::AllLocal);
        assert_eq!(served(Nftables), NodePortDestinations::Ips(vec!["192.168.0.10".parse().unwrap()]));
        assert!(context(Iptables, Unset, true).localhost_node_ports(IpFamily::V4));
        assert!(!context(Ipvs, Unset, true).localhost_node_ports(IpFamily::V4));
        assert!(!context(Nftables, Unset, true).localhost_node_ports(IpFamily::V4));
        assert_eq!(ProxySettings::default().node_port_addresses, Unset);
    }
}
