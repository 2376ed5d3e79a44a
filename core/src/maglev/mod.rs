//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network
//! Load Balancer", NSDI 2016, section 3.4).
//!
//! ```text
//! backend name --jhash(seed A) mod M--> offset      permutation[i][j] = (offset + j*skip) mod M
//! backend name --jhash(seed B) mod M-1, +1--> skip  population: backends take turns claiming
//!                                                   their next free bucket until all M are taken
//! packet: jhash(saddr . sport, FLOW_SEED) scaled to 0..M --> bucket --> table[bucket] = backend
//! ```
//! A backend's name is its address and port, so every node builds the same table from the same
//! endpoints, whatever order they arrive in. The table size `M` is a prime fixed per Service
//! port; it grows (a full reshuffle, like any change of `M`) only when the endpoints outgrow
//! it — see [`table_size`].

mod jhash;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use jhash::{jhash, reciprocal_scale};

/// The seed of the per-packet hash: explicit and the same on every node, so every node maps a
/// flow to the same bucket.
pub const FLOW_SEED: u32 = 0x7469_6465;
/// Seeds of the two backend-name hashes (offset and skip).
const OFFSET_SEED: u32 = 0x6f66_6673;
const SKIP_SEED: u32 = 0x736b_6970;

/// Default table size per Service port: the smallest of the primes tried (1021, 2039, 3067,
/// 4093) that keeps the buckets moved by removing or adding one of N ≤ 20 backends within
/// 1/N + 3 % for every backend set sampled (1021 reaches 1/N + 8 %, 2039 1/N + 18 % for some
/// three-backend sets), with at least 10 buckets per backend up to 409 backends. Each bucket is
/// one kernel map element per frontend (about 64 bytes): see docs/benchmarks.md.
pub const DEFAULT_TABLE_SIZE: u32 = 4093;
/// The table sizes a ProxyConfig may set: the largest prime below each power of two from 2^3
/// to 2^16 (from 251 up, the sizes Cilium's `bpf-lb-maglev-table-size` takes). A list, not
/// "any prime in range", so the CRD schema can refuse a size at admission with an `enum`.
pub const TABLE_SIZES: [u32; 14] =
    [7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191, 16_381, 32_749, 65_521];
/// Smallest table size accepted.
pub const MIN_TABLE_SIZE: u32 = TABLE_SIZES[0];
/// Largest table size accepted (IPVS's `mh` goes up to this order too).
pub const MAX_TABLE_SIZE: u32 = TABLE_SIZES[TABLE_SIZES.len() - 1];
/// The table grows when a backend would get fewer buckets than this.
pub const MIN_BUCKETS_PER_BACKEND: u32 = 10;

/// True when `n` is prime.
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// The smallest prime at or above `n`.
pub fn next_prime(n: u32) -> u32 {
    (n.max(2)..).find(|p| is_prime(*p)).unwrap_or(n)
}

/// The table size a Service port with `backends` backends uses, given the configured size:
/// the configured size while it holds [`MIN_BUCKETS_PER_BACKEND`] per backend, else the first
/// prime at or above the configured size doubled as often as needed (a pure function of both,
/// so every node picks the same; crossing a step reshuffles the whole table once).
pub fn table_size(configured: u32, backends: usize) -> u32 {
    let need = (backends as u64).saturating_mul(u64::from(MIN_BUCKETS_PER_BACKEND));
    let mut size = u64::from(configured.max(MIN_TABLE_SIZE));
    while size < need && size < u64::from(MAX_TABLE_SIZE) {
        size *= 2;
    }
    // A configured size is prime (validated); the prime after a doubling is at most a few
    // buckets above it.
    next_prime(size.min(u64::from(MAX_TABLE_SIZE)) as u32).min(MAX_TABLE_SIZE)
}

/// A backend's name: its address octets then its port, big-endian.
pub fn backend_name(ip: &IpAddr, port: u16) -> Vec<u8> {
    let mut out = match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    out.extend_from_slice(&port.to_be_bytes());
    out
}

/// The lookup table: for each bucket, the index of its backend in the slice given to
/// [`MaglevTable::build`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaglevTable {
    entries: Vec<u32>,
}

impl MaglevTable {
    /// Populates a table of `size` buckets (a prime) for backends named by `names`. The
    /// result does not depend on the order of `names`: backends take turns in name order.
    pub fn build(names: &[Vec<u8>], size: u32) -> MaglevTable {
        debug_assert!(is_prime(size), "Maglev table sizes are prime");
        let m = u64::from(size);
        if names.is_empty() || size == 0 {
            return MaglevTable { entries: Vec::new() };
        }
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|a, b| names[*a].cmp(&names[*b]));
        let perms: Vec<(u64, u64)> = order
            .iter()
            .map(|i| {
                let n = &names[*i];
                let offset = u64::from(jhash(n, OFFSET_SEED)) % m;
                let skip = u64::from(jhash(n, SKIP_SEED)) % (m - 1).max(1) + 1;
                (offset, skip)
            })
            .collect();
        let mut next = vec![0u64; order.len()];
        let mut entries = vec![u32::MAX; size as usize];
        let mut filled = 0usize;
        'fill: loop {
            for (turn, (offset, skip)) in perms.iter().enumerate() {
                let mut c = (offset + next[turn] * skip) % m;
                while entries[c as usize] != u32::MAX {
                    next[turn] += 1;
                    c = (offset + next[turn] * skip) % m;
                }
                entries[c as usize] = order[turn] as u32;
                next[turn] += 1;
                filled += 1;
                if filled == entries.len() {
                    break 'fill;
                }
            }
        }
        MaglevTable { entries }
    }

    /// Number of buckets.
    pub fn size(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Backend index per bucket.
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }

    /// The backend index of `bucket`.
    pub fn get(&self, bucket: u32) -> Option<u32> {
        self.entries.get(bucket as usize).copied()
    }
}

/// The bytes the kernel hashes for a flow, as nft lays the registers out: the source address,
/// then (unless `address_only`) the source port in network order padded to a 32-bit register
/// with zeros.
pub fn flow_key(src: &IpAddr, sport: u16, address_only: bool) -> Vec<u8> {
    let mut out = match src {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    if !address_only {
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    out
}

/// The bucket the kernel's `jhash <flow> mod size seed FLOW_SEED` yields for a flow.
pub fn flow_bucket(src: &IpAddr, sport: u16, address_only: bool, size: u32) -> u32 {
    reciprocal_scale(jhash(&flow_key(src, sport, address_only), FLOW_SEED), size)
}
