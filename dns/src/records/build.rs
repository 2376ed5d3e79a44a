//! Building a [`RecordIndex`] from the cluster state.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};
use tideway_core::cluster::ClusterState;
use tideway_core::model::{Endpoint, EndpointPort, Pod, Service, ServiceType};
use tideway_core::net::Protocol;

use super::external::external_addresses;
use super::names::{DashedIp, is_host_label};
use super::{
    EndpointRecord, ExternalIndex, IndexSettings, Kind, Namespace, PodsMode, Port, ProgrammedIndex,
    RecordIndex, ServiceRecords, Span, name_hash,
};

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

/// An endpoint's host label while building: its name (lower case), or its address dashed
/// (not stored in the index: written again when asked for).
enum Label {
    Named(Vec<u8>),
    Dashed(DashedIp),
}

impl Label {
    fn bytes(&self) -> &[u8] {
        match self {
            Label::Named(h) => h,
            Label::Dashed(d) => d.as_bytes(),
        }
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Build-time state: label interning and port-list dedup.
struct Builder<'s> {
    ix: RecordIndex,
    labels: HashMap<Vec<u8>, Span>,
    port_sets: HashMap<Vec<(String, Protocol, u16)>, u32>,
    /// Wire length of `svc.<zone>.`, to reject names longer than 255 bytes.
    suffix_len: usize,
    pods: HashMap<(&'s str, &'s str), &'s Pod>,
    /// The port list of the last slice, and its index.
    last_ports: Option<(Vec<EndpointPort>, u32)>,
    /// The namespace of the last Service (Services come in namespace order).
    last_namespace: Option<String>,
}

impl Builder<'_> {
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

