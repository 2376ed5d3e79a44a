//! LoadBalancer decisions for one Service: its addresses (through the [`Allocator`]) and who
//! announces them (through [`crate::announce`]), as the writes that bring the cluster there.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::action::{Action, Event, ObjectRef};
use crate::announce::{self, Change, Load, LocalEndpoints, NodeInfo, ServiceTraffic};
use crate::cluster::ClusterState;
use crate::config::LabelSelector;
use crate::ipam::{Allocator, LbRequest};
use crate::model::{L2Announcement, LoadBalancerPool, Service, ServiceName, ServiceType};

/// Whether this operator handles a Service's addresses: type LoadBalancer and the class it
/// serves (no `--load-balancer-class`: Services without a class, as MetalLB).
pub fn handles(svc: &Service, class: Option<&str>) -> bool {
    svc.service_type == ServiceType::LoadBalancer
        && svc.load_balancer.as_deref().is_some_and(|lb| lb.class.as_deref() == class)
}

/// The allocator's request for `svc` (its namespace's labels for pool selectors).
pub fn request(state: &ClusterState, svc: &Service) -> Option<LbRequest> {
    let empty = BTreeMap::new();
    let labels = state.namespace(&svc.name.namespace).map_or(&empty, |n| &n.labels);
    LbRequest::for_service(svc, labels)
}

/// The addresses a Service shows in `status.loadBalancer.ingress`.
pub fn observed_ips(svc: &Service) -> Vec<IpAddr> {
    svc.load_balancer_ingress.iter().filter_map(|i| i.ip).collect()
}

/// Per-reconcile node views: every node once, with the current Service's local endpoints.
pub(crate) struct Nodes {
    infos: Vec<NodeInfo>,
    index: BTreeMap<String, usize>,
    /// Per node (as `infos`), the listed L2 interfaces its agent reports missing.
    missing: Vec<Vec<String>>,
}

impl Nodes {
    pub(crate) fn of(state: &ClusterState) -> Nodes {
        let infos: Vec<NodeInfo> = state
            .nodes()
            .map(|n| NodeInfo::of(n, state.agent_liveness(&n.name), LocalEndpoints::Absent))
            .collect();
        let index = infos.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let missing = infos
            .iter()
            .map(|n| state.node_state(&n.name).map(|s| s.missing_interfaces.clone()).unwrap_or_default())
            .collect();
        Nodes { infos, index, missing }
    }

    /// Marks the nodes that lack every one of `interfaces` (a pool's `l2.interfaces`; none
    /// listed: no node lacks them).
    fn mark_lacking(&mut self, interfaces: &[String]) {
        for (n, missing) in self.infos.iter_mut().zip(&self.missing) {
            n.lacks_interfaces = !interfaces.is_empty() && interfaces.iter().all(|i| missing.contains(i));
        }
    }

    /// Fills in `svc`'s endpoints per node; returns whether any endpoint serves.
    fn load(&mut self, state: &ClusterState, svc: &ServiceName) -> bool {
        for n in &mut self.infos {
            n.local = LocalEndpoints::Absent;
        }
        let mut per_node: BTreeMap<usize, Vec<(bool, bool)>> = BTreeMap::new();
        let mut serving = false;
        for ep in state.endpoint_slices_for(svc).flat_map(|s| &s.endpoints) {
            serving |= ep.ready || ep.serving;
            if let Some(i) = ep.node_name.as_deref().and_then(|n| self.index.get(n)) {
                per_node.entry(*i).or_default().push((ep.ready, ep.serving));
            }
        }
        for (i, conditions) in per_node {
            self.infos[i].local = LocalEndpoints::of(conditions);
        }
        serving
    }
}

