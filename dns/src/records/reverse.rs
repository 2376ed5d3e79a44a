//! The reverse map behind PTR answers: every published address, in address order, with the
//! names it stands for (a ClusterIP its Service; an endpoint address one name per Service it
//! is an endpoint of).
//!
//! A sorted list of claims rather than a hash map: a third of the memory, built by one sort.
//! IPv4 addresses (nearly all of them) are 4-byte keys sorted by radix, a million in a few
//! milliseconds; IPv6 addresses are sorted by comparison.

use std::net::IpAddr;

/// What an address stands for: an endpoint's name, or a Service's (its ClusterIP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The endpoint record at this place in the index.
    Endpoint(u32),
    /// The Service at this place in the index.
    Service(u32),
}

/// The top bit of a claim's target: a Service, not an endpoint.
const SERVICE: u32 = 1 << 31;

impl Target {
    fn encode(self) -> u32 {
        match self {
            Target::Endpoint(e) => e & !SERVICE,
            Target::Service(s) => s | SERVICE,
        }
    }

    fn decode(t: u32) -> Self {
        if t & SERVICE == 0 { Target::Endpoint(t) } else { Target::Service(t & !SERVICE) }
    }
}

/// Addresses to PTR targets: every claim on an address, sorted by address (ties in the order
/// claimed). The claims themselves are the map: no second copy, no grouping pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReverseMap {
    v4: Vec<(u32, u32)>,
    v6: Vec<([u8; 16], u32)>,
}

impl ReverseMap {
    /// The targets of `ip`, in the order claimed; empty when unknown. A ClusterIP hides the
    /// endpoints at the same address (CoreDNS looks at Services first).
    #[cfg(test)]
    pub(crate) fn lookup(&self, ip: &IpAddr) -> Vec<Target> {
        let claims = self.claims(ip);
        match claims.iter().find(|c| matches!(c, Target::Service(_))) {
            Some(service) => vec![*service],
            None => claims,
        }
    }

    /// Every claim on `ip`, in the order claimed.
    pub(crate) fn claims(&self, ip: &IpAddr) -> Vec<Target> {
        match ip {
            IpAddr::V4(v4) => run(&self.v4, u32::from(*v4)),
            IpAddr::V6(v6) => run(&self.v6, v6.octets()),
        }
    }

    /// Number of claims.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// The claims on `key` in a list sorted by key.
fn run<K: Ord + Copy>(sorted: &[(K, u32)], key: K) -> Vec<Target> {
    let start = sorted.partition_point(|c| c.0 < key);
    sorted[start..].iter().take_while(|c| c.0 == key).map(|c| Target::decode(c.1)).collect()
}

/// Claims on addresses, gathered while the index is built.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    v4: Vec<(u32, u32)>,
    v6: Vec<([u8; 16], u32)>,
}

impl Claims {
    /// Room for `n` claims (nearly all IPv4 in practice).
    pub(crate) fn with_capacity(n: usize) -> Self {
        Claims { v4: Vec::with_capacity(n), v6: Vec::new() }
    }

    /// `target` claims `ip`. Claims on one address keep the order they are made in.
    pub(crate) fn push(&mut self, ip: IpAddr, target: Target) {
        match ip {
            IpAddr::V4(v4) => self.v4.push((u32::from(v4), target.encode())),
            IpAddr::V6(v6) => self.v6.push((v6.octets(), target.encode())),
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
fn radix_sort_by_address(claims: &mut Vec<(u32, u32)>) {
    let mut counts = [[0usize; 256]; 4];
    for c in claims.iter() {
        for (byte, count) in counts.iter_mut().enumerate() {
            count[(c.0 >> (8 * byte)) as usize & 0xff] += 1;
        }
    }
    let mut out: Vec<(u32, u32)> = Vec::new();
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
        out.resize(claims.len(), (0, 0));
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
        let mut claims: Vec<(u32, u32)> = (0..5000)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (0x0a00_0000 | (x >> 8) & 0x0003_0f0f, i)
            })
            .collect();
        let mut expected = claims.clone();
        expected.sort_by_key(|c| c.0);
        radix_sort_by_address(&mut claims);
        assert_eq!(claims, expected);
    }

    #[test]
    fn a_cluster_ip_hides_endpoints_and_ties_keep_the_order_claimed() {
        use Target::{Endpoint, Service};
        let mut claims = Claims::with_capacity(8);
        claims.push(ip("10.0.0.9"), Endpoint(0));
        claims.push(ip("10.0.0.5"), Endpoint(1));
        claims.push(ip("fd00::1"), Endpoint(2));
        claims.push(ip("10.0.0.5"), Endpoint(3));
        claims.push(ip("10.0.0.9"), Endpoint(4));
        claims.push(ip("10.0.0.9"), Service(1));
        claims.push(ip("10.0.0.9"), Service(2));
        let map = claims.finish();
        assert_eq!(map.len(), 7);
        assert_eq!(map.lookup(&ip("10.0.0.5")), &[Endpoint(1), Endpoint(3)]);
        assert_eq!(map.lookup(&ip("10.0.0.9")), &[Service(1)], "the first ClusterIP claim");
        assert_eq!(map.lookup(&ip("fd00::1")), &[Endpoint(2)]);
        assert!(map.lookup(&ip("10.0.0.6")).is_empty());
        assert!(map.lookup(&ip("10.0.0.10")).is_empty(), "past the last address");
        assert!(map.lookup(&ip("::ffff:10.0.0.5")).is_empty(), "families are not mixed");
    }
}
