//! The external zone's answers (CoreDNS's `k8s_external`):
//!
//! * `<svc>.<ns>.<zone>` A/AAAA: the Service's external IPs and LoadBalancer ingress
//!   addresses; NXDOMAIN for a Service without any (ClusterIP-only, headless, ExternalName).
//! * `<svc>.<ns>.<zone>` and `_<port>._<proto>.<svc>.<ns>.<zone>` SRV: one row per (matching)
//!   port, target the Service's name, its addresses in the additional section.
//! * The apex: SOA (`ns1.dns.<zone>`, `hostmaster.dns.<zone>`), NS `ns1.dns.<zone>`, whose
//!   addresses are the DNS Service's own external addresses.
//!
//! Owner names and the Service part of targets keep the query's case; negative answers carry
//! the zone's SOA, and SERVFAIL stands in for NXDOMAIN until the first sync.

use hickory_proto::rr::rdata::SRV;
use hickory_proto::rr::{Name, RData, RecordType};

use super::outcome::Outcome;
use super::query::{Cx, strip_underscore};
use crate::records::{ExternalIndex, RecordIndex};

/// Answers `qname` (lower-cased: `lower`), a name at or under the external zone.
pub(super) fn answer(
    ix: &RecordIndex,
    ext: &ExternalIndex,
    qname: &Name,
    lower: &Name,
    qtype: RecordType,
) -> Outcome {
    let cx = Cx {
        ix,
        qname,
        qtype,
        ttl: ext.ttl,
        soa: &ext.soa,
        zone_labels: ext.zone_labels,
        own_labels: ext.zone_labels,
    };
    let rel_len = lower.num_labels() as usize - ext.zone_labels;
    if rel_len > 4 {
        return cx.nxdomain();
    }
    let rel: Vec<&[u8]> = lower.iter().take(rel_len).collect();
    match rel.as_slice() {
        [] => cx.apex("ns1.dns", &ext.ns_addrs),
        [b"dns"] => cx.nodata(),
        [b"ns1", b"dns"] => cx.answer(cx.addresses(qname, ext.ns_addrs.iter().copied()), Vec::new()),
        [svc, ns] => service(&cx, svc, ns, None),
        [port, proto, svc, ns] => {
            service(&cx, svc, ns, Some((strip_underscore(port), strip_underscore(proto))))
        }
        _ => cx.nxdomain(),
    }
}

/// `<svc>.<ns>.<zone>`, or one of its ports when `filter` names one.
fn service(cx: &Cx<'_>, svc: &[u8], ns: &[u8], filter: Option<(&[u8], &[u8])>) -> Outcome {
    let Some(svc) = cx.ix.namespace(ns).and_then(|_| cx.ix.service(ns, svc)) else {
        return cx.nxdomain();
    };
    let ips = svc.external_ips();
    let mut ports: Vec<u16> = svc
        .ports()
        .iter()
        .filter(|p| filter.is_none_or(|(name, proto)| svc.port_matches(p, name, proto)))
        .map(|p| p.port)
        .collect();
    if ips.is_empty() || (filter.is_some() && ports.is_empty()) {
        return cx.nxdomain();
    }
    match cx.qtype {
        RecordType::A | RecordType::AAAA => {
            cx.answer(cx.addresses(cx.qname, ips.iter().copied()), Vec::new())
        }
        RecordType::SRV => {
            let target = cx.qname.trim_to(cx.zone_labels + 2);
            // Each (address, port) is a candidate, as CoreDNS counts them.
            let weight = u16::try_from(100 / (ports.len() * ips.len()).max(1)).unwrap_or(100).max(1);
            ports.sort_unstable();
            ports.dedup();
            let answers = ports
                .into_iter()
                .map(|port| cx.record(cx.qname, RData::SRV(SRV::new(0, weight, port, target.clone()))))
                .collect();
            let mut glue = Vec::new();
            cx.glue(&target, ips.iter().copied(), &mut glue);
            cx.answer(answers, glue)
        }
        _ => cx.nodata(),
    }
}
