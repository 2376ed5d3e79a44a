//! Address pools ([`Pool`], a model type): validation over the whole set, which pools admit a Service and in what
//! order they are tried, and usage figures.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::error::PoolError;
use super::request::LbRequest;
use crate::model::{AddrRange, is_buggy};
use crate::model::{Pool, ServiceAllocation};
use crate::net::IpFamily;

impl Pool {
    /// True when `ip` is within one of the entries of `addresses` that parse.
    pub fn holds(&self, ip: IpAddr) -> bool {
        self.addresses.iter().filter_map(|a| a.range.as_ref().ok()).any(|r| r.contains(ip))
    }
}

impl ServiceAllocation {
    /// True when the Service passes both terms: its namespace is listed or matches a namespace
    /// selector (no namespace term: any namespace), and its labels match a Service selector
    /// (no Service selector: any Service).
    pub fn admits(&self, req: &LbRequest) -> bool {
        let namespace_ok = (self.namespaces.is_empty() && self.namespace_selectors.is_empty())
            || self.namespaces.contains(&req.service.namespace)
            || self.namespace_selectors.iter().any(|s| s.matches(&req.namespace_labels));
        let service_ok = self.service_selectors.is_empty()
            || self.service_selectors.iter().any(|s| s.matches(&req.labels));
        namespace_ok && service_ok
    }
}

/// Usage of one pool, as MetalLB reports it: distinct addresses, not Services (a shared
/// address counts once). IPv6 figures are `u128` and saturate at `u128::MAX`; the CRD status
/// is `int64`, so the caller clamps there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// IPv4 addresses in use.
    pub assigned_ipv4: u64,
    /// IPv4 addresses left.
    pub available_ipv4: u64,
    /// IPv6 addresses in use.
    pub assigned_ipv6: u128,
    /// IPv6 addresses left.
    pub available_ipv6: u128,
}

/// A pool after validation.
#[derive(Debug, Clone)]
pub(crate) struct PoolEntry {
    pub(crate) spec: Pool,
    /// The entries that parse, sorted by address (an invalid pool keeps them so that the
    /// addresses it gave out are still recognised).
    pub(crate) ranges: Vec<AddrRange>,
    pub(crate) error: Option<PoolError>,
}

impl PoolEntry {
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.error.is_none()
    }

    /// True when `ip` is one of the pool's addresses (`.0`/`.255` excluded when avoided).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        !(self.spec.avoid_buggy_ips && is_buggy(ip)) && self.ranges.iter().any(|r| r.contains(ip))
    }

    pub(crate) fn has_family(&self, family: IpFamily) -> bool {
        self.ranges.iter().any(|r| r.family == family)
    }

    pub(crate) fn admits(&self, req: &LbRequest) -> bool {
        self.spec.allocation.as_ref().is_none_or(|a| a.admits(req))
    }

    /// Try order for automatic assignment: pools with a `serviceAllocation` first, by
    /// priority (set before unset, lower first), then pools without; ties by name.
    fn try_order(&self) -> (bool, bool, i32, &str) {
        let priority = self.spec.allocation.as_ref().map(|a| a.priority);
        (priority.is_none(), priority.flatten().is_none(), priority.flatten().unwrap_or(0), self.name())
    }

    /// Usage, given every address in use.
    pub(crate) fn stats(&self, used: &BTreeMap<IpAddr, impl Sized>) -> PoolStats {
        let mut stats = PoolStats::default();
        for range in &self.ranges {
            let size = range.size(self.spec.avoid_buggy_ips);
            let assigned = used
                .range(range.first_ip()..=range.last_ip())
                .filter(|(ip, _)| !(self.spec.avoid_buggy_ips && is_buggy(**ip)))
                .count() as u128;
            match range.family {
                IpFamily::V4 => {
                    stats.assigned_ipv4 += assigned as u64;
                    stats.available_ipv4 += (size - assigned) as u64;
                }
                IpFamily::V6 => {
                    stats.assigned_ipv6 = stats.assigned_ipv6.saturating_add(assigned);
                    stats.available_ipv6 = stats.available_ipv6.saturating_add(size - assigned);
                }
            }
        }
        stats
    }
}

/// Every configured pool, validated, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolSet {
    pub(crate) by_name: BTreeMap<String, PoolEntry>,
}

/// Ranges of the valid pools so far: start -> (end, pool, entry), disjoint.
type Claimed = BTreeMap<(IpFamily, u128), (u128, String, String)>;

