//! The operator's decisions, pure: from the cluster state to the writes that bring the cluster
//! where it should be.
//!
//! ```text
//!  ClusterState + Changes (+ ProxyConfigs the source rejected)
//!     | Reconciler::reconcile
//!     |   pools        -> Allocator::set_pools (first time: restore every Service's status IPs)
//!     |   Services     -> lb::assign: addresses (ipam), status.loadBalancer.ingress
//!     |   addresses    -> lb::announcement: eligible nodes + sticky announcer (Tideway's; for
//!     |                   an address it never announced, MetalLB's: its ServiceL2Status), new
//!     |                   or moving ones to the least loaded node (announce, Load: global counts)
//!     |   nodes/states -> rollout: ProxyConfig status
//!     |   Services x node configs -> balancing: a Service's algorithm a mode cannot program
//!     v
//!  Vec<Action>: SetIngress, Announce/Withdraw (L2Announcement), ProxyConfigStatus, PoolStatus,
//!               Event — each only when it differs from what the cluster shows or was written
//! ```
//! Work follows the changes: one endpoint change re-decides that Service's announcement (and
//! those sharing its address), as does a change of MetalLB's `ServiceL2Status` naming it;
//! node changes re-decide every announcement; pool or namespace changes re-decide every
//! address. The operator crate performs the writes.

mod action;
pub mod balancing;
mod lb;
pub mod lease;
pub mod rollout;

use std::collections::{BTreeMap, BTreeSet};

use action::refused_pool_message;
pub use action::{Action, Event, ObjectRef, PoolReport, Refused};
pub use lb::{handles, observed_ips, request};
use rollout::{Condition, ConfigStatus};

use crate::announce::Load;
use crate::cluster::{Changes, ClusterState};
use crate::ipam::{Allocator, PoolStatus};
use crate::model::{L2Announcement, PoolConflict, PoolOrigin, ServiceName};

/// The operator's memory between reconciles: the allocator, and what it last decided or wrote
/// where the cluster does not show it.
#[derive(Debug, Default)]
pub struct Reconciler {
    class: Option<String>,
    alloc: Allocator,
    started: bool,
    resync: bool,
    reported: lb::Reported,
    decided: BTreeMap<ServiceName, L2Announcement>,
    /// Addresses per announcing node, kept with `decided` (seeded from what the cluster
    /// shows on the first pass).
    load: Load,
    configs: BTreeMap<String, ConfigStatus>,
    pools: BTreeMap<String, PoolReport>,
    /// The pools refused at the last pass (one mended back to its last valid version changes
    /// nothing in the state, only this).
    refused_pools: BTreeMap<String, String>,
    /// The same for ProxyConfigs.
    refused_configs: BTreeMap<String, String>,
    /// Pool name clashes already told.
    conflicts: BTreeSet<PoolConflict>,
    /// Per Service, the load-balancing fallbacks already told in an Event.
    fallbacks: BTreeMap<ServiceName, BTreeSet<String>>,
    /// Per node, the listed L2 interfaces its agent last reported missing.
    missing_interfaces: BTreeMap<String, Vec<String>>,
}

impl Reconciler {
    /// A reconciler for LoadBalancer Services of `class` (None: Services without a class).
    pub fn new(class: Option<String>) -> Self {
        Reconciler { class, ..Default::default() }
    }

    /// Makes the next reconcile decide everything again and rewrite every status (after failed
    /// writes, and periodically: what the cluster shows is compared again, object by object).
    pub fn resync(&mut self) {
        self.resync = true;
        self.configs.clear();
        self.pools.clear();
    }

    /// Records the missing L2 interfaces the reports of `nodes` give; true when any differs
    /// from before (every announcement is then decided again).
    fn note_missing_interfaces(&mut self, state: &ClusterState, nodes: &BTreeSet<String>) -> bool {
        let mut moved = false;
        for node in nodes {
            let now = state.node_state(node).map(|s| s.missing_interfaces.clone()).unwrap_or_default();
            let before = self.missing_interfaces.get(node).cloned().unwrap_or_default();
            if now != before {
                moved = true;
                if now.is_empty() {
                    self.missing_interfaces.remove(node);
                } else {
                    self.missing_interfaces.insert(node.clone(), now);
                }
            }
        }
        moved
    }

