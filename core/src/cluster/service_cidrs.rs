//! ServiceCIDRs: the ranges ClusterIPs come from, one list for the whole cluster.

use super::registry::stored_kind;
use super::state::ClusterState;
use crate::model::ServiceCidr;
use crate::net::IpNet;

stored_kind!(ServiceCidr, "ServiceCIDR", namespaced: false, service_cidrs, service_cidrs, |s: &mut ClusterState, _| s
    .changes
    .service_cidrs = true);

impl ClusterState {
    /// The ServiceCIDR called `name`.
    pub fn service_cidr(&self, name: &str) -> Option<&ServiceCidr> {
        self.service_cidrs.get(&("", name))
    }

    /// Every ServiceCIDR object.
    pub fn service_cidr_objects(&self) -> impl Iterator<Item = &ServiceCidr> {
        self.service_cidrs.values()
    }

    /// Every range of every ServiceCIDR, sorted and without repeats (a range being deleted
    /// still counts: its ClusterIPs may still be held).
    pub fn service_cidrs(&self) -> Vec<IpNet> {
        let mut all: Vec<IpNet> = self.service_cidrs.values().flat_map(|c| c.cidrs.iter().copied()).collect();
        all.sort();
        all.dedup();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::net;

    fn cidr(name: &str, cidrs: &[&str]) -> ServiceCidr {
        ServiceCidr { name: name.into(), cidrs: cidrs.iter().map(|c| net(c)).collect() }
    }

    #[test]
    fn ranges_of_every_object_are_one_sorted_list_and_changes_are_flagged() {
        let mut c = ClusterState::new();
        assert!(c.apply(cidr("kubernetes", &["10.96.0.0/16", "fd00:96::/112"])));
        assert!(c.apply(cidr("extra", &["10.50.0.0/16", "10.96.0.0/16"])));
        let text: Vec<String> = c.service_cidrs().iter().map(ToString::to_string).collect();
        assert_eq!(text, ["10.50.0.0/16", "10.96.0.0/16", "fd00:96::/112"]);
        assert!(c.take_changes().service_cidrs);
        assert!(!c.take_changes().affect_proxy("any"), "nothing new");
        assert!(!c.apply(cidr("extra", &["10.50.0.0/16", "10.96.0.0/16"])), "no-op update");
        assert!(c.delete::<ServiceCidr>("", "extra"));
        let changes = c.take_changes();
        assert!(changes.service_cidrs && changes.affect_proxy("node-a"));
        assert_eq!(c.service_cidrs().len(), 2);
    }
}
