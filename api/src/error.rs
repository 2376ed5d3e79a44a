//! Errors that name the object and the field at fault.

use std::fmt;

/// An object that cannot be converted into the model; the rest still plans.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConvertError {
    /// Object kind (`Service`, `EndpointSlice`, ...).
    pub kind: &'static str,
    /// `namespace/name` (or `name` for cluster-scoped objects).
    pub object: String,
    /// JSON path of the offending field (`spec.ports[0].port`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}: {}", self.kind, self.object, self.field, self.message)
    }
}

/// Builds errors for one object.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) kind: &'static str,
    pub(crate) object: String,
}

impl Ctx {
    pub(crate) fn new(kind: &'static str, namespace: Option<&str>, name: &str) -> Ctx {
        let object = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        Ctx { kind, object }
    }

    pub(crate) fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ConvertError {
        ConvertError {
            kind: self.kind,
            object: self.object.clone(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn ip(&self, field: impl Into<String>, value: &str) -> Result<std::net::IpAddr, ConvertError> {
        value.trim().parse().map_err(|_| self.err(field, format!("{value:?} is not a valid IP address")))
    }

    pub(crate) fn cidr(
        &self,
        field: impl Into<String>,
        value: &str,
    ) -> Result<tideway_core::net::IpNet, ConvertError> {
        let v = value.trim();
        v.parse::<tideway_core::net::IpNet>()
            .map(|n| n.trunc())
            .or_else(|_| v.parse::<std::net::IpAddr>().map(tideway_core::net::IpNet::from))
            .map_err(|_| self.err(field, format!("{value:?} is not a valid CIDR")))
    }

    pub(crate) fn port(&self, field: impl Into<String>, value: i32) -> Result<u16, ConvertError> {
        u16::try_from(value)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| self.err(field, format!("{value} is out of range 1-65535")))
    }

    pub(crate) fn protocol(
        &self,
        field: impl Into<String>,
        value: Option<&str>,
    ) -> Result<tideway_core::net::Protocol, ConvertError> {
        match value {
            None => Ok(tideway_core::net::Protocol::Tcp),
            Some(p) => {
                match p {
                    "TCP" => Ok(tideway_core::net::Protocol::Tcp),
                    "UDP" => Ok(tideway_core::net::Protocol::Udp),
                    "SCTP" => Ok(tideway_core::net::Protocol::Sctp),
                    other => Err(self
                        .err(field, format!("unsupported protocol {other:?} (expected TCP, UDP or SCTP)"))),
                }
            }
        }
    }
}
