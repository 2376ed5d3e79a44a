//! The index's records: what one Service publishes, its endpoints and ports, laid out flat in
//! a part's vectors and found by the ranges ([`Span`]) into them, and the hash that finds a
//! Service by its names.

use std::hash::Hasher;

use tideway_core::net::Protocol;

use super::names;

/// FNV-1a over `namespace.name`, finished with a 64-bit mixer so every bit of the result
/// depends on every input byte (the hash table uses both the top and the bottom bits).
pub(crate) fn name_hash(ns: &[u8], name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ns.iter().chain(b".").chain(name) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A hasher for keys that already are hashes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A range of one of the index's vectors (or of its label arena).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub(super) start: u32,
    pub(super) len: u32,
}

/// An endpoint's host label: from the label arena, or its address dashed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Host<'a> {
    /// A hostname (the endpoint's or its pod's).
    Named(&'a [u8]),
    /// The address with `-` for `.` and `:`.
    Dashed(names::DashedIp),
}

impl std::ops::Deref for Host<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Host::Named(label) => label,
            Host::Dashed(d) => d.as_bytes(),
        }
    }
}

impl Span {
    pub(super) fn of<T>(v: &[T], span: Span) -> &[T] {
        let start = span.start as usize;
        v.get(start..start + span.len as usize).unwrap_or(&[])
    }
}

/// A named (or unnamed) port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Port {
    /// Lower-case port name in the label arena; empty for an unnamed port.
    pub(super) name: Span,
    pub(crate) protocol: Protocol,
    pub(crate) port: u16,
}

/// How a Service is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A virtual IP per family.
    ClusterIp,
    /// The ready endpoints themselves.
    Headless,
    /// A CNAME to `external_names[i]`.
    ExternalName(u32),
}

/// One address of a ready endpoint, under the host label it is published as: 12 bytes (a
/// million of them at 100,000 Services), read through [`Svc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndpointRecord {
    /// Index into the index's host labels, or [`EndpointRecord::DASHED`].
    pub(super) host: u32,
    /// Index into the port lists of the Service's EndpointSlices; the top bit,
    /// [`EndpointRecord::V6`], marks an IPv6 address.
    pub(super) port_set: u32,
    /// The IPv4 address, or the place of the IPv6 address in the index's IPv6 list.
    pub(super) ip: u32,
}

impl EndpointRecord {
    /// The host label is the address, dashed ([`names::DashedIp`]).
    pub(super) const DASHED: u32 = u32::MAX;
    /// The address is IPv6.
    pub(super) const V6: u32 = 1 << 31;
}

/// Everything published for one Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServiceRecords {
    pub(super) ns: Span,
    pub(super) name: Span,
    pub(crate) kind: Kind,
    /// ClusterIPs.
    pub(super) ips: Span,
    /// The Service's ports (what ClusterIP SRV records publish).
    pub(super) ports: Span,
    /// Ready endpoint addresses, sorted by host label.
    pub(super) endpoints: Span,
    /// External and LoadBalancer addresses (the external zone's records).
    pub(super) external: Span,
    /// The `resourceVersion` at which the Service's generation last changed (0: unknown),
    /// what agents' programmed versions are compared with.
    pub(super) spec_version: u64,
}
