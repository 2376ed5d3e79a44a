//! The answer rules: one query against a [`RecordIndex`] gives one [`Outcome`].
//!
//! Every rule of the Kubernetes DNS specification (schema 1.1.0) and the CoreDNS behaviours
//! clients rely on lives here, as a pure function:
//!
//! * `<svc>.<ns>.svc.<zone>`: ClusterIP A/AAAA; headless A/AAAA per ready endpoint (NXDOMAIN
//!   when none is ready); ExternalName CNAME (chased in-zone here, upstream by the caller);
//!   SRV on the bare name for every port.
//! * `_<port>._<proto>.<svc>.<ns>.svc.<zone>` SRV (named ports only) with the targets' addresses
//!   in the additional section; weight `100 / rows`, priority 0.
//! * `<host>.<svc>.<ns>.svc.<zone>`: endpoint names (hostname, pod hostname, or dashed IP).
//! * `<a-b-c-d>.<ns>.pod.<zone>` behind [`PodsMode`](crate::records::PodsMode).
//! * `dns-version.<zone>` TXT, apex SOA/NS, `ns.dns.<zone>` A/AAAA, PTR for ClusterIPs and
//!   endpoint addresses (names not found in the reverse trees go upstream, like CoreDNS's
//!   `fallthrough in-addr.arpa ip6.arpa`).
//! * Negative answers: NXDOMAIN for names that do not exist, NODATA (NOERROR, empty) for names
//!   that exist without the asked type (including empty non-terminals such as `svc.<zone>` and
//!   `<ns>.svc.<zone>`), both with the zone SOA in the authority section; SERVFAIL instead of
//!   NXDOMAIN until the index has seen a full sync.
//!
//! * The external zone, when configured: see [`external`].
//! * `--require-programmed`: [`gate`] holds a ClusterIP back from a pod until its node has the
//!   Service's rules.
//!
//! Answers keep the case of the query name as CoreDNS does: owner names, and the zone wherever
//! it appears (SOA owner, primary server and mailbox; NS answers; SRV targets) are spelled as
//! the query spelled them, while the Service, namespace and host labels of an SRV target are
//! spelled as the objects name them; all matching is case-insensitive.

use std::net::IpAddr;

use hickory_proto::op::{LowerQuery, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

pub use programmed::{Gate, gate};

use crate::records::names::{pod_label_ip, reverse_ip, reverse_tree};
use crate::records::{EndpointRecord, Host, Kind, PodsMode, Port, RecordIndex, Svc};

mod external;
mod programmed;
#[cfg(test)]
pub(crate) mod tests;

/// The `dns-version` TXT value (schema version of the specification implemented).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// TTL of the `dns-version` record (fixed in CoreDNS).
const VERSION_TTL: u32 = 28800;
/// How many in-zone CNAMEs (ExternalName pointing at ExternalName ...) are followed.
const MAX_CHASE: usize = 8;

/// A complete authoritative answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// NOERROR (with or without records), NXDOMAIN, or SERVFAIL before the first sync.
    pub rcode: ResponseCode,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of negative answers).
    pub authority: Vec<Record>,
    /// Additional section (SRV targets, NS addresses).
    pub additionals: Vec<Record>,
}

/// What to do with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Send this authoritative answer.
    Answer(Answer),
    /// An ExternalName: send `answer` (ending in a CNAME to `target`) completed with `target`'s
    /// records of the query type, looked up upstream.
    Chase {
        /// The CNAME chain so far.
        answer: Answer,
        /// The name to look up upstream.
        target: Name,
    },
    /// Not the cluster's to answer: forward it.
    Forward,
}

/// Answers `query` from `index`.
pub fn answer(index: &RecordIndex, query: &LowerQuery) -> Outcome {
    let outcome = resolve(index, query.original().name(), query.name(), query.query_type(), 0);
    match outcome {
        // `fallthrough`: a name a cluster zone does not have is asked upstream.
        Outcome::Answer(Answer { rcode: ResponseCode::NXDomain, .. })
            if index.fallthrough.covers(query.name())
                && index.cluster_zone_labels(query.name()).is_some() =>
        {
            Outcome::Forward
        }
        outcome => outcome,
    }
}

