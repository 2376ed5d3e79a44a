//! The response cache for forwarded names (CoreDNS's `cache` plugin).
//!
//! Two caches with their own capacity and TTL cap: *success* (NOERROR with answers) and
//! *denial* (NXDOMAIN, NODATA, and upstream SERVFAIL for a few seconds). TTLs in cached answers
//! count down. When a cache is full an arbitrary entry is evicted (CoreDNS evicts a random
//! one). With prefetch enabled, an entry asked for often enough is refreshed in the background
//! shortly before it expires. The cluster zone is never cached: the record index is the
//! source of truth and changes take effect at once.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, LowerName, Record, RecordType};

use crate::metrics::Metrics;

const SHARDS: usize = 16;

/// Cache settings (CoreDNS defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Entries in the success cache (0 disables it).
    pub success_capacity: usize,
    /// Entries in the denial cache (0 disables it).
    pub denial_capacity: usize,
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

type Shard = Mutex<HashMap<CacheKey, Arc<Entry>>>;

/// The success and denial caches.
pub struct Cache {
    settings: CacheSettings,
    success: Vec<Shard>,
    denial: Vec<Shard>,
    hasher: RandomState,
    metrics: Arc<Metrics>,
}

fn shards() -> Vec<Shard> {
    (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect()
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

    fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Arc<Entry>>> {
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks `key` up at `now`.
    pub fn get(&self, key: &CacheKey, now: Instant) -> Option<Hit> {
        let server = self.metrics.server_labels();
        self.metrics.cache_requests.get_or_create(&server).inc();
        let i = self.shard_of(key);
        for (caches, kind) in [(&self.success, "success"), (&self.denial, "denial")] {
            let entry = Self::lock(&caches[i]).get(key).cloned();
            let Some(entry) = entry else { continue };
            let age = now.saturating_duration_since(entry.stored).as_secs();
            let Some(left) = u64::from(entry.ttl).checked_sub(age).filter(|l| *l > 0) else {
                Self::lock(&caches[i]).remove(key);
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
            return Some(Hit {
                rcode: entry.rcode,
                answers: aged(&entry.answers),
                authorities: aged(&entry.authorities),
                additionals: aged(&entry.additionals),
                prefetch,
            });
        }
        self.metrics.cache_misses.get_or_create(&server).inc();
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
        let (caches, capacity, kind) = if denial {
            (&self.denial, s.denial_capacity, "denial")
        } else {
            (&self.success, s.success_capacity, "success")
        };
        if capacity == 0 || ttl == 0 {
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
        });
        let per_shard = capacity.div_ceil(SHARDS);
        let mut shard = Self::lock(&caches[self.shard_of(&key)]);
        if !shard.contains_key(&key)
            && shard.len() >= per_shard
            && let Some(victim) = shard.keys().next().cloned()
        {
            shard.remove(&victim);
            self.metrics.cache_evictions.get_or_create(&self.metrics.cache_labels(kind)).inc();
        }
        shard.insert(key, entry);
        drop(shard);
        self.report_size(caches, kind);
    }

    fn report_size(&self, caches: &[Shard], kind: &'static str) {
        let n: usize = caches.iter().map(|s| Self::lock(s).len()).sum();
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
        let count = |c: &[Shard]| c.iter().map(|s| Self::lock(s).len()).sum();
        (count(&self.success), count(&self.denial))
    }

    /// True when both caches are empty.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{MessageType, OpCode};
    use hickory_proto::rr::rdata::{A, SOA};
    use hickory_proto::rr::{Name, RData};
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut Registry::default()))
    }

    fn key(name: &str) -> CacheKey {
        CacheKey {
            name: LowerName::from(Name::from_ascii(name).unwrap()),
            qtype: RecordType::A,
            qclass: DNSClass::IN,
            dnssec_ok: false,
        }
    }

    fn response(rcode: ResponseCode, answer_ttl: Option<u32>, soa: Option<(u32, u32)>) -> Message {
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        m.metadata.response_code = rcode;
        let name = Name::from_ascii("www.example.com.").unwrap();
        if let Some(ttl) = answer_ttl {
            m.add_answer(Record::from_rdata(name.clone(), ttl, RData::A(A([192, 0, 2, 1].into()))));
        }
        if let Some((ttl, min)) = soa {
            let soa = SOA::new(name.clone(), name.clone(), 1, 1, 1, 1, min);
            m.add_authority(Record::from_rdata(name, ttl, RData::SOA(soa)));
        }
        m
    }

    #[test]
    fn ttls_count_down_and_are_capped() {
        let cache = Cache::new(CacheSettings { success_max_ttl: 60, ..Default::default() }, metrics());
        let t0 = Instant::now();
        cache.insert(key("a.example."), &response(ResponseCode::NoError, Some(300), None), t0);
        let hit = cache.get(&key("A.Example."), t0 + Duration::from_secs(10)).expect("hit");
        assert_eq!(hit.answers[0].ttl, 50, "capped at 60, 10 s elapsed");
        assert!(cache.get(&key("a.example."), t0 + Duration::from_secs(61)).is_none(), "expired");
        assert_eq!(cache.len(), (0, 0), "expired entries are dropped");
    }

    #[test]
    fn denials_use_the_soa_minimum() {
        let cache = Cache::new(CacheSettings::default(), metrics());
        let t0 = Instant::now();
        cache.insert(key("nx.example."), &response(ResponseCode::NXDomain, None, Some((3600, 30))), t0);
        assert_eq!(cache.len(), (0, 1));
        assert!(cache.get(&key("nx.example."), t0 + Duration::from_secs(29)).is_some());
        assert!(cache.get(&key("nx.example."), t0 + Duration::from_secs(31)).is_none());
        // REFUSED and truncated answers are not cached.
        cache.insert(key("r.example."), &response(ResponseCode::Refused, None, None), t0);
        let mut tc = response(ResponseCode::NoError, Some(30), None);
        tc.metadata.truncation = true;
        cache.insert(key("tc.example."), &tc, t0);
        assert_eq!(cache.len(), (0, 0));
    }

    #[test]
    fn capacity_is_bounded_per_cache() {
        let cache = Cache::new(
            CacheSettings { success_capacity: 32, denial_capacity: 16, ..Default::default() },
            metrics(),
        );
        let t0 = Instant::now();
        for i in 0..500 {
            cache.insert(
                key(&format!("s{i}.example.")),
                &response(ResponseCode::NoError, Some(60), None),
                t0,
            );
            cache.insert(
                key(&format!("d{i}.example.")),
                &response(ResponseCode::NXDomain, None, Some((60, 60))),
                t0,
            );
        }
        let (s, d) = cache.len();
        assert!(s <= 32 && d <= 16 && s > 0 && d > 0, "{s} {d}");
    }

    #[test]
    fn prefetch_fires_once_near_expiry_for_popular_entries() {
        let cache = Cache::new(CacheSettings { prefetch_hits: 2, ..Default::default() }, metrics());
        let t0 = Instant::now();
        cache.insert(key("p.example."), &response(ResponseCode::NoError, Some(100), None), t0);
        assert!(!cache.get(&key("p.example."), t0).unwrap().prefetch, "1 hit, fresh");
        assert!(!cache.get(&key("p.example."), t0 + Duration::from_secs(50)).unwrap().prefetch, "not yet");
        assert!(cache.get(&key("p.example."), t0 + Duration::from_secs(95)).unwrap().prefetch);
        assert!(!cache.get(&key("p.example."), t0 + Duration::from_secs(96)).unwrap().prefetch, "once");
    }
}
