//! Building a [`RecordIndex`] from the DNS server's view of the cluster.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};
use tideway_core::net::Protocol;

use super::external::ExternalIndex;
use super::names::is_host_label;
use super::programmed::ProgrammedIndex;
use super::reverse::{Claims, ReverseMap, Target};
use super::rows::{self, Row, Rows, ServiceOf};
use super::{
    EndpointRecord, IndexSettings, Kind, PodsMode, Port, RecordIndex, ServiceRecords, Span, name_hash,
};
use crate::view::{ClusterView, Ports, Publish};

/// `<zone>. SOA ns.dns.<zone>. hostmaster.<zone>. <serial> 7200 1800 86400 <ttl>`, with TTL
/// `min(ttl, 300)` as CoreDNS sets it; the minimum field makes negative caching follow `ttl`.
fn soa_record(zone: &Name, ns_name: &Name, ttl: u32, serial: u32) -> Record {
    let rname =
        Name::from_ascii("hostmaster").and_then(|n| n.append_domain(zone)).unwrap_or_else(|_| zone.clone());
    let soa = SOA::new(ns_name.clone(), rname, serial, 7200, 1800, 86400, ttl);
    Record::from_rdata(zone.clone(), ttl.min(300), RData::SOA(soa))
}

fn under(prefix: &str, zone: &Name) -> Name {
    Name::from_ascii(prefix).and_then(|n| n.append_domain(zone)).unwrap_or_else(|_| zone.clone())
}