impl PoolSet {
    /// Validates `pools` together. Pools are taken in name order; a pool is invalid when an
    /// entry does not parse, two of its entries overlap, or an entry overlaps a pool already
    /// accepted, so of two overlapping pools the one whose name sorts later is invalid.
    pub(crate) fn new(pools: impl IntoIterator<Item = Pool>) -> PoolSet {
        let specs: BTreeMap<String, Pool> = pools.into_iter().map(|p| (p.name.clone(), p)).collect();
        let mut claimed = Claimed::new();
        let by_name = specs.into_values().map(|spec| validate(spec, &mut claimed)).collect();
        PoolSet { by_name }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&PoolEntry> {
        self.by_name.get(name)
    }

    /// The pool holding every one of `ips`: a valid one if any (valid pools do not overlap),
    /// else an invalid one, first by name.
    pub(crate) fn holding(&self, ips: &[IpAddr]) -> Option<&PoolEntry> {
        let mut holders = self.by_name.values().filter(|p| ips.iter().all(|ip| p.contains(*ip)));
        let first = holders.next()?;
        if first.is_valid() { Some(first) } else { holders.find(|p| p.is_valid()).or(Some(first)) }
    }

    /// True when some pool, valid or not, holds `ip`.
    pub(crate) fn any_holds(&self, ip: IpAddr) -> bool {
        self.by_name.values().any(|p| p.contains(ip))
    }

    /// Valid, auto-assigned pools admitting the Service, in try order.
    pub(crate) fn automatic(&self, req: &LbRequest) -> Vec<&PoolEntry> {
        let mut pools: Vec<&PoolEntry> =
            self.by_name.values().filter(|p| p.is_valid() && p.spec.auto_assign && p.admits(req)).collect();
        pools.sort_by(|a, b| a.try_order().cmp(&b.try_order()));
        pools
    }

    /// Invalid pools and why.
    pub(crate) fn errors(&self) -> BTreeMap<String, PoolError> {
        self.by_name.values().filter_map(|p| Some((p.name().to_string(), p.error.clone()?))).collect()
    }
}

fn validate(spec: Pool, claimed: &mut Claimed) -> (String, PoolEntry) {
    let mut error = None;
    let mut ranges = Vec::new();
    let mut texts = BTreeMap::new();
    for address in &spec.addresses {
        match &address.range {
            Ok(r) => {
                texts.insert(*r, address.text.trim().to_string());
                ranges.push(*r);
            }
            Err(e) => {
                error.get_or_insert(PoolError::Range(e.clone()));
            }
        }
    }
    ranges.sort();
    let error = error
        .or_else(|| overlap_within(&ranges, &texts))
        .or_else(|| overlap_claimed(&ranges, &texts, claimed));
    if error.is_none() {
        for r in &ranges {
            claimed.insert((r.family, r.first), (r.last, spec.name.clone(), texts[r].clone()));
        }
    }
    (spec.name.clone(), PoolEntry { spec, ranges, error })
}

fn overlap_within(ranges: &[AddrRange], texts: &BTreeMap<AddrRange, String>) -> Option<PoolError> {
    let pair = ranges.windows(2).find(|w| w[0].overlaps(&w[1]))?;
    Some(PoolError::OverlapWithin { range: texts[&pair[1]].clone(), other: texts[&pair[0]].clone() })
}

fn overlap_claimed(
    ranges: &[AddrRange],
    texts: &BTreeMap<AddrRange, String>,
    claimed: &Claimed,
) -> Option<PoolError> {
    ranges.iter().find_map(|r| {
        // Claimed ranges are disjoint, so only the last one starting at or before our end can
        // reach into us.
        let (&(family, _), (end, pool, text)) = claimed.range(..=(r.family, r.last)).next_back()?;
        (family == r.family && *end >= r.first).then(|| PoolError::Overlap {
            range: texts[r].clone(),
            other_pool: pool.clone(),
            other_range: text.clone(),
        })
    })
}

/// The families `ips` cover, in order, and whether any repeats.
pub(crate) fn families_of(ips: &[IpAddr]) -> (Vec<IpFamily>, bool) {
    let families: Vec<IpFamily> = ips.iter().map(IpFamily::of).collect();
    let distinct: BTreeSet<_> = families.iter().collect();
    let repeats = distinct.len() != families.len();
    (families, repeats)
}
