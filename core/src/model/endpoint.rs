//! EndpointSlices and their endpoints, with the API's condition semantics already applied.

use std::collections::BTreeMap;
use std::net::IpAddr;

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
    /// Addresses (all of the slice's family; a boxed slice: exactly as long as it is).
    pub addresses: Box<[IpAddr]>,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
    /// `hostname`.
    pub hostname: Option<String>,
    /// `nodeName`.
    pub node_name: Option<String>,
    /// `zone`.
    pub zone: Option<String>,
    /// `hints`, when any (most endpoints have none: one pointer for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<Box<EndpointHints>>,
    /// `targetRef.name` when it refers to a Pod.
    pub pod_name: Option<String>,
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
            addresses: Box::new([ip]),
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
