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

use hickory_proto::op::{LowerQuery, ResponseCode};
use hickory_proto::rr::rdata::{CNAME, PTR, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

pub use outcome::{Answer, Outcome};
pub use programmed::{Gate, gate};
use query::{Cx, strip_underscore};

use crate::records::names::{pod_label_ip, reverse_ip, reverse_tree};
use crate::records::{EndpointRecord, Host, Kind, PodsMode, Port, RecordIndex, Svc};

mod external;
mod outcome;
mod programmed;
mod query;
#[cfg(test)]
pub(crate) mod tests;

/// The `dns-version` TXT value (schema version of the specification implemented).
pub const SCHEMA_VERSION: &str = "1.1.0";
/// TTL of the `dns-version` record (fixed in CoreDNS).
const VERSION_TTL: u32 = 28800;
/// How many in-zone CNAMEs (ExternalName pointing at ExternalName ...) are followed.
const MAX_CHASE: usize = 8;

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
            if ix.namespace(ns).is_none() {
                return cx.nxdomain();
            }
            let Some((svc_label, below)) = rel[..rel.len() - 2].split_last() else {
                return cx.nodata();
            };
            let Some(svc) = ix.service(ns, svc_label) else {
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

/// The cluster zone's names: Services, their endpoints and ports, pods.
impl Cx<'_> {
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
