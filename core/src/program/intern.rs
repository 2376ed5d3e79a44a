//! Shared names: the chain, set and comment names every program uses, allocated once.

use std::sync::LazyLock;

use rustc_hash::FxHashMap;

use super::ir::Name;
use crate::render::chains;

/// nftables' fixed chain, set and map names (iptables' and IPVS's are [`crate::render::chains`]'s).
const NFTABLES: &[&str] = &[
    // nftables
    "to-cluster-ip",
    "to-cluster-ip-local",
    "to-external",
    "to-external-local",
    "to-nodeport",
    "to-nodeport-local",
    "no-endpoint-reject",
    "no-endpoint-drop",
    "no-endpoint-nodeport-reject",
    "no-endpoint-nodeport-drop",
    "firewall-ips",
    "firewall-allow",
    "hairpin",
    "local-cidrs",
    "nodeport-ips",
    "cluster-lb",
    "local-lb",
    "nodeport-cluster-lb",
    "nodeport-local-lb",
    "cluster-dispatch",
    "local-dispatch",
    "nodeport-cluster-dispatch",
    "nodeport-local-dispatch",
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
];

static NAMES: LazyLock<FxHashMap<&'static str, Name>> = LazyLock::new(|| {
    let known = NFTABLES.iter().chain(chains::FIXED_CHAINS).chain(chains::IPVS_SETS);
    known.map(|n| (*n, Name::from(*n))).collect()
});

/// A shared copy of a well-known name (a fresh allocation for any other name).
pub fn name(s: &str) -> Name {
    match NAMES.get(s) {
        Some(n) => n.clone(),
        None => Name::from(s),
    }
}