/// The announcement a group of Services holding `ip` must agree on: the intersection of their
/// eligible nodes, the current announcer kept while eligible (with none of Tideway's,
/// MetalLB's, the same way), else the least loaded (by the counts without `ip`, the same for
/// every Service of the group).
fn announce_group(
    state: &ClusterState,
    nodes: &mut Nodes,
    ip: IpAddr,
    group: &[&Service],
    selectors: &[LabelSelector],
    a: &Announcing<'_>,
) -> announce::Decision {
    let mut eligible: Option<Vec<String>> = None;
    for svc in group {
        let serving = nodes.load(state, &svc.name);
        let traffic = ServiceTraffic { policy: svc.external_traffic_policy, serving_endpoints: serving };
        let mine = announce::eligible_nodes(&traffic, &nodes.infos, selectors);
        eligible = Some(match eligible {
            None => mine,
            Some(prev) => prev.into_iter().filter(|n| mine.contains(n)).collect(),
        });
    }
    let eligible = eligible.unwrap_or_default();
    let (current, metallb) = (a.current, a.metallb.filter(|_| a.current.is_none()));
    // MetalLB's election: the eligible node of the smallest hash, every node weighing alike.
    let elected = (a.metallb_election && current.is_none() && metallb.is_none())
        .then(|| announce::choose_announcer(ip, &eligible, None))
        .flatten();
    let sticky = current.or(metallb).or(elected.as_deref());
    let announcer = announce::choose_balanced(ip, &eligible, sticky, |n| a.load.besides(n, ip));
    let change = match (current, metallb, &announcer) {
        (None, None, Some(_)) if elected.is_some() => Some(Change::MetalLbElection),
        (None, Some(m), Some(next)) if next == m => Some(Change::KeptFromMetalLb),
        (None, Some(m), Some(_)) => {
            let why = why_not(state, nodes, group[0], m, selectors);
            Some(Change::MetalLbIneligible { metallb: m.to_string(), why })
        }
        (None, _, Some(_)) => Some(Change::FirstChoice),
        (Some(prev), _, next) if next.as_deref() != Some(prev) => {
            let why = why_not(state, nodes, group[0], prev, selectors);
            let previous = prev.to_string();
            Some(match next {
                Some(_) => Change::PreviousIneligible { previous, why },
                None => Change::NoneEligible { previous, why },
            })
        }
        _ => None,
    };
    announce::Decision { eligible, announcer, change }
}

/// Why `node` may not announce, seen from `svc` (the first Service of its group).
fn why_not(
    state: &ClusterState,
    nodes: &mut Nodes,
    svc: &Service,
    node: &str,
    selectors: &[LabelSelector],
) -> announce::Ineligible {
    let serving = nodes.load(state, &svc.name);
    let traffic = ServiceTraffic { policy: svc.external_traffic_policy, serving_endpoints: serving };
    nodes
        .infos
        .iter()
        .find(|n| n.name == node)
        .map_or(Err(announce::Ineligible::Gone), |n| announce::eligibility(&traffic, n, selectors))
        .err()
        .unwrap_or(announce::Ineligible::Selector)
}

/// What was last reported about each Service's request, so each Event is recorded once.
#[derive(Debug, Default)]
pub(crate) struct Reported {
    /// The allocation error last reported.
    pub(crate) errors: BTreeMap<ServiceName, String>,
    /// The annotation conflicts last reported.
    pub(crate) conflicts: BTreeMap<ServiceName, Vec<String>>,
}

impl Reported {
    /// Forgets a Service (gone, or no longer ours).
    pub(crate) fn forget(&mut self, name: &ServiceName) {
        self.errors.remove(name);
        self.conflicts.remove(name);
    }
}

