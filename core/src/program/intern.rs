//! Shared names: the chain, set and comment names every program uses, allocated once.

use std::sync::LazyLock;

use rustc_hash::FxHashMap;

use super::Name;

const KNOWN: &[&str] = &[
    // nftables
    "service-ips",
    "service-nodeports",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "firewall-ips",
    "firewall-allow",
    "hairpin",
    "local-cidrs",
    "nodeport-ips",
    "cluster-lb",
    "local-lb",
    "nodeport-cluster-lb",
    "nodeport-local-lb",
    "cluster-endpoints",
    "local-endpoints",
    "nodeport-cluster-endpoints",
    "nodeport-local-endpoints",
    "mark-for-masquerade",
    "masquerading",
    "reject-chain",
    "services",
    "cluster-ip",
    "cluster-ip-local",
    "external",
    "external-local",
    "nodeport",
    "nodeport-local",
    "firewall-check",
    "service-endpoints-check",
    "nodeport-endpoints-check",
    // iptables / IPVS
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-NODE-PORT",
    "KUBE-FORWARD",
    "KUBE-PROXY-FIREWALL",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-LOAD-BALANCER",
    "KUBE-CLUSTER-IP",
    "KUBE-LOOP-BACK",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER-LOCAL",
    "KUBE-LOAD-BALANCER-FW",
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    "KUBE-HEALTH-CHECK-NODE-PORT",
    "KUBE-IPVS-IPS",
    "KUBE-INTERNAL-NO-LOCAL",
    "KUBE-EXTERNAL-NO-LOCAL",
];

static NAMES: LazyLock<FxHashMap<&'static str, Name>> =
    LazyLock::new(|| KNOWN.iter().map(|n| (*n, Name::from(*n))).collect());

/// A shared copy of a well-known name (a fresh allocation for any other name).
pub fn name(s: &str) -> Name {
    match NAMES.get(s) {
        Some(n) => n.clone(),
        None => Name::from(s),
    }
}
