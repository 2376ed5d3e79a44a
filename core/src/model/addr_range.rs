//! Address ranges as MetalLB's `spec.addresses` writes them, and addresses as numbers. A
//! pool holds its entries parsed ([`PoolAddress`]); the allocator reads the ranges.

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

/// One entry of a pool's `spec.addresses`: as written, and parsed once (an entry that does
/// not parse is the pool's error, reported in its status, not the object's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolAddress {
    /// The entry as written.
    pub text: String,
    /// The entry parsed.
    pub range: Result<AddrRange, RangeError>,
}

impl PoolAddress {
    /// Parses `text`.
    pub fn new(text: &str) -> PoolAddress {
        PoolAddress { text: text.to_string(), range: AddrRange::parse(text) }
    }
}
