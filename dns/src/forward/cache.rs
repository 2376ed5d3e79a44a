//! The response cache for forwarded names (CoreDNS's `cache` plugin).
//!
//! Two caches with their own capacity and TTL cap: *success* (NOERROR with answers) and
//! *denial* (NXDOMAIN, NODATA, and upstream SERVFAIL for a few seconds). TTLs in cached answers
//! count down. Each cache is bounded in entries (CoreDNS's) and in bytes: an answer over TCP
//! may be 64 KiB, so 9,984 of them would be 600 MiB. When a cache is full an entry is evicted:
//! an expired one if the first few looked at hold one, else an arbitrary one (CoreDNS evicts a
//! random one). With prefetch enabled, an entry asked for often enough is refreshed in the
//! background shortly before it expires. An expired entry is kept for `serve_stale` and
//! answered with TTL 0 when no upstream answers (CoreDNS's `serve_stale ... verify`). The
//! cluster zone is never cached: the record index is the source of truth and changes take
//! effect at once.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, LowerName, Record, RecordType};

use crate::metrics::Metrics;

const SHARDS: usize = 16;
/// Entries looked at for an expired one before an arbitrary one is evicted.
const EVICTION_LOOKS: usize = 8;

/// Cache settings (CoreDNS defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Entries in the success cache (0 disables it).
    pub success_capacity: usize,
    /// Entries in the denial cache (0 disables it).
    pub denial_capacity: usize,
    /// Bytes the success cache may take, about.
    pub success_bytes: usize,
    /// Bytes the denial cache may take, about.
    pub denial_bytes: usize,
    /// How long an expired entry is kept to answer (TTL 0) when no upstream does (0: never).
    pub serve_stale: Duration,
    /// TTL cap for positive answers, seconds.
    pub success_max_ttl: u32,
    /// TTL cap for negative answers, seconds.
    pub denial_max_ttl: u32,
    /// TTL floor, seconds.
    pub min_ttl: u32,
    /// How long an upstream SERVFAIL is cached, seconds (0: not cached).
    pub servfail_ttl: u32,
    /// Prefetch an entry after this many hits within its lifetime (0: no prefetch).
    pub prefetch_hits: u32,
    /// ... when less than this percentage of its TTL is left.
    pub prefetch_percentage: u8,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            success_capacity: 9984,
            denial_capacity: 9984,
            success_bytes: 8 << 20,
            denial_bytes: 2 << 20,
            serve_stale: Duration::from_secs(3600),
            success_max_ttl: 3600,
            denial_max_ttl: 1800,
            min_ttl: 5,
            servfail_ttl: 5,
            prefetch_hits: 0,
            prefetch_percentage: 10,
        }
    }
}

/// What a cache entry is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Lower-case query name.
    pub name: LowerName,
    /// Query type.
    pub qtype: RecordType,
    /// Query class.
    pub qclass: DNSClass,
    /// DNSSEC OK bit (answers differ with it).
    pub dnssec_ok: bool,
}

/// A cached response.
#[derive(Debug)]
pub struct Entry {
    /// Response code.
    pub rcode: ResponseCode,
    answers: Vec<Record>,
    authorities: Vec<Record>,
    additionals: Vec<Record>,
    stored: Instant,
    ttl: u32,
    denial: bool,
    hits: AtomicU32,
    prefetching: AtomicBool,
    /// What it takes in memory, about.
    bytes: usize,
}

impl Entry {
    /// True when it expired at `now`.
    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.stored).as_secs() >= u64::from(self.ttl)
    }

    /// The records with their TTLs at most `left`.
    fn hit(&self, left: u32, prefetch: bool) -> Hit {
        let aged = |records: &[Record]| -> Vec<Record> {
            records
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r.ttl = r.ttl.min(left);
                    r
                })
                .collect()
        };
        Hit {
            rcode: self.rcode,
            answers: aged(&self.answers),
            authorities: aged(&self.authorities),
            additionals: aged(&self.additionals),
            prefetch,
        }
    }
}

/// A cache hit: the records with their TTLs counted down.
#[derive(Debug)]
pub struct Hit {
    /// Response code.
    pub rcode: ResponseCode,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section.
    pub authorities: Vec<Record>,
    /// Additional section.
    pub additionals: Vec<Record>,
    /// True when the entry should be refreshed in the background now.
    pub prefetch: bool,
}

