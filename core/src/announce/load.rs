//! How many addresses each node announces: the operator's global counts, which spread new and
//! moving addresses over the nodes (MetalLB hashes alone, so one node can end up with most).
//!
//! Counted per address, not per Service: Services sharing an address (a sharing key) are one
//! announcement. Kept as decisions are made, so a reconcile that re-decides one Service costs
//! a few map operations, not a count over every Service.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::model::ServiceName;

/// The announcer of every decided address, and the number of addresses per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Load {
    /// Each Service's first address and its announcer.
    by_service: BTreeMap<ServiceName, (IpAddr, String)>,
    /// Per node: its addresses, with how many Services hold each.
    per_node: BTreeMap<String, BTreeMap<IpAddr, usize>>,
}

impl Load {
    /// An empty count.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `svc`'s address `ip` is announced by `node` (None: by nobody, or the
    /// Service is gone), replacing what was recorded for `svc`.
    pub fn set(&mut self, svc: &ServiceName, ip: IpAddr, node: Option<&str>) {
        if let Some((old_ip, old_node)) = self.by_service.remove(svc) {
            self.forget(&old_node, old_ip);
        }
        if let Some(node) = node {
            *self.per_node.entry(node.to_string()).or_default().entry(ip).or_default() += 1;
            self.by_service.insert(svc.clone(), (ip, node.to_string()));
        }
    }

    /// Forgets `svc` (it has no address, or no announcer).
    pub fn remove(&mut self, svc: &ServiceName) {
        if let Some((ip, node)) = self.by_service.remove(svc) {
            self.forget(&node, ip);
        }
    }

    fn forget(&mut self, node: &str, ip: IpAddr) {
        let Some(ips) = self.per_node.get_mut(node) else { return };
        if let Some(n) = ips.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                ips.remove(&ip);
            }
        }
        if ips.is_empty() {
            self.per_node.remove(node);
        }
    }

    /// The number of addresses `node` announces.
    pub fn of(&self, node: &str) -> usize {
        self.per_node.get(node).map_or(0, BTreeMap::len)
    }

    /// The number of addresses `node` announces other than `ip` (the load a choice for `ip`
    /// weighs: every Service sharing `ip` then sees the same counts, and agrees).
    pub fn besides(&self, node: &str, ip: IpAddr) -> usize {
        self.per_node.get(node).map_or(0, |ips| ips.len() - usize::from(ips.contains_key(&ip)))
    }

    /// The announcer recorded for `svc`.
    pub fn announcer(&self, svc: &ServiceName) -> Option<&str> {
        self.by_service.get(svc).map(|(_, n)| n.as_str())
    }

    /// Addresses per node, for nodes announcing any.
    pub fn per_node(&self) -> impl Iterator<Item = (&str, usize)> {
        self.per_node.iter().map(|(n, ips)| (n.as_str(), ips.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ip;

    #[test]
    fn counts_addresses_not_services_and_follows_moves() {
        let (a, b, c) =
            (ServiceName::new("ns", "a"), ServiceName::new("ns", "b"), ServiceName::new("ns", "c"));
        let mut load = Load::new();
        load.set(&a, ip("192.168.0.200"), Some("n1"));
        load.set(&b, ip("192.168.0.200"), Some("n1"));
        load.set(&c, ip("192.168.0.201"), Some("n1"));
        assert_eq!(load.of("n1"), 2, "a and b share one address");
        assert_eq!(load.besides("n1", ip("192.168.0.200")), 1);
        assert_eq!(load.besides("n1", ip("192.168.0.209")), 2);
        load.set(&a, ip("192.168.0.200"), Some("n2"));
        assert_eq!((load.of("n1"), load.of("n2")), (2, 1), "b still holds .200 on n1");
        load.remove(&b);
        load.set(&c, ip("192.168.0.201"), None);
        assert_eq!((load.of("n1"), load.of("n2")), (0, 1));
        assert_eq!(load.per_node().collect::<Vec<_>>(), [("n2", 1)]);
        assert_eq!(load.announcer(&a), Some("n2"));
        assert_eq!(load.announcer(&c), None);
    }
}
