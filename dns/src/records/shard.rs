//! One part of the index: the Services whose `(namespace, name)` hash falls in it, with
//! everything they publish, flat. A change to one Service rebuilds its part alone; the next
//! index shares every other part with the one before ([`RecordIndex::updated`]), and a query
//! reads one index, whole: each name is the old version or the new, never a mix.
//!
//! [`RecordIndex::updated`]: super::RecordIndex::updated

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::{IpAddr, Ipv6Addr};

use hickory_proto::rr::Name;

use super::layout::{EndpointRecord, Port, Prehashed, ServiceRecords, Span};
use super::reverse::{ReverseMap, Target};

/// The part a hash falls in, of `1 << bits`: bits from the middle of the hash, so that the
/// part's own hash table still sees every bit it reads vary (its buckets take the low bits,
/// its tags the top ones).
pub(crate) fn part_of(hash: u64, bits: u32) -> usize {
    if bits == 0 { 0 } else { ((hash >> 24) & ((1 << bits) - 1)) as usize }
}

/// One part's Services and what they publish.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shard {
    /// Every label the part refers to, lower-case.
    pub(super) text: Vec<u8>,
    pub(super) services: Vec<ServiceRecords>,
    /// Service indices in namespace, then name order.
    pub(super) by_name: Vec<u32>,
    /// `name_hash(namespace, name)` to the Service index; `u32::MAX` marks a hash shared by
    /// several Services (then `by_name` is searched). One probe instead of a binary search:
    /// the lookup is on every query's path and the index is far larger than the CPU caches.
    pub(super) by_hash: HashMap<u64, u32, BuildHasherDefault<Prehashed>>,
    pub(super) ips: Vec<IpAddr>,
    pub(super) ports: Vec<Port>,
    pub(super) port_sets: Vec<Span>,
    pub(super) endpoints: Vec<EndpointRecord>,
    /// Endpoint host labels (hostnames) in the label arena.
    pub(super) hosts: Vec<Span>,
    /// Endpoint IPv6 addresses.
    pub(super) v6: Vec<Ipv6Addr>,
    pub(super) external_names: Vec<Name>,
    /// Addresses to PTR targets.
    pub(super) reverse: ReverseMap,
}

impl Shard {
    pub(super) fn text(&self, span: Span) -> &[u8] {
        Span::of(&self.text, span)
    }

    /// The Service `name` in namespace `ns` (lower-case labels), whose
    /// [`name_hash`](super::layout::name_hash) is `hash`.
    pub(super) fn find(&self, hash: u64, ns: &[u8], name: &[u8]) -> Option<&ServiceRecords> {
        match self.by_hash.get(&hash) {
            None => return None,
            Some(&i) if i != u32::MAX => {
                let svc = self.services.get(i as usize)?;
                return (self.text(svc.name) == name && self.text(svc.ns) == ns).then_some(svc);
            }
            Some(_) => {}
        }
        let names = |i: u32| self.services.get(i as usize).map(|s| (self.text(s.ns), self.text(s.name)));
        let at = self.by_name.binary_search_by(|&i| names(i).cmp(&Some((ns, name)))).ok()?;
        self.services.get(self.by_name[at] as usize)
    }

    /// The Service whose endpoints hold the record at `e` (they are stored Service by Service:
    /// the one whose span ends past `e`).
    pub(super) fn service_of_endpoint(&self, e: u32) -> Option<&ServiceRecords> {
        let s = self.services.partition_point(|s| s.endpoints.start + s.endpoints.len <= e);
        self.services.get(s)
    }

    /// Every claim on `ip` in this part, in the order claimed.
    pub(super) fn claims(&self, ip: &IpAddr) -> Vec<Target> {
        self.reverse.claims(ip)
    }
}
