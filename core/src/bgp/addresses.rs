//! The LoadBalancer addresses one node's advertisement decision reads: each LoadBalancer
//! Service's ingress IPs with the pool holding each, the Service's external traffic needs, and
//! the node with the Service's endpoints there. An address no pool holds is not Tideway's to
//! advertise (MetalLB too advertises only its pools' addresses).

use crate::announce::{LocalEndpoints, NodeInfo, ServiceTraffic};
use crate::cluster::ClusterState;
use crate::model::{Service, ServiceType};

use super::decide::decide;
use super::node::{NodeBgp, ServiceAddress};
use crate::model::bgp::Objects;

/// What node `node` advertises to which peer, decided from the state (its router id: its
/// first IPv4 address; a peer's `passwordSecret` read from the state's password Secrets); None
/// when the node is unknown.
pub fn decide_for(state: &ClusterState, node: &str) -> Option<NodeBgp> {
    let n = state.node(node)?;
    let info = NodeInfo::of(n, state.agent_liveness(node), LocalEndpoints::Absent);
    let router_id = n.ips.iter().copied().find(std::net::IpAddr::is_ipv4);
    let mut peers = state.bgp().peers.clone();
    for p in peers.iter_mut().filter(|p| p.password.is_none()) {
        let secret = p.password_secret.as_deref().and_then(|name| state.bgp_secret(name));
        p.password = secret.map(|s| s.password.clone());
    }
    let objects = Objects { peers: &peers, ..state.bgp().objects() };
    Some(decide(&info, router_id, objects, &service_addresses(state, node)))
}

/// Every LoadBalancer address as node `node` sees it; none when the node is unknown.
pub fn service_addresses(state: &ClusterState, node: &str) -> Vec<ServiceAddress> {
    let Some(node) = state.node(node) else { return Vec::new() };
    let liveness = state.agent_liveness(&node.name);
    let mut out = Vec::new();
    for svc in state.services().filter(|s| s.service_type == ServiceType::LoadBalancer) {
        let ips: Vec<_> = svc.load_balancer_ingress.iter().filter_map(|i| i.ip).collect();
        if ips.is_empty() {
            continue;
        }
        let (traffic, local) = endpoints(state, svc, &node.name);
        for ip in ips {
            let Some(pool) = state.pools().find(|p| p.pool.holds(ip)) else { continue };
            out.push(ServiceAddress {
                service: svc.name.clone(),
                ip,
                pool: pool.name().to_string(),
                traffic,
                node: NodeInfo::of(node, liveness, local),
            });
        }
    }
    out
}