fn resolve(ix: &RecordIndex, qname: &Name, lower: &Name, qtype: RecordType, depth: usize) -> Outcome {
    if let Some(ext) = &ix.external
        && ext.zone.zone_of(lower)
    {
        return external::answer(ix, ext, qname, lower, qtype);
    }
    let Some(zone_labels) = ix.cluster_zone_labels(lower) else {
        return reverse(&Cx::cluster(ix, qname, qtype, ix.zone_labels), lower);
    };
    let cx = Cx::cluster(ix, qname, qtype, zone_labels);
    // Labels below the zone, leaf first; deeper than `_port._proto.svc.ns.svc` never exists.
    let rel_len = lower.num_labels() as usize - zone_labels;
    if rel_len > 5 {
        return cx.nxdomain();
    }
    let mut rel: [&[u8]; 5] = [&[]; 5];
    for (slot, label) in rel.iter_mut().zip(lower.iter().take(rel_len)) {
        *slot = label;
    }
    let rel = &rel[..rel_len];
    match rel {
        [] => cx.apex("ns.dns", &ix.ns_addrs),
        [b"dns-version"] if qtype == RecordType::TXT => {
            let txt = RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()]));
            cx.answer(vec![Record::from_rdata(qname.clone(), VERSION_TTL, txt)], Vec::new())
        }
        [b"dns-version" | b"svc" | b"pod" | b"dns"] => cx.nodata(),
        [b"ns", b"dns"] => cx.answer(cx.addresses(qname, ix.ns_addrs.iter().copied()), Vec::new()),
        [.., ns, b"svc"] => {
            let Some(namespace) = ix.namespace(ns) else {
                return cx.nxdomain();
            };
            let Some((svc_label, below)) = rel[..rel.len() - 2].split_last() else {
                return cx.nodata();
            };
            let Some(svc) = ix.service(ns, namespace, svc_label) else {
                return cx.nxdomain();
            };
            match below {
                [] => cx.service(&svc, depth),
                [host] => cx.endpoint(&svc, host),
                [port, proto] => cx.port(&svc, strip_underscore(port), strip_underscore(proto)),
                _ => cx.nxdomain(),
            }
        }
        [.., b"pod"] => cx.pod(rel),
        _ => cx.nxdomain(),
    }
}

/// PTR for cluster addresses; everything else in (or outside) the reverse trees goes upstream.
fn reverse(cx: &Cx<'_>, lower: &Name) -> Outcome {
    if cx.qtype != RecordType::PTR || lower.num_labels() > 34 {
        return Outcome::Forward;
    }
    let mut labels: [&[u8]; 34] = [&[]; 34];
    let n = lower.num_labels() as usize;
    for (slot, label) in labels.iter_mut().zip(lower.iter()) {
        *slot = label;
    }
    let labels = &labels[..n];
    if reverse_tree(labels).is_none() {
        return Outcome::Forward;
    }
    match reverse_ip(labels).and_then(|ip| cx.ix.reverse(&ip)) {
        Some(names) => {
            let answers = names.into_iter().map(|n| cx.record(cx.qname, RData::PTR(PTR(n)))).collect();
            cx.answer(answers, Vec::new())
        }
        None => Outcome::Forward,
    }
}

/// `_http` -> `http`; CoreDNS accepts the labels with or without the underscore.
fn strip_underscore(label: &[u8]) -> &[u8] {
    label.strip_prefix(b"_").unwrap_or(label)
}

/// One query being answered, in the cluster zone or the external one.
struct Cx<'a> {
    ix: &'a RecordIndex,
    qname: &'a Name,
    qtype: RecordType,
    /// The zone's record TTL and its SOA.
    ttl: u32,
    soa: &'a Record,
    /// The depth in labels of the zone the query is in.
    zone_labels: usize,
    /// The depth of the zone the index's own names (SOA, Service names) are under: the first
    /// cluster zone, or the external zone.
    own_labels: usize,
}

impl<'a> Cx<'a> {
    /// A query in the cluster zone `zone_labels` deep.
    fn cluster(ix: &'a RecordIndex, qname: &'a Name, qtype: RecordType, zone_labels: usize) -> Self {
        Cx { ix, qname, qtype, ttl: ix.ttl, soa: &ix.soa, zone_labels, own_labels: ix.zone_labels }
    }

    fn record(&self, owner: &Name, data: RData) -> Record {
        Record::from_rdata(owner.clone(), self.ttl, data)
    }