    /// The allocator (read-only), for status APIs.
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    /// The writes that bring the cluster where `state` says it should be, given what changed
    /// since the last call (everything, the first time) and the ProxyConfigs the source
    /// rejected (name -> why).
    pub fn reconcile(&mut self, state: &ClusterState, changes: &Changes, refused: &Refused) -> Vec<Action> {
        let invalid_configs = &refused.proxy_configs;
        let mut out = Vec::new();
        let first = !self.started;
        if first {
            self.start(state, &mut out);
        } else if changes.pools {
            self.set_pools(state);
        }
        let everything = first || std::mem::take(&mut self.resync) || changes.pools || changes.namespaces;
        let services: BTreeSet<ServiceName> = if everything {
            state.services().map(|s| s.name.clone()).chain(self.alloc.services().cloned()).collect()
        } else {
            changes.services.iter().chain(&changes.announcements).cloned().collect()
        };
        for name in &services {
            self.assign(state, name, &mut out);
        }
        let interfaces_moved = self.note_missing_interfaces(state, &changes.node_states);
        let announce: BTreeSet<ServiceName> = if everything || !changes.nodes.is_empty() || interfaces_moved {
            self.alloc.services().cloned().chain(self.decided.keys().cloned()).collect()
        } else {
            services.iter().chain(&changes.metallb_announcers).flat_map(|s| self.group_of(s)).collect()
        };
        self.announce(state, &announce, &mut out);
        let nodes_moved = !changes.nodes.is_empty() || !changes.node_states.is_empty();
        if everything || nodes_moved || changes.proxy_configs || *invalid_configs != self.refused_configs {
            self.refused_configs.clone_from(invalid_configs);
            self.rollout(state, invalid_configs, &mut out);
        }
        if everything || nodes_moved || changes.proxy_configs {
            let all: BTreeSet<ServiceName> =
                state.services().map(|s| s.name.clone()).chain(self.fallbacks.keys().cloned()).collect();
            self.balancing(state, &all, &mut out);
        } else if !services.is_empty() {
            self.balancing(state, &services, &mut out);
        }
        if everything || !services.is_empty() || refused.pools != self.refused_pools {
            self.refused_pools.clone_from(&refused.pools);
            self.pool_reports(state, &refused.pools, &mut out);
        }
        out
    }

    /// First call: the pools, then every address the Services already show (before anything
    /// new is handed out, so a restart moves nobody).
    fn start(&mut self, state: &ClusterState, out: &mut Vec<Action>) {
        self.started = true;
        self.set_pools(state);
        for svc in state.services().filter(|s| handles(s, self.class.as_deref())) {
            let ips = observed_ips(svc);
            if let (false, Some(req)) = (ips.is_empty(), request(state, svc))
                && let Err(e) = self.alloc.restore(&req, &ips)
            {
                // The assign that follows allocates afresh; say why the old addresses went.
                let msg = format!("cannot keep {}: {e}", lb::join(&ips));
                out.push(Action::Event(Event::warning(
                    ObjectRef::service(&svc.name),
                    "ClearAssignment",
                    msg,
                )));
            }
        }
    }

    fn set_pools(&mut self, state: &ClusterState) {
        self.alloc.set_pools(state.pools().map(|p| p.pool.clone()));
    }

