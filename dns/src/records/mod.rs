//! The record index: the cluster's DNS data, compact and indexed by lower-case labels.
//!
//! Built from the server's [`ClusterView`](crate::view::ClusterView) by
//! [`RecordIndex::build`], in parts ([`shard`]) that a change to a few Services rebuilds alone
//! ([`RecordIndex::updated`]); read by [`crate::answer`]. Every lookup the answer rules need —
//! namespace, Service, endpoint host, named port, reverse address, pod address — is a hash
//! lookup or a binary search, so negative answers (NXDOMAIN vs NODATA, empty non-terminals,
//! unknown namespaces) cost the same as positive ones.
//!
//! Nothing is pre-rendered: records are synthesized when asked for. Each part's data is flat —
//! all labels in one byte arena, Services, addresses, ports and endpoints in shared vectors
//! referenced by [`Span`]s — so the benchmark zone (11,000 Services, 5,000 endpoints) takes
//! about 2 MB instead of the ~1.3 KB per record of a generic zone store.

mod build;
mod external;
mod layout;
pub mod names;
mod programmed;
mod reverse;
mod rows;
mod shard;
mod update;
mod zone;

pub(crate) use external::ExternalIndex;
pub use external::ExternalZone;
pub(crate) use programmed::ProgrammedIndex;
pub use programmed::programmed_fingerprint;
pub use zone::{ZoneError, parse_zone};

use rustc_hash::{FxHashMap, FxHashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Arc;

use layout::ServiceRecords;
pub(crate) use layout::{EndpointRecord, Host, Kind, Port, Span, name_hash};
use shard::{Shard, part_of};

use hickory_proto::rr::{Name, Record};
use tideway_core::model::ServiceName;

/// The CoreDNS `pods` setting: whether `a-b-c-d.<ns>.pod.<zone>` names answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodsMode {
    /// No pod records (NXDOMAIN), CoreDNS's default.
    #[default]
    Disabled,
    /// Any well-formed address in an existing namespace answers (kubeadm's default).
    Insecure,
    /// Only addresses of existing pods in that namespace answer.
    Verified,
}

/// A pods mode CoreDNS does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pods mode {0:?} (disabled, insecure or verified)")]
pub struct UnknownPodsMode(pub String);

impl FromStr for PodsMode {
    type Err = UnknownPodsMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disabled" => Ok(PodsMode::Disabled),
            "insecure" => Ok(PodsMode::Insecure),
            "verified" => Ok(PodsMode::Verified),
            other => Err(UnknownPodsMode(other.to_string())),
        }
    }
}

/// What shapes the index besides the cluster objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSettings {
    /// The cluster domain, e.g. `cluster.local.` (stored lower-case, fully qualified).
    pub zone: Name,
    /// TTL of every cluster record; also the SOA minimum (negative-caching TTL).
    pub ttl: u32,
    /// Pod records.
    pub pods: PodsMode,
    /// The Service whose ClusterIPs `ns.dns.<zone>` and the apex NS stand for.
    pub dns_service: Option<ServiceName>,
    /// Addresses for `ns.dns.<zone>` when that Service does not exist (the listen address).
    pub fallback_ns_addrs: Vec<IpAddr>,
    /// The external zone for LoadBalancer and external IPs, if any.
    pub external: Option<ExternalZone>,
    /// Give a pod a Service's ClusterIP only once its node's agent reports the Service
    /// programmed (`--require-programmed`).
    pub require_programmed: bool,
    /// Name an endpoint without a hostname after the pod it targets, not its dashed address
    /// (`--endpoint-pod-names`, CoreDNS's `endpoint_pod_names`).
    pub endpoint_pod_names: bool,
    /// Further cluster zones, answered as `zone` is (CoreDNS's `kubernetes cluster.local
    /// example.local`): names under them spell the zone as asked; PTR targets name `zone`.
    pub extra_zones: Vec<Name>,
    /// Which cluster zones send an NXDOMAIN upstream instead (CoreDNS's `fallthrough`).
    pub fallthrough: Fallthrough,
}

