//! A pod's sandbox, as a CNI plugin makes it: a network namespace named as the lab names pods
//! (`tw-LAB-p-NS-POD`, so `tideway lab exec POD` finds it), a veth to the node, an address from
//! the node's pod CIDR and the routes: the lab topology's own commands
//! ([`crate::topology::pod_up`], [`crate::topology::unplug_pod`]). And its resolv.conf, by
//! `dnsPolicy`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::control::{NodeState, PodState};
use crate::topology::{Cmd, Names};

use super::config::KubeletConfig;

/// The node as the topology's commands want it.
pub fn node_state(cfg: &KubeletConfig) -> NodeState {
    NodeState {
        name: cfg.node_name.clone(),
        ip: cfg.node_ip().unwrap_or(Ipv4Addr::UNSPECIFIED),
        index: 0,
        pod_cidr: cfg.pod_net().unwrap_or((Ipv4Addr::UNSPECIFIED, 32)),
    }
}

fn pod_state(cfg: &KubeletConfig, namespace: &str, name: &str, ip: Ipv4Addr) -> PodState {
    PodState {
        namespace: namespace.into(),
        name: name.into(),
        node: cfg.node_name.clone(),
        ip,
        labels: BTreeMap::new(),
        ready: false,
        ports: vec![],
        hostname: None,
        subdomain: None,
    }
}

/// The commands that make pod `namespace/name`'s sandbox with `ip`.
pub fn up(cfg: &KubeletConfig, namespace: &str, name: &str, ip: Ipv4Addr) -> Vec<Cmd> {
    let names = Names::new(&cfg.lab);
    crate::topology::pod_up(&names, &node_state(cfg), &pod_state(cfg, namespace, name, ip))
}

/// The command that unplugs it from the node (its namespace then goes with
/// [`crate::netns::remove`]).
pub fn unplug(cfg: &KubeletConfig, namespace: &str, name: &str) -> Cmd {
    let names = Names::new(&cfg.lab);
    crate::topology::unplug_pod(&names, &pod_state(cfg, namespace, name, Ipv4Addr::UNSPECIFIED))
}

/// Pod `namespace/name`'s network namespace.
pub fn netns(cfg: &KubeletConfig, namespace: &str, name: &str) -> String {
    Names::new(&cfg.lab).pod(namespace, name)
}

/// The node's network namespace.
pub fn node_netns(cfg: &KubeletConfig) -> String {
    Names::new(&cfg.lab).node(&cfg.node_name)
}

/// The resolv.conf a pod in `namespace` gets under `dns_policy` (`host_network` for a pod on
/// the node's network), or `None` for the node's own (`Default`, and `ClusterFirst` on the host
/// network, as kubelet falls back).
pub fn resolv_conf(
    cfg: &KubeletConfig,
    namespace: &str,
    dns_policy: &str,
    host_network: bool,
) -> Option<String> {
    let cluster = match dns_policy {
        "Default" | "None" => false,
        "ClusterFirstWithHostNet" => true,
        _ => !host_network,
    };
    if !cluster || cfg.cluster_dns.is_empty() {
        return None;
    }
    let d = &cfg.cluster_domain;
    let servers: String = cfg.cluster_dns.iter().map(|ip| format!("nameserver {ip}\n")).collect();
    Some(format!("{servers}search {namespace}.svc.{d} svc.{d} {d}\noptions ndots:5\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> KubeletConfig {
        serde_json::from_value(serde_json::json!({
            "lab": "demo", "nodeName": "w1", "kubeconfig": "/k",
            "addresses": [{"type": "InternalIP", "address": "172.18.0.4"}],
            "podCIDR": "10.10.1.0/24", "clusterDNS": ["10.200.1.10"], "leaseDurationSeconds": 40,
            "renewIntervalMs": 10000, "tidewayBinary": "/b/tideway", "stateDir": "/s",
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_sandbox_is_the_labs_pod_namespace_and_its_dns_follows_the_policy() {
        let cmds: Vec<String> =
            up(&cfg(), "default", "web", Ipv4Addr::new(10, 10, 1, 2)).iter().map(|c| c.join(" ")).collect();
        assert_eq!(cmds[0], "ip netns add tw-demo-p-default-web");
        assert!(
            cmds.contains(&"ip -n tw-demo-n-w1 addr add 10.10.1.1/32 dev p".to_string())
                || cmds.iter().any(|c| c.starts_with("ip -n tw-demo-n-w1 addr add 10.10.1.1/32 dev p"))
        );
        assert!(cmds.contains(&"ip -n tw-demo-p-default-web route add default via 10.10.1.1".to_string()));
        assert!(unplug(&cfg(), "default", "web").join(" ").starts_with("ip -n tw-demo-n-w1 link del p"));
        assert_eq!(
            resolv_conf(&cfg(), "shop", "ClusterFirst", false).unwrap(),
            "nameserver 10.200.1.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
        assert!(resolv_conf(&cfg(), "shop", "ClusterFirstWithHostNet", true).is_some());
        assert_eq!(
            resolv_conf(&cfg(), "shop", "ClusterFirst", true),
            None,
            "the host network falls back to the node's"
        );
        assert_eq!(resolv_conf(&cfg(), "shop", "Default", false), None);
    }
}
