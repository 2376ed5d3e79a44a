//! Building a [`RecordIndex`] from the cluster state.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};
use tideway_core::cluster::ClusterState;
use tideway_core::model::{EndpointPort, Pod, Service, ServiceType};

use super::names::{dashed_ip, is_host_label, name_from};
use super::{EndpointRecord, IndexSettings, Kind, PodsMode, Port, RecordIndex, ServiceRecords};

impl RecordIndex {
    /// Builds the index for `state`. `serial` becomes the SOA serial (the time of the last
    /// change, injected so building stays deterministic). The result counts as synced.
    pub fn build(state: &ClusterState, settings: &IndexSettings, serial: u32) -> Self {
        let zone = settings.zone.clone();
        let zone_labels = zone.num_labels() as usize;
        let ns_name =
            Name::from_ascii("ns.dns").and_then(|n| n.append_domain(&zone)).unwrap_or_else(|_| zone.clone());
        let soa = soa_record(&zone, &ns_name, settings.ttl, serial);
        let mut index = RecordIndex {
            soa,
            zone,
            zone_labels,
            ttl: settings.ttl,
            pods: settings.pods,
            synced: true,
            serial,
            ns_name,
            ns_addrs: Vec::new(),
            namespaces: HashMap::new(),
            reverse: HashMap::new(),
            service_count: 0,
            endpoint_count: 0,
        };

        // Pods by namespace/name, for `hostname` + `subdomain` endpoint names.
        let pods: HashMap<(&str, &str), &Pod> =
            state.pods().map(|p| ((p.namespace.as_str(), p.name.as_str()), p)).collect();
        for pod in state.pods() {
            let ns = index.namespaces.entry(lower(&pod.namespace)).or_default();
            if settings.pods == PodsMode::Verified {
                ns.pod_ips.extend(pod.ips.iter().copied());
            }
        }
        for slice in state.endpoint_slices() {
            index.namespaces.entry(lower(&slice.namespace)).or_default();
        }

        let mut endpoint_ptrs: BTreeMap<IpAddr, Vec<Name>> = BTreeMap::new();
        for svc in state.services() {
            let Some(records) = service_records(state, svc, &index.zone, &pods) else {
                tracing::debug!(service = %svc.name, "service name is not a DNS label; not published");
                continue;
            };
            for ep in records.endpoints.iter() {
                endpoint_ptrs.entry(ep.ip).or_default().push(ep.fqdn.clone());
            }
            index.endpoint_count += records.endpoints.len();
            index.service_count += 1;
            if Some(&svc.name) == settings.dns_service.as_ref()
                && let Kind::ClusterIp(ips) = &records.kind
            {
                index.ns_addrs = ips.to_vec();
            }
            index
                .namespaces
                .entry(lower(&svc.name.namespace))
                .or_default()
                .services
                .insert(lower(&svc.name.name), records);
        }
        if index.ns_addrs.is_empty() {
            index.ns_addrs = settings.fallback_ns_addrs.clone();
        }

        // PTR: ClusterIPs win over endpoint addresses (CoreDNS checks Services first).
        index.reverse.extend(endpoint_ptrs.into_iter().map(|(ip, mut names)| {
            names.dedup();
            (ip, names)
        }));
        for ns in index.namespaces.values() {
            for svc in ns.services.values() {
                if let Kind::ClusterIp(ips) = &svc.kind {
                    for ip in ips.iter() {
                        index.reverse.insert(*ip, vec![svc.fqdn.clone()]);
                    }
                }
            }
        }
        index
    }
}

/// `<zone>. SOA ns.dns.<zone>. hostmaster.<zone>. <serial> 7200 1800 86400 <ttl>`, with TTL
/// `min(ttl, 300)` as CoreDNS sets it; the minimum field makes negative caching follow `ttl`.
fn soa_record(zone: &Name, ns_name: &Name, ttl: u32, serial: u32) -> Record {
    let rname =
        Name::from_ascii("hostmaster").and_then(|n| n.append_domain(zone)).unwrap_or_else(|_| zone.clone());
    let soa = SOA::new(ns_name.clone(), rname, serial, 7200, 1800, 86400, ttl);
    Record::from_rdata(zone.clone(), ttl.min(300), RData::SOA(soa))
}

