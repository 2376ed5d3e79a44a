//! iptables backend: kube-proxy's chain layout ([`lower_plan`]) and `iptables-restore` text ([`text`]).

mod lower;
pub mod text;

pub use crate::render::chains::{FILTER, NAT, RAW};
pub use lower::{LARGE_CLUSTER_ENDPOINTS, base, is_large, lower_plan};

use crate::program::{ChainRef, Program, name};
use crate::render::chains::{TIDEWAY_NODE_DNS, TIDEWAY_NODE_DNS_OUTPUT};
use crate::render::names::is_service_chain;

/// The node-local DNS listener's chains: gone with it.
const NODE_DNS_CHAINS: [&str; 2] = [TIDEWAY_NODE_DNS, TIDEWAY_NODE_DNS_OUTPUT];

/// The per-Service chains, and the node-local DNS listener's, among `present` (`(table,
/// chain)` as the kernel lists them) that `p` no longer has: what a full sync deletes (after
/// the jumps to them from built-in chains). Other fixed chains and chains of others stay.
pub fn stale_chains<'a>(p: &Program, present: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<ChainRef> {
    let assembled = p.assemble();
    let desired: std::collections::BTreeSet<(&str, &str)> =
        assembled.chains.iter().map(|c| (c.def.table, &*c.def.name)).collect();
    present
        .into_iter()
        .filter(|(t, c)| (is_service_chain(c) || NODE_DNS_CHAINS.contains(c)) && !desired.contains(&(*t, *c)))
        .map(|(t, c)| ChainRef {
            table: [NAT, RAW].into_iter().find(|k| *k == t).unwrap_or(FILTER),
            name: name(c),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{IpFamily, Protocol};
    use crate::testing::{mk_node_context, mk_service, mk_slice};

    #[test]
    fn only_per_service_chains_the_program_lost_are_stale() {
        let mut cluster = crate::cluster::ClusterState::new();
        cluster
            .apply(mk_service("ns1", "web").cluster_ip("10.96.0.10").port("http", Protocol::Tcp, 80).build());
        cluster.apply(
            mk_slice("ns1", "web").port("http", Protocol::Tcp, 8080).ready("10.244.1.5", "node-a").build(),
        );
        let ruleset = crate::plan::compile(&cluster, &mk_node_context());
        let p =
            crate::render::Renderer::new(crate::config::ProxyMode::Iptables, &ruleset).lower(IpFamily::V4);
        let assembled = p.assemble();
        let mut present: Vec<(&str, &str)> =
            assembled.chains.iter().map(|c| (c.def.table, &*c.def.name)).collect();
        present.extend([
            (NAT, "KUBE-SVC-GONE000000000000"),
            (NAT, "KUBE-SEP-GONE000000000000"),
            (FILTER, "KUBE-SERVICES"),
            (FILTER, "SOMEONE-ELSES"),
            (FILTER, "KUBE-FIREWALL"),
        ]);
        let stale: Vec<(&str, String)> =
            stale_chains(&p, present).into_iter().map(|c| (c.table, c.name.to_string())).collect();
        assert_eq!(
            stale,
            [(NAT, "KUBE-SVC-GONE000000000000".to_string()), (NAT, "KUBE-SEP-GONE000000000000".into())]
        );
    }
}
