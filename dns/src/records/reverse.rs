//! The reverse map behind PTR answers: every published address, in address order, with the
//! names it stands for (a ClusterIP its Service; an endpoint address one name per Service it
//! is an endpoint of).
//!
//! A sorted list of claims rather than a hash map: a third of the memory, built by one sort.
//! IPv4 addresses (nearly all of them) are 4-byte keys sorted by radix, a million in a few
//! milliseconds; IPv6 addresses are sorted by comparison.

use std::net::IpAddr;

/// The endpoint index that stands for the Service name itself (a ClusterIP's PTR target).
pub(crate) const SERVICE_NAME: u32 = u32::MAX;

/// Addresses to PTR targets: every claim on an address, sorted by address (ties in Service
/// order). The claims themselves are the map: no second copy, no grouping pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReverseMap {
    v4: Vec<(u32, u32, u32)>,
    v6: Vec<([u8; 16], u32, u32)>,
}

impl ReverseMap {
    /// The `(service, endpoint)` targets of `ip`, in Service order; empty when unknown. A
    /// ClusterIP hides the endpoints at the same address (CoreDNS looks at Services first).
    pub(crate) fn lookup(&self, ip: &IpAddr) -> Vec<(u32, u32)> {
        let claims: Vec<(u32, u32)> = match ip {
            IpAddr::V4(v4) => run(&self.v4, u32::from(*v4)),
            IpAddr::V6(v6) => run(&self.v6, v6.octets()),
        };
        match claims.iter().find(|c| c.1 == SERVICE_NAME) {
            Some(service) => vec![*service],
            None => claims,
        }
    }

    /// Number of claims.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// The claims on `key` in a list sorted by key.
fn run<K: Ord + Copy>(sorted: &[(K, u32, u32)], key: K) -> Vec<(u32, u32)> {
    let start = sorted.partition_point(|c| c.0 < key);
    sorted[start..].iter().take_while(|c| c.0 == key).map(|c| (c.1, c.2)).collect()
}

/// Claims on addresses, gathered in Service order while the index is built.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    v4: Vec<(u32, u32, u32)>,
    v6: Vec<([u8; 16], u32, u32)>,
}

impl Claims {
    /// Room for `n` claims (nearly all IPv4 in practice).
    pub(crate) fn with_capacity(n: usize) -> Self {
        Claims { v4: Vec::with_capacity(n), v6: Vec::new() }
    }

    /// Service `service` claims `ip` for endpoint `endpoint` (or [`SERVICE_NAME`]). Claims
    /// must come in Service order: the order ties keep.
    pub(crate) fn push(&mut self, ip: IpAddr, service: u32, endpoint: u32) {
        match ip {
            IpAddr::V4(v4) => self.v4.push((u32::from(v4), service, endpoint)),
            IpAddr::V6(v6) => self.v6.push((v6.octets(), service, endpoint)),
        }
    }

    /// The map: the claims sorted by address, stably.
    pub(crate) fn finish(self) -> ReverseMap {
        let Claims { mut v4, mut v6 } = self;
        radix_sort_by_address(&mut v4);
        v6.sort_by_key(|c| c.0);
        v4.shrink_to_fit();
        v6.shrink_to_fit();
        ReverseMap { v4, v6 }
    }
}

/// A stable least-significant-digit radix sort on the address, a byte per pass; a pass in
/// which every address has the same byte is skipped.
fn radix_sort_by_address(claims: &mut Vec<(u32, u32, u32)>) {
    let mut counts = [[0usize; 256]; 4];
    for c in claims.iter() {
        for (byte, count) in counts.iter_mut().enumerate() {
            count[(c.0 >> (8 * byte)) as usize & 0xff] += 1;
        }
    }
    let mut out: Vec<(u32, u32, u32)> = Vec::new();
    for (byte, count) in counts.iter().enumerate() {
        if count.contains(&claims.len()) {
            continue;
        }
        let mut next = [0usize; 256];
        let mut sum = 0;
        for (slot, n) in next.iter_mut().zip(count) {
            *slot = sum;
            sum += n;
        }
        out.clear();
        out.resize(claims.len(), (0, 0, 0));
        for c in claims.iter() {
            let digit = (c.0 >> (8 * byte)) as usize & 0xff;
            out[next[digit]] = *c;
            next[digit] += 1;
        }
        std::mem::swap(claims, &mut out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn radix_sort_is_a_stable_sort_by_address() {
        // A pseudo-random walk over addresses that share some bytes, with ties.
        let mut x: u32 = 12345;
        let mut claims: Vec<(u32, u32, u32)> = (0..5000)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (0x0a00_0000 | (x >> 8) & 0x0003_0f0f, i, 0)
            })
            .collect();
        let mut expected = claims.clone();
        expected.sort_by_key(|c| c.0);
        radix_sort_by_address(&mut claims);
        assert_eq!(claims, expected);
    }

    #[test]
    fn a_cluster_ip_hides_endpoints_and_ties_keep_service_order() {
        let mut claims = Claims::with_capacity(8);
        claims.push(ip("10.0.0.9"), 0, 0);
        claims.push(ip("10.0.0.5"), 0, 1);
        claims.push(ip("fd00::1"), 1, 2);
        claims.push(ip("10.0.0.5"), 2, 3);
        claims.push(ip("10.0.0.9"), 3, 4);
        claims.push(ip("10.0.0.9"), 1, SERVICE_NAME);
        claims.push(ip("10.0.0.9"), 2, SERVICE_NAME);
        let map = claims.finish();
        assert_eq!(map.len(), 7);
        assert_eq!(map.lookup(&ip("10.0.0.5")), &[(0, 1), (2, 3)]);
        assert_eq!(map.lookup(&ip("10.0.0.9")), &[(1, SERVICE_NAME)], "the first ClusterIP claim");
        assert_eq!(map.lookup(&ip("fd00::1")), &[(1, 2)]);
        assert!(map.lookup(&ip("10.0.0.6")).is_empty());
        assert!(map.lookup(&ip("10.0.0.10")).is_empty(), "past the last address");
        assert!(map.lookup(&ip("::ffff:10.0.0.5")).is_empty(), "families are not mixed");
    }
}