fn lower(s: &str) -> Vec<u8> {
    s.to_ascii_lowercase().into_bytes()
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Build-time state: label interning and port-list dedup.
struct Builder {
    ix: RecordIndex,
    labels: HashMap<Vec<u8>, Span>,
    /// Port lists as the view writes them, to their index.
    port_sets: HashMap<Vec<u8>, u32>,
    /// Host labels by their place in the label arena, to their place in the host list.
    hosts: HashMap<u32, u32>,
    /// Wire length of `svc.<zone>.`, to reject names longer than 255 bytes.
    suffix_len: usize,
    /// The port list of the last slice, and its index.
    last_ports: Option<(Vec<u8>, u32)>,
}

impl Builder {
    /// The arena span of `label` (lower case), adding it when new.
    fn intern(&mut self, label: &[u8]) -> Span {
        if let Some(span) = self.labels.get(label) {
            return *span;
        }
        let span = Span { start: len32(self.ix.text.len()), len: len32(label.len()) };
        self.ix.text.extend_from_slice(label);
        self.labels.insert(label.to_vec(), span);
        span
    }

    /// [`intern`](Self::intern) of `s` in lower case (copied only when it has capitals).
    fn intern_lower(&mut self, s: &str) -> Span {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            self.intern(&lower(s))
        } else {
            self.intern(s.as_bytes())
        }
    }

    /// The place of host label `label` (lower-cased) in the index's host labels.
    fn host(&mut self, label: &str) -> u32 {
        let span = self.intern_lower(label);
        let next = len32(self.ix.hosts.len());
        let id = *self.hosts.entry(span.start).or_insert(next);
        if id == next {
            self.ix.hosts.push(span);
        }
        id
    }

    /// True when `labels` under `svc.<zone>.` make a legal name.
    fn fits(&self, labels: &[&[u8]]) -> bool {
        labels.iter().all(is_host_label)
            && labels.iter().map(|l| l.len() + 1).sum::<usize>() + self.suffix_len <= 255
    }

    fn port(&mut self, name: &str, protocol: Protocol, port: u16) -> Port {
        Port { name: self.intern_lower(name), protocol, port }
    }

    /// The index of `ports` in `port_sets`, adding it when new.
    fn port_set(&mut self, ports: Ports<'_>) -> u32 {
        // Slices mostly repeat the port list of the one before.
        if let Some((last, i)) = &self.last_ports
            && last.as_slice() == ports.0
        {
            return *i;
        }
        let i = self.new_port_set(ports);
        self.last_ports = Some((ports.0.to_vec(), i));
        i
    }

    fn new_port_set(&mut self, ports: Ports<'_>) -> u32 {
        if let Some(i) = self.port_sets.get(ports.0) {
            return *i;
        }
        let start = len32(self.ix.ports.len());
        for (name, protocol, port) in ports.iter() {
            let p = self.port(name, protocol, port);
            self.ix.ports.push(p);
        }
        let i = len32(self.ix.port_sets.len());
        self.ix.port_sets.push(Span { start, len: len32(self.ix.ports.len()) - start });
        self.port_sets.insert(ports.0.to_vec(), i);
        i
    }

    /// Adds one Service; false when its names cannot form DNS names.
    fn service(&mut self, (ns, name, svc): ServiceOf<'_>, rows: &[Row<'_>], reverse: &mut Claims) -> bool {
        if !self.fits(&[name.as_bytes(), ns.as_bytes()]) {
            return false;
        }
        let svc = svc.read();
        let kind = match svc.publish {
            Publish::ExternalName(target) => {
                // CoreDNS publishes ExternalName only when it is a host name, not an address.
                let Some(mut target) =
                    target.filter(|t| t.parse::<IpAddr>().is_err()).and_then(|t| Name::from_ascii(t).ok())
                else {
                    return false;
                };
                target.set_fqdn(true);
                self.ix.external_names.push(target);
                Kind::ExternalName(len32(self.ix.external_names.len() - 1))
            }
            Publish::Headless => Kind::Headless,
            Publish::ClusterIp => Kind::ClusterIp,
        };
        let ips_start = len32(self.ix.ips.len());
        if kind == Kind::ClusterIp {
            self.ix.ips.extend(svc.cluster_ips);
        }
        let ips = Span { start: ips_start, len: len32(self.ix.ips.len()) - ips_start };
        let ports_start = len32(self.ix.ports.len());
        for (port_name, protocol, port) in svc.ports.iter() {
            let port = self.port(port_name, protocol, port);
            self.ix.ports.push(port);
        }
        let ports = Span { start: ports_start, len: len32(self.ix.ports.len()) - ports_start };
        let external_start = len32(self.ix.ips.len());
        if self.ix.external.is_some() && !matches!(kind, Kind::ExternalName(_)) {
            self.ix.ips.extend(svc.external);
        }
        let external = Span { start: external_start, len: len32(self.ix.ips.len()) - external_start };

        let eps_start = len32(self.ix.endpoints.len());
        for row in rows {
            let host = row.host.map_or(EndpointRecord::DASHED, |h| self.host(h));
            let port_set = self.port_set(row.ports);
            reverse.push(row.ip, Target::Endpoint(len32(self.ix.endpoints.len())));
            let record = match row.ip {
                IpAddr::V4(v4) => EndpointRecord { host, port_set, ip: u32::from(v4) },
                IpAddr::V6(v6) => {
                    self.ix.v6.push(v6);
                    EndpointRecord {
                        host,
                        port_set: port_set | EndpointRecord::V6,
                        ip: len32(self.ix.v6.len() - 1),
                    }
                }
            };
            self.ix.endpoints.push(record);
        }
        let record = ServiceRecords {
            ns: self.intern_lower(ns),
            name: self.intern_lower(name),
            kind,
            ips,
            ports,
            endpoints: Span { start: eps_start, len: len32(self.ix.endpoints.len()) - eps_start },
            external,
            spec_version: svc.spec_version,
        };
        self.ix.services.push(record);
        true
    }
}

