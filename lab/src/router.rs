//! The lab's upstream routers ([`LabRouter`], as the lab file gives them; pure: [`crate::frr`]
//! and [`crate::netns`] carry it out):
//!
//! ```text
//!  tw-<lab>-lan  br0 (the node network)
//!   ├─ tw-<lab>-n-<node>   FRR (zebra, bfdd, bgpd) driven by the node's agent
//!   └─ tw-<lab>-r-<router> eth0 on the node network; FRR peering with every node over eBGP,
//!       │                  BFD at 100 ms × 3, multipath over them, hashed on layer 4
//!       └─ out0 (bridge, the outside network)
//!           └─ tw-<lab>-h-<host>   a host behind the router (`spec.router`)
//! ```
//! The LAN's gateway routes the outside network through the router, so the nodes' replies
//! (default route: the gateway) find their way back.

use std::net::Ipv4Addr;

use crate::control::{NodeState, Plan, in_net};
use crate::spec::{LabHost, LabRouter};
use crate::topology::{Cmd, Names, attach, cmd, ifname, sysctls};

impl LabRouter {
    /// The outside network (address, prefix length).
    pub fn outside_net(&self) -> (Ipv4Addr, u8) {
        let (ip, len) = self.outside;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        (Ipv4Addr::from(u32::from(ip) & mask), len)
    }

    /// Whether `ip` is on the outside network.
    pub fn is_outside(&self, ip: Ipv4Addr) -> bool {
        in_net(ip, self.outside)
    }
}

/// BFD's timers on the router's side (milliseconds) and its detect multiplier.
pub const BFD_INTERVAL_MS: u32 = 100;
/// Packets missed before BFD declares a peer down.
pub const BFD_MULTIPLIER: u32 = 3;

