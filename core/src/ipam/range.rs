//! The index of used addresses that finds the lowest free one without scanning (the ranges
//! themselves are model types: [`crate::model::AddrRange`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::model::addr_range::{addr_number, number_addr};
use crate::model::{AddrRange, is_buggy};
use crate::net::IpFamily;

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
