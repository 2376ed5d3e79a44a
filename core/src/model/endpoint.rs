//! EndpointSlices and their endpoints, with the API's condition semantics already applied.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::net::{IpFamily, Protocol};

/// Label on an EndpointSlice naming its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// One `ports[]` entry of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPort {
    /// Port name; matches the Service port name.
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// The endpoint's port number.
    pub port: u16,
}

/// One endpoint (a pod, usually), conditions resolved per the discovery/v1 rules:
/// `ready` nil means ready, `serving` nil means "same as ready", `terminating` nil means false.
///
/// What every reader reads is inline; the hostname, zone and hints, which most endpoints lack
/// as a reader keeps them, share one optional box (72 bytes in all, no heap of its own in the
/// usual case). Serialized as the flat list of fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "EndpointFields", into = "EndpointFields")]
pub struct Endpoint {
    /// Addresses (all of the slice's family; nearly always one, kept inline).
    pub addresses: Addresses,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
    /// `nodeName` (one copy per name: [`ClusterState`](crate::cluster::ClusterState) shares
    /// it among the endpoints it holds).
    pub node_name: Option<Arc<str>>,
    /// `targetRef.name` when it refers to a Pod.
    pub pod_name: Option<Box<str>>,
    /// Hostname, zone and hints; `None` when all three are (never a box of nothing, so
    /// equal endpoints compare equal).
    details: Option<Box<Details>>,
}

/// The fields of an endpoint most do without.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Details {
    hostname: Option<Box<str>>,
    zone: Option<Arc<str>>,
    hints: Option<Box<EndpointHints>>,
}

/// An endpoint as (de)serialized: every field flat.
#[derive(Serialize, Deserialize)]
struct EndpointFields {
    addresses: Addresses,
    ready: bool,
    serving: bool,
    terminating: bool,
    hostname: Option<Box<str>>,
    node_name: Option<Arc<str>>,
    zone: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hints: Option<Box<EndpointHints>>,
    pod_name: Option<Box<str>>,
}

impl From<EndpointFields> for Endpoint {
    fn from(f: EndpointFields) -> Self {
        let mut ep = Endpoint {
            addresses: f.addresses,
            ready: f.ready,
            serving: f.serving,
            terminating: f.terminating,
            node_name: f.node_name,
            pod_name: f.pod_name,
            details: None,
        };
        ep.set_details(Details { hostname: f.hostname, zone: f.zone, hints: f.hints });
        ep
    }
}

impl From<Endpoint> for EndpointFields {
    fn from(ep: Endpoint) -> Self {
        let d = ep.details.map(|d| *d).unwrap_or_default();
        EndpointFields {
            addresses: ep.addresses,
            ready: ep.ready,
            serving: ep.serving,
            terminating: ep.terminating,
            hostname: d.hostname,
            node_name: ep.node_name,
            zone: d.zone,
            hints: d.hints,
            pod_name: ep.pod_name,
        }
    }
}

/// An endpoint's addresses: one inline (nearly every endpoint has exactly one), more on the
/// heap. Reads as a slice; (de)serialized as a list.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<IpAddr>", into = "Vec<IpAddr>")]
pub enum Addresses {
    /// The usual case.
    One(IpAddr),
    /// None, or more than one.
    Many(Box<[IpAddr]>),
}

impl std::ops::Deref for Addresses {
    type Target = [IpAddr];

    fn deref(&self) -> &[IpAddr] {
        match self {
            Addresses::One(ip) => std::slice::from_ref(ip),
            Addresses::Many(ips) => ips,
        }
    }
}

impl From<IpAddr> for Addresses {
    fn from(ip: IpAddr) -> Self {
        Addresses::One(ip)
    }
}

impl From<Vec<IpAddr>> for Addresses {
    fn from(ips: Vec<IpAddr>) -> Self {
        match ips.as_slice() {
            [ip] => Addresses::One(*ip),
            _ => Addresses::Many(ips.into_boxed_slice()),
        }
    }
}

impl From<Addresses> for Vec<IpAddr> {
    fn from(ips: Addresses) -> Self {
        ips.to_vec()
    }
}

impl std::fmt::Debug for Addresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Addresses {
    type Item = &'a IpAddr;
    type IntoIter = std::slice::Iter<'a, IpAddr>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Topology hints of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointHints {
    /// `hints.forZones[].name`.
    pub for_zones: Vec<String>,
    /// `hints.forNodes[].name`.
    pub for_nodes: Vec<String>,
}

impl Endpoint {
    /// A ready endpoint at `ip`, for builders and tests.
    pub fn ready(ip: IpAddr) -> Self {
        Self::at(Addresses::One(ip))
    }

    /// A ready endpoint at `addresses`, with no other field set.
    pub fn at(addresses: Addresses) -> Self {
        Endpoint {
            addresses,
            ready: true,
            serving: true,
            terminating: false,
            node_name: None,
            pod_name: None,
            details: None,
        }
    }