    /// A positive answer, or NODATA when `answers` is empty.
    fn answer(&self, answers: Vec<Record>, additionals: Vec<Record>) -> Outcome {
        if answers.is_empty() {
            return self.nodata();
        }
        Outcome::Answer(Answer { rcode: ResponseCode::NoError, answers, authority: Vec::new(), additionals })
    }

    fn nodata(&self) -> Outcome {
        Outcome::Answer(Answer {
            rcode: ResponseCode::NoError,
            authority: vec![self.soa()],
            ..Answer::default()
        })
    }

    /// The zone as the query spells it.
    fn zone_name(&self) -> Name {
        self.qname.trim_to(self.zone_labels)
    }

    /// The zone's SOA, with the zone as the query spells it: its owner, and under it the
    /// primary server (`ns.dns.<zone>`) and mailbox (`hostmaster.<zone>`), as CoreDNS writes them.
    fn soa(&self) -> Record {
        let mut soa = self.soa.clone();
        let zone = self.zone_name();
        if let RData::SOA(data) = &mut soa.data {
            data.mname = self.under_zone(&data.mname, &zone);
            data.rname = self.under_zone(&data.rname, &zone);
        }
        soa.name = zone;
        soa
    }

    /// `name` (one of the index's own names) with its zone part replaced by `zone`.
    fn under_zone(&self, name: &Name, zone: &Name) -> Name {
        let own = usize::from(name.num_labels()).saturating_sub(self.own_labels);
        Name::from_labels(name.iter().take(own))
            .and_then(|prefix| prefix.append_domain(zone))
            .unwrap_or_else(|_| name.clone())
    }

    /// An SRV target naming the Service: `<svc>.<ns>.svc.` as the Service is named, then the
    /// zone as the query spells it (CoreDNS's case: `svc1.testns.svc.cLuStEr.LoCaL.`).
    fn service_target(&self, svc: &Svc<'_>) -> Name {
        self.under_zone(&svc.fqdn(), &self.zone_name())
    }

    /// An SRV target naming an endpoint: `<host>.<svc>.<ns>.svc.` as named, the zone as queried.
    fn endpoint_target(&self, svc: &Svc<'_>, ep: &EndpointRecord) -> Name {
        self.under_zone(&svc.endpoint_fqdn(ep), &self.zone_name())
    }

    /// NXDOMAIN, or SERVFAIL while the index has not seen a full sync: a denial would be
    /// cached downstream for a name that may well exist (kubernetes/dns#186).
    fn nxdomain(&self) -> Outcome {
        let rcode = if self.ix.synced { ResponseCode::NXDomain } else { ResponseCode::ServFail };
        Outcome::Answer(Answer { rcode, authority: vec![self.soa()], ..Answer::default() })
    }

    /// A/AAAA records (per the query type) of `ips`, owned by `owner`.
    fn addresses(&self, owner: &Name, ips: impl Iterator<Item = IpAddr>) -> Vec<Record> {
        let qtype = self.qtype;
        ips.filter_map(|ip| match (qtype, ip) {
            (RecordType::A, IpAddr::V4(v4)) => Some(self.record(owner, RData::A(A(v4)))),
            (RecordType::AAAA, IpAddr::V6(v6)) => Some(self.record(owner, RData::AAAA(AAAA(v6)))),
            _ => None,
        })
        .collect()
    }

    /// A and AAAA records of `ips` (for the additional section).
    fn glue(&self, owner: &Name, ips: impl Iterator<Item = IpAddr>, out: &mut Vec<Record>) {
        out.extend(ips.map(|ip| match ip {
            IpAddr::V4(v4) => self.record(owner, RData::A(A(v4))),
            IpAddr::V6(v6) => self.record(owner, RData::AAAA(AAAA(v6))),
        }));
    }

    /// The zone's apex: its SOA, and NS `<ns_prefix>.<zone>` with `ns_addrs` as glue.
    fn apex(&self, ns_prefix: &str, ns_addrs: &[IpAddr]) -> Outcome {
        match self.qtype {
            RecordType::SOA => self.answer(vec![self.soa()], Vec::new()),
            RecordType::NS => {
                let ns_name = Name::from_ascii(ns_prefix)
                    .and_then(|n| n.append_domain(self.qname))
                    .unwrap_or_else(|_| self.qname.clone());
                let ns = self.record(self.qname, RData::NS(NS(ns_name.clone())));
                let mut glue = Vec::new();
                self.glue(&ns_name, ns_addrs.iter().copied(), &mut glue);
                self.answer(vec![ns], glue)
            }
            _ => self.nodata(),
        }
    }

