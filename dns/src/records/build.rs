//! Building a [`RecordIndex`] from the DNS server's view of the cluster.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};
use tideway_core::net::Protocol;

use std::sync::Arc;

use super::external::ExternalIndex;
use super::names::is_host_label;
use super::programmed::ProgrammedIndex;
use super::reverse::{Claims, Target};
use super::rows::{self, Row, Rows, ServiceOf};
use super::shard::{Shard, part_of};
use super::{
    EndpointRecord, IndexSettings, Kind, Namespace, PodsMode, Port, RecordIndex, ServiceRecords, Span,
    name_hash,
};
use crate::view::{ClusterView, Ports, Publish};

#[path = "copy.rs"]
mod copy;

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

/// The hash a label is interned under.
fn text_hash(label: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(label);
    h.finish()
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Build-time state of one part: label interning, port-list dedup, address claims.
pub(super) struct Builder {
    part: Shard,
    reverse: Claims,
    /// The external zone is served: Services' external addresses are kept.
    external: bool,
    /// The arena's labels, found by their text (no key beside the arena).
    labels: hashbrown::HashTable<Span>,
    /// Port lists as the view writes them, to their index.
    port_sets: HashMap<Vec<u8>, u32>,
    /// Host labels by their place in the label arena, to their place in the host list.
    hosts: HashMap<u32, u32>,
    /// Wire length of `svc.<zone>.`, to reject names longer than 255 bytes.
    suffix_len: usize,
    /// The port list of the last slice, and its index.
    last_ports: Option<(Vec<u8>, u32)>,
    /// Port lists of the part a Service was copied from, to their index here.
    copied_port_sets: HashMap<u32, u32>,
}

impl Builder {
    /// The arena span of `label` (lower case), adding it when new.
    fn intern(&mut self, label: &[u8]) -> Span {
        let hash = text_hash(label);
        let text = &self.part.text;
        if let Some(span) = self.labels.find(hash, |s| Span::of(text, *s) == label) {
            return *span;
        }
        let span = Span { start: len32(self.part.text.len()), len: len32(label.len()) };
        self.part.text.extend_from_slice(label);
        let text = &self.part.text;
        self.labels.insert_unique(hash, span, |s| text_hash(Span::of(text, *s)));
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
        self.host_at(span)
    }

    /// [`host`](Self::host) of a label already in lower case.
    fn host_of(&mut self, label: &[u8]) -> u32 {
        let span = self.intern(label);
        self.host_at(span)
    }

    fn host_at(&mut self, span: Span) -> u32 {
        let next = len32(self.part.hosts.len());
        let id = *self.hosts.entry(span.start).or_insert(next);
        if id == next {
            self.part.hosts.push(span);
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
        let start = len32(self.part.ports.len());
        for (name, protocol, port) in ports.iter() {
            let p = self.port(name, protocol, port);
            self.part.ports.push(p);
        }
        let i = len32(self.part.port_sets.len());
        self.part.port_sets.push(Span { start, len: len32(self.part.ports.len()) - start });
        self.port_sets.insert(ports.0.to_vec(), i);
        i
    }

    /// A builder of an empty part, with room for about `addresses` endpoint addresses.
    pub(super) fn new(suffix_len: usize, external: bool, addresses: usize) -> Self {
        let mut part = Shard::default();
        part.endpoints.reserve(addresses);
        Builder {
            part,
            reverse: Claims::with_capacity(addresses + addresses / 8),
            external,
            labels: hashbrown::HashTable::new(),
            port_sets: HashMap::default(),
            hosts: HashMap::default(),
            suffix_len,
            last_ports: None,
            copied_port_sets: HashMap::default(),
        }
    }

    /// Adds one Service; false when its names cannot form DNS names.
    pub(super) fn service(&mut self, (ns, name, svc): ServiceOf<'_>, rows: &[Row<'_>]) -> bool {
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
                self.part.external_names.push(target);
                Kind::ExternalName(len32(self.part.external_names.len() - 1))
            }
            Publish::Headless => Kind::Headless,
            Publish::ClusterIp => Kind::ClusterIp,
        };
        let ips_start = len32(self.part.ips.len());
        if kind == Kind::ClusterIp {
            self.part.ips.extend(svc.cluster_ips);
        }
        let ips = Span { start: ips_start, len: len32(self.part.ips.len()) - ips_start };
        let ports_start = len32(self.part.ports.len());
        for (port_name, protocol, port) in svc.ports.iter() {
            let port = self.port(port_name, protocol, port);
            self.part.ports.push(port);
        }
        let ports = Span { start: ports_start, len: len32(self.part.ports.len()) - ports_start };
        let external_start = len32(self.part.ips.len());
        if self.external && !matches!(kind, Kind::ExternalName(_)) {
            self.part.ips.extend(svc.external);
        }
        let external = Span { start: external_start, len: len32(self.part.ips.len()) - external_start };

        let eps_start = len32(self.part.endpoints.len());
        for row in rows {
            let host = row.host.map_or(EndpointRecord::DASHED, |h| self.host(h));
            let port_set = self.port_set(row.ports);
            self.reverse.push(row.ip, Target::Endpoint(len32(self.part.endpoints.len())));
            let record = match row.ip {
                IpAddr::V4(v4) => EndpointRecord { host, port_set, ip: u32::from(v4) },
                IpAddr::V6(v6) => {
                    self.part.v6.push(v6);
                    EndpointRecord {
                        host,
                        port_set: port_set | EndpointRecord::V6,
                        ip: len32(self.part.v6.len() - 1),
                    }
                }
            };
            self.part.endpoints.push(record);
        }
        let record = ServiceRecords {
            ns: self.intern_lower(ns),
            name: self.intern_lower(name),
            kind,
            ips,
            ports,
            endpoints: Span { start: eps_start, len: len32(self.part.endpoints.len()) - eps_start },
            external,
            spec_version: svc.spec_version,
        };
        self.part.services.push(record);
        true
    }

    /// The part, its Services ordered and hashed, its addresses claimed.
    pub(super) fn finish(self) -> Shard {
        let Builder { mut part, mut reverse, .. } = self;
        // Services by namespace, then name (as written, usually); and by hash.
        part.by_hash.reserve(part.services.len());
        let mut order: Vec<u32> = (0..len32(part.services.len())).collect();
        let (services, text) = (&part.services, &part.text);
        let names = |i: u32| {
            let svc = &services[i as usize];
            (Span::of(text, svc.ns), Span::of(text, svc.name))
        };
        if !order.is_sorted_by(|&a, &b| names(a) <= names(b)) {
            order.sort_by(|&a, &b| names(a).cmp(&names(b)));
        }
        for &i in &order {
            let (ns, name) = names(i);
            let slot = part.by_hash.entry(name_hash(ns, name)).or_insert(i);
            if *slot != i {
                *slot = u32::MAX;
            }
        }
        part.by_name = order;
        // PTR: ClusterIPs win over endpoint addresses (CoreDNS checks Services first).
        for (i, svc) in part.services.iter().enumerate() {
            if svc.kind == Kind::ClusterIp {
                for ip in Span::of(&part.ips, svc.ips) {
                    reverse.push(*ip, Target::Service(len32(i)));
                }
            }
        }
        part.reverse = reverse.finish();
        part.text.shrink_to_fit();
        part.ports.shrink_to_fit();
        part.ips.shrink_to_fit();
        part.endpoints.shrink_to_fit();
        part.hosts.shrink_to_fit();
        part.v6.shrink_to_fit();
        part.services.shrink_to_fit();
        part
    }
}

