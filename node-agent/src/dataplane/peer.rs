//! A kube-proxy on the node, seen by the chains only it writes
//! ([`KUBE_PROXY_SIGNATURES`]).
//!
//! iptables and IPVS modes write kube-proxy's own names (`KUBE-SERVICES`, `KUBE-SVC-…`,
//! `kube-ipvs0`, the `KUBE-*` ipsets), so beside a running kube-proxy the two would rewrite
//! each other's rules. While one is seen, those modes write nothing and their clean-ups remove
//! nothing; once kube-proxy is gone (`kube-proxy --cleanup`, or a reboot, after its DaemonSet is
//! removed) the next retry programs the node. nftables mode keeps its own table and is not
//! concerned.

use tideway_core::render::names::KUBE_PROXY_SIGNATURES;

use crate::exec;

/// Where kube-proxy was seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kube-proxy's {mode} mode programs this node (its chain {chain} is in the {table} table of {tool}): \
     iptables and IPVS modes write no KUBE-* object beside it; they program the node once kube-proxy \
     is gone (its DaemonSet removed, then `kube-proxy --cleanup` or a reboot)"
)]
pub struct KubeProxySeen {
    /// kube-proxy's mode the chain belongs to.
    pub mode: &'static str,
    /// The table holding it.
    pub table: &'static str,
    /// The chain.
    pub chain: &'static str,
    /// The tool that lists it (`iptables-nft`, `ip6tables-legacy`, ...).
    pub tool: String,
}

/// The first kube-proxy signature chain in either iptables backend and either family. The
/// legacy backend is asked only where its tables exist already: listing them would load
/// `ip_tables` and create them.
pub fn kube_proxy() -> Option<KubeProxySeen> {
    for (family, names) in
        [("iptables", "/proc/net/ip_tables_names"), ("ip6tables", "/proc/net/ip6_tables_names")]
    {
        let legacy_tables = std::fs::read_to_string(names).unwrap_or_default();
        for variant in ["nft", "legacy"] {
            let tool = format!("{family}-{variant}");
            for &(table, chain, mode) in KUBE_PROXY_SIGNATURES {
                if variant == "legacy" && !legacy_tables.lines().any(|t| t == table) {
                    continue;
                }
                if exec::run(&tool, &["-w", "5", "-t", table, "-S", chain], None).is_ok() {
                    return Some(KubeProxySeen { mode, table, chain, tool });
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_chain_and_the_way_out() {
        let seen = KubeProxySeen {
            mode: "iptables",
            table: "nat",
            chain: "KUBE-PROXY-CANARY",
            tool: "iptables-nft".into(),
        };
        let text = seen.to_string();
        assert!(text.starts_with("kube-proxy's iptables mode programs this node (its chain KUBE-PROXY-CANARY is in the nat table of iptables-nft)"), "{text}");
        assert!(text.contains("kube-proxy --cleanup"), "{text}");
    }
}
