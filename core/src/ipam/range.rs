//! Address ranges as MetalLB's `spec.addresses` writes them, addresses as numbers, and the
//! index of used addresses that finds the lowest free one without scanning.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::net::{IpFamily, IpNet};

/// Why an entry of `spec.addresses` was rejected; each variant names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Neither a CIDR nor `first-last`.
    #[error("{value:?} is neither a CIDR (192.168.10.0/24) nor a range (192.168.9.1-192.168.9.5)")]
    Malformed {
        /// The rejected entry.
        value: String,
    },
    /// `first-last` with one IPv4 and one IPv6 end.
    #[error("range {value:?} mixes IPv4 and IPv6")]
    MixedFamilies {
        /// The rejected entry.
        value: String,
    },
    /// `first-last` with `first` after `last`.
    #[error("range {value:?} starts after it ends")]
    Reversed {
        /// The rejected entry.
        value: String,
    },
}

/// An inclusive range of addresses of one family, held as numbers (IPv4 in the low 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddrRange {
    /// The family of both ends.
    pub family: IpFamily,
    /// First address.
    pub first: u128,
    /// Last address (inclusive).
    pub last: u128,
}

impl AddrRange {
    /// Parses a CIDR (host bits are ignored, as Go's `net.ParseCIDR` does; a `/32` or `/128`
    /// is one address) or a range `first-last` (whitespace around `-` tolerated).
    pub fn parse(value: &str) -> Result<AddrRange, RangeError> {
        let malformed = || RangeError::Malformed { value: value.into() };
        let Some((a, b)) = value.split_once('-') else {
            let net = IpNet::from_str(value.trim()).map_err(|_| malformed())?;
            return Ok(AddrRange::of_net(&net));
        };
        let first = IpAddr::from_str(a.trim()).map_err(|_| malformed())?;
        let last = IpAddr::from_str(b.trim()).map_err(|_| malformed())?;
        let ((fa, first), (fb, last)) = (addr_number(first), addr_number(last));
        if fa != fb {
            return Err(RangeError::MixedFamilies { value: value.into() });
        }
        if first > last {
            return Err(RangeError::Reversed { value: value.into() });
        }
        Ok(AddrRange { family: fa, first, last })
    }

    /// Every address of `net`.
    pub fn of_net(net: &IpNet) -> AddrRange {
        let (family, first) = addr_number(net.network());
        let (_, last) = addr_number(net.broadcast());
        AddrRange { family, first, last }
    }

    /// True when `ip` lies inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (family, n) = addr_number(ip);
        family == self.family && (self.first..=self.last).contains(&n)
    }

    /// True when the two ranges share an address.
    pub fn overlaps(&self, other: &AddrRange) -> bool {
        self.family == other.family && self.first <= other.last && other.first <= self.last
    }

    /// Number of addresses, saturating at `u128::MAX` (only `::/0` saturates), less the IPv4
    /// addresses ending in `.0` or `.255` when `avoid_buggy_ips`.
    pub fn size(&self, avoid_buggy_ips: bool) -> u128 {
        let all = (self.last - self.first).saturating_add(1);
        if avoid_buggy_ips && self.family == IpFamily::V4 {
            all - (buggy_up_to(self.last) - self.first.checked_sub(1).map_or(0, buggy_up_to))
        } else {
            all
        }
    }

    /// The first address.
    pub fn first_ip(&self) -> IpAddr {
        number_addr(self.family, self.first)
    }

    /// The last address.
    pub fn last_ip(&self) -> IpAddr {
        number_addr(self.family, self.last)
    }
}

impl fmt::Display for AddrRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first_ip(), self.last_ip())
    }
}

/// How many numbers in `0..=n` are IPv4 addresses ending in `.0` or `.255`.
fn buggy_up_to(n: u128) -> u128 {
    (n / 256 + 1) + (n + 1) / 256
}

/// True for an IPv4 address ending in `.0` or `.255`, which MetalLB's `avoidBuggyIPs` skips
/// because some consumer routers' smurf protection drops traffic to them.
pub fn is_buggy(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => matches!(v4.octets()[3], 0 | 255),
        IpAddr::V6(_) => false,
    }
}

/// An address as (family, number).
pub(crate) fn addr_number(ip: IpAddr) -> (IpFamily, u128) {
    match ip {
        IpAddr::V4(v4) => (IpFamily::V4, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (IpFamily::V6, u128::from(v6)),
    }
}

/// The address numbered `n` in `family` (IPv4 keeps the low 32 bits).
pub(crate) fn number_addr(family: IpFamily, n: u128) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// Used addresses as maximal runs `start -> end` (inclusive) per family, so the lowest free
/// address at or after a point is one lookup, whatever the number of addresses in use.
#[derive(Debug, Clone, Default)]
pub(crate) struct UsedRuns {
    runs: [BTreeMap<u128, u128>; 2],
}

fn slot(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 0,
        IpFamily::V6 => 1,
    }
}

impl UsedRuns {
    /// Marks `ip` used (idempotent).
    pub(crate) fn insert(&mut self, ip: IpAddr) {
        let (family, n) = addr_number(ip);
        let runs = &mut self.runs[slot(family)];
        let (mut start, mut end) = (n, n);
        if let Some((&s, &e)) = runs.range(..=n).next_back() {
            if e >= n {
                return;
            }
            if e + 1 == n {
                start = s;
            }
        }
        if let Some(e) = n.checked_add(1).and_then(|next| runs.remove(&next)) {
            end = e;
        }
        runs.insert(start, end);
    }

