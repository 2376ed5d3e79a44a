//! MetalLB's own objects (`metallb.io/v1beta1` `IPAddressPool` and `L2Advertisement`), as read,
//! and how they become the same [`LoadBalancerPool`]s Tideway's own CRD gives: one pool per
//! `IPAddressPool`, announced over layer 2 when an `L2Advertisement` selects it (MetalLB
//! announces nothing without one).
//!
//! A `LoadBalancerPool` and an `IPAddressPool` of the same name are one pool too many: the
//! `LoadBalancerPool` is used, and the clash is a [`PoolConflict`] the operator reports.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::LabelSelector;

use super::pool::{L2Settings, LoadBalancerPool, Pool, PoolOrigin};

/// An `IPAddressPool`: the allocator's pool (named as the object) and the labels that
/// `ipAddressPoolSelectors` match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetalLbPool {
    /// Namespace (MetalLB's own, usually `metallb-system`).
    pub namespace: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.addresses`, `autoAssign`, `avoidBuggyIPs`, `serviceAllocation`.
    pub pool: Pool,
    /// `metadata.generation` (0 when the source has none).
    pub generation: i64,
}

impl MetalLbPool {
    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.pool.name
    }
}

/// An `L2Advertisement`: which pools' addresses are announced over ARP / NDP, by which nodes
/// and on which interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct L2Advertisement {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.ipAddressPools`: pools by name.
    pub pools: Vec<String>,
    /// `spec.ipAddressPoolSelectors`: pools by label (with no pool named or selected, every
    /// pool is advertised).
    pub pool_selectors: Vec<LabelSelector>,
    /// `spec.nodeSelectors`: nodes that may announce (any matching; empty: every node).
    pub node_selectors: Vec<LabelSelector>,
    /// `spec.interfaces` (empty: MetalLB announces on every interface; Tideway on the one
    /// holding the node's address).
    pub interfaces: Vec<String>,
}

impl L2Advertisement {
    /// True when this advertisement covers `pool`.
    pub fn selects(&self, pool: &MetalLbPool) -> bool {
        (self.pools.is_empty() && self.pool_selectors.is_empty())
            || self.pools.iter().any(|p| p == pool.name())
            || self.pool_selectors.iter().any(|s| s.matches(&pool.labels))
    }
}

/// Two objects claiming one pool name; the first is used.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PoolConflict {
    /// The pool's name.
    pub name: String,
    /// The pool used: `None` for the `LoadBalancerPool`, else the `IPAddressPool`'s namespace.
    pub used: Option<String>,
    /// The namespace of the `IPAddressPool` left unused.
    pub ignored: String,
}

impl PoolConflict {
    /// For people: both objects, and which one counts.
    pub fn message(&self) -> String {
        let used = match &self.used {
            None => format!("LoadBalancerPool {}", self.name),
            Some(ns) => format!("IPAddressPool {ns}/{}", self.name),
        };
        format!(
            "IPAddressPool {}/{} and {used} have one name: the addresses of {used} are used, not the IPAddressPool's",
            self.ignored, self.name
        )
    }
}

/// The layer-2 settings the advertisements selecting `pool` give it: announced when any
/// selects it; by the nodes any of them admits (an advertisement without node selectors
/// admits every node); on the interfaces they name (none named by one: the default).
pub fn l2_of(pool: &MetalLbPool, ads: &[&L2Advertisement]) -> L2Settings {
    let selecting: Vec<&L2Advertisement> = ads.iter().copied().filter(|a| a.selects(pool)).collect();
    let every = |f: fn(&L2Advertisement) -> bool| selecting.iter().any(|a| f(a));
    let node_selectors = if every(|a| a.node_selectors.is_empty()) {
        Vec::new()
    } else {
        dedup(selecting.iter().flat_map(|a| a.node_selectors.iter().cloned()))
    };
    let interfaces = if every(|a| a.interfaces.is_empty()) {
        Vec::new()
    } else {
        let names: BTreeSet<String> = selecting.iter().flat_map(|a| a.interfaces.iter().cloned()).collect();
        names.into_iter().collect()
    };
    L2Settings { enabled: !selecting.is_empty(), interfaces, node_selectors }
}

