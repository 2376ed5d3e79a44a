//! The external zone (CoreDNS's `k8s_external`): `<svc>.<ns>.<zone>` names a Service's
//! LoadBalancer ingress and external IPs under a zone of the user's choosing, so that
//! addresses the operator hands out resolve outside the cluster too.

use std::net::IpAddr;

use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record};

use super::zone::{ZoneError, parse_zone};

/// The external zone's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalZone {
    /// The zone, e.g. `example.org.` (lower-case, fully qualified).
    pub zone: Name,
    /// TTL of its records (CoreDNS's default: 5).
    pub ttl: u32,
}

impl ExternalZone {
    /// `zone` with TTL 5.
    pub fn new(zone: &str) -> Result<Self, ZoneError> {
        Ok(ExternalZone { zone: parse_zone(zone)?, ttl: 5 })
    }
}

/// The external zone as the index answers it.
#[derive(Debug, Clone)]
pub(crate) struct ExternalIndex {
    pub(crate) zone: Name,
    pub(crate) zone_labels: usize,
    pub(crate) ttl: u32,
    /// `<zone> SOA ns1.dns.<zone> hostmaster.dns.<zone>`.
    pub(crate) soa: Record,
    /// The addresses of `ns1.dns.<zone>`: the DNS Service's own external addresses.
    pub(crate) ns_addrs: Vec<IpAddr>,
}

impl ExternalIndex {
    pub(crate) fn new(settings: &ExternalZone, serial: u32) -> Self {
        let zone = settings.zone.clone();
        let under = |prefix: &str| {
            Name::from_ascii(prefix).and_then(|n| n.append_domain(&zone)).unwrap_or_else(|_| zone.clone())
        };
        let soa =
            SOA::new(under("ns1.dns"), under("hostmaster.dns"), serial, 7200, 1800, 86400, settings.ttl);
        ExternalIndex {
            zone_labels: zone.num_labels() as usize,
            soa: Record::from_rdata(zone.clone(), settings.ttl, RData::SOA(soa)),
            zone,
            ttl: settings.ttl,
            ns_addrs: Vec::new(),
        }
    }
}