    /// Marks `ip` free (idempotent).
    pub(crate) fn remove(&mut self, ip: IpAddr) {
        let (family, n) = addr_number(ip);
        let runs = &mut self.runs[slot(family)];
        let Some((&s, &e)) = runs.range(..=n).next_back() else { return };
        if e < n {
            return;
        }
        runs.remove(&s);
        if s < n {
            runs.insert(s, n - 1);
        }
        if n < e {
            runs.insert(n + 1, e);
        }
    }

    /// The lowest unused address of `range` (skipping `.0`/`.255` when `avoid_buggy_ips`).
    pub(crate) fn lowest_free(&self, range: &AddrRange, avoid_buggy_ips: bool) -> Option<IpAddr> {
        let runs = &self.runs[slot(range.family)];
        let mut n = range.first;
        loop {
            if let Some((_, &e)) = runs.range(..=n).next_back().filter(|(_, e)| **e >= n) {
                n = e.checked_add(1)?;
            }
            if n > range.last {
                return None;
            }
            let ip = number_addr(range.family, n);
            if !(avoid_buggy_ips && is_buggy(ip)) {
                return Some(ip);
            }
            n += 1;
        }
    }

    #[cfg(test)]
    pub(crate) fn run_count(&self) -> usize {
        self.runs.iter().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ip;

    fn r(s: &str) -> AddrRange {
        AddrRange::parse(s).unwrap()
    }

    #[test]
    fn parses_like_metallb_addresses() {
        assert_eq!(r("192.168.10.0/24").to_string(), "192.168.10.0-192.168.10.255");
        assert_eq!(r("192.168.10.7/24").to_string(), "192.168.10.0-192.168.10.255");
        assert_eq!(r("10.0.0.5/32").to_string(), "10.0.0.5-10.0.0.5");
        assert_eq!(r("fc00::/120").to_string(), "fc00::-fc00::ff");
        assert_eq!(r("192.168.9.1-192.168.9.5").size(false), 5);
        assert_eq!(r(" 192.168.9.1 - 192.168.9.5 ").size(false), 5);
        assert_eq!(r("fc00::1-fc00::1").size(false), 1);
        assert_eq!(r("::/0").size(false), u128::MAX);
        assert_eq!(r("2001:db8::/64").size(false), 1 << 64);
    }

    #[test]
    fn malformed_entries_name_the_value() {
        let cases = [
            ("192.168.10.0/33", "neither a CIDR"),
            ("192.168.10.1", "neither a CIDR"),
            ("", "neither a CIDR"),
            ("10.0.0.1-", "neither a CIDR"),
            ("10.0.0.1-10.0.0.x", "neither a CIDR"),
            ("10.0.0.1-fc00::1", "mixes IPv4 and IPv6"),
            ("10.0.0.9-10.0.0.1", "starts after it ends"),
        ];
        for (value, want) in cases {
            let err = AddrRange::parse(value).unwrap_err().to_string();
            assert!(err.contains(want) && err.contains(&format!("{value:?}")), "{value}: {err}");
        }
    }

    #[test]
    fn buggy_ips_are_left_out_of_the_size() {
        assert_eq!(r("10.0.0.0/24").size(true), 254);
        assert_eq!(r("10.0.0.0/16").size(true), 65536 - 512);
        assert_eq!(r("10.0.0.255-10.0.1.0").size(true), 0);
        assert_eq!(r("10.0.0.254-10.0.1.1").size(true), 2);
        assert_eq!(r("0.0.0.0/0").size(true), (1 << 32) - 2 * (1 << 24));
        assert_eq!(r("fc00::/120").size(true), 256);
        assert!(is_buggy(ip("10.1.2.0")) && is_buggy(ip("10.1.2.255")) && !is_buggy(ip("fc00::ff")));
    }

    #[test]
    fn used_runs_find_the_lowest_free_address() {
        let range = r("10.0.0.0/24");
        let mut used = UsedRuns::default();
        assert_eq!(used.lowest_free(&range, true), Some(ip("10.0.0.1")));
        for i in [1, 2, 4, 3] {
            used.insert(ip(&format!("10.0.0.{i}")));
        }
        assert_eq!(used.run_count(), 1);
        assert_eq!(used.lowest_free(&range, true), Some(ip("10.0.0.5")));
        used.remove(ip("10.0.0.2"));
        assert_eq!(used.run_count(), 2);
        assert_eq!(used.lowest_free(&range, false), Some(ip("10.0.0.0")));
        assert_eq!(used.lowest_free(&range, true), Some(ip("10.0.0.2")));
        used.insert(ip("10.0.0.2"));
        for i in 5..=254 {
            used.insert(ip(&format!("10.0.0.{i}")));
        }
        assert_eq!(used.lowest_free(&range, true), None);
        assert_eq!(used.lowest_free(&range, false), Some(ip("10.0.0.0")));
        let top = r("255.255.255.254/31");
        used.insert(ip("255.255.255.254"));
        used.insert(ip("255.255.255.255"));
        assert_eq!(used.lowest_free(&top, false), None);
        let top6 = r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128");
        used.insert(top6.first_ip());
        assert_eq!(used.lowest_free(&top6, false), None);
    }
}