    /// `<svc>.<ns>.svc.<zone>`.
    fn service(&self, svc: &Svc<'_>, depth: usize) -> Outcome {
        match svc.kind() {
            Kind::ExternalName(_) => match svc.external_name() {
                Some(target) => self.external_name(target, depth),
                None => self.nxdomain(),
            },
            Kind::ClusterIp => match self.qtype {
                RecordType::A | RecordType::AAAA => {
                    self.answer(self.addresses(self.qname, svc.cluster_ips().iter().copied()), Vec::new())
                }
                RecordType::SRV => self.cluster_ip_srv(svc, None),
                _ => self.nodata(),
            },
            Kind::Headless if svc.endpoints().is_empty() => self.nxdomain(),
            Kind::Headless => self.endpoints(svc, svc.endpoints(), None),
        }
    }

    /// `<host>.<svc>.<ns>.svc.<zone>`: endpoint names, under headless and ClusterIP Services.
    fn endpoint(&self, svc: &Svc<'_>, host: &[u8]) -> Outcome {
        if matches!(svc.kind(), Kind::ExternalName(_)) {
            return self.nxdomain();
        }
        let eps = svc.endpoints_named(host);
        if eps.is_empty() {
            return self.nxdomain();
        }
        self.endpoints(svc, eps, None)
    }

    /// `_<port>._<proto>.<svc>.<ns>.svc.<zone>`.
    fn port(&self, svc: &Svc<'_>, name: &[u8], proto: &[u8]) -> Outcome {
        match svc.kind() {
            Kind::ExternalName(_) => self.nxdomain(),
            Kind::ClusterIp => {
                if !svc.ports().iter().any(|p| svc.port_matches(p, name, proto)) {
                    return self.nxdomain();
                }
                match self.qtype {
                    RecordType::A | RecordType::AAAA => {
                        self.answer(self.addresses(self.qname, svc.cluster_ips().iter().copied()), Vec::new())
                    }
                    RecordType::SRV => self.cluster_ip_srv(svc, Some((name, proto))),
                    _ => self.nodata(),
                }
            }
            Kind::Headless => {
                let any = svc
                    .endpoints()
                    .iter()
                    .any(|ep| svc.endpoint_ports(ep).iter().any(|p| svc.port_matches(p, name, proto)));
                if !any {
                    return self.nxdomain();
                }
                self.endpoints(svc, svc.endpoints(), Some((name, proto)))
            }
        }
    }

