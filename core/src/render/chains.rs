//! kube-proxy's names for the iptables chains and the IPVS mode's ipsets, written once. The
//! iptables and IPVS renderers use kube-proxy's names (its dashboards, `iptables-save | grep`
//! habits and `kube-proxy --cleanup` know them); the hashed per-Service chains are
//! [`super::names`]'s.

/// The filter table.
pub const FILTER: &str = "filter";
/// The nat table.
pub const NAT: &str = "nat";
/// The raw table (before conntrack).
pub const RAW: &str = "raw";

/// nat: the ClusterIP, external IP and LoadBalancer dispatch (both modes); filter: the
/// no-endpoint rejects.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// filter: rejects and drops for external traffic to Services without (local) endpoints.
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
/// nat, iptables mode: NodePort dispatch.
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
/// nat and filter, IPVS mode: NodePorts and their health-check ports.
pub const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
/// filter: conntrack's accepted and invalid packets in FORWARD.
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// filter: `loadBalancerSourceRanges`.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// nat: masquerade what was marked.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// nat: mark a packet for masquerade.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// nat, IPVS mode: LoadBalancer dispatch; also the ipset of LoadBalancer addresses.
pub const KUBE_LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
/// filter, IPVS mode: `loadBalancerSourceRanges` by ipset.
pub const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
/// filter, IPVS mode: drops traffic to the IPVS interface's addresses that no Service uses.
pub const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
/// filter: kubelet's anti-martian chain, which kube-proxy writes too when it serves localhost
/// NodePorts. Not Tideway's to remove.
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";
/// kube-proxy's iptables mode's flush detector, in every table it uses; never Tideway's.
pub const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";
/// kube-proxy's IPVS mode filter of the node's own traffic to load balancers; never Tideway's.
pub const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";

/// raw, with a node-local DNS listener: its queries marked for local delivery and exempt
/// from conntrack ([`crate::render::node_dns`]).
pub const TIDEWAY_NODE_DNS: &str = "TIDEWAY-NODE-DNS";
/// raw, with a node-local DNS listener: its replies exempt from conntrack.
pub const TIDEWAY_NODE_DNS_OUTPUT: &str = "TIDEWAY-NODE-DNS-OUTPUT";

/// Every fixed chain the iptables and IPVS renderers create (per-Service chains aside).
pub const FIXED_CHAINS: &[&str] = &[
    TIDEWAY_NODE_DNS,
    TIDEWAY_NODE_DNS_OUTPUT,
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_NODEPORTS,
    KUBE_NODE_PORT,
    KUBE_FORWARD,
    KUBE_PROXY_FIREWALL,
    KUBE_POSTROUTING,
    KUBE_MARK_MASQ,
    KUBE_LOAD_BALANCER,
    KUBE_SOURCE_RANGES_FIREWALL,
    KUBE_IPVS_FILTER,
];

/// IPVS mode's ipsets: ClusterIP:port.
pub const KUBE_CLUSTER_IP: &str = "KUBE-CLUSTER-IP";
/// Endpoint:port:endpoint, for hairpin masquerade.
pub const KUBE_LOOP_BACK: &str = "KUBE-LOOP-BACK";
/// External IP:port.
pub const KUBE_EXTERNAL_IP: &str = "KUBE-EXTERNAL-IP";
/// External IP:port of `externalTrafficPolicy: Local` Services.
pub const KUBE_EXTERNAL_IP_LOCAL: &str = "KUBE-EXTERNAL-IP-LOCAL";
/// LoadBalancer IP:port of `externalTrafficPolicy: Local` Services.
pub const KUBE_LOAD_BALANCER_LOCAL: &str = "KUBE-LOAD-BALANCER-LOCAL";
/// LoadBalancer IP:port with `loadBalancerSourceRanges`.
pub const KUBE_LOAD_BALANCER_FW: &str = "KUBE-LOAD-BALANCER-FW";
/// LoadBalancer IP:port:source range allowed.
pub const KUBE_LOAD_BALANCER_SOURCE_CIDR: &str = "KUBE-LOAD-BALANCER-SOURCE-CIDR";
/// LoadBalancer IP:port:source IP allowed.
pub const KUBE_LOAD_BALANCER_SOURCE_IP: &str = "KUBE-LOAD-BALANCER-SOURCE-IP";
/// `healthCheckNodePort`s.
pub const KUBE_HEALTH_CHECK_NODE_PORT: &str = "KUBE-HEALTH-CHECK-NODE-PORT";
/// Every address on the IPVS interface (for [`KUBE_IPVS_FILTER`]).
pub const KUBE_IPVS_IPS: &str = "KUBE-IPVS-IPS";
/// ClusterIP:port of `internalTrafficPolicy: Local` Services without a local endpoint.
pub const KUBE_INTERNAL_NO_LOCAL: &str = "KUBE-INTERNAL-NO-LOCAL";
/// External and LoadBalancer IP:port of `externalTrafficPolicy: Local` Services without a
/// local endpoint.
pub const KUBE_EXTERNAL_NO_LOCAL: &str = "KUBE-EXTERNAL-NO-LOCAL";

/// Every ipset IPVS mode creates.
pub const IPVS_SETS: &[&str] = &[
    KUBE_CLUSTER_IP,
    KUBE_LOOP_BACK,
    KUBE_EXTERNAL_IP,
    KUBE_EXTERNAL_IP_LOCAL,
    KUBE_LOAD_BALANCER,
    KUBE_LOAD_BALANCER_LOCAL,
    KUBE_LOAD_BALANCER_FW,
    KUBE_LOAD_BALANCER_SOURCE_CIDR,
    KUBE_LOAD_BALANCER_SOURCE_IP,
    KUBE_HEALTH_CHECK_NODE_PORT,
    KUBE_IPVS_IPS,
    KUBE_INTERNAL_NO_LOCAL,
    KUBE_EXTERNAL_NO_LOCAL,
];