/// Part of a cache: its entries and what they take.
#[derive(Debug, Default)]
struct Part {
    entries: HashMap<CacheKey, Arc<Entry>>,
    bytes: usize,
}

impl Part {
    fn remove(&mut self, key: &CacheKey) -> Option<Arc<Entry>> {
        let entry = self.entries.remove(key)?;
        self.bytes -= entry.bytes;
        Some(entry)
    }

    /// An entry to evict: an expired one among the first few, else the first.
    fn victim(&self, now: Instant) -> Option<CacheKey> {
        let mut looked = self.entries.iter().take(EVICTION_LOOKS);
        let first = self.entries.keys().next().cloned();
        looked.find(|(_, e)| e.expired(now)).map(|(k, _)| k.clone()).or(first)
    }
}

type Shard = Mutex<Part>;

/// The success and denial caches.
pub struct Cache {
    settings: CacheSettings,
    success: Vec<Shard>,
    denial: Vec<Shard>,
    hasher: RandomState,
    metrics: Arc<Metrics>,
}

fn shards() -> Vec<Shard> {
    (0..SHARDS).map(|_| Mutex::new(Part::default())).collect()
}

/// About what `records` take in memory: each one's struct and its wire form.
fn records_bytes(records: &[Record]) -> usize {
    records
        .iter()
        .map(|r| {
            size_of::<Record>()
                + hickory_proto::serialize::binary::BinEncodable::to_bytes(r).map_or(0, |b| b.len())
        })
        .sum()
}

impl Cache {
    /// An empty cache.
    pub fn new(settings: CacheSettings, metrics: Arc<Metrics>) -> Self {
        let cache =
            Cache { settings, success: shards(), denial: shards(), hasher: RandomState::new(), metrics };
        cache.report_sizes();
        cache
    }

    /// The settings.
    pub fn settings(&self) -> &CacheSettings {
        &self.settings
    }

