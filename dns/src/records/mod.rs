//! The record index: the cluster's DNS data, compact and indexed by lower-case labels.
//!
//! Built wholesale from a [`ClusterState`](tideway_core::cluster::ClusterState) by
//! [`RecordIndex::build`]; read by [`crate::answer`]. Every lookup the answer rules need —
//! namespace, Service, endpoint host, named port, reverse address, pod address — is a hash
//! lookup or a binary search, so negative answers (NXDOMAIN vs NODATA, empty non-terminals,
//! unknown namespaces) cost the same as positive ones. Nothing is pre-rendered per query name:
//! records are synthesized from this data when asked for.

mod build;
pub mod names;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::str::FromStr;

use hickory_proto::rr::{Name, Record};
use tideway_core::model::ServiceName;
use tideway_core::net::Protocol;

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

impl FromStr for PodsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disabled" => Ok(PodsMode::Disabled),
            "insecure" => Ok(PodsMode::Insecure),
            "verified" => Ok(PodsMode::Verified),
            other => Err(format!("unknown pods mode {other:?} (disabled, insecure or verified)")),
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
}

impl IndexSettings {
    /// Settings for `zone` with CoreDNS's defaults (TTL 5, pods disabled, `kube-system/kube-dns`).
    pub fn new(zone: &str) -> Result<Self, String> {
        Ok(IndexSettings {
            zone: parse_zone(zone)?,
            ttl: 5,
            pods: PodsMode::Disabled,
            dns_service: Some(ServiceName::new("kube-system", "kube-dns")),
            fallback_ns_addrs: Vec::new(),
        })
    }
}

/// Parses a zone name into its lower-case, fully qualified form.
pub fn parse_zone(zone: &str) -> Result<Name, String> {
    let mut name = Name::from_ascii(zone).map_err(|e| format!("invalid zone {zone:?}: {e}"))?;
    name.set_fqdn(true);
    if name.is_root() {
        return Err("the cluster zone cannot be the root".into());
    }
    Ok(name.to_lowercase())
}

/// A named (or unnamed) port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Port {
    /// Lower-case port name; empty for an unnamed port.
    pub(crate) name: Box<[u8]>,
    pub(crate) protocol: Protocol,
    pub(crate) port: u16,
}

impl Port {
    /// True when `_name._proto` labels (underscores already stripped) select this port.
    pub(crate) fn matches(&self, name: &[u8], proto: &[u8]) -> bool {
        !self.name.is_empty() && *self.name == *name && self.protocol.as_str().as_bytes() == proto
    }
}

/// How a Service is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A virtual IP per family.
    ClusterIp(Box<[IpAddr]>),
    /// The ready endpoints themselves.
    Headless,
    /// A CNAME to this name.
    ExternalName(Name),
}

/// One address of a ready endpoint, under the host label it is published as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EndpointRecord {
    /// Lower-case host label (hostname, pod hostname, or dashed address).
    pub(crate) host: Box<[u8]>,
    /// `<host>.<svc>.<ns>.svc.<zone>.`
    pub(crate) fqdn: Name,
    pub(crate) ip: IpAddr,
    /// Index into [`ServiceRecords::port_sets`].
    pub(crate) ports: u16,
}

/// Everything published for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceRecords {
    /// `<svc>.<ns>.svc.<zone>.`
    pub(crate) fqdn: Name,
    pub(crate) kind: Kind,
    /// The Service's ports (what ClusterIP SRV records publish).
    pub(crate) ports: Box<[Port]>,
    /// Ready endpoint addresses, sorted by host label.
    pub(crate) endpoints: Box<[EndpointRecord]>,
    /// Distinct port lists of the Service's EndpointSlices.
    pub(crate) port_sets: Box<[Box<[Port]>]>,
}

impl ServiceRecords {
    /// The endpoint addresses published under `host`.
    pub(crate) fn endpoints_named(&self, host: &[u8]) -> &[EndpointRecord] {
        let start = self.endpoints.partition_point(|e| &*e.host < host);
        let len = self.endpoints[start..].iter().take_while(|e| &*e.host == host).count();
        &self.endpoints[start..start + len]
    }

    /// The ports of one endpoint.
    pub(crate) fn endpoint_ports(&self, ep: &EndpointRecord) -> &[Port] {
        self.port_sets.get(ep.ports as usize).map_or(&[], |p| p)
    }
}

/// One namespace: its Services (by lower-case name) and, in `verified` mode, its pod addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Namespace {
    pub(crate) services: HashMap<Box<[u8]>, ServiceRecords>,
    pub(crate) pod_ips: HashSet<IpAddr>,
}

/// The cluster zone's data, ready to answer from.
#[derive(Debug, Clone)]
pub struct RecordIndex {
    pub(crate) zone: Name,
    pub(crate) zone_labels: usize,
    pub(crate) ttl: u32,
    pub(crate) pods: PodsMode,
    pub(crate) synced: bool,
    pub(crate) serial: u32,
    /// `ns.dns.<zone>.`
    pub(crate) ns_name: Name,
    /// The zone's SOA record (owner: the zone), used at the apex and in every negative answer.
    pub(crate) soa: Record,
    pub(crate) ns_addrs: Vec<IpAddr>,
    pub(crate) namespaces: HashMap<Box<[u8]>, Namespace>,
    /// Reverse map: ClusterIPs to their Service, endpoint addresses to one name per Service.
    pub(crate) reverse: HashMap<IpAddr, Vec<Name>>,
    pub(crate) service_count: usize,
    pub(crate) endpoint_count: usize,
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
        self.service_count
    }

    /// Number of ready endpoint addresses published.
    pub fn endpoint_count(&self) -> usize {
        self.endpoint_count
    }

    pub(crate) fn namespace(&self, name: &[u8]) -> Option<&Namespace> {
        self.namespaces.get(name)
    }
}