/// Where a name the cluster zones do not have is asked upstream instead of denied
/// (CoreDNS's `fallthrough [ZONES...]`). Names in the reverse trees that are not the cluster's
/// always go upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Fallthrough {
    /// Denied with NXDOMAIN (the default).
    #[default]
    Never,
    /// In every cluster zone (`fallthrough` without zones).
    Everywhere,
    /// In these zones (`fallthrough example.local`), lower-case, fully qualified.
    In(Vec<Name>),
}

impl Fallthrough {
    /// Whether an NXDOMAIN for `lower` (a lower-case name in a cluster zone) goes upstream.
    pub fn covers(&self, lower: &Name) -> bool {
        match self {
            Fallthrough::Never => false,
            Fallthrough::Everywhere => true,
            Fallthrough::In(zones) => zones.iter().any(|z| z.zone_of(lower)),
        }
    }
}

impl IndexSettings {
    /// Settings for `zone` with CoreDNS's defaults (TTL 5, pods disabled, `kube-system/kube-dns`).
    pub fn new(zone: &str) -> Result<Self, ZoneError> {
        Ok(IndexSettings {
            zone: parse_zone(zone)?,
            ttl: 5,
            pods: PodsMode::Disabled,
            dns_service: Some(ServiceName::new("kube-system", "kube-dns")),
            fallback_ns_addrs: Vec::new(),
            external: None,
            require_programmed: false,
            endpoint_pod_names: false,
            extra_zones: Vec::new(),
            fallthrough: Fallthrough::Never,
        })
    }

    /// Every cluster zone, the first one first.
    pub fn cluster_zones(&self) -> impl Iterator<Item = &Name> {
        cluster_zones(&self.zone, &self.extra_zones)
    }
}

/// `first`, then `extra`: the cluster zones as settings and the index both hold them.
fn cluster_zones<'a>(first: &'a Name, extra: &'a [Name]) -> impl Iterator<Item = &'a Name> {
    std::iter::once(first).chain(extra)
}

/// One namespace: that it exists and, in `verified` mode, its pod addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Namespace {
    pub(crate) pod_ips: FxHashSet<IpAddr>,
}

/// A Service, seen through the index and the part that hold its data.
#[derive(Clone, Copy)]
pub(crate) struct Svc<'a> {
    ix: &'a RecordIndex,
    part: &'a Shard,
    rec: &'a ServiceRecords,
}

impl<'a> Svc<'a> {
    pub(crate) fn kind(&self) -> Kind {
        self.rec.kind
    }

    /// The `resourceVersion` at which its generation last changed, if known.
    pub(crate) fn spec_version(&self) -> Option<u64> {
        Some(self.rec.spec_version).filter(|v| *v != 0)
    }

    /// `<svc>.<ns>.svc.<zone>.`
    pub(crate) fn fqdn(&self) -> Name {
        self.ix.under_svc(&[self.part.text(self.rec.name), self.part.text(self.rec.ns)])
    }

