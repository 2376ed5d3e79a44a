//! Which UDP conntrack entries are stale: the decision half of kube-proxy's conntrack
//! reconciler (pkg/proxy/conntrack). The node agent lists flows and deletes what this returns.
//! Also which Services the flows in conntrack are using ([`plans_in_use`]), and so what a node
//! whose rules are gone programs first ([`ports_first`]).
//!
//! UDP has no connection close, so an entry that was DNATed to an endpoint that has gone (or
//! was created while the Service had no endpoints) keeps blackholing the client's flow until it
//! times out. TCP entries are never touched (that would break graceful termination).
//!
//! Stricter than kube-proxy, on purpose: kube-proxy keeps the entries of every endpoint still
//! serving, routed to or not (pkg/proxy/conntrack/cleanup.go); this keeps only those of the
//! endpoints this node routes to. Tried the kube-proxy way, a cluster moving off CoreDNS lost
//! lookups when its Pods exited at the end of their lameduck: a lookup whose source port an
//! earlier one had used still followed that entry to the Pod that was gone, until its
//! endpoint left the slices. Deleting the entries as soon as the endpoint terminates loses at
//! most a reply already in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, Protocol};
use crate::plan::{PlanKey, Ruleset, ServicePortPlan};

/// One conntrack entry: the original direction and the reply source.
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
    let frontends = Frontends::of(ruleset, Protocol::Udp, |_, plan| {
        plan.reachable_endpoints().iter().map(|b| (b.ip, b.port)).collect::<Endpoints>()
    });
    flows
        .iter()
        .filter(|f| frontends.get(f).is_some_and(|eps| !eps.contains(&(f.reply_src, f.reply_sport))))
        .copied()
        .collect()
}

/// The service ports that `flows` of `protocol` (established or not, any conntrack entry)
/// were sent to: what a node whose rules are gone programs first, so that those connections
/// are translated again before every other Service is.
pub fn plans_in_use(ruleset: &Ruleset, protocol: Protocol, flows: &[Flow]) -> BTreeSet<PlanKey> {
    if flows.is_empty() {
        return BTreeSet::new();
    }
    let frontends = Frontends::of(ruleset, protocol, |key, _| key);
    flows.iter().filter_map(|f| frontends.get(f).map(|k| (*k).clone())).collect()
}

/// A first transaction is not worth it when the ports in use are more than one in this many
/// of all: it would then cost nearly as much as the full one it delays.
pub const FIRST_AT_MOST_ONE_IN: usize = 4;

/// What a node whose rules are gone programs first: the service ports `flows` (of any
/// protocol) were sent to, or none when they are too many for a first transaction to pay
/// ([`FIRST_AT_MOST_ONE_IN`]).
pub fn ports_first(ruleset: &Ruleset, flows: &[(Protocol, Flow)]) -> BTreeSet<PlanKey> {
    let mut ports = BTreeSet::new();
    for protocol in Protocol::ALL {
        let of: Vec<Flow> = flows.iter().filter(|(p, _)| *p == protocol).map(|(_, f)| *f).collect();
        ports.extend(plans_in_use(ruleset, protocol, &of));
    }
    if ports.len() * FIRST_AT_MOST_ONE_IN > ruleset.services.len() {
        return BTreeSet::new();
    }
    ports
}

/// Where flows of one protocol enter Services: something of each frontend's plan.
struct Frontends<V> {
    by_address: BTreeMap<(IpAddr, u16), V>,
    by_node_port: BTreeMap<(IpFamily, u16), V>,
    node_ips: BTreeSet<IpAddr>,
}