/// Whether any endpoint of `svc` serves, and its endpoints on `node`.
fn endpoints(state: &ClusterState, svc: &Service, node: &str) -> (ServiceTraffic, LocalEndpoints) {
    let mut serving = false;
    let mut here = Vec::new();
    for ep in state.endpoint_slices_for(&svc.name).flat_map(|s| &s.endpoints) {
        serving |= ep.ready || ep.serving;
        if ep.node_name.as_deref() == Some(node) {
            here.push((ep.ready, ep.serving));
        }
    }
    let traffic = ServiceTraffic { policy: svc.external_traffic_policy, serving_endpoints: serving };
    (traffic, LocalEndpoints::of(here))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;
    use crate::ipam::Pool;
    use crate::model::{L2Settings, LoadBalancerPool, PoolOrigin};
    use crate::testing::{ip, mk_node, mk_service, mk_slice};

    fn pool(name: &str, addresses: &[&str]) -> LoadBalancerPool {
        LoadBalancerPool {
            pool: Pool::new(name, addresses),
            l2: L2Settings::default(),
            generation: 1,
            origin: PoolOrigin::Tideway,
        }
    }

    #[test]
    fn each_pool_address_is_seen_with_its_pool_policy_and_the_nodes_endpoints() {
        let state = ClusterState::from_snapshot(Snapshot {
            nodes: vec![mk_node("node-a", "172.18.0.2", "z"), mk_node("node-b", "172.18.0.3", "z")],
            pools: vec![pool("gold", &["172.18.240.0/28"]), pool("silver", &["172.18.241.1-172.18.241.9"])],
            services: vec![
                mk_service("demo", "web").lb_ip("172.18.240.1").lb_ip("172.18.241.5").build(),
                mk_service("demo", "local").lb_ip("172.18.240.2").etp_local().build(),
                mk_service("demo", "foreign").lb_ip("192.0.2.1").build(),
                mk_service("demo", "pending").load_balancer().build(),
                mk_service("demo", "plain").cluster_ip("10.96.0.9").build(),
            ],
            endpoint_slices: vec![
                mk_slice("demo", "web").ready("10.1.0.1", "node-b").build(),
                mk_slice("demo", "local").ready("10.1.0.2", "node-a").build(),
            ],
            ..Default::default()
        });
        let seen: Vec<_> = service_addresses(&state, "node-a")
            .into_iter()
            .map(|a| (a.service.name, a.ip, a.pool, a.traffic.serving_endpoints, a.node.local))
            .collect();
        assert_eq!(
            seen,
            [
                ("local".into(), ip("172.18.240.2"), "gold".into(), true, LocalEndpoints::Ready),
                ("web".into(), ip("172.18.240.1"), "gold".into(), true, LocalEndpoints::Absent),
                ("web".into(), ip("172.18.241.5"), "silver".into(), true, LocalEndpoints::Absent),
            ]
        );
        assert!(service_addresses(&state, "node-gone").is_empty());
    }

    /// From the cluster state to what each node advertises: a Cluster Service from both nodes,
    /// a Local one only from the node with its endpoint.
    #[test]
    fn the_state_decides_each_nodes_routes() {
        use crate::bgp::{BgpAdvertisement, BgpPeer};
        use crate::cluster::{BgpObject, BgpSpec};
        let peer = BgpPeer::new("router", 64512, 64513, ip("172.18.0.1"));
        let state = ClusterState::from_snapshot(Snapshot {
            nodes: vec![mk_node("node-a", "172.18.0.2", "z"), mk_node("node-b", "172.18.0.3", "z")],
            pools: vec![pool("gold", &["172.18.240.0/28"])],
            services: vec![
                mk_service("demo", "web").lb_ip("172.18.240.1").build(),
                mk_service("demo", "local").lb_ip("172.18.240.2").etp_local().build(),
            ],
            endpoint_slices: vec![
                mk_slice("demo", "web").ready("10.1.0.1", "node-b").build(),
                mk_slice("demo", "local").ready("10.1.0.2", "node-a").build(),
            ],
            bgp: vec![
                BgpObject::tideway("router", BgpSpec::Peer(peer)),
                BgpObject::tideway("all", BgpSpec::Advertisement(BgpAdvertisement::new("all"))),
            ],
            ..Default::default()
        });
        let routes = |node: &str| -> Vec<String> {
            let bgp = decide_for(&state, node).expect("the node is known");
            bgp.prefixes().iter().map(ToString::to_string).collect()
        };
        assert_eq!(routes("node-a"), ["172.18.240.1/32", "172.18.240.2/32"]);
        assert_eq!(routes("node-b"), ["172.18.240.1/32"]);
    }

    /// A peer's `passwordSecret` is read from the state's Secrets; without the Secret, the
    /// peer is left out and named.
    #[test]
    fn a_password_secret_is_read_from_the_state() {
        use crate::bgp::{BgpPeer, Conflict};
        use crate::cluster::{BgpObject, BgpSecret, BgpSpec};
        let peer = BgpPeer {
            password_secret: Some("bgp-auth".into()),
            ..BgpPeer::new("tor", 64512, 64513, ip("172.18.0.1"))
        };
        let mut state = ClusterState::from_snapshot(Snapshot {
            nodes: vec![mk_node("node-a", "172.18.0.2", "z")],
            bgp: vec![BgpObject::tideway("tor", BgpSpec::Peer(peer))],
            ..Default::default()
        });
        let decided = decide_for(&state, "node-a").unwrap();
        assert!(decided.sessions.is_empty());
        assert!(
            matches!(&decided.conflicts[..], [Conflict::PasswordUnread { .. }]),
            "{:?}",
            decided.conflicts
        );
        state.take_changes();
        state.apply(BgpSecret { name: "bgp-auth".into(), password: "s3cret".into() });
        assert!(state.take_changes().bgp, "a Secret is a BGP change");
        let decided = decide_for(&state, "node-a").unwrap();
        assert_eq!(decided.sessions[0].peer.password.as_deref(), Some("s3cret"));
        assert!(!format!("{:?}", state.bgp_secret("bgp-auth")).contains("s3cret"), "never printed");
    }
}
