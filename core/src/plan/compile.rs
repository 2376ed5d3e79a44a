//! `compile`: ClusterState + NodeContext -> Ruleset.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::categorize::{Candidate, categorize_endpoints};
use super::node::NodeContext;
use super::ruleset::{Backend, HealthCheck, Requested, Ruleset, ServicePortPlan};
use crate::cluster::ClusterState;
use crate::model::{EndpointSlice, LABEL_HEADLESS, Service, ServicePort, SessionAffinity, TrafficPolicy};
use crate::net::IpFamily;

/// Compiles the whole ruleset for one node.
pub fn compile(cluster: &ClusterState, node: &NodeContext) -> Ruleset {
    let mut ruleset = Ruleset::empty(node);
    ruleset.fill(cluster);
    ruleset
}

/// Plans every port and family of one Service (without cross-Service conflict resolution),
/// plus its health-check server if it needs one. Services this proxy must not program
/// (headless, ExternalName, another proxy's) yield nothing.
pub fn plan_service<'a>(
    svc: &Service,
    slices: impl Iterator<Item = &'a EndpointSlice>,
    node: &NodeContext,
) -> (Vec<ServicePortPlan>, Option<HealthCheck>) {
    if !svc.has_cluster_ip() || !svc.is_proxied_by(node.settings.service_proxy_name.as_deref()) {
        return (Vec::new(), None);
    }
    let slices: Vec<&EndpointSlice> = slices.filter(|s| !s.labels.contains_key(LABEL_HEADLESS)).collect();
    let mut plans = Vec::new();
    for family in IpFamily::ALL {
        let Some(cluster_ip) = svc.cluster_ip(family) else {
            continue;
        };
        for port in &svc.ports {
            plans.push(plan_port(svc, port, family, cluster_ip, &slices, node));
        }
    }
    let health = health_check(svc, &slices, node);
    (plans, health)
}

fn plan_port(
    svc: &Service,
    port: &ServicePort,
    family: IpFamily,
    cluster_ip: IpAddr,
    slices: &[&EndpointSlice],
    node: &NodeContext,
) -> ServicePortPlan {
    let of_family = |ip: &IpAddr| IpFamily::of(ip) == family;
    let external_ips: Vec<IpAddr> = dedup(svc.external_ips.iter().copied().filter(of_family));
    let load_balancer_ips: Vec<IpAddr> = dedup(svc.load_balancer_vips().filter(of_family));
    let node_port = port.node_port.filter(|_| svc.external_policy_applies());
    let source_ranges: Vec<_> = family.nets_of(&svc.load_balancer_source_ranges);
    let externally_accessible =
        node_port.is_some() || !external_ips.is_empty() || !load_balancer_ips.is_empty();
    let internal_local = svc.internal_traffic_policy == TrafficPolicy::Local;
    let external_local = externally_accessible
        && svc.external_policy_applies()
        && svc.external_traffic_policy == TrafficPolicy::Local;
    let uses_cluster = !internal_local || externally_accessible;
    let uses_local = internal_local || external_local;

    let candidates = gather(slices, family, port, node);
    let cats = categorize_endpoints(&candidates, uses_cluster, uses_local, &node.name, node.zone.as_deref());
    let allow_from_node = node.ips_of(family).iter().any(|ip| source_ranges.iter().any(|r| r.contains(ip)));
    let affinity_timeout = match svc.session_affinity {
        SessionAffinity::ClientIp { timeout_seconds } => Some(timeout_seconds),
        SessionAffinity::None => None,
    };
    let backends = cats.cluster.len().max(cats.local.len());
    let balancing = super::balancing::choose(svc.load_balancing.as_deref(), backends, &node.settings);
    ServicePortPlan {
        name: svc.port_name(port),
        family,
        port: port.port,
        cluster_ip: Some(cluster_ip),
        node_port,
        external_ips: external_ips.clone(),
        load_balancer_ips: load_balancer_ips.clone(),
        source_ranges,
        allow_from_node,
        affinity_timeout,
        internal_local,
        external_local,
        has_endpoints: cats.has_any,
        cluster_endpoints: cats.cluster,
        local_endpoints: cats.local,
        health_check_node_port: svc.health_check_node_port.filter(|_| external_local),
        shadowed: Vec::new(),
        balancing,
        requested: Requested { cluster_ip: Some(cluster_ip), external_ips, load_balancer_ips, node_port },
    }
}

fn dedup(ips: impl Iterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut seen = BTreeSet::new();
    ips.filter(|ip| seen.insert(*ip)).collect()
}

/// Endpoints of `family` exposing the Service port's name and protocol; kube-proxy uses each
/// endpoint's first address. Duplicates across slices keep the most usable copy.
fn gather<'a>(
    slices: &[&'a EndpointSlice],
    family: IpFamily,
    port: &ServicePort,
    node: &NodeContext,
) -> Vec<Candidate<'a>> {
    let mut all: Vec<Candidate<'a>> = Vec::new();
    for slice in slices.iter().filter(|s| s.family == family) {
        let Some(ep_port) = slice.ports.iter().find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        all.extend(slice.endpoints.iter().filter_map(|ep| {
            let ip = ep.addresses.first().copied()?;
            Some(Candidate {
                backend: Backend {
                    ip,
                    port: ep_port.port,
                    local: ep.node_name.as_deref() == Some(node.name.as_str()),
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                },
                zone_hints: ep.zone_hints(),
                node_hints: ep.node_hints(),
            })
        }));
    }
    // By address, the most usable copy first, the earliest of equals (the sort is stable).
    let address = |c: &Candidate<'_>| (c.backend.ip, c.backend.port);
    let rank = |c: &Candidate<'_>| (c.backend.ready, c.backend.serving);
    all.sort_by(|a, b| address(a).cmp(&address(b)).then_with(|| rank(b).cmp(&rank(a))));
    all.dedup_by_key(|c| address(c));
    all
}

fn health_check(svc: &Service, slices: &[&EndpointSlice], node: &NodeContext) -> Option<HealthCheck> {
    let port = svc.health_check_node_port?;
    if !(svc.external_policy_applies() && svc.external_traffic_policy == TrafficPolicy::Local) {
        return None;
    }
    let local_ready: BTreeSet<IpAddr> = slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|ep| ep.ready && ep.node_name.as_deref() == Some(node.name.as_str()))
        .filter_map(|ep| ep.addresses.first().copied())
        .collect();
    Some(HealthCheck { service: svc.name.clone(), port, local_endpoints: local_ready.len() })
}
