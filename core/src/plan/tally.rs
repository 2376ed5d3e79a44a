//! Figures a node reports about its plan (ports, endpoints, Local policies without a local
//! endpoint, UDP ports, shadowed frontends), kept current by [`super::Ruleset::update`] one
//! Service port at a time, so a sync that changes one Service does not walk every plan.

use std::ops::{AddAssign, SubAssign};

use super::ruleset::{ServicePortPlan, Target};
use crate::net::Protocol;

/// The figures of some plans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    /// Service port plans.
    pub service_ports: usize,
    /// Endpoints of Cluster traffic policy, summed over plans.
    pub cluster_endpoints: usize,
    /// Plans whose internal traffic is dropped (Local policy, no local endpoint).
    pub internal_no_local: usize,
    /// Plans whose external traffic is dropped (Local policy, no local endpoint).
    pub external_no_local: usize,
    /// UDP plans (their stale conntrack entries need cleaning).
    pub udp: usize,
    /// Plans with a frontend another plan owns.
    pub shadowed: usize,
    /// Plans that could not get the load-balancing algorithm they asked for.
    #[serde(default)]
    pub balancing_fallbacks: usize,
}

impl Tally {
    /// The figures of one plan.
    pub fn of(plan: &ServicePortPlan) -> Tally {
        Tally {
            service_ports: 1,
            cluster_endpoints: plan.cluster_endpoints.len(),
            internal_no_local: usize::from(plan.internal_target() == Target::Drop),
            external_no_local: usize::from(plan.external_target() == Target::Drop),
            udp: usize::from(plan.name.protocol == Protocol::Udp),
            shadowed: usize::from(!plan.shadowed.is_empty()),
            balancing_fallbacks: usize::from(plan.balancing.fallback.is_some()),
        }
    }

    /// The figures of every plan in `plans`, counted afresh.
    pub fn sum<'a>(plans: impl IntoIterator<Item = &'a ServicePortPlan>) -> Tally {
        let mut t = Tally::default();
        for p in plans {
            t += Tally::of(p);
        }
        t
    }
}

impl AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.service_ports += o.service_ports;
        self.cluster_endpoints += o.cluster_endpoints;
        self.internal_no_local += o.internal_no_local;
        self.external_no_local += o.external_no_local;
        self.udp += o.udp;
        self.shadowed += o.shadowed;
        self.balancing_fallbacks += o.balancing_fallbacks;
    }
}

impl SubAssign for Tally {
    fn sub_assign(&mut self, o: Tally) {
        self.service_ports -= o.service_ports;
        self.cluster_endpoints -= o.cluster_endpoints;
        self.internal_no_local -= o.internal_no_local;
        self.external_no_local -= o.external_no_local;
        self.udp -= o.udp;
        self.shadowed -= o.shadowed;
        self.balancing_fallbacks -= o.balancing_fallbacks;
    }
}