/// How many parts an index of `services` Services is cut into, as a power of two: a few
/// hundred Services each, at most 256 parts (a PTR query reads every part's reverse map).
fn part_bits(services: usize) -> u32 {
    (services / 384).next_power_of_two().trailing_zeros().min(MAX_PART_BITS)
}

/// At most `1 << MAX_PART_BITS` parts.
pub(super) const MAX_PART_BITS: u32 = 8;

/// The wire length of `svc.<zone>.`.
pub(super) fn suffix_len(svc_zone: &Name) -> usize {
    svc_zone.iter().map(|l| l.len() + 1).sum::<usize>() + 1
}

/// The part of the Service `name` in `ns` (as the view spells them).
pub(super) fn part_of_service(ns: &str, name: &str, bits: u32) -> usize {
    if bits == 0 {
        return 0;
    }
    let hash = if has_capitals(ns) || has_capitals(name) {
        name_hash(&lower(ns), &lower(name))
    } else {
        name_hash(ns.as_bytes(), name.as_bytes())
    };
    part_of(hash, bits)
}

/// True when `s` has capitals.
pub(super) fn has_capitals(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_uppercase())
}

/// The SOA record of an index of `settings` at `serial`.
pub(super) fn soa_of(zone: &Name, ns_name: &Name, settings: &IndexSettings, serial: u32) -> Record {
    soa_record(zone, ns_name, settings.ttl, serial)
}