    /// SRV for a ClusterIP Service: one row per (matching) port, target the Service name;
    /// the weight counts a candidate per port and ClusterIP, as CoreDNS does.
    fn cluster_ip_srv(&self, svc: &Svc<'_>, filter: Option<(&[u8], &[u8])>) -> Outcome {
        let ips = svc.cluster_ips();
        let fqdn = self.service_target(svc);
        let rows: Vec<(Host<'_>, u32, u16)> = svc
            .ports()
            .iter()
            .filter(|p| filter.is_none_or(|(name, proto)| svc.port_matches(p, name, proto)))
            .map(|p| (Host::Named(&[]), 0, p.port))
            .collect();
        let candidates = rows.len() * ips.len();
        let answers = self.srv_rows(rows, candidates, |_| fqdn.clone());
        let mut extra = Vec::new();
        if !answers.is_empty() {
            self.glue(&fqdn, ips.iter().copied(), &mut extra);
        }
        self.answer(answers, extra)
    }

    /// Records of a set of endpoint addresses: A/AAAA, or SRV rows for their ports. With a
    /// `(name, proto)` filter only endpoints and ports matching it count.
    fn endpoints(&self, svc: &Svc<'_>, eps: &[EndpointRecord], filter: Option<(&[u8], &[u8])>) -> Outcome {
        let port_ok = |p: &Port| filter.is_none_or(|(name, proto)| svc.port_matches(p, name, proto));
        let selected = |ep: &&EndpointRecord| filter.is_none() || svc.endpoint_ports(ep).iter().any(port_ok);
        match self.qtype {
            RecordType::A | RecordType::AAAA => {
                let ips = eps.iter().filter(selected).map(|ep| svc.ip(ep));
                self.answer(self.addresses(self.qname, ips), Vec::new())
            }
            RecordType::SRV => {
                let rows: Vec<(Host<'_>, u32, u16)> = eps
                    .iter()
                    .enumerate()
                    .flat_map(|(i, ep)| {
                        svc.endpoint_ports(ep)
                            .iter()
                            .filter(|p| port_ok(p))
                            .map(move |p| (svc.host(ep), i as u32, p.port))
                    })
                    .collect();
                let candidates = rows.len();
                let answers =
                    self.srv_rows(rows, candidates, |i| self.endpoint_target(svc, &eps[i as usize]));
                let mut extra = Vec::new();
                if !answers.is_empty() {
                    // Glue: every address of every target host, once.
                    let mut last: Option<Host<'_>> = None;
                    for ep in eps.iter().filter(|ep| svc.endpoint_ports(ep).iter().any(port_ok)) {
                        let host = svc.host(ep);
                        if last.as_deref() != Some(&*host) {
                            last = Some(host);
                            let fqdn = self.endpoint_target(svc, ep);
                            self.glue(
                                &fqdn,
                                svc.endpoints_named(&host).iter().map(|e| svc.ip(e)),
                                &mut extra,
                            );
                        }
                    }
                }
                self.answer(answers, extra)
            }
            _ => self.nodata(),
        }
    }

    /// SRV rows `0 <100/candidates> <port> <target>`, one per distinct (host, port); `target`
    /// names the endpoint a row's second field refers to.
    fn srv_rows(
        &self,
        mut rows: Vec<(Host<'_>, u32, u16)>,
        candidates: usize,
        target: impl Fn(u32) -> Name,
    ) -> Vec<Record> {
        let weight = u16::try_from(100 / candidates.max(1)).unwrap_or(100).max(1);
        rows.sort_by(|a, b| (*a.0).cmp(&*b.0).then(a.2.cmp(&b.2)));
        rows.dedup_by(|a, b| *a.0 == *b.0 && a.2 == b.2);
        rows.into_iter()
            .map(|(_, ep, port)| self.record(self.qname, RData::SRV(SRV::new(0, weight, port, target(ep)))))
            .collect()
    }

    /// An ExternalName Service: its CNAME, chased in-zone here or upstream by the caller.
    fn external_name(&self, target: &Name, depth: usize) -> Outcome {
        let cname = self.record(self.qname, RData::CNAME(CNAME(target.clone())));
        if !matches!(self.qtype, RecordType::A | RecordType::AAAA) || depth >= MAX_CHASE {
            return self.answer(vec![cname], Vec::new());
        }
        let lower = target.to_lowercase();
        if self.ix.cluster_zone_labels(&lower).is_none() {
            return Outcome::Chase {
                answer: Answer { answers: vec![cname], ..Answer::default() },
                target: target.clone(),
            };
        }
        match resolve(self.ix, target, &lower, self.qtype, depth + 1) {
            Outcome::Answer(mut a) => {
                a.answers.insert(0, cname);
                Outcome::Answer(a)
            }
            Outcome::Chase { mut answer, target } => {
                answer.answers.insert(0, cname);
                Outcome::Chase { answer, target }
            }
            Outcome::Forward => self.answer(vec![cname], Vec::new()),
        }
    }

    /// `<ns>.pod.<zone>` and `<a-b-c-d>.<ns>.pod.<zone>`.
    fn pod(&self, rel: &[&[u8]]) -> Outcome {
        if self.ix.pods == PodsMode::Disabled {
            return self.nxdomain();
        }
        let (ns, ip_label) = match rel {
            [ns, _pod] => (ns, None),
            [ip, ns, _pod] => (ns, Some(ip)),
            _ => return self.nxdomain(),
        };
        let Some(namespace) = self.ix.namespace(ns) else {
            return self.nxdomain();
        };
        let Some(ip_label) = ip_label else {
            return self.nodata();
        };
        let Some(ip) = pod_label_ip(ip_label) else {
            return self.nxdomain();
        };
        if self.ix.pods == PodsMode::Verified && !namespace.pod_ips.contains(&ip) {
            return self.nxdomain();
        }
        self.answer(self.addresses(self.qname, std::iter::once(ip)), Vec::new())
    }
}
