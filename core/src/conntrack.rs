//! Which UDP conntrack entries are stale: the decision half of kube-proxy's conntrack
//! reconciler (pkg/proxy/conntrack). The node agent lists flows and deletes what this returns.
//!
//! UDP has no connection close, so an entry that was DNATed to an endpoint that has gone (or
//! was created while the Service had no endpoints) keeps blackholing the client's flow until it
//! times out. TCP entries are never touched (that would break graceful termination).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, Protocol};
use crate::plan::Ruleset;

/// One UDP conntrack entry: the original direction and the reply source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Flow {
    /// Original source address.
    pub src: IpAddr,
    /// Original destination address (a Service frontend, for the flows that matter).
    pub dst: IpAddr,
    /// Original source port.
    pub sport: u16,
    /// Original destination port.
    pub dport: u16,
    /// Where replies come from (the endpoint after DNAT, or `dst` when not translated).
    pub reply_src: IpAddr,
    /// Reply source port.
    pub reply_sport: u16,
}

type Endpoints = BTreeSet<(IpAddr, u16)>;

/// Flows to a UDP Service frontend (ClusterIP, externalIP, LB IP, or a NodePort on a node
/// address) whose replies do not come from one of that Service port's endpoints.
pub fn stale_udp_flows(ruleset: &Ruleset, flows: &[Flow]) -> Vec<Flow> {
    let mut by_frontend: BTreeMap<(IpAddr, u16), Endpoints> = BTreeMap::new();
    let mut by_node_port: BTreeMap<(IpFamily, u16), Endpoints> = BTreeMap::new();
    for plan in ruleset.services.values().filter(|p| p.name.protocol == Protocol::Udp) {
        let eps: Endpoints = plan.reachable_endpoints().iter().map(|b| (b.ip, b.port)).collect();
        for ip in plan.cluster_ip.iter().chain(&plan.external_ips).chain(&plan.load_balancer_ips) {
            by_frontend.insert((*ip, plan.port), eps.clone());
        }
        if let Some(np) = plan.node_port {
            by_node_port.insert((plan.family, np), eps);
        }
    }
    let node_ips: BTreeSet<IpAddr> =
        ruleset.families.values().flat_map(|f| f.node_ips.iter().copied()).collect();
    flows
        .iter()
        .filter(|f| {
            let eps = by_frontend.get(&(f.dst, f.dport)).or_else(|| {
                node_ips
                    .contains(&f.dst)
                    .then(|| by_node_port.get(&(IpFamily::of(&f.dst), f.dport)))
                    .flatten()
            });
            eps.is_some_and(|eps| !eps.contains(&(f.reply_src, f.reply_sport)))
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterState;
    use crate::plan::compile;
    use crate::testing::*;

    fn flow(dst: &str, dport: u16, reply: &str, rport: u16) -> Flow {
        Flow {
            src: ip("10.244.1.9"),
            dst: ip(dst),
            sport: 40000,
            dport,
            reply_src: ip(reply),
            reply_sport: rport,
        }
    }

    #[test]
    fn flows_to_gone_or_missing_endpoints_are_stale() {
        let mut c = ClusterState::new();
        c.apply_service(
            mk_service("ns", "dns")
                .cluster_ip("10.96.0.53")
                .port("dns", Protocol::Udp, 53)
                .node_port(30053)
                .build(),
        );
        c.apply_service(
            mk_service("ns", "web").cluster_ip("10.96.0.80").port("http", Protocol::Tcp, 80).build(),
        );
        c.apply_endpoint_slice(
            mk_slice("ns", "dns").port("dns", Protocol::Udp, 5353).ready("10.244.2.5", "node-b").build(),
        );
        let rs = compile(&c, &mk_node_context());
        let flows = [
            flow("10.96.0.53", 53, "10.244.2.5", 5353), // live endpoint
            flow("10.96.0.53", 53, "10.244.2.6", 5353), // endpoint that is gone
            flow("10.96.0.53", 53, "10.96.0.53", 53),   // created while there were no endpoints
            flow(NODE_A, 30053, "10.244.2.7", 5353),    // NodePort to a gone endpoint
            flow("10.96.0.80", 80, "10.244.9.9", 8080), // a TCP Service: not ours to judge
            flow("8.8.8.8", 53, "8.8.8.8", 53),         // not a Service
        ];
        let stale = stale_udp_flows(&rs, &flows);
        assert_eq!(stale, vec![flows[1], flows[2], flows[3]]);
    }
}