impl RecordIndex {
    /// Builds the index for `view`. `serial` becomes the SOA serial (the time of the last
    /// change, injected so building stays deterministic). The result counts as synced.
    pub fn build(view: &ClusterView, settings: &IndexSettings, serial: u32) -> Self {
        let zone = settings.zone.clone();
        let ns_name = under("ns.dns", &zone);
        let svc_zone = under("svc", &zone);
        let suffix_len = svc_zone.iter().map(|l| l.len() + 1).sum::<usize>() + 1;
        let ix = RecordIndex {
            soa: soa_record(&zone, &ns_name, settings.ttl, serial),
            zone_labels: zone.num_labels() as usize,
            zone,
            extra_zones: settings.extra_zones.clone(),
            fallthrough: settings.fallthrough.clone(),
            ttl: settings.ttl,
            pods: settings.pods,
            synced: true,
            serial,
            ns_addrs: Vec::new(),
            svc_zone,
            text: Vec::new(),
            namespaces: HashMap::default(),
            services: Vec::with_capacity(view.service_count()),
            by_name: Vec::with_capacity(view.service_count()),
            by_hash: std::collections::HashMap::default(),
            ips: Vec::new(),
            ports: Vec::new(),
            port_sets: Vec::new(),
            endpoints: Vec::new(),
            hosts: Vec::new(),
            v6: Vec::new(),
            external_names: Vec::new(),
            reverse: ReverseMap::default(),
            external: settings.external.as_ref().map(|e| ExternalIndex::new(e, serial)),
            programmed: None,
        };
        let mut b = Builder {
            ix,
            labels: HashMap::default(),
            port_sets: HashMap::default(),
            hosts: HashMap::default(),
            suffix_len,
            last_ports: None,
        };
        // Sized once: growth by doubling would copy (and the kernel zero) these many times.
        let mut addresses = 0;
        for (ns, namespace) in view.namespaces() {
            let pod_ips = &mut b.ix.namespaces.entry(lower(ns).into()).or_default().pod_ips;
            if settings.pods == PodsMode::Verified {
                pod_ips.extend(namespace.pods.iter().flat_map(|p| p.ips.iter().copied()));
            }
            addresses += namespace.slices.iter().map(|s| s.address_count()).sum::<usize>();
        }
        b.ix.endpoints.reserve_exact(addresses);
        b.ix.ips.reserve(view.service_count());
        let mut reverse = Claims::with_capacity(addresses + view.service_count());

        let rows_of = Rows::new(view, suffix_len, settings.endpoint_pod_names);
        let dns_service = settings.dns_service.as_ref().map(|s| (s.namespace.as_str(), s.name.as_str()));
        rows::for_each_service(view, &rows_of, |svc, rows| {
            if !b.service(svc, rows, &mut reverse) {
                tracing::debug!(
                    namespace = svc.0,
                    service = svc.1,
                    "names do not form DNS names; not published"
                );
                return;
            }
            if Some((svc.0, svc.1)) == dns_service {
                let facts = svc.2.read();
                b.ix.ns_addrs = facts.cluster_ips.collect();
                if let Some(ext) = &mut b.ix.external {
                    ext.ns_addrs = facts.external.collect();
                }
            }
        });

        let mut ix = b.ix;
        if ix.ns_addrs.is_empty() {
            ix.ns_addrs = settings.fallback_ns_addrs.clone();
        }

        // Services by namespace, then name; and by hash.
        ix.by_hash.reserve(ix.services.len());
        let mut order: Vec<u32> = (0..len32(ix.services.len())).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&ix.services[a as usize], &ix.services[b as usize]);
            (ix.text(a.ns), ix.text(a.name)).cmp(&(ix.text(b.ns), ix.text(b.name)))
        });
        for group in order.chunk_by(|&a, &b| ix.services[a as usize].ns == ix.services[b as usize].ns) {
            let ns = ix.text(ix.services[group[0] as usize].ns).to_vec();
            let span = Span { start: len32(ix.by_name.len()), len: len32(group.len()) };
            ix.by_name.extend_from_slice(group);
            for &i in group {
                let h = name_hash(&ns, ix.text(ix.services[i as usize].name));
                let slot = ix.by_hash.entry(h).or_insert(i);
                if *slot != i {
                    *slot = u32::MAX;
                }
            }
            ix.namespaces.entry(ns.into()).or_default().services = span;
        }

        // PTR: ClusterIPs win over endpoint addresses (CoreDNS checks Services first).
        for (i, svc) in ix.services.iter().enumerate() {
            if svc.kind == Kind::ClusterIp {
                for ip in Span::of(&ix.ips, svc.ips) {
                    reverse.push(*ip, Target::Service(len32(i)));
                }
            }
        }
        ix.reverse = reverse.finish();

        if settings.require_programmed {
            ix.programmed = Some(ProgrammedIndex::build(view));
        }
        ix.text.shrink_to_fit();
        ix.ports.shrink_to_fit();
        ix.ips.shrink_to_fit();
        ix.endpoints.shrink_to_fit();
        ix.hosts.shrink_to_fit();
        ix.v6.shrink_to_fit();
        ix
    }
}
