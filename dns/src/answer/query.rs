//! One query being answered, in the cluster zone or the external one: the records, SOA and
//! negative answers every name in either zone is answered with.

use std::net::IpAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, NS};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::outcome::{Answer, Outcome};
use crate::records::{EndpointRecord, RecordIndex, Svc};

/// One query being answered, in the cluster zone or the external one.
pub(super) struct Cx<'a> {
    pub(super) ix: &'a RecordIndex,
    pub(super) qname: &'a Name,
    pub(super) qtype: RecordType,
    /// The zone's record TTL and its SOA.
    pub(super) ttl: u32,
    pub(super) soa: &'a Record,
    /// The depth in labels of the zone the query is in.
    pub(super) zone_labels: usize,
    /// The depth of the zone the index's own names (SOA, Service names) are under: the first
    /// cluster zone, or the external zone.
    pub(super) own_labels: usize,
}

impl<'a> Cx<'a> {
    /// A query in the cluster zone `zone_labels` deep.
    pub(super) fn cluster(
        ix: &'a RecordIndex,
        qname: &'a Name,
        qtype: RecordType,
        zone_labels: usize,
    ) -> Self {
        Cx { ix, qname, qtype, ttl: ix.ttl, soa: &ix.soa, zone_labels, own_labels: ix.zone_labels }
    }

    pub(super) fn record(&self, owner: &Name, data: RData) -> Record {
        Record::from_rdata(owner.clone(), self.ttl, data)
    }

    /// A positive answer, or NODATA when `answers` is empty.
    pub(super) fn answer(&self, answers: Vec<Record>, additionals: Vec<Record>) -> Outcome {
        if answers.is_empty() {
            return self.nodata();
        }
        Outcome::Answer(Answer { rcode: ResponseCode::NoError, answers, authority: Vec::new(), additionals })
    }

    pub(super) fn nodata(&self) -> Outcome {
        Outcome::Answer(Answer {
            rcode: ResponseCode::NoError,
            authority: vec![self.soa()],
            ..Answer::default()
        })
    }

    /// The zone as the query spells it.
    pub(super) fn zone_name(&self) -> Name {
        self.qname.trim_to(self.zone_labels)
    }

    /// The zone's SOA, with the zone as the query spells it: its owner, and under it the
    /// primary server (`ns.dns.<zone>`) and mailbox (`hostmaster.<zone>`), as CoreDNS writes them.
    pub(super) fn soa(&self) -> Record {
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
    pub(super) fn under_zone(&self, name: &Name, zone: &Name) -> Name {
        let own = usize::from(name.num_labels()).saturating_sub(self.own_labels);
        Name::from_labels(name.iter().take(own))
            .and_then(|prefix| prefix.append_domain(zone))
            .unwrap_or_else(|_| name.clone())
    }

    /// An SRV target naming the Service: `<svc>.<ns>.svc.` as the Service is named, then the
    /// zone as the query spells it (CoreDNS's case: `svc1.testns.svc.cLuStEr.LoCaL.`).
    pub(super) fn service_target(&self, svc: &Svc<'_>) -> Name {
        self.under_zone(&svc.fqdn(), &self.zone_name())
    }

    /// An SRV target naming an endpoint: `<host>.<svc>.<ns>.svc.` as named, the zone as queried.
    pub(super) fn endpoint_target(&self, svc: &Svc<'_>, ep: &EndpointRecord) -> Name {
        self.under_zone(&svc.endpoint_fqdn(ep), &self.zone_name())
    }

    /// NXDOMAIN, or SERVFAIL while the index has not seen a full sync: a denial would be
    /// cached downstream for a name that may well exist (kubernetes/dns#186).
    pub(super) fn nxdomain(&self) -> Outcome {
        let rcode = if self.ix.synced { ResponseCode::NXDomain } else { ResponseCode::ServFail };
        Outcome::Answer(Answer { rcode, authority: vec![self.soa()], ..Answer::default() })
    }

    /// A/AAAA records (per the query type) of `ips`, owned by `owner`.
    pub(super) fn addresses(&self, owner: &Name, ips: impl Iterator<Item = IpAddr>) -> Vec<Record> {
        let qtype = self.qtype;
        ips.filter_map(|ip| match (qtype, ip) {
            (RecordType::A, IpAddr::V4(v4)) => Some(self.record(owner, RData::A(A(v4)))),
            (RecordType::AAAA, IpAddr::V6(v6)) => Some(self.record(owner, RData::AAAA(AAAA(v6)))),
            _ => None,
        })
        .collect()
    }

    /// A and AAAA records of `ips` (for the additional section).
    pub(super) fn glue(&self, owner: &Name, ips: impl Iterator<Item = IpAddr>, out: &mut Vec<Record>) {
        out.extend(ips.map(|ip| match ip {
            IpAddr::V4(v4) => self.record(owner, RData::A(A(v4))),
            IpAddr::V6(v6) => self.record(owner, RData::AAAA(AAAA(v6))),
        }));
    }

    /// The zone's apex: its SOA, and NS `<ns_prefix>.<zone>` with `ns_addrs` as glue.
    pub(super) fn apex(&self, ns_prefix: &str, ns_addrs: &[IpAddr]) -> Outcome {
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
}

/// `_http` -> `http`; CoreDNS accepts the labels with or without the underscore.
pub(super) fn strip_underscore(label: &[u8]) -> &[u8] {
    label.strip_prefix(b"_").unwrap_or(label)
}
