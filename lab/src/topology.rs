//! The lab's network, planned as commands (pure; [`crate::netns`] runs them):
//!
//! ```text
//!  tw-<lab>-lan      bridge br0 = the node network, 172.18.0.1/16 = the gateway
//!   ├─ tw-<lab>-n-<node>   eth0 172.18.0.N/16, default via the gateway, routes to the other
//!   │   │                  nodes' pod CIDRs (host-gw); forwarding on, loose rp_filter
//!   │   └─ tw-<lab>-p-<ns>-<pod>   eth0 10.10.N.x/32 <-veth-> node (10.10.N.1/32 on its side)
//!   └─ tw-<lab>-h-<host>   eth0 on the node network, default via the gateway
//! ```
//! Every command names one of the lab's namespaces (`ip -n NS`, `ip netns exec NS`): nothing
//! touches the host's own namespace, and every name carries the lab's prefix so `lab down`
//! finds everything from the names alone.

use std::net::Ipv4Addr;

use crate::control::{NodeState, Plan, PodState};
use crate::spec::LabHost;

/// One command (argv; the first word is the program).
pub type Cmd = Vec<String>;

pub(crate) fn cmd(s: &str) -> Cmd {
    s.split_whitespace().map(str::to_string).collect()
}

/// Short stable interface names (at most 15 characters): a letter and 8 hex digits of a hash.
pub(crate) fn ifname(letter: char, key: &str) -> String {
    // FNV-1a, stable across runs and versions (std's hasher is not).
    let mut h: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{letter}{h:08x}")
}

/// The names of one lab's namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    lab: String,
}

impl Names {
    /// Names for the lab `lab`.
    pub fn new(lab: &str) -> Names {
        Names { lab: lab.to_string() }
    }

    /// The lab's name.
    pub fn lab(&self) -> &str {
        &self.lab
    }

    /// Every namespace of the lab starts with this.
    pub fn prefix(&self) -> String {
        format!("tw-{}-", self.lab)
    }

    /// The LAN namespace.
    pub fn lan(&self) -> String {
        format!("{}lan", self.prefix())
    }

    /// A node's namespace.
    pub fn node(&self, node: &str) -> String {
        format!("{}n-{node}", self.prefix())
    }

    /// A pod's namespace.
    pub fn pod(&self, ns: &str, pod: &str) -> String {
        format!("{}p-{ns}-{pod}", self.prefix())
    }

    /// The operator's namespace (it reads and writes the lab's files, and gossips with the
    /// agents on the node network).
    pub fn operator(&self) -> String {
        format!("{}operator", self.prefix())
    }

    /// A router's namespace.
    pub fn router(&self, router: &str) -> String {
        format!("{}r-{router}", self.prefix())
    }

    /// A host's namespace.
    pub fn host(&self, host: &str) -> String {
        format!("{}h-{host}", self.prefix())
    }
}

fn prefix_len(plan: &Plan) -> u8 {
    plan.node_net.1
}

/// The LAN: the bridge and the gateway address.
pub fn lan_up(n: &Names, plan: &Plan) -> Vec<Cmd> {
    let lan = n.lan();
    vec![
        cmd(&format!("ip netns add {lan}")),
        cmd(&format!("ip -n {lan} link set lo up")),
        cmd(&format!("ip -n {lan} link add br0 type bridge")),
        cmd(&format!("ip -n {lan} addr add {}/{} dev br0", plan.gateway, prefix_len(plan))),
        cmd(&format!("ip -n {lan} link set br0 up")),
    ]
}

/// The operator's namespace, on the node network as a pod would be (the agents' liveness
/// gossip reaches it there).
pub fn operator_up(n: &Names, plan: &Plan) -> Vec<Cmd> {
    attach(n, plan, &n.operator(), &ifname('o', "operator"), plan.operator_ip)
}

/// A machine on the node network: its namespace, a veth into the bridge, its address and a
/// default route through the gateway.
pub(crate) fn attach(n: &Names, plan: &Plan, ns: &str, link: &str, ip: Ipv4Addr) -> Vec<Cmd> {
    let lan = n.lan();
    vec![
        cmd(&format!("ip netns add {ns}")),
        cmd(&format!("ip -n {ns} link set lo up")),
        cmd(&format!("ip -n {lan} link add {link} type veth peer name eth0 netns {ns}")),
        cmd(&format!("ip -n {lan} link set {link} master br0 up")),
        cmd(&format!("ip -n {ns} addr add {ip}/{} dev eth0", prefix_len(plan))),
        cmd(&format!("ip -n {ns} link set eth0 up")),
        cmd(&format!("ip -n {ns} route add default via {}", plan.gateway)),
    ]
}