    fn shard_of(&self, key: &CacheKey) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, Part> {
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks `key` up at `now`: an entry that has not expired.
    pub fn get(&self, key: &CacheKey, now: Instant) -> Option<Hit> {
        let server = self.metrics.server_labels();
        self.metrics.cache_requests.get_or_create(&server).inc();
        let i = self.shard_of(key);
        for (caches, kind) in [(&self.success, "success"), (&self.denial, "denial")] {
            let entry = Self::lock(&caches[i]).entries.get(key).cloned();
            let Some(entry) = entry else { continue };
            let age = now.saturating_duration_since(entry.stored).as_secs();
            let Some(left) = u64::from(entry.ttl).checked_sub(age).filter(|l| *l > 0) else {
                // Kept to be served stale, until that is over too.
                if self.stale_for(&entry, now).is_none() {
                    Self::lock(&caches[i]).remove(key);
                }
                continue;
            };
            let left = u32::try_from(left).unwrap_or(u32::MAX);
            self.metrics.cache_hits.get_or_create(&self.metrics.cache_labels(kind)).inc();
            let hits = entry.hits.fetch_add(1, Ordering::Relaxed) + 1;
            let s = &self.settings;
            let prefetch = s.prefetch_hits > 0
                && !entry.denial
                && hits >= s.prefetch_hits
                && u64::from(left) * 100 <= u64::from(entry.ttl) * u64::from(s.prefetch_percentage)
                && !entry.prefetching.swap(true, Ordering::Relaxed);
            if prefetch {
                self.metrics.cache_prefetches.get_or_create(&server).inc();
            }
            return Some(entry.hit(left, prefetch));
        }
        self.metrics.cache_misses.get_or_create(&server).inc();
        None
    }

    /// How long `entry` has been expired at `now`, while that is less than `serve_stale`.
    fn stale_for(&self, entry: &Entry, now: Instant) -> Option<Duration> {
        let expired = now.checked_duration_since(entry.stored + Duration::from_secs(u64::from(entry.ttl)))?;
        (expired < self.settings.serve_stale).then_some(expired)
    }

    /// An expired entry for `key` kept for `serve_stale`, with TTL 0: what to answer when no
    /// upstream does. A stale SERVFAIL is not served.
    pub fn stale(&self, key: &CacheKey, now: Instant) -> Option<Hit> {
        let i = self.shard_of(key);
        for caches in [&self.success, &self.denial] {
            let entry = Self::lock(&caches[i]).entries.get(key).cloned();
            let Some(entry) = entry.filter(|e| e.rcode != ResponseCode::ServFail) else { continue };
            if entry.expired(now) && self.stale_for(&entry, now).is_some() {
                self.metrics.cache_served_stale.get_or_create(&self.metrics.server_labels()).inc();
                return Some(entry.hit(0, false));
            }
        }
        None
    }

    /// Stores an upstream response for `key` if it is cacheable.
    pub fn insert(&self, key: CacheKey, response: &Message, now: Instant) {
        let s = &self.settings;
        let rcode = response.metadata.response_code;
        if response.metadata.truncation {
            return;
        }
        let (denial, ttl) = match rcode {
            ResponseCode::NoError if !response.answers.is_empty() => {
                let ttl =
                    response.answers.iter().chain(&response.authorities).map(|r| r.ttl).min().unwrap_or(0);
                (false, ttl.clamp(s.min_ttl, s.success_max_ttl.max(s.min_ttl)))
            }
            ResponseCode::NoError | ResponseCode::NXDomain => {
                // RFC 2308: the negative TTL is the SOA's minimum, capped by the SOA's TTL.
                let ttl = response
                    .authorities
                    .iter()
                    .find_map(|r| match &r.data {
                        hickory_proto::rr::RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                        _ => None,
                    })
                    .unwrap_or(s.min_ttl);
                (true, ttl.clamp(s.min_ttl, s.denial_max_ttl.max(s.min_ttl)))
            }
            ResponseCode::ServFail if s.servfail_ttl > 0 => (true, s.servfail_ttl),
            _ => return,
        };
        let (caches, capacity, bytes, kind) = if denial {
            (&self.denial, s.denial_capacity, s.denial_bytes, "denial")
        } else {
            (&self.success, s.success_capacity, s.success_bytes, "success")
        };
        if capacity == 0 || ttl == 0 {
            return;
        }
        let size = size_of::<Entry>()
            + size_of::<CacheKey>()
            + records_bytes(&response.answers)
            + records_bytes(&response.authorities)
            + records_bytes(&response.additionals);
        let (per_shard, bytes_per_shard) = (capacity.div_ceil(SHARDS), bytes / SHARDS);
        if size > bytes_per_shard {
            return;
        }
        let entry = Arc::new(Entry {
            rcode,
            answers: response.answers.clone(),
            authorities: response.authorities.clone(),
            additionals: response.additionals.clone(),
            stored: now,
            ttl,
            denial,
            hits: AtomicU32::new(0),
            prefetching: AtomicBool::new(false),
            bytes: size,
        });
        let mut shard = Self::lock(&caches[self.shard_of(&key)]);
        shard.remove(&key);
        while shard.entries.len() >= per_shard || shard.bytes + size > bytes_per_shard {
            let Some(victim) = shard.victim(now) else { break };
            shard.remove(&victim);
            self.metrics.cache_evictions.get_or_create(&self.metrics.cache_labels(kind)).inc();
        }
        shard.bytes += size;
        shard.entries.insert(key, entry);
        drop(shard);
        self.report_size(caches, kind);
    }

    fn report_size(&self, caches: &[Shard], kind: &'static str) {
        let n: usize = caches.iter().map(|s| Self::lock(s).entries.len()).sum();
        self.metrics
            .cache_entries
            .get_or_create(&self.metrics.cache_labels(kind))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    fn report_sizes(&self) {
        self.report_size(&self.success, "success");
        self.report_size(&self.denial, "denial");
    }

    /// Number of entries (success, denial).
    pub fn len(&self) -> (usize, usize) {
        let count = |c: &[Shard]| c.iter().map(|s| Self::lock(s).entries.len()).sum();
        (count(&self.success), count(&self.denial))
    }

    /// What the entries take, about, in bytes (success, denial).
    pub fn bytes(&self) -> (usize, usize) {
        let count = |c: &[Shard]| c.iter().map(|s| Self::lock(s).bytes).sum();
        (count(&self.success), count(&self.denial))
    }

    /// True when both caches are empty.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