fn lower(s: &str) -> Box<[u8]> {
    s.to_ascii_lowercase().into_bytes().into_boxed_slice()
}

fn port(name: &str, protocol: tideway_core::net::Protocol, number: u16) -> Port {
    Port { name: lower(name), protocol, port: number }
}

/// The records of one Service; `None` when its names cannot form DNS names.
fn service_records(
    state: &ClusterState,
    svc: &Service,
    zone: &Name,
    pods: &HashMap<(&str, &str), &Pod>,
) -> Option<ServiceRecords> {
    let (ns, name) = (svc.name.namespace.as_str(), svc.name.name.as_str());
    if !is_host_label(ns) || !is_host_label(name) {
        return None;
    }
    let fqdn = name_from(&[name, ns, "svc"])?.append_domain(zone).ok()?.to_lowercase();
    let kind = if svc.service_type == ServiceType::ExternalName {
        // CoreDNS publishes ExternalName only when it is a host name, not an address.
        let target = svc.external_name.as_deref().filter(|t| t.parse::<IpAddr>().is_err())?;
        let mut target = Name::from_ascii(target).ok()?;
        target.set_fqdn(true);
        Kind::ExternalName(target)
    } else if svc.headless || svc.cluster_ips.is_empty() {
        Kind::Headless
    } else {
        Kind::ClusterIp(svc.cluster_ips.clone().into_boxed_slice())
    };
    let ports = svc.ports.iter().map(|p| port(&p.name, p.protocol, p.port)).collect();

    let mut port_sets: Vec<Vec<EndpointPort>> = Vec::new();
    let mut endpoints = Vec::new();
    if !matches!(kind, Kind::ExternalName(_)) {
        for slice in state.endpoint_slices_for(&svc.name) {
            let set = match port_sets.iter().position(|p| *p == slice.ports) {
                Some(i) => i,
                None => {
                    port_sets.push(slice.ports.clone());
                    port_sets.len() - 1
                }
            };
            for ep in &slice.endpoints {
                // publishNotReadyAddresses: the controller marks everything ready; honour the
                // flag here too, so hand-written slices behave the same.
                if !(ep.ready || svc.publish_not_ready_addresses) {
                    continue;
                }
                let host = endpoint_host(ep, ns, name, pods);
                for ip in &ep.addresses {
                    let host = host.clone().unwrap_or_else(|| dashed_ip(*ip));
                    let Some(fqdn) = Name::from_ascii(&host).ok().and_then(|h| h.append_domain(&fqdn).ok())
                    else {
                        continue;
                    };
                    endpoints.push(EndpointRecord {
                        host: lower(&host),
                        fqdn: fqdn.to_lowercase(),
                        ip: *ip,
                        ports: u16::try_from(set).unwrap_or(u16::MAX),
                    });
                }
            }
        }
    }
    endpoints.sort_by(|a, b| a.host.cmp(&b.host).then(a.ip.cmp(&b.ip)));
    endpoints.dedup_by(|a, b| a.host == b.host && a.ip == b.ip);
    let port_sets = port_sets
        .into_iter()
        .map(|set| set.iter().map(|p| port(&p.name, p.protocol, p.port)).collect())
        .collect();
    Some(ServiceRecords { fqdn, kind, ports, endpoints: endpoints.into_boxed_slice(), port_sets })
}

/// The endpoint's host label: its `hostname`, else the hostname of the pod it points to when
/// that pod's `subdomain` is this Service (how StatefulSet pods get stable names).
fn endpoint_host(
    ep: &tideway_core::model::Endpoint,
    ns: &str,
    svc: &str,
    pods: &HashMap<(&str, &str), &Pod>,
) -> Option<String> {
    if let Some(h) = ep.hostname.as_deref().filter(|h| is_host_label(h)) {
        return Some(h.to_string());
    }
    let pod = pods.get(&(ns, ep.pod_name.as_deref()?))?;
    if pod.subdomain.as_deref() != Some(svc) {
        return None;
    }
    pod.hostname.as_deref().filter(|h| is_host_label(h)).map(str::to_string)
}