    /// The node MetalLB announces `svc`'s address from (the `ServiceL2Status` of the first
    /// Service holding it that has one, so that every holder agrees).
    fn metallb_announcer<'s>(&self, state: &'s ClusterState, svc: &ServiceName) -> Option<&'s str> {
        // None read (no --metallb-compat, or MetalLB before v0.14): nothing to look for.
        state.service_l2_statuses().next()?;
        self.group_of(svc).iter().find_map(|h| state.metallb_announcer(h))
    }

    /// Services holding the same first address as `svc` (itself included).
    fn group_of(&self, svc: &ServiceName) -> Vec<ServiceName> {
        match self.alloc.assignment(svc).and_then(|a| a.ips.first().copied()) {
            Some(ip) => self.alloc.holders(ip),
            None => vec![svc.clone()],
        }
    }

    fn assign(&mut self, state: &ClusterState, name: &ServiceName, out: &mut Vec<Action>) {
        match state.service(name) {
            Some(svc) if handles(svc, self.class.as_deref()) => {
                lb::assign(&mut self.alloc, state, svc, &mut self.reported, out);
            }
            Some(svc) => {
                // No longer ours (type or class changed): give the addresses back and clear
                // what we wrote, never what another load balancer wrote.
                self.reported.forget(name);
                if let Some(a) = self.alloc.release(name)
                    && observed_ips(svc) == a.ips
                {
                    out.push(Action::SetIngress { service: name.clone(), ips: Vec::new() });
                }
            }
            None => {
                self.reported.forget(name);
                self.alloc.release(name);
            }
        }
    }

    fn announce(&mut self, state: &ClusterState, services: &BTreeSet<ServiceName>, out: &mut Vec<Action>) {
        if services.is_empty() {
            return;
        }
        let mut nodes = lb::Nodes::of(state);
        // What each address's announcer is now, before any is decided again: a choice weighs
        // every other address where it is (on the first pass, where the cluster shows it; for
        // one Tideway never announced, where MetalLB announces it).
        for name in services {
            let node = match self.decided.get(name).or(state.announcement(name)) {
                Some(d) => d.node.as_deref(),
                None => self.metallb_announcer(state, name),
            };
            match (self.alloc.assignment(name), node) {
                (Some(a), Some(node)) => self.load.set(name, a.ips[0], Some(node)),
                _ => self.load.remove(name),
            }
        }
        for name in services {
            let observed = state.announcement(name);
            let desired = match (state.service(name), self.alloc.assignment(name)) {
                (Some(svc), Some(a)) => {
                    let holders = self.alloc.holders(a.ips[0]);
                    let tideway = self.decided.get(name).or(observed);
                    let current = tideway.and_then(|d| d.node.as_deref());
                    // Tideway never announced it: MetalLB's announcer is kept as its own would be.
                    let metallb = tideway.is_none().then(|| self.metallb_announcer(state, name)).flatten();
                    // An address MetalLB gave out (in the Service's status when taken over,
                    // MetalLB's objects read): where MetalLB's election put it.
                    let metallb_election = tideway.is_none()
                        && state.metallb_pools().next().is_some()
                        && lb::observed_ips(svc) == a.ips;
                    let pool = state.pool(&a.pool);
                    let load = &self.load;
                    let ann = lb::Announcing {
                        ips: &a.ips,
                        pool,
                        holders: &holders,
                        current,
                        metallb,
                        metallb_election,
                        load,
                    };
                    lb::announcement(state, &mut nodes, svc, ann, out)
                }
                _ => None,
            };
            match desired {
                Some(d) => {
                    if observed != Some(&d) {
                        out.push(Action::Announce(d.clone()));
                    }
                    self.load.set(name, d.ips[0], d.node.as_deref());
                    self.decided.insert(name.clone(), d);
                }
                None => {
                    self.load.remove(name);
                    self.decided.remove(name);
                    if observed.is_some() {
                        out.push(Action::Withdraw(name.clone()));
                    }
                }
            }
        }
    }

    fn rollout(&mut self, state: &ClusterState, invalid: &BTreeMap<String, String>, out: &mut Vec<Action>) {
        let configs: Vec<_> = state.proxy_configs().cloned().collect();
        let now = rollout::rollout(&configs, invalid, state.nodes(), |n| state.node_state(n));
        for (name, status) in &now {
            let before = self.configs.get(name);
            if before == Some(status) {
                continue;
            }
            let object = ObjectRef::cluster_scoped("ProxyConfig", name);
            let was = |kind: &str| before.and_then(|b| b.conditions.iter().find(|c| c.kind == kind));
            for c in status
                .conditions
                .iter()
                .filter(|c| c.status && matches!(c.reason, "TiedPrecedence" | "InvalidSpec"))
            {
                if was(c.kind).is_none_or(|w| w.reason != c.reason) {
                    out.push(Action::Event(Event::warning(object.clone(), c.reason, c.message.clone())));
                }
            }
            out.push(Action::ProxyConfigStatus { name: name.clone(), status: status.clone() });
        }
        self.configs = now;
    }

    /// An Event (`LoadBalancingUnavailable`, once per fallback) for each Service whose
    /// `tideway.io/load-balancing` some nodes' mode cannot program (they keep their default).
    fn balancing(&mut self, state: &ClusterState, services: &BTreeSet<ServiceName>, out: &mut Vec<Action>) {
        let groups = balancing::node_groups(state);
        for name in services {
            let Some(svc) = state.service(name) else {
                self.fallbacks.remove(name);
                continue;
            };
            let now = balancing::fallbacks(svc, &groups);
            let told = self.fallbacks.get(name);
            for (message, nodes) in now.iter().filter(|(m, _)| told.is_none_or(|t| !t.contains(m))) {
                let message = format!("{message} (on {})", balancing::node_list(nodes));
                out.push(Action::Event(Event::warning(
                    ObjectRef::service(name),
                    "LoadBalancingUnavailable",
                    message,
                )));
            }
            if now.is_empty() {
                self.fallbacks.remove(name);
            } else {
                self.fallbacks.insert(name.clone(), balancing::messages(&now));
            }
        }
    }

    /// The pools' statuses, where they changed; a pool whose stored version was `refused` says
    /// why, with the usage of its last valid version (none if it never had one).
    fn pool_reports(
        &mut self,
        state: &ClusterState,
        refused: &BTreeMap<String, String>,
        out: &mut Vec<Action>,
    ) {
        let mut now = BTreeMap::new();
        let mut pools: Vec<PoolStatus> = self.alloc.pool_status();
        let never_valid = refused
            .keys()
            .filter(|name| !pools.iter().any(|p| &&p.name == name))
            .cloned()
            .collect::<Vec<_>>();
        pools.extend(never_valid.into_iter().map(|name| PoolStatus {
            name,
            error: None,
            stats: Default::default(),
        }));
        for p in pools {
            let valid = match (refused.get(&p.name), &p.error) {
                (Some(why), _) => Condition::new(
                    "Valid",
                    false,
                    "InvalidSpec",
                    refused_pool_message(why, state.pool(&p.name).is_some()),
                ),
                (None, None) => {
                    Condition::new("Valid", true, "Valid", "every address range is valid and its own")
                }
                (None, Some(e)) => Condition::new("Valid", false, "InvalidAddresses", e.to_string()),
            };
            let pool = state.pool(&p.name);
            let generation = pool.map_or(0, |x| x.generation);
            let report = PoolReport { observed_generation: generation, stats: p.stats, valid };
            if self.pools.get(&p.name) != Some(&report) {
                let object = match pool.map(|x| &x.origin) {
                    Some(PoolOrigin::MetalLb { namespace }) => ObjectRef::metallb_pool(namespace, &p.name),
                    _ => ObjectRef::cluster_scoped("LoadBalancerPool", &p.name),
                };
                if !report.valid.status && self.pools.get(&p.name).is_none_or(|b| b.valid != report.valid) {
                    out.push(Action::Event(Event::warning(
                        object.clone(),
                        "InvalidPool",
                        report.valid.message.clone(),
                    )));
                }
                // An IPAddressPool's status is MetalLB's: only a LoadBalancerPool gets one.
                if object.kind == "LoadBalancerPool" {
                    out.push(Action::PoolStatus { name: p.name.clone(), status: report.clone() });
                }
            }
            now.insert(p.name, report);
        }
        self.pools = now;
        self.pool_conflicts(state, out);
    }

    /// A Warning on both objects for each new clash of an `IPAddressPool` with another pool
    /// of its name (the one left unused is named, and the one used).
    fn pool_conflicts(&mut self, state: &ClusterState, out: &mut Vec<Action>) {
        let now: BTreeSet<PoolConflict> = state.pool_conflicts().iter().cloned().collect();
        for c in now.difference(&self.conflicts) {
            let used = match &c.used {
                None => ObjectRef::cluster_scoped("LoadBalancerPool", &c.name),
                Some(ns) => ObjectRef::metallb_pool(ns, &c.name),
            };
            for object in [ObjectRef::metallb_pool(&c.ignored, &c.name), used] {
                out.push(Action::Event(Event::warning(object, "PoolConflict", c.message())));
            }
        }
        self.conflicts = now;
    }
}

#[cfg(test)]
mod tests;