    /// `hostname`.
    pub fn hostname(&self) -> Option<&str> {
        self.details.as_ref()?.hostname.as_deref()
    }

    /// `zone`.
    pub fn zone(&self) -> Option<&str> {
        self.details.as_ref()?.zone.as_deref()
    }

    /// `hints`, when any.
    pub fn hints(&self) -> Option<&EndpointHints> {
        self.details.as_ref()?.hints.as_deref()
    }

    /// `hints.forZones[].name` (empty without hints).
    pub fn zone_hints(&self) -> &[String] {
        self.hints().map_or(&[], |h| &h.for_zones)
    }

    /// `hints.forNodes[].name` (empty without hints).
    pub fn node_hints(&self) -> &[String] {
        self.hints().map_or(&[], |h| &h.for_nodes)
    }

    /// Sets `hostname`.
    pub fn set_hostname(&mut self, hostname: Option<Box<str>>) {
        self.edit_details(|d| d.hostname = hostname);
    }

    /// Sets `zone`.
    pub fn set_zone(&mut self, zone: Option<Arc<str>>) {
        self.edit_details(|d| d.zone = zone);
    }

    /// Sets `hints` (hints naming no zone and no node are none).
    pub fn set_hints(&mut self, hints: Option<EndpointHints>) {
        let hints = hints.filter(|h| !h.for_zones.is_empty() || !h.for_nodes.is_empty());
        self.edit_details(|d| d.hints = hints.map(Box::new));
    }

    /// The zone, to be pointed at a shared copy.
    pub(crate) fn zone_mut(&mut self) -> Option<&mut Arc<str>> {
        self.details.as_mut()?.zone.as_mut()
    }

    fn edit_details(&mut self, edit: impl FnOnce(&mut Details)) {
        let mut d = self.details.take().map(|d| *d).unwrap_or_default();
        edit(&mut d);
        self.set_details(d);
    }

    fn set_details(&mut self, d: Details) {
        let none = d.hostname.is_none() && d.zone.is_none() && d.hints.is_none();
        self.details = (!none).then(|| Box::new(d));
    }
}

/// An EndpointSlice (discovery.k8s.io/v1) of address type IPv4 or IPv6.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointSlice {
    /// Namespace.
    pub namespace: String,
    /// Slice name.
    pub name: String,
    /// Owning Service (label `kubernetes.io/service-name`).
    pub service: String,
    /// Address family of every endpoint in the slice.
    pub family: IpFamily,
    /// Ports.
    pub ports: Vec<EndpointPort>,
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// `metadata.labels` but `kubernetes.io/service-name`, which is `service`.
    pub labels: BTreeMap<String, String>,
    /// Annotation `endpoints.kubernetes.io/last-change-trigger-time`: when the change this
    /// version of the slice reflects happened (kube-proxy's network programming latency
    /// starts there).
    #[serde(default)]
    pub trigger_time: Option<std::time::SystemTime>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_inline_and_lists_read_and_serialize_as_before() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(Addresses::from(vec![a]), Addresses::One(a));
        let two = Addresses::from(vec![a, b]);
        assert!(matches!(two, Addresses::Many(_)));
        assert_eq!(&*two, &[a, b]);
        assert!(Addresses::from(vec![]).is_empty());
        assert_eq!(serde_json::to_string(&Addresses::One(a)).unwrap(), r#"["10.0.0.1"]"#);
        let back: Addresses = serde_json::from_str(r#"["10.0.0.1","10.0.0.2"]"#).unwrap();
        assert_eq!(back, two);
        // An endpoint keeps no heap allocation of its own in the usual case (one address, a
        // shared node name): the struct is all it costs.
        assert!(size_of::<Endpoint>() <= 72, "Endpoint grew to {} bytes", size_of::<Endpoint>());
    }

    #[test]
    fn details_are_boxed_only_when_set_and_serialize_flat() {
        let mut ep = Endpoint::ready("10.0.0.1".parse().unwrap());
        let plain = ep.clone();
        ep.set_hostname(Some("web-0".into()));
        ep.set_zone(Some("z1".into()));
        ep.set_hints(Some(EndpointHints { for_zones: vec!["z1".into()], for_nodes: vec![] }));
        assert_eq!((ep.hostname(), ep.zone()), (Some("web-0"), Some("z1")));
        assert_eq!(ep.zone_hints(), ["z1"]);
        let json = serde_json::to_value(&ep).unwrap();
        assert_eq!((&json["hostname"], &json["zone"]), (&"web-0".into(), &"z1".into()));
        assert_eq!(serde_json::from_value::<Endpoint>(json).unwrap(), ep);
        ep.set_hostname(None);
        ep.set_zone(None);
        ep.set_hints(Some(EndpointHints::default()));
        assert!(ep.details.is_none(), "nothing set: no box");
        assert_eq!(ep, plain);
        let back: Endpoint = serde_json::from_str(&serde_json::to_string(&plain).unwrap()).unwrap();
        assert!(back.details.is_none());
    }
}