pub(crate) fn sysctls(ns: &str, settings: &[&str]) -> Cmd {
    let mut c = cmd(&format!("ip netns exec {ns} sysctl -qw"));
    c.extend(settings.iter().map(|s| s.to_string()));
    c
}

/// A node: attached to the LAN, forwarding, with routes to every other node's pod CIDR.
/// `route_localnet` starts off, as on a fresh node, whatever the host's (a new namespace copies
/// the host's IPv4 settings): the agent turns it on for localhost NodePorts.
pub fn node_up(n: &Names, plan: &Plan, node: &NodeState, others: &[NodeState]) -> Vec<Cmd> {
    let ns = n.node(&node.name);
    let mut out = attach(n, plan, &ns, &ifname('n', &node.name), node.ip);
    out.push(sysctls(
        &ns,
        &[
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.rp_filter=2",
            "net.ipv4.conf.default.rp_filter=2",
            "net.ipv4.conf.all.route_localnet=0",
            "net.ipv4.conf.all.send_redirects=0",
            "net.ipv4.icmp_ratelimit=0",
        ],
    ));
    for o in others.iter().filter(|o| o.name != node.name) {
        out.push(route(&ns, o));
    }
    out
}

/// The route on node namespace `ns` to `to`'s pods.
pub fn route(ns: &str, to: &NodeState) -> Cmd {
    cmd(&format!("ip -n {ns} route replace {}/{} via {}", to.pod_cidr.0, to.pod_cidr.1, to.ip))
}

/// The LAN end of node or host `name`'s link (`kind` `n` or `h`): its port on the bridge.
pub fn lan_port(kind: char, name: &str) -> String {
    ifname(kind, name)
}

/// Sets node `node`'s port on the bridge down or up (the node's `eth0` loses or regains its
/// carrier, as with a pulled cable or a dead switch port).
pub fn node_link(n: &Names, node: &str, up: bool) -> Cmd {
    let state = if up { "up" } else { "down" };
    cmd(&format!("ip -n {} link set {} {state}", n.lan(), ifname('n', node)))
}

/// Deletes the LAN end of node or host `name`'s link (`kind` `n` or `h`): the pair goes at
/// once, where deleting the namespace leaves the kernel to remove its links in the background
/// (and a namespace of the same name built right after would find the old link there).
pub fn unplug_from_lan(n: &Names, kind: char, name: &str) -> Cmd {
    cmd(&format!("ip -n {} link del {}", n.lan(), ifname(kind, name)))
}

/// Deletes the node end of pod `pod`'s link, as [`unplug_from_lan`] does for nodes.
pub fn unplug_pod(n: &Names, pod: &PodState) -> Cmd {
    let link = ifname('p', &format!("{}/{}", pod.namespace, pod.name));
    cmd(&format!("ip -n {} link del {link}", n.node(&pod.node)))
}

/// Removes that route.
pub fn unroute(ns: &str, to: &NodeState) -> Cmd {
    cmd(&format!("ip -n {ns} route del {}/{}", to.pod_cidr.0, to.pod_cidr.1))
}

/// The pods' gateway on their node: the first address of the node's pod CIDR.
pub fn pod_gateway(node: &NodeState) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(node.pod_cidr.0) + 1)
}

/// A pod: a veth to its node, a /32 address and a default route through the node.
pub fn pod_up(n: &Names, node: &NodeState, pod: &PodState) -> Vec<Cmd> {
    let (ns, node_ns) = (n.pod(&pod.namespace, &pod.name), n.node(&node.name));
    let link = ifname('p', &format!("{}/{}", pod.namespace, pod.name));
    let gw = pod_gateway(node);
    vec![
        cmd(&format!("ip netns add {ns}")),
        cmd(&format!("ip -n {ns} link set lo up")),
        cmd(&format!("ip -n {node_ns} link add {link} type veth peer name eth0 netns {ns}")),
        cmd(&format!("ip -n {node_ns} link set {link} up")),
        cmd(&format!("ip -n {node_ns} addr add {gw}/32 dev {link}")),
        cmd(&format!("ip -n {node_ns} route add {}/32 dev {link}", pod.ip)),
        cmd(&format!("ip -n {ns} addr add {}/32 dev eth0", pod.ip)),
        cmd(&format!("ip -n {ns} link set eth0 up")),
        cmd(&format!("ip -n {ns} route add {gw} dev eth0")),
        cmd(&format!("ip -n {ns} route add default via {gw}")),
    ]
}

