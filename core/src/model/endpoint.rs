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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Addresses (all of the slice's family; nearly always one, kept inline).
    pub addresses: Addresses,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
    /// `hostname`.
    pub hostname: Option<Box<str>>,
    /// `nodeName` (one copy per name: [`ClusterState`](crate::cluster::ClusterState) shares
    /// it among the endpoints it holds).
    pub node_name: Option<Arc<str>>,
    /// `zone` (shared like `node_name`).
    pub zone: Option<Arc<str>>,
    /// `hints`, when any (most endpoints have none: one pointer for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<Box<EndpointHints>>,
    /// `targetRef.name` when it refers to a Pod.
    pub pod_name: Option<Box<str>>,
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
        Endpoint {
            addresses: Addresses::One(ip),
            ready: true,
            serving: true,
            terminating: false,
            hostname: None,
            node_name: None,
            zone: None,
            hints: None,
            pod_name: None,
        }
    }

    /// `hints.forZones[].name` (empty without hints).
    pub fn zone_hints(&self) -> &[String] {
        self.hints.as_deref().map_or(&[], |h| &h.for_zones)
    }

    /// `hints.forNodes[].name` (empty without hints).
    pub fn node_hints(&self) -> &[String] {
        self.hints.as_deref().map_or(&[], |h| &h.for_nodes)
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
    /// `metadata.labels`.
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
        // An endpoint keeps no heap allocation of its own in the usual case (one address,
        // shared node and zone names): the struct is all it costs.
        assert!(size_of::<Endpoint>() <= 104, "Endpoint grew to {} bytes", size_of::<Endpoint>());
    }
}