/// The router: attached to the node network, forwarding, hashing multipath on layer 4, with a
/// bridge for the outside network; the LAN's gateway routes that network through it.
pub fn router_up(n: &Names, plan: &Plan, r: &LabRouter) -> Vec<Cmd> {
    let ns = n.router(&r.name);
    let mut out = attach(n, plan, &ns, &ifname('r', &r.name), r.ip);
    out.push(sysctls(
        &ns,
        &[
            "net.ipv4.ip_forward=1",
            "net.ipv4.fib_multipath_hash_policy=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ],
    ));
    out.push(cmd(&format!("ip -n {ns} link add out0 type bridge")));
    out.push(cmd(&format!("ip -n {ns} addr add {}/{} dev out0", r.outside.0, r.outside.1)));
    out.push(cmd(&format!("ip -n {ns} link set out0 up")));
    let lan = n.lan();
    out.push(sysctls(&lan, &["net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0"]));
    let (net, len) = r.outside_net();
    out.push(cmd(&format!("ip -n {lan} route replace {net}/{len} via {}", r.ip)));
    out
}

/// A host behind router `r`: a veth into the router's outside bridge, its address, a default
/// route through the router.
pub fn outside_host_up(n: &Names, r: &LabRouter, host: &LabHost) -> Vec<Cmd> {
    let (ns, router_ns) = (n.host(&host.name), n.router(&r.name));
    let link = ifname('h', &host.name);
    vec![
        cmd(&format!("ip netns add {ns}")),
        cmd(&format!("ip -n {ns} link set lo up")),
        cmd(&format!("ip -n {router_ns} link add {link} type veth peer name eth0 netns {ns}")),
        cmd(&format!("ip -n {router_ns} link set {link} master out0 up")),
        cmd(&format!("ip -n {ns} addr add {}/{} dev eth0", host.ip, r.outside.1)),
        cmd(&format!("ip -n {ns} link set eth0 up")),
        cmd(&format!("ip -n {ns} route add default via {}", r.outside.0)),
    ]
}

/// Deletes router `router`'s end of outside host `host`'s link.
pub fn unplug_outside_host(n: &Names, router: &str, host: &str) -> Cmd {
    cmd(&format!("ip -n {} link del {}", n.router(router), ifname('h', host)))
}

/// Removes what [`router_up`] added to the LAN: the router's port and the gateway's route to
/// its outside network.
pub fn router_down(n: &Names, r: &LabRouter) -> Vec<Cmd> {
    let (net, len) = r.outside_net();
    vec![
        cmd(&format!("ip -n {} link del {}", n.lan(), ifname('r', &r.name))),
        cmd(&format!("ip -n {} route del {net}/{len} via {}", n.lan(), r.ip)),
    ]
}

/// The router's FRR configuration: eBGP with every node (whatever its ASN), BFD at
/// [`BFD_INTERVAL_MS`] × [`BFD_MULTIPLIER`], a connect retry of 1 s (a node back on the network
/// is peered again at once), and up to 8 paths per prefix.
pub fn frr_config(r: &LabRouter, nodes: &[NodeState]) -> String {
    let mut c = format!(
        "frr defaults traditional\nhostname {}\nlog stdout informational\nip forwarding\n!\n",
        r.name
    );
    c.push_str(&format!(
        "bfd\n profile lab\n  detect-multiplier {BFD_MULTIPLIER}\n  receive-interval {BFD_INTERVAL_MS}\n  transmit-interval {BFD_INTERVAL_MS}\n exit\n !\nexit\n!\n"
    ));
    c.push_str(&format!(
        "router bgp {}\n bgp router-id {}\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n",
        r.asn, r.ip
    ));
    for node in nodes {
        let ip = node.ip;
        c.push_str(&format!(
            " neighbor {ip} remote-as external\n neighbor {ip} description {}\n neighbor {ip} timers 30 90\n neighbor {ip} timers connect 1\n neighbor {ip} bfd\n neighbor {ip} bfd profile lab\n",
            node.name
        ));
    }
    c.push_str(" !\n address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\nexit\n!\n");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tor() -> LabRouter {
        LabRouter {
            name: "tor".into(),
            ip: Ipv4Addr::new(172, 18, 0, 254),
            asn: 64513,
            outside: (Ipv4Addr::new(192, 168, 50, 1), 24),
        }
    }

    fn node(name: &str, last: u8, index: u8) -> NodeState {
        NodeState {
            name: name.into(),
            ip: Ipv4Addr::new(172, 18, 0, last),
            index,
            pod_cidr: (Ipv4Addr::new(10, 10, index, 0), 24),
        }
    }

    #[test]
    fn the_router_peers_with_every_node_with_fast_bfd_and_multipath() {
        let text = frr_config(&tor(), &[node("w1", 4, 1), node("w2", 5, 2)]);
        for line in [
            "router bgp 64513",
            " bgp router-id 172.18.0.254",
            " neighbor 172.18.0.4 remote-as external",
            " neighbor 172.18.0.5 bfd profile lab",
            " neighbor 172.18.0.5 timers connect 1",
            "  receive-interval 100",
            "  detect-multiplier 3",
            "  maximum-paths 8",
            "ip forwarding",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
        }
        assert_eq!(text.matches("remote-as").count(), 2);
    }

    #[test]
    fn the_router_hashes_on_layer_4_and_the_gateway_routes_the_outside_through_it() {
        let n = Names::new("demo");
        let text: Vec<String> = router_up(&n, &Plan::default(), &tor()).iter().map(|c| c.join(" ")).collect();
        assert!(text.iter().any(|t| t.contains("net.ipv4.fib_multipath_hash_policy=1")), "{text:?}");
        assert!(text.contains(&"ip -n tw-demo-r-tor addr add 172.18.0.254/16 dev eth0".to_string()));
        assert!(
            text.contains(&"ip -n tw-demo-lan route replace 192.168.50.0/24 via 172.18.0.254".to_string())
        );
        let host =
            LabHost { name: "far".into(), ip: Ipv4Addr::new(192, 168, 50, 10), router: Some("tor".into()) };
        let text: Vec<String> = outside_host_up(&n, &tor(), &host).iter().map(|c| c.join(" ")).collect();
        assert!(text.contains(&"ip -n tw-demo-h-far route add default via 192.168.50.1".to_string()));
        assert!(text.iter().any(|t| t.starts_with("ip -n tw-demo-r-tor link add h")), "{text:?}");
        assert!(tor().is_outside(Ipv4Addr::new(192, 168, 50, 10)));
        assert!(!tor().is_outside(Ipv4Addr::new(172, 18, 0, 100)));
    }
}
