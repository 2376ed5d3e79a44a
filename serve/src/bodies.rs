//! Request bodies of the components' REST APIs that are more than a merge patch, and their
//! checks: each turns JSON into a core type or a problem naming the field (`400`), never a
//! panic. The conversion fuzz drives mutated bodies through them.
//!
//! * [`TraceRequest`]: the agents' `POST /api/v1/trace`, into a [`Packet`] ([`trace_packet`]).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use schemars::JsonSchema;
use serde::Deserialize;
use std::net::IpAddr;
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::trace::{Origin, Packet};

use crate::problem::{Problem, json_body};

/// A packet to trace.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// Source address.
    #[schemars(schema_with = "crate::openapi::ip_address")]
    pub src: IpAddr,
    /// Destination address (a ClusterIP, node IP, LoadBalancer IP, ...).
    #[schemars(schema_with = "crate::openapi::ip_address")]
    pub dst: IpAddr,
    /// Destination port.
    pub port: u16,
    /// Source port: with it, a Maglev Service's endpoint is the one the kernel's hash picks.
    #[serde(default, rename = "srcPort")]
    pub src_port: Option<u16>,
    /// Transport protocol.
    #[serde(default)]
    pub protocol: TraceProtocol,
    /// Where the packet comes from.
    #[serde(default)]
    pub from: TraceOrigin,
}

/// `tcp`, `udp` or `sctp`.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TraceProtocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// `pod`, `node` or `external`.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TraceOrigin {
    /// A pod on this node.
    #[default]
    Pod,
    /// A process on the node itself.
    Node,
    /// Outside the node.
    External,
}

impl TraceRequest {
    /// The packet asked for: both addresses of one family.
    pub fn packet(&self) -> Result<Packet, Problem> {
        if IpFamily::of(&self.src) != IpFamily::of(&self.dst) {
            return Err(Problem::bad_field(
                "src",
                format!("{} and dst {} are of different families", self.src, self.dst),
            ));
        }
        let protocol = match self.protocol {
            TraceProtocol::Tcp => Protocol::Tcp,
            TraceProtocol::Udp => Protocol::Udp,
            TraceProtocol::Sctp => Protocol::Sctp,
        };
        let origin = match self.from {
            TraceOrigin::Pod => Origin::Pod,
            TraceOrigin::Node => Origin::Node,
            TraceOrigin::External => Origin::External,
        };
        Ok(Packet { src: self.src, dst: self.dst, protocol, dport: self.port, sport: self.src_port, origin })
    }
}

/// The packet of a `POST /api/v1/trace` body.
pub fn trace_packet(body: Result<Bytes, BytesRejection>) -> Result<Packet, Problem> {
    json_body::<TraceRequest>(body)?.packet()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(body: &str) -> Result<Packet, Problem> {
        trace_packet(Ok(Bytes::from(body.to_string())))
    }

    #[test]
    fn a_body_becomes_a_packet_with_its_defaults() {
        let p =
            packet(r#"{"src": "10.244.1.5", "dst": "10.96.0.10", "port": 53, "protocol": "udp"}"#).unwrap();
        assert_eq!((p.protocol, p.dport, p.sport, p.origin), (Protocol::Udp, 53, None, Origin::Pod));
        let p = packet(
            r#"{"src": "fd00::1", "dst": "fd00::2", "port": 80, "srcPort": 4000, "from": "external"}"#,
        )
        .unwrap();
        assert_eq!((p.protocol, p.sport, p.origin), (Protocol::Tcp, Some(4000), Origin::External));
    }

    #[test]
    fn bad_bodies_name_the_field() {
        for (body, field) in [
            (r#"{"src": "10.0.0.1", "dst": "fd00::1", "port": 80}"#, "src"),
            (r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "port": 70000}"#, "port"),
            (r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "port": 80, "protocol": "icmp"}"#, "protocol"),
            (r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "port": 80, "from": "mars"}"#, "from"),
            (r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "port": 80, "extra": 1}"#, "extra"),
            (r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "#, "."),
        ] {
            let p = packet(body).unwrap_err();
            assert_eq!(p.status, 400, "{body}");
            assert_eq!(p.errors.first().map(|e| e.field.as_str()), Some(field), "{body}: {p:?}");
        }
    }
}