    /// Notes that the namespace `ns` exists.
    fn namespace(&mut self, ns: &str) {
        let label = lower(ns);
        if !self.ix.namespaces.contains_key(label.as_slice()) {
            self.ix.namespaces.insert(label.into(), Namespace::default());
        }
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
    fn port_set(&mut self, ports: &[EndpointPort]) -> u32 {
        // Slices mostly repeat the port list of the one before.
        if let Some((last, i)) = &self.last_ports
            && last.as_slice() == ports
        {
            return *i;
        }
        let i = self.new_port_set(ports);
        self.last_ports = Some((ports.to_vec(), i));
        i
    }

    fn new_port_set(&mut self, ports: &[EndpointPort]) -> u32 {
        let key: Vec<(String, Protocol, u16)> =
            ports.iter().map(|p| (p.name.to_ascii_lowercase(), p.protocol, p.port)).collect();
        if let Some(i) = self.port_sets.get(&key) {
            return *i;
        }
        let start = len32(self.ix.ports.len());
        for (name, protocol, port) in &key {
            let p = self.port(name, *protocol, *port);
            self.ix.ports.push(p);
        }
        let i = len32(self.ix.port_sets.len());
        self.ix.port_sets.push(Span { start, len: len32(key.len()) });
        self.port_sets.insert(key, i);
        i
    }

    /// The endpoint's host label: its `hostname`, else the hostname of the pod it points to
    /// when that pod's `subdomain` is this Service (how StatefulSet pods get stable names).
    fn endpoint_host(&self, ep: &Endpoint, ns: &str, svc: &str) -> Option<String> {
        if let Some(h) = ep.hostname.as_deref().filter(|h| is_host_label(h)) {
            return Some(h.to_string());
        }
        let pod = self.pods.get(&(ns, ep.pod_name.as_deref()?))?;
        if pod.subdomain.as_deref() != Some(svc) {
            return None;
        }
        pod.hostname.as_deref().filter(|h| is_host_label(h)).map(str::to_string)
    }

    /// Adds one Service; false when its names cannot form DNS names.
    fn service(
        &mut self,
        state: &ClusterState,
        svc: &Service,
        reverse: &mut Vec<(IpAddr, u32, u32)>,
    ) -> bool {
        let (ns, name) = (svc.name.namespace.as_str(), svc.name.name.as_str());
        if !self.fits(&[name.as_bytes(), ns.as_bytes()]) {
            return false;
        }
        let index = len32(self.ix.services.len());
        let kind = if svc.service_type == ServiceType::ExternalName {
            // CoreDNS publishes ExternalName only when it is a host name, not an address.
            let Some(mut target) = svc
                .external_name
                .as_deref()
                .filter(|t| t.parse::<IpAddr>().is_err())
                .and_then(|t| Name::from_ascii(t).ok())
            else {
                return false;
            };
            target.set_fqdn(true);
            self.ix.external_names.push(target);
            Kind::ExternalName(len32(self.ix.external_names.len() - 1))
        } else if svc.headless || svc.cluster_ips.is_empty() {
            Kind::Headless
        } else {
            Kind::ClusterIp
        };
        let ips_start = len32(self.ix.ips.len());
        if kind == Kind::ClusterIp {
            self.ix.ips.extend(svc.cluster_ips.iter().copied());
        }
        let ips = Span { start: ips_start, len: len32(self.ix.ips.len()) - ips_start };
        let ports_start = len32(self.ix.ports.len());
        for p in &svc.ports {
            let port = self.port(&p.name, p.protocol, p.port);
            self.ix.ports.push(port);
        }
        let ports = Span { start: ports_start, len: len32(self.ix.ports.len()) - ports_start };
        let external_start = len32(self.ix.ips.len());
        if self.ix.external.is_some() && !matches!(kind, Kind::ExternalName(_)) {
            self.ix.ips.extend(external_addresses(svc));
        }
        let external = Span { start: external_start, len: len32(self.ix.ips.len()) - external_start };

        // Ready endpoints (publishNotReadyAddresses: the controller marks everything ready;
        // the flag is honoured here too, so hand-written slices behave the same). A host
        // label is kept only when it is a name: an address's dashed label is written when
        // asked for.
        let mut eps: Vec<(Label, IpAddr, u32)> = Vec::new();
        if !matches!(kind, Kind::ExternalName(_)) {
            for slice in state.endpoint_slices_for(&svc.name) {
                let set = self.port_set(&slice.ports);
                for ep in slice.endpoints.iter().filter(|e| e.ready || svc.publish_not_ready_addresses) {
                    let host = self.endpoint_host(ep, ns, name);
                    for ip in &ep.addresses {
                        let label = match host.as_deref() {
                            Some(h) => Label::Named(h.as_bytes().to_ascii_lowercase()),
                            None => Label::Dashed(DashedIp::new(*ip)),
                        };
                        if self.fits(&[label.bytes(), name.as_bytes(), ns.as_bytes()]) {
                            eps.push((label, *ip, set));
                        }
                    }
                }
            }
        }
        // In host label order (lookups by label search them), then address.
        eps.sort_by(|a, b| a.0.bytes().cmp(b.0.bytes()).then(a.1.cmp(&b.1)));
        eps.dedup_by(|a, b| a.1 == b.1 && a.0.bytes() == b.0.bytes());
        let eps_start = len32(self.ix.endpoints.len());
        for (host, ip, port_set) in eps {
            let host = match host {
                Label::Named(h) => self.intern(&h),
                Label::Dashed(_) => Span::DASHED,
            };
            reverse.push((ip, index, len32(self.ix.endpoints.len())));
            self.ix.endpoints.push(EndpointRecord { host, ip, port_set });
        }
        let record = ServiceRecords {
            ns: self.intern_lower(ns),
            name: self.intern_lower(name),
            kind,
            ips,
            ports,
            endpoints: Span { start: eps_start, len: len32(self.ix.endpoints.len()) - eps_start },
            external,
            generation: svc.generation,
        };
        self.ix.services.push(record);
        if self.last_namespace.as_deref() != Some(ns) {
            self.namespace(ns);
            self.last_namespace = Some(ns.to_string());
        }
        true
    }
}

impl RecordIndex {
    /// Builds the index for `state`. `serial` becomes the SOA serial (the time of the last
    /// change, injected so building stays deterministic). The result counts as synced.
    pub fn build(state: &ClusterState, settings: &IndexSettings, serial: u32) -> Self {
        let zone = settings.zone.clone();
        let ns_name = under("ns.dns", &zone);
        let svc_zone = under("svc", &zone);
        let suffix_len = svc_zone.iter().map(|l| l.len() + 1).sum::<usize>() + 1;
        let ix = RecordIndex {
            soa: soa_record(&zone, &ns_name, settings.ttl, serial),
            zone_labels: zone.num_labels() as usize,
            zone,
            ttl: settings.ttl,
            pods: settings.pods,
            synced: true,
            serial,
            ns_addrs: Vec::new(),
            svc_zone,
            text: Vec::new(),
            namespaces: HashMap::default(),
            services: Vec::with_capacity(state.service_count()),
            by_name: Vec::with_capacity(state.service_count()),
            by_hash: std::collections::HashMap::default(),
            ips: Vec::new(),
            ports: Vec::new(),
            port_sets: Vec::new(),
            endpoints: Vec::new(),
            external_names: Vec::new(),
            reverse: Vec::new(),
            ptrs: Vec::new(),
            external: settings.external.as_ref().map(|e| ExternalIndex::new(e, serial)),
            programmed: None,
        };
        let mut b = Builder {
            ix,
            labels: HashMap::default(),
            port_sets: HashMap::default(),
            suffix_len,
            pods: state.pods().map(|p| ((p.namespace.as_str(), p.name.as_str()), p)).collect(),
            last_ports: None,
            last_namespace: None,
        };
        // A namespace exists when its Namespace object does, or (sources without Namespace
        // objects) when anything lives in it.
        for ns in state.namespaces() {
            b.ix.namespaces.entry(lower(&ns.name).into()).or_default();
        }
        for pod in state.pods() {
            let ns = b.ix.namespaces.entry(lower(&pod.namespace).into()).or_default();
            if settings.pods == PodsMode::Verified {
                ns.pod_ips.extend(pod.ips.iter().copied());
            }
        }
        for slice in state.endpoint_slices() {
            b.ix.namespaces.entry(lower(&slice.namespace).into()).or_default();
        }

        // Sized once: growth by doubling would copy (and the kernel zero) these many times.
        let addresses: usize =
            state.endpoint_slices().flat_map(|s| &s.endpoints).map(|e| e.addresses.len()).sum();
        b.ix.endpoints.reserve_exact(addresses);
        b.ix.ips.reserve(state.service_count());
        let mut reverse: Vec<(IpAddr, u32, u32)> = Vec::with_capacity(addresses + state.service_count());
        for svc in state.services() {
            if !b.service(state, svc, &mut reverse) {
                tracing::debug!(service = %svc.name, "names do not form DNS names; not published");
                continue;
            }
            if Some(&svc.name) == settings.dns_service.as_ref() {
                b.ix.ns_addrs = svc.cluster_ips.clone();
                if let Some(ext) = &mut b.ix.external {
                    ext.ns_addrs = external_addresses(svc);
                }
            }
        }
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
                reverse.extend(Span::of(&ix.ips, svc.ips).iter().map(|ip| (*ip, len32(i), u32::MAX)));
            }
        }
        // Per address, Services in name order (their index); a ClusterIP's own entry is found
        // wherever it sorts.
        reverse.sort_unstable();
        ix.reverse.reserve_exact(reverse.chunk_by(|a, b| a.0 == b.0).count());
        for group in reverse.chunk_by(|a, b| a.0 == b.0) {
            let chosen: &[(IpAddr, u32, u32)] = match group.iter().position(|r| r.2 == u32::MAX) {
                Some(at) => &group[at..=at],
                None => group,
            };
            let span = Span { start: len32(ix.ptrs.len()), len: len32(chosen.len()) };
            ix.ptrs.extend(chosen.iter().map(|r| (r.1, r.2)));
            ix.reverse.push((group[0].0, span));
        }
        if settings.require_programmed {
            let programmed = ProgrammedIndex::build(state, |name| {
                let (ns, svc) = (lower(&name.namespace), lower(&name.name));
                ix.service(&ns, ix.namespace(&ns)?, &svc).map(|s| s.id())
            });
            ix.programmed = Some(programmed);
        }
        ix.text.shrink_to_fit();
        ix.ports.shrink_to_fit();
        ix.ips.shrink_to_fit();
        ix.endpoints.shrink_to_fit();
        ix.ptrs.shrink_to_fit();
        ix
    }
}
