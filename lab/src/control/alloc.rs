//! What the API server allocates, kept stable across applies: node and pod addresses, pod
//! CIDRs, ClusterIPs, NodePorts and health-check NodePorts, and `metadata.generation`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// Why the lab file cannot be made into a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// An address or port asked for is taken.
    #[error("{0} is already taken")]
    Taken(String),
    /// Outside the lab's ranges.
    #[error("{0} is outside the lab's range")]
    OutOfRange(String),
    /// A range is full.
    #[error("no {0} left")]
    Exhausted(String),
    /// An address that does not parse.
    #[error("{0}")]
    Invalid(String),
}

/// The lab's address plan (the defaults follow kind and the seeds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Node network (172.18.0.0/16), its gateway (.1) and prefix length.
    pub node_net: (Ipv4Addr, u8),
    /// The gateway every node and host routes through.
    pub gateway: Ipv4Addr,
    /// Pod network: node N gets `a.b.N.0/24` (10.10.0.0/16).
    pub pod_net: (Ipv4Addr, u8),
    /// Service network (10.200.1.0/24).
    pub service_net: (Ipv4Addr, u8),
    /// The cluster DNS Service's address.
    pub dns_ip: Ipv4Addr,
    /// NodePorts.
    pub node_ports: RangeInclusive<u16>,
    /// The operator's address on the node network (as a pod's would be, reached by the
    /// agents' liveness gossip).
    pub operator_ip: Ipv4Addr,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            node_net: (Ipv4Addr::new(172, 18, 0, 0), 16),
            gateway: Ipv4Addr::new(172, 18, 0, 1),
            pod_net: (Ipv4Addr::new(10, 10, 0, 0), 16),
            service_net: (Ipv4Addr::new(10, 200, 1, 0), 24),
            dns_ip: Ipv4Addr::new(10, 200, 1, 10),
            node_ports: 30000..=32767,
            operator_ip: Ipv4Addr::new(172, 18, 0, 250),
        }
    }
}

/// Whether `ip` is in the network `(net, len)` (`net` need not be the network's first address).
pub(crate) fn in_net(ip: Ipv4Addr, (net, len): (Ipv4Addr, u8)) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & mask == u32::from(net) & mask
}

fn hosts(net: (Ipv4Addr, u8)) -> impl Iterator<Item = Ipv4Addr> {
    let base = u32::from(net.0);
    let size = 1u32 << (32 - net.1);
    (1..size - 1).map(move |i| Ipv4Addr::from(base + i))
}

impl Plan {
    /// The pod CIDR of the node with index `n`.
    pub fn pod_cidr(&self, n: u8) -> (Ipv4Addr, u8) {
        let o = self.pod_net.0.octets();
        (Ipv4Addr::new(o[0], o[1], n, 0), 24)
    }
}

/// Allocations, kept while their objects exist.
#[derive(Debug, Clone, Default)]
pub struct Allocations {
    node_ips: BTreeMap<String, Ipv4Addr>,
    node_index: BTreeMap<String, u8>,
    pod_ips: BTreeMap<(String, String), Ipv4Addr>,
    cluster_ips: BTreeMap<(String, String), Ipv4Addr>,
    node_ports: BTreeMap<(String, String, usize), u16>,
    hc_ports: BTreeMap<(String, String), u16>,
    generations: BTreeMap<(&'static str, String, String), (String, i64)>,
    /// Each EndpointSlice's endpoints and ports (serialised) and when they last changed:
    /// (namespace, Service, slice) -> (content, RFC 3339 time).
    slice_changes: BTreeMap<(String, String, String), (String, String)>,
    /// The time a build stamps changes with; without one, slices carry no trigger time.
    clock: Option<String>,
}

/// Takes a given value (checked) or the first free one.
fn take<K: Ord + Clone, V: Ord + Copy + std::fmt::Display>(
    map: &mut BTreeMap<K, V>,
    key: K,
    given: Option<V>,
    mut candidates: impl Iterator<Item = V>,
    what: &str,
) -> Result<V, ControlError> {
    let used: BTreeSet<V> = map.iter().filter(|(k, _)| **k != key).map(|(_, v)| *v).collect();
    let v = match (given, map.get(&key)) {
        (Some(g), _) if used.contains(&g) => return Err(ControlError::Taken(format!("{what} {g}"))),
        (Some(g), _) => g,
        (None, Some(v)) => *v,
        (None, None) => {
            candidates.find(|c| !used.contains(c)).ok_or_else(|| ControlError::Exhausted(what.into()))?
        }
    };
    map.insert(key, v);
    Ok(v)
}

impl Allocations {
    /// Forgets everything not in `keep` (objects that left the lab free their allocations).
    pub fn retain(
        &mut self,
        nodes: &BTreeSet<String>,
        pods: &BTreeSet<(String, String)>,
        svcs: &BTreeSet<(String, String)>,
    ) {
        self.node_ips.retain(|k, _| nodes.contains(k));
        self.node_index.retain(|k, _| nodes.contains(k));
        self.pod_ips.retain(|k, _| pods.contains(k));
        self.cluster_ips.retain(|k, _| svcs.contains(k));
        self.node_ports.retain(|(ns, n, _), _| svcs.contains(&(ns.clone(), n.clone())));
        self.hc_ports.retain(|k, _| svcs.contains(k));
        self.slice_changes.retain(|(ns, svc, _), _| svcs.contains(&(ns.clone(), svc.clone())));
    }