fn dedup(items: impl Iterator<Item = LabelSelector>) -> Vec<LabelSelector> {
    let mut out: Vec<LabelSelector> = Vec::new();
    for s in items {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Every pool the operator allocates from: Tideway's own, then each `IPAddressPool` whose
/// name is free (in namespace order), with the clashes.
pub fn merge_pools<'a>(
    own: impl Iterator<Item = &'a LoadBalancerPool>,
    metallb: impl Iterator<Item = &'a MetalLbPool>,
    ads: impl Iterator<Item = &'a L2Advertisement>,
) -> (Vec<LoadBalancerPool>, Vec<PoolConflict>) {
    let ads: Vec<&L2Advertisement> = ads.collect();
    let mut used: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut pools: Vec<LoadBalancerPool> = own
        .inspect(|p| {
            used.insert(p.name().to_string(), None);
        })
        .cloned()
        .collect();
    let mut conflicts = Vec::new();
    for m in metallb {
        if let Some(first) = used.get(m.name()) {
            conflicts.push(PoolConflict {
                name: m.name().to_string(),
                used: first.clone(),
                ignored: m.namespace.clone(),
            });
            continue;
        }
        used.insert(m.name().to_string(), Some(m.namespace.clone()));
        // Only advertisements of the pool's own namespace apply to it, as in MetalLB.
        let own_ads: Vec<&L2Advertisement> =
            ads.iter().copied().filter(|a| a.namespace == m.namespace).collect();
        pools.push(LoadBalancerPool {
            pool: m.pool.clone(),
            l2: l2_of(m, &own_ads),
            generation: m.generation,
            origin: PoolOrigin::MetalLb { namespace: m.namespace.clone() },
        });
    }
    (pools, conflicts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LabelSelector;

    fn selector(k: &str, v: &str) -> LabelSelector {
        LabelSelector { match_labels: [(k.to_string(), v.to_string())].into(), match_expressions: vec![] }
    }

    fn metallb(name: &str, labels: &[(&str, &str)]) -> MetalLbPool {
        MetalLbPool {
            namespace: "metallb-system".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            pool: Pool::new(name, &["192.168.10.0/24"]),
            generation: 1,
        }
    }

    fn ad(name: &str) -> L2Advertisement {
        L2Advertisement { namespace: "metallb-system".into(), name: name.into(), ..Default::default() }
    }

    /// MetalLB's rules, one case per row: which advertisements select a pool, and the L2
    /// settings they add up to.
    #[test]
    fn advertisements_add_up_to_a_pools_l2_settings() {
        let pool = metallb("first-pool", &[("tier", "gold")]);
        let worker = selector("node-role.kubernetes.io/worker", "");
        let every = ad("all");
        let by_name = L2Advertisement { pools: vec!["first-pool".into()], ..ad("by-name") };
        let other = L2Advertisement { pools: vec!["second-pool".into()], ..ad("other") };
        let by_label = L2Advertisement { pool_selectors: vec![selector("tier", "gold")], ..ad("by-label") };
        let on_workers = L2Advertisement { node_selectors: vec![worker.clone()], ..by_name.clone() };
        let on_eth1 = L2Advertisement {
            interfaces: vec!["eth1".into()],
            node_selectors: vec![worker.clone()],
            ..ad("eth1")
        };
        let on_eth2 = L2Advertisement { interfaces: vec!["eth2".into()], ..by_label.clone() };
        let l2 = |ads: &[&L2Advertisement]| l2_of(&pool, ads);
        let announced = |nodes: Vec<LabelSelector>, ifs: &[&str]| L2Settings {
            enabled: true,
            node_selectors: nodes,
            interfaces: ifs.iter().map(|s| s.to_string()).collect(),
        };
        let cases: Vec<(&str, Vec<&L2Advertisement>, L2Settings)> = vec![
            (
                "no advertisement: not announced",
                vec![],
                L2Settings { enabled: false, ..announced(vec![], &[]) },
            ),
            ("another pool's only", vec![&other], L2Settings { enabled: false, ..announced(vec![], &[]) }),
            ("an empty advertisement selects every pool", vec![&every], announced(vec![], &[])),
            ("by name", vec![&by_name], announced(vec![], &[])),
            ("by label", vec![&by_label], announced(vec![], &[])),
            ("node selectors", vec![&on_workers], announced(vec![worker.clone()], &[])),
            (
                "one without node selectors admits every node",
                vec![&on_workers, &by_label],
                announced(vec![], &[]),
            ),
            ("interfaces add up", vec![&on_eth1, &on_eth2], announced(vec![], &["eth1", "eth2"])),
            ("one without interfaces: the default", vec![&on_eth1, &by_name], announced(vec![], &[])),
            ("same selector once", vec![&on_workers, &on_eth1], announced(vec![worker.clone()], &[])),
        ];
        for (what, ads, want) in cases {
            assert_eq!(l2(&ads), want, "{what}");
        }
    }

    #[test]
    fn a_load_balancer_pool_wins_its_name_and_the_clash_is_named() {
        let own = LoadBalancerPool {
            pool: Pool::new("first-pool", &["10.0.0.0/24"]),
            l2: L2Settings::default(),
            generation: 3,
            origin: PoolOrigin::Tideway,
        };
        let mut twin = metallb("first-pool", &[]);
        twin.namespace = "other".into();
        let pools = [metallb("first-pool", &[]), metallb("second-pool", &[]), twin];
        let ads = [ad("all"), L2Advertisement { namespace: "elsewhere".into(), ..ad("elsewhere") }];
        let (merged, conflicts) = merge_pools([&own].into_iter(), pools.iter(), ads.iter());
        let names: Vec<(&str, &PoolOrigin)> = merged.iter().map(|p| (p.name(), &p.origin)).collect();
        let metallb_origin = PoolOrigin::MetalLb { namespace: "metallb-system".into() };
        assert_eq!(names, [("first-pool", &PoolOrigin::Tideway), ("second-pool", &metallb_origin)]);
        assert_eq!(merged[0], own, "the LoadBalancerPool is used as it is");
        assert!(merged[1].l2.enabled, "the advertisement of its own namespace applies");
        assert_eq!(conflicts.len(), 2);
        assert_eq!(
            conflicts[0].message(),
            "IPAddressPool metallb-system/first-pool and LoadBalancerPool first-pool have one name: \
             the addresses of LoadBalancerPool first-pool are used, not the IPAddressPool's"
        );
        assert_eq!(conflicts[1].used, None);
        assert_eq!(conflicts[1].ignored, "other");
    }
}