impl RecordIndex {
    /// Builds the index for `view`. `serial` becomes the SOA serial (the time of the last
    /// change, injected so building stays deterministic). The result counts as synced.
    pub fn build(view: &ClusterView, settings: &IndexSettings, serial: u32) -> Self {
        Self::build_in_parts(view, settings, serial, part_bits(view.service_count()))
    }

    /// [`Self::build`], cut into `1 << part_bits` parts.
    pub(super) fn build_in_parts(
        view: &ClusterView,
        settings: &IndexSettings,
        serial: u32,
        part_bits: u32,
    ) -> Self {
        let zone = settings.zone.clone();
        let ns_name = under("ns.dns", &zone);
        let svc_zone = under("svc", &zone);
        let suffix_len = suffix_len(&svc_zone);
        let external = settings.external.is_some();
        let mut namespaces: HashMap<Box<[u8]>, Namespace> = HashMap::default();
        let mut capitals = false;
        // Sized once, each part a share with some to spare: growth by doubling would copy
        // (and the kernel zero) these many times.
        let mut addresses = 0;
        for (ns, namespace) in view.namespaces() {
            capitals |= has_capitals(ns);
            let pod_ips = &mut namespaces.entry(lower(ns).into()).or_default().pod_ips;
            if settings.pods == PodsMode::Verified {
                pod_ips.extend(namespace.pods.iter().flat_map(|p| p.ips.iter().copied()));
            }
            addresses += namespace.slices.iter().map(|s| s.address_count()).sum::<usize>();
        }
        let share = (addresses >> part_bits) + (addresses >> part_bits) / 8;
        let mut builders: Vec<Builder> =
            (0..1usize << part_bits).map(|_| Builder::new(suffix_len, external, share)).collect();
        let mut ns_addrs = None;
        let rows_of = Rows::new(view, suffix_len, settings.endpoint_pod_names);
        let dns_service = settings.dns_service.as_ref().map(|s| (s.namespace.as_str(), s.name.as_str()));
        rows::for_each_service(view, &rows_of, |svc, rows| {
            capitals |= has_capitals(svc.1);
            let part = part_of_service(svc.0, svc.1, part_bits);
            if !builders[part].service(svc, rows) {
                tracing::debug!(
                    namespace = svc.0,
                    service = svc.1,
                    "names do not form DNS names; not published"
                );
                return;
            }
            if Some((svc.0, svc.1)) == dns_service {
                let facts = svc.2.read();
                ns_addrs = Some((facts.cluster_ips.collect(), facts.external.collect()));
            }
        });
        let parts = builders.into_iter().map(|b| Arc::new(b.finish())).collect();
        let mut ix = RecordIndex {
            soa: soa_of(&zone, &ns_name, settings, serial),
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
            ns_name,
            namespaces: Arc::new(namespaces),
            parts,
            part_bits,
            capitals,
            external: settings.external.as_ref().map(|e| ExternalIndex::new(e, serial)),
            programmed: None,
        };
        ix.set_ns_addrs(settings, ns_addrs);
        if settings.require_programmed {
            ix.programmed = Some(Arc::new(ProgrammedIndex::build(view)));
        }
        ix
    }

    /// The addresses of `ns.dns.<zone>` (and of the external zone's name server): the DNS
    /// Service's, when it is published, else the fallback.
    pub(super) fn set_ns_addrs(&mut self, settings: &IndexSettings, dns: Option<(Vec<IpAddr>, Vec<IpAddr>)>) {
        let (cluster, external) = dns.unwrap_or_default();
        self.ns_addrs = if cluster.is_empty() { settings.fallback_ns_addrs.clone() } else { cluster };
        if let Some(ext) = &mut self.external {
            ext.ns_addrs = external;
        }
    }
}