    /// Builds from now on happen at `now` (what a changed EndpointSlice is stamped with).
    pub fn set_clock(&mut self, now: std::time::SystemTime) {
        self.clock = k8s_openapi::jiff::Timestamp::try_from(now).ok().map(|t| t.to_string());
    }

    /// When slice `slice` of Service `ns/svc` last changed (its content is `content`), as the
    /// EndpointSlice controller's `endpoints.kubernetes.io/last-change-trigger-time`: the
    /// clock's time when it is new or differs, else the time kept. None without a clock.
    pub fn trigger_time(&mut self, ns: &str, svc: &str, slice: &str, content: String) -> Option<String> {
        let now = self.clock.clone()?;
        let key = (ns.to_string(), svc.to_string(), slice.to_string());
        let entry = self.slice_changes.entry(key).or_insert_with(|| (content.clone(), now.clone()));
        if entry.0 != content {
            *entry = (content, now);
        }
        Some(entry.1.clone())
    }

    /// A node's address (given, kept, or the next free one from .2).
    pub fn node_ip(
        &mut self,
        plan: &Plan,
        node: &str,
        given: Option<Ipv4Addr>,
    ) -> Result<Ipv4Addr, ControlError> {
        if let Some(g) = given.filter(|g| !in_net(*g, plan.node_net)) {
            return Err(ControlError::OutOfRange(format!("node {node} address {g}")));
        }
        let gw = plan.gateway;
        let free = hosts(plan.node_net).filter(move |ip| *ip != gw);
        take(&mut self.node_ips, node.to_string(), given, free, "node address")
    }

    /// A node's index (its pod CIDR is `pod_net.N.0/24`).
    pub fn node_index(&mut self, node: &str) -> Result<u8, ControlError> {
        take(&mut self.node_index, node.to_string(), None, 0..=u8::MAX, "node index")
    }

    /// A pod's address inside its node's pod CIDR (.2 upward; .1 is the node side of the veth).
    pub fn pod_ip(&mut self, cidr: (Ipv4Addr, u8), key: (String, String)) -> Result<Ipv4Addr, ControlError> {
        if self.pod_ips.get(&key).is_some_and(|ip| !in_net(*ip, cidr)) {
            self.pod_ips.remove(&key); // moved to another node
        }
        let free = hosts(cidr).skip(1);
        take(&mut self.pod_ips, key, None, free, "pod address")
    }

    /// A Service's ClusterIP (given and checked, kept, or the first free one; .1 and the DNS
    /// address are reserved).
    pub fn cluster_ip(
        &mut self,
        plan: &Plan,
        key: (String, String),
        given: Option<Ipv4Addr>,
    ) -> Result<Ipv4Addr, ControlError> {
        if let Some(g) = given.filter(|g| !in_net(*g, plan.service_net)) {
            return Err(ControlError::OutOfRange(format!("ClusterIP {g} of {}/{}", key.0, key.1)));
        }
        let reserved = [plan.dns_ip, hosts(plan.service_net).next().unwrap_or(plan.dns_ip)];
        let free = hosts(plan.service_net).filter(move |ip| !reserved.contains(ip));
        take(&mut self.cluster_ips, key, given, free, "ClusterIP")
    }