/// A host on the node network; Service addresses are routed through `via` (a node), as a
/// gateway that knows the cluster would.
pub fn host_up(n: &Names, plan: &Plan, host: &LabHost, via: Option<Ipv4Addr>) -> Vec<Cmd> {
    let ns = n.host(&host.name);
    let mut out = attach(n, plan, &ns, &ifname('h', &host.name), host.ip);
    if let Some(via) = via {
        out.push(cmd(&format!(
            "ip -n {ns} route add {}/{} via {via}",
            plan.service_net.0, plan.service_net.1
        )));
    }
    out
}

/// The resolv.conf of a pod in `namespace` (hosts use `default`).
pub fn resolv_conf(plan: &Plan, namespace: &str) -> String {
    format!(
        "nameserver {}\nsearch {namespace}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
        plan.dns_ip
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ip: [u8; 4], index: u8) -> NodeState {
        NodeState { name: name.into(), ip: ip.into(), index, pod_cidr: (Ipv4Addr::new(10, 10, index, 0), 24) }
    }

    #[test]
    fn every_command_stays_in_the_labs_namespaces() {
        let (n, plan) = (Names::new("demo"), Plan::default());
        let nodes = [node("cp", [172, 18, 0, 2], 0), node("w1", [172, 18, 0, 4], 1)];
        let pod = PodState {
            namespace: "default".into(),
            name: "web".into(),
            node: "w1".into(),
            ip: Ipv4Addr::new(10, 10, 1, 2),
            labels: Default::default(),
            ready: true,
            ports: vec![],
            hostname: None,
            subdomain: None,
        };
        let host = LabHost { name: "mypc".into(), ip: Ipv4Addr::new(172, 18, 0, 100), router: None };
        let all: Vec<Cmd> = lan_up(&n, &plan)
            .into_iter()
            .chain(node_up(&n, &plan, &nodes[1], &nodes))
            .chain(pod_up(&n, &nodes[1], &pod))
            .chain(host_up(&n, &plan, &host, Some(nodes[0].ip)))
            .collect();
        for c in &all {
            let line = c.join(" ");
            let ns_word = match c.get(1).map(String::as_str) {
                Some("-n") => &c[2],
                Some("netns") => &c[3],
                _ => panic!("a command outside the lab's namespaces: {line}"),
            };
            assert!(ns_word.starts_with("tw-demo-"), "{line}");
            for link in c.iter().skip(3) {
                assert!(
                    link.len() <= 15 || link.contains('.') || link.contains('=') || link.starts_with("tw-"),
                    "{line}"
                );
            }
        }
        let text: Vec<String> = all.iter().map(|c| c.join(" ")).collect();
        assert!(text.contains(&"ip -n tw-demo-n-w1 route replace 10.10.0.0/24 via 172.18.0.2".to_string()));
        assert!(text.contains(&"ip -n tw-demo-p-default-web route add default via 10.10.1.1".to_string()));
        assert!(text.contains(&"ip -n tw-demo-h-mypc route add 10.200.1.0/24 via 172.18.0.2".to_string()));
        assert!(text.iter().any(|t| t.starts_with("ip -n tw-demo-lan link add n")
            && t.ends_with("peer name eth0 netns tw-demo-n-w1")));
    }

    #[test]
    fn interface_names_are_short_and_stable() {
        assert_eq!(ifname('p', "default/webpod1"), ifname('p', "default/webpod1"));
        assert_ne!(ifname('p', "default/webpod1"), ifname('p', "default/webpod2"));
        assert_eq!(ifname('n', "myk8s-control-plane").len(), 9);
        assert_eq!(
            resolv_conf(&Plan::default(), "kube-system").lines().next(),
            Some("nameserver 10.200.1.10")
        );
    }
}