impl<V: Clone> Frontends<V> {
    fn of<'r>(
        ruleset: &'r Ruleset,
        protocol: Protocol,
        value: impl Fn(&'r PlanKey, &'r ServicePortPlan) -> V,
    ) -> Self {
        let mut by_address = BTreeMap::new();
        let mut by_node_port = BTreeMap::new();
        for (key, plan) in ruleset.services.iter().filter(|(_, p)| p.name.protocol == protocol) {
            let v = value(key, plan);
            for ip in plan.cluster_ip.iter().chain(&plan.external_ips).chain(&plan.load_balancer_ips) {
                by_address.insert((*ip, plan.port), v.clone());
            }
            if let Some(np) = plan.node_port {
                by_node_port.insert((plan.family, np), v);
            }
        }
        let node_ips = ruleset.families.values().flat_map(|f| f.node_ips.iter().copied()).collect();
        Frontends { by_address, by_node_port, node_ips }
    }

    /// What the frontend `f` was sent to holds, if it is one.
    fn get(&self, f: &Flow) -> Option<&V> {
        self.by_address.get(&(f.dst, f.dport)).or_else(|| {
            self.node_ips.contains(&f.dst).then(|| self.by_node_port.get(&(IpFamily::of(&f.dst), f.dport)))?
        })
    }
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
        c.apply(
            mk_service("ns", "dns")
                .cluster_ip("10.96.0.53")
                .port("dns", Protocol::Udp, 53)
                .node_port(30053)
                .build(),
        );
        c.apply(mk_service("ns", "web").cluster_ip("10.96.0.80").port("http", Protocol::Tcp, 80).build());
        c.apply(mk_slice("ns", "dns").port("dns", Protocol::Udp, 5353).ready("10.244.2.5", "node-b").build());
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

    #[test]
    fn flows_to_a_terminating_endpoint_go_once_others_are_ready() {
        let mut c = ClusterState::new();
        c.apply(mk_service("ns", "dns").cluster_ip("10.96.0.53").port("dns", Protocol::Udp, 53).build());
        c.apply(
            mk_slice("ns", "dns")
                .port("dns", Protocol::Udp, 5353)
                .ready("10.244.2.5", "node-b")
                .endpoint("10.244.2.6", "node-b", false, true, true) // in its lameduck
                .endpoint("10.244.2.7", "node-b", false, false, true) // stopped serving
                .build(),
        );
        let rs = compile(&c, &mk_node_context());
        let flows = [
            flow("10.96.0.53", 53, "10.244.2.5", 5353),
            flow("10.96.0.53", 53, "10.244.2.6", 5353),
            flow("10.96.0.53", 53, "10.244.2.7", 5353),
        ];
        // Stricter than kube-proxy, which keeps the serving one's (the module's overview).
        assert_eq!(stale_udp_flows(&rs, &flows), vec![flows[1], flows[2]]);
    }

    #[test]
    fn flows_name_the_service_ports_they_use() {
        let mut c = ClusterState::new();
        c.apply(
            mk_service("ns", "web")
                .cluster_ip("10.96.0.80")
                .port("http", Protocol::Tcp, 80)
                .node_port(30080)
                .port("dns", Protocol::Udp, 53)
                .build(),
        );
        c.apply(mk_service("ns", "idle").cluster_ip("10.96.0.81").port("http", Protocol::Tcp, 80).build());
        let rs = compile(&c, &mk_node_context());
        let http = rs.services.keys().find(|k| k.1.service.name == "web" && k.1.protocol == Protocol::Tcp);
        let http = http.expect("web's TCP port").clone();
        let node_port = rs.services[&http].node_port.expect("a NodePort");
        let flows = [
            flow("10.96.0.80", 80, "10.244.2.5", 8080),   // to the ClusterIP
            flow(NODE_A, node_port, "10.244.2.5", 8080),  // to the NodePort on this node
            flow("10.96.0.80", 8080, "10.96.0.80", 8080), // not a frontend's port
            flow("8.8.8.8", 80, "8.8.8.8", 80),           // not a Service
        ];
        assert_eq!(plans_in_use(&rs, Protocol::Tcp, &flows), BTreeSet::from([http]));
        // A frontend is its protocol's: port 80 has no UDP plan, port 53 no TCP one.
        let dns = flow("10.96.0.80", 53, "10.244.2.5", 5353);
        assert!(plans_in_use(&rs, Protocol::Tcp, &[dns]).is_empty());
        let udp = plans_in_use(&rs, Protocol::Udp, &[dns, flows[0]]);
        assert_eq!(udp.iter().map(|k| k.1.protocol).collect::<Vec<_>>(), vec![Protocol::Udp]);
        assert!(plans_in_use(&rs, Protocol::Sctp, &flows).is_empty());
    }

    #[test]
    fn ports_first_are_those_in_use_unless_they_are_many() {
        let mut c = ClusterState::new();
        for (name, ip) in [("a", "10.96.0.1"), ("b", "10.96.0.2"), ("c", "10.96.0.3"), ("d", "10.96.0.4")] {
            c.apply(mk_service("ns", name).cluster_ip(ip).port("http", Protocol::Tcp, 80).build());
        }
        let rs = compile(&c, &mk_node_context());
        let a = rs.services.keys().find(|k| k.1.service.name == "a").expect("a's port").clone();
        let to = |ip: &str| (Protocol::Tcp, flow(ip, 80, "10.244.2.5", 8080));
        // One port in four: first.
        assert_eq!(ports_first(&rs, &[to("10.96.0.1"), to("8.8.8.8")]), BTreeSet::from([a]));
        // Two in four: a first transaction would be half the full one.
        assert!(ports_first(&rs, &[to("10.96.0.1"), to("10.96.0.2")]).is_empty());
        // A UDP flow to a TCP frontend uses nothing.
        assert!(ports_first(&rs, &[(Protocol::Udp, flow("10.96.0.1", 80, "10.244.2.5", 8080))]).is_empty());
    }
}