    pub(crate) fn cluster_ips(&self) -> &'a [IpAddr] {
        Span::of(&self.part.ips, self.rec.ips)
    }

    /// `spec.externalIPs` and LoadBalancer ingress addresses.
    pub(crate) fn external_ips(&self) -> &'a [IpAddr] {
        Span::of(&self.part.ips, self.rec.external)
    }

    pub(crate) fn external_name(&self) -> Option<&'a Name> {
        match self.rec.kind {
            Kind::ExternalName(i) => self.part.external_names.get(i as usize),
            _ => None,
        }
    }

    pub(crate) fn ports(&self) -> &'a [Port] {
        Span::of(&self.part.ports, self.rec.ports)
    }

    /// True when `_name._proto` labels (underscores already stripped) select `port`.
    pub(crate) fn port_matches(&self, port: &Port, name: &[u8], proto: &[u8]) -> bool {
        port.name.len > 0 && self.part.text(port.name) == name && port.protocol.as_str().as_bytes() == proto
    }

    pub(crate) fn endpoints(&self) -> &'a [EndpointRecord] {
        Span::of(&self.part.endpoints, self.rec.endpoints)
    }

    /// The endpoint addresses published under `host` (endpoints are in host label order).
    pub(crate) fn endpoints_named(&self, host: &[u8]) -> &'a [EndpointRecord] {
        let eps = self.endpoints();
        let start = eps.partition_point(|e| &*self.host(e) < host);
        let len = eps[start..].iter().take_while(|e| &*self.host(e) == host).count();
        &eps[start..start + len]
    }

    pub(crate) fn host(&self, ep: &EndpointRecord) -> Host<'a> {
        match self.part.hosts.get(ep.host as usize) {
            Some(label) => Host::Named(self.part.text(*label)),
            None => Host::Dashed(names::DashedIp::new(self.ip(ep))),
        }
    }

    /// The endpoint's address.
    pub(crate) fn ip(&self, ep: &EndpointRecord) -> IpAddr {
        if ep.port_set & EndpointRecord::V6 == 0 {
            IpAddr::V4(Ipv4Addr::from(ep.ip))
        } else {
            let v6 = self.part.v6.get(ep.ip as usize).copied().unwrap_or(Ipv6Addr::UNSPECIFIED);
            IpAddr::V6(v6)
        }
    }

    /// `<host>.<svc>.<ns>.svc.<zone>.`
    pub(crate) fn endpoint_fqdn(&self, ep: &EndpointRecord) -> Name {
        let part = self.part;
        self.ix.under_svc(&[&self.host(ep), part.text(self.rec.name), part.text(self.rec.ns)])
    }

    /// The ports of one endpoint (its EndpointSlice's).
    pub(crate) fn endpoint_ports(&self, ep: &EndpointRecord) -> &'a [Port] {
        let set = ep.port_set & !EndpointRecord::V6;
        let span = self.part.port_sets.get(set as usize).copied().unwrap_or_default();
        Span::of(&self.part.ports, span)
    }
}

/// The cluster zone's data, ready to answer from.
#[derive(Debug, Clone)]
pub struct RecordIndex {
    pub(crate) zone: Name,
    pub(crate) zone_labels: usize,
    /// Further cluster zones, answered alike.
    pub(crate) extra_zones: Vec<Name>,
    pub(crate) fallthrough: Fallthrough,
    pub(crate) ttl: u32,
    pub(crate) pods: PodsMode,
    pub(crate) synced: bool,
    pub(crate) serial: u32,
    /// The zone's SOA record (owner: the zone), used at the apex and in every negative answer.
    pub(crate) soa: Record,
    pub(crate) ns_addrs: Vec<IpAddr>,
    /// `svc.<zone>.`, the suffix of every Service and endpoint name.
    svc_zone: Name,
    /// `ns.dns.<zone>.`, the SOA's name server.
    ns_name: Name,
    /// Every namespace, by lower-case name.
    namespaces: Arc<FxHashMap<Box<[u8]>, Namespace>>,
    /// The parts, `1 << part_bits` of them, each shared with the indexes before and after
    /// it until one of its Services changes.
    parts: Vec<Arc<Shard>>,
    part_bits: u32,
    /// Some Service or namespace name has capitals (a manifest's): the parts, which find the
    /// view's objects by their lower-case names, are not rebuilt alone then.
    capitals: bool,
    /// The external zone, when configured.
    pub(crate) external: Option<ExternalIndex>,
    /// Node reports, with `--require-programmed`.
    pub(crate) programmed: Option<Arc<ProgrammedIndex>>,
}