/// Decides the addresses of one handled Service: the writes and Events.
pub(crate) fn assign(
    alloc: &mut Allocator,
    state: &ClusterState,
    svc: &Service,
    reported: &mut Reported,
    out: &mut Vec<Action>,
) -> Vec<IpAddr> {
    let object = ObjectRef::service(&svc.name);
    let observed = observed_ips(svc);
    let conflicts = svc.load_balancer.as_deref().map_or(&[][..], |lb| &lb.conflicts[..]);
    if reported.conflicts.get(&svc.name).map(Vec::as_slice) != Some(conflicts) {
        for c in conflicts {
            out.push(Action::Event(Event::warning(object.clone(), "AnnotationConflict", c.clone())));
        }
        reported.conflicts.insert(svc.name.clone(), conflicts.to_vec());
    }
    let errors = &mut reported.errors;
    let request_error = svc.load_balancer.as_deref().and_then(|lb| lb.error.clone());
    let result = match (request(state, svc), request_error) {
        (_, Some(e)) => Err(e),
        (Some(req), None) => alloc.assign(&req).map_err(|e| e.to_string()),
        (None, None) => Err("the Service has no ClusterIP to take its IP families from".to_string()),
    };
    let ips = match result {
        Ok(a) => {
            errors.remove(&svc.name);
            if let Some(c) = &a.cleared {
                let msg = format!("addresses {:?} given back: {}", c.ips, c.reason);
                out.push(Action::Event(Event::warning(object.clone(), "ClearAssignment", msg)));
            }
            if a.ips != observed {
                let msg = format!("assigned {} from pool {}", join(&a.ips), a.pool);
                out.push(Action::Event(Event::normal(object.clone(), "IPAllocated", msg)));
            }
            a.ips
        }
        Err(e) => {
            if errors.get(&svc.name) != Some(&e) {
                out.push(Action::Event(Event::warning(object.clone(), "AllocationFailed", e.clone())));
                errors.insert(svc.name.clone(), e);
            }
            Vec::new()
        }
    };
    if ips != observed {
        out.push(Action::SetIngress { service: svc.name.clone(), ips: ips.clone() });
    }
    ips
}

/// Where a Service's addresses are announced from: its pool's layer-2 settings.
pub(crate) struct Announcing<'a> {
    /// The Service's addresses.
    pub(crate) ips: &'a [IpAddr],
    /// Its pool (None: unknown, announce from any node).
    pub(crate) pool: Option<&'a LoadBalancerPool>,
    /// Every Service holding the same first address (they agree on one node).
    pub(crate) holders: &'a [ServiceName],
    /// The announcer now (Tideway's).
    pub(crate) current: Option<&'a str>,
    /// The node MetalLB announces the address from (its `ServiceL2Status`), kept while
    /// eligible when Tideway never announced it (`current` is then None).
    pub(crate) metallb: Option<&'a str>,
    /// Tideway never announced the address, MetalLB gave it out (the Service's status held it
    /// when the operator, reading MetalLB's objects, took it over) and no `ServiceL2Status`
    /// says where MetalLB announces it: the node MetalLB's election picks is kept.
    pub(crate) metallb_election: bool,
    /// Addresses per node, every Service's.
    pub(crate) load: &'a Load,
}

/// The announcement a Service should have (None: none), with the Event when its announcer moved.
pub(crate) fn announcement(
    state: &ClusterState,
    nodes: &mut Nodes,
    svc: &Service,
    a: Announcing<'_>,
    out: &mut Vec<Action>,
) -> Option<L2Announcement> {
    let (ips, first) = (a.ips, *a.ips.first()?);
    if a.pool.is_some_and(|p| !p.l2.enabled) {
        return None;
    }
    let group: Vec<&Service> = a.holders.iter().filter_map(|h| state.service(h)).collect();
    let group = if group.is_empty() { vec![svc] } else { group };
    let selectors = a.pool.map(|p| p.l2.node_selectors.clone()).unwrap_or_default();
    let interfaces = a.pool.map(|p| p.l2.interfaces.clone()).unwrap_or_default();
    nodes.mark_lacking(&interfaces);
    let decision = announce_group(state, nodes, first, &group, &selectors, &a);
    if let Some(change) = &decision.change {
        let object = ObjectRef::service(&svc.name);
        let msg = match &decision.announcer {
            Some(n) => format!("node {n} announces {}: {change}", join(ips)),
            None => format!("no node announces {}: {change}", join(ips)),
        };
        let event = match &decision.announcer {
            Some(n) => Event::normal(object, "AnnouncerChanged", msg)
                .related(Some(ObjectRef::cluster_scoped("Node", n))),
            None => Event::warning(object, "NoAnnouncer", msg),
        };
        out.push(Action::Event(event));
    }
    Some(L2Announcement {
        service: svc.name.clone(),
        ips: ips.to_vec(),
        node: decision.announcer,
        eligible: decision.eligible,
        interfaces,
    })
}

pub(crate) fn join(ips: &[IpAddr]) -> String {
    ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
