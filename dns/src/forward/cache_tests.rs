//! The cache's bounds, TTLs, serve-stale and prefetch.

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
    let settings = CacheSettings { success_max_ttl: 60, serve_stale: Duration::ZERO, ..Default::default() };
    let cache = Cache::new(settings, metrics());
    let t0 = Instant::now();
    cache.insert(key("a.example."), &response(ResponseCode::NoError, Some(300), None), t0);
    let hit = cache.get(&key("A.Example."), t0 + Duration::from_secs(10)).expect("hit");
    assert_eq!(hit.answers[0].ttl, 50, "capped at 60, 10 s elapsed");
    assert!(cache.get(&key("a.example."), t0 + Duration::from_secs(61)).is_none(), "expired");
    assert_eq!(cache.len(), (0, 0), "expired entries are dropped");
}

#[test]
fn an_expired_entry_is_served_stale_with_ttl_zero_for_a_while() {
    let settings =
        CacheSettings { success_max_ttl: 60, serve_stale: Duration::from_secs(100), ..Default::default() };
    let cache = Cache::new(settings, metrics());
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    cache.insert(key("a.example."), &response(ResponseCode::NoError, Some(300), None), t0);
    assert!(cache.stale(&key("a.example."), at(30)).is_none(), "not expired yet");
    assert!(cache.get(&key("a.example."), at(61)).is_none(), "an expired entry is no hit");
    let stale = cache.stale(&key("a.example."), at(61)).expect("served stale");
    assert_eq!((stale.answers.len(), stale.answers[0].ttl), (1, 0));
    assert!(cache.stale(&key("a.example."), at(161)).is_none(), "stale for too long");
    assert!(cache.get(&key("a.example."), at(161)).is_none());
    assert_eq!(cache.len(), (0, 0), "dropped once it may no longer be served stale");
    cache.insert(key("sf.example."), &response(ResponseCode::ServFail, None, None), t0);
    assert!(cache.stale(&key("sf.example."), at(10)).is_none(), "a SERVFAIL is not served stale");
}

#[test]
fn each_cache_is_bounded_in_bytes() {
    let cache = Cache::new(CacheSettings { success_bytes: 2 << 20, ..Default::default() }, metrics());
    let t0 = Instant::now();
    let mut big = response(ResponseCode::NoError, Some(60), None);
    for i in 0..100u8 {
        let name = Name::from_ascii("www.example.com.").unwrap();
        big.add_answer(Record::from_rdata(name, 60, RData::A(A([192, 0, 2, i].into()))));
    }
    for i in 0..500 {
        cache.insert(key(&format!("big{i}.example.")), &big, t0);
    }
    let ((entries, _), (bytes, _)) = (cache.len(), cache.bytes());
    assert!(bytes <= 2 << 20, "{bytes} bytes in {entries} entries");
    assert!(entries > 10 && entries < 250, "{entries} entries of {bytes} bytes");
    // An entry larger than a shard's share is not kept at all.
    let tiny = Cache::new(CacheSettings { success_bytes: 16 << 10, ..Default::default() }, metrics());
    tiny.insert(key("big.example."), &big, t0);
    assert_eq!(tiny.len(), (0, 0));
}

#[test]
fn denials_use_the_soa_minimum() {
    let cache = Cache::new(CacheSettings { serve_stale: Duration::ZERO, ..Default::default() }, metrics());
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
        cache.insert(key(&format!("s{i}.example.")), &response(ResponseCode::NoError, Some(60), None), t0);
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