impl RecordIndex {
    /// An index with no objects that has not seen a full sync: it answers SERVFAIL where it
    /// would otherwise deny a name.
    pub fn unsynced(settings: &IndexSettings) -> Self {
        let mut index = Self::build(&Default::default(), settings, 0);
        index.synced = false;
        index
    }

    /// The cluster zone (lower-case, fully qualified).
    pub fn zone(&self) -> &Name {
        &self.zone
    }

    /// The cluster zones after the first.
    pub fn extra_zones(&self) -> &[Name] {
        &self.extra_zones
    }

    /// Where NXDOMAIN goes upstream instead.
    pub fn fallthrough(&self) -> &Fallthrough {
        &self.fallthrough
    }

    /// The depth in labels of the cluster zone `lower` (a lower-case name) is in, the deepest
    /// when zones nest (CoreDNS matches the longest zone), or `None` outside them all.
    pub(crate) fn cluster_zone_labels(&self, lower: &Name) -> Option<usize> {
        cluster_zones(&self.zone, &self.extra_zones)
            .filter(|z| z.zone_of(lower))
            .map(|z| usize::from(z.num_labels()))
            .max()
    }

    /// The record TTL.
    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    /// True once built from a complete view of the cluster.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Number of Services published.
    pub fn service_count(&self) -> usize {
        self.parts.iter().map(|p| p.services.len()).sum()
    }

    /// Number of ready endpoint addresses published.
    pub fn endpoint_count(&self) -> usize {
        self.parts.iter().map(|p| p.endpoints.len()).sum()
    }

    /// Number of parts.
    pub fn part_count(&self) -> usize {
        self.parts.len()
    }

    /// `<labels...>.svc.<zone>.`; the labels were validated when the index was built.
    fn under_svc(&self, labels: &[&[u8]]) -> Name {
        Name::from_labels(labels.iter().copied())
            .and_then(|n| n.append_domain(&self.svc_zone))
            .unwrap_or_else(|_| self.svc_zone.clone())
    }

    pub(crate) fn namespace(&self, name: &[u8]) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// The Service `name` of namespace `ns`.
    pub(crate) fn service<'a>(&'a self, ns_label: &[u8], name: &[u8]) -> Option<Svc<'a>> {
        let hash = name_hash(ns_label, name);
        let part = self.parts.get(part_of(hash, self.part_bits))?;
        Some(Svc { ix: self, part, rec: part.find(hash, ns_label, name)? })
    }

    /// The PTR targets of `ip`: a ClusterIP's Service (it hides the endpoints at the same
    /// address: CoreDNS looks at Services first), else every endpoint name at it, in
    /// namespace, then Service order.
    pub(crate) fn reverse(&self, ip: &IpAddr) -> Option<Vec<Name>> {
        let mut services = Vec::new();
        let mut endpoints = Vec::new();
        for part in &self.parts {
            for target in part.claims(ip) {
                match target {
                    reverse::Target::Service(s) => {
                        let rec = part.services.get(s as usize)?;
                        services.push(Svc { ix: self, part, rec });
                    }
                    reverse::Target::Endpoint(e) => {
                        let rec = part.service_of_endpoint(e)?;
                        endpoints.push((Svc { ix: self, part, rec }, part.endpoints.get(e as usize)?));
                    }
                }
            }
        }
        fn order<'a>(s: &Svc<'a>) -> (&'a [u8], &'a [u8]) {
            (s.part.text(s.rec.ns), s.part.text(s.rec.name))
        }
        if let Some(first) = services.iter().min_by(|a, b| order(a).cmp(&order(b))) {
            return Some(vec![first.fqdn()]);
        }
        if endpoints.is_empty() {
            return None;
        }
        endpoints.sort_by(|a, b| order(&a.0).cmp(&order(&b.0)));
        Some(endpoints.iter().map(|(svc, ep)| svc.endpoint_fqdn(ep)).collect())
    }
}

#[cfg(test)]
mod tests;