    /// A NodePort for port `index` of a Service.
    pub fn node_port(
        &mut self,
        plan: &Plan,
        key: (String, String),
        index: usize,
        given: Option<u16>,
    ) -> Result<u16, ControlError> {
        let hc: BTreeSet<u16> = self.hc_ports.values().copied().collect();
        let free = plan.node_ports.clone().filter(move |p| !hc.contains(p));
        take(&mut self.node_ports, (key.0, key.1, index), given, free, "NodePort")
    }

    /// A health-check NodePort.
    pub fn health_check_port(
        &mut self,
        plan: &Plan,
        key: (String, String),
        given: Option<u16>,
    ) -> Result<u16, ControlError> {
        let np: BTreeSet<u16> = self.node_ports.values().copied().collect();
        let free = plan.node_ports.clone().rev().filter(move |p| !np.contains(p));
        take(&mut self.hc_ports, key, given, free, "health-check NodePort")
    }

    /// `metadata.generation`: 1, then one more each time `spec` (serialised) changes.
    pub fn generation(&mut self, kind: &'static str, ns: &str, name: &str, spec: String) -> i64 {
        let entry =
            self.generations.entry((kind, ns.to_string(), name.to_string())).or_insert((spec.clone(), 1));
        if entry.0 != spec {
            *entry = (spec, entry.1 + 1);
        }
        entry.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> (String, String) {
        ("default".into(), n.into())
    }

    #[test]
    fn addresses_are_stable_checked_and_reused_after_release() {
        let plan = Plan::default();
        let mut a = Allocations::default();
        assert_eq!(
            a.node_ip(&plan, "cp", Some(Ipv4Addr::new(172, 18, 0, 2))).unwrap(),
            Ipv4Addr::new(172, 18, 0, 2)
        );
        assert_eq!(a.node_ip(&plan, "w1", None).unwrap(), Ipv4Addr::new(172, 18, 0, 3));
        assert!(matches!(
            a.node_ip(&plan, "w2", Some(Ipv4Addr::new(172, 18, 0, 3))),
            Err(ControlError::Taken(_))
        ));
        assert!(matches!(
            a.node_ip(&plan, "w2", Some(Ipv4Addr::new(10, 0, 0, 1))),
            Err(ControlError::OutOfRange(_))
        ));
        assert_eq!(
            a.cluster_ip(&plan, key("a"), None).unwrap(),
            Ipv4Addr::new(10, 200, 1, 2),
            ".1 is reserved"
        );
        assert_eq!(a.cluster_ip(&plan, key("a"), None).unwrap(), Ipv4Addr::new(10, 200, 1, 2), "kept");
        assert_eq!(a.cluster_ip(&plan, key("dns"), Some(plan.dns_ip)).unwrap(), plan.dns_ip);
        let cidr = plan.pod_cidr(a.node_index("w1").unwrap());
        assert_eq!(cidr, (Ipv4Addr::new(10, 10, 0, 0), 24));
        assert_eq!(a.pod_ip(cidr, key("p1")).unwrap(), Ipv4Addr::new(10, 10, 0, 2));
        assert_eq!(a.node_port(&plan, key("a"), 0, None).unwrap(), 30000);
        assert_eq!(a.health_check_port(&plan, key("a"), None).unwrap(), 32767);
        a.retain(&BTreeSet::new(), &BTreeSet::new(), &BTreeSet::new());
        assert_eq!(a.node_ip(&plan, "w9", None).unwrap(), Ipv4Addr::new(172, 18, 0, 2), "freed");
    }

    #[test]
    fn generation_moves_with_the_spec() {
        let mut a = Allocations::default();
        assert_eq!(a.generation("Service", "ns", "a", "x".into()), 1);
        assert_eq!(a.generation("Service", "ns", "a", "x".into()), 1);
        assert_eq!(a.generation("Service", "ns", "a", "y".into()), 2);
    }
}
