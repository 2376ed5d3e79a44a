//! The allocator keeps its promises under random churn.
//!
//! A deterministic random walk assigns, reassigns with changed requests, releases, restores
//! and swaps pool sets (some with overlapping or malformed entries) over small pools. After
//! every step, checked against a brute-force model of the pools: holders of one address can
//! share it, an operation never changes another Service's addresses, `set_pools` changes
//! nobody's, a repeated `assign` is a no-op, fresh automatic picks take the lowest free
//! address, exhaustion is real, and pool usage figures count what is held.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tideway_core::ipam::{AddrRange, AllocError, Allocator, Assignment, LbRequest, Pool, is_buggy};
use tideway_core::model::{ServiceName, TrafficPolicy};
use tideway_core::net::{IpFamily, Protocol};
use tideway_core::testing::random::Rng;

const SERVICES: u64 = 16;
const PORTS: [(Protocol, u16); 3] = [(Protocol::Tcp, 80), (Protocol::Udp, 53), (Protocol::Tcp, 53)];

fn pool(name: &str, addresses: &[&str], auto_assign: bool, avoid_buggy_ips: bool) -> Pool {
    Pool { auto_assign, avoid_buggy_ips, ..Pool::new(name, addresses) }
}

fn pool_sets() -> Vec<Vec<Pool>> {
    vec![
        vec![
            pool("p1", &["10.0.0.0/29", "fd00::/126"], true, false),
            pool("p2", &["10.0.1.254-10.0.2.2", "fd00:1::/127"], true, true),
            pool("p3", &["10.0.3.0/30"], false, false),
        ],
        vec![
            pool("p0", &["10.0.0.4/30"], true, false), // overlaps p1: p1 is invalid
            pool("p1", &["10.0.0.0/29", "fd00::/126"], true, false),
            pool("p2", &["10.0.1.254-10.0.2.2", "fd00:1::/127", "bogus"], true, true),
        ],
        vec![pool("p2", &["10.0.1.254-10.0.2.2", "fd00:1::/127"], true, true)],
    ]
}

fn addr(family: IpFamily, n: u128) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// Every address of a pool, by brute force (None for an entry that does not parse).
fn addresses(p: &Pool) -> Vec<IpAddr> {
    let ranges = p.addresses.iter().filter_map(|a| AddrRange::parse(&a.text).ok());
    let all = ranges.flat_map(|r| (r.first..=r.last).map(move |n| addr(r.family, n)));
    let mut all: Vec<IpAddr> = all.filter(|ip| !(p.avoid_buggy_ips && is_buggy(*ip))).collect();
    all.sort();
    all
}

fn random_request(rng: &mut Rng, i: u64, space: &[IpAddr]) -> LbRequest {
    let families = match rng.below(5) {
        0 => vec![IpFamily::V6],
        1 => vec![IpFamily::V4, IpFamily::V6],
        2 => vec![IpFamily::V6, IpFamily::V4],
        _ => vec![IpFamily::V4],
    };
    let mut r = LbRequest::new(ServiceName::new("ns", format!("s{i}")), families);
    r.sharing_key = [None, Some("k1".to_string()), Some("k2".to_string())][rng.below(3) as usize].clone();
    r.ports = PORTS.iter().copied().filter(|_| rng.below(2) == 0).collect();
    if rng.below(3) == 0 {
        r.external_traffic_policy = TrafficPolicy::Local;
    }
    r.selector = [("app".to_string(), format!("a{}", rng.below(2)))].into();
    if rng.below(6) == 0 && r.families.len() == 1 {
        r.requested = vec![space[rng.below(space.len() as u64) as usize]];
        r.requested.retain(|ip| IpFamily::of(ip) == r.families[0]);
    }
    if rng.below(6) == 0 {
        r.pool = Some(["p1", "p2", "p3"][rng.below(3) as usize].to_string());
    }
    r
}

fn compatible(a: &LbRequest, b: &LbRequest) -> bool {
    let cluster = a.external_traffic_policy == TrafficPolicy::Cluster
        && b.external_traffic_policy == TrafficPolicy::Cluster;
    a.sharing_key.is_some()
        && a.sharing_key == b.sharing_key
        && !a.ports.iter().any(|p| b.ports.contains(p))
        && (cluster || a.selector == b.selector)
}

struct World {
    alloc: Allocator,
    pools: Vec<Pool>,
    requests: BTreeMap<ServiceName, LbRequest>,
    /// How often each checked situation came up.
    seen: BTreeMap<&'static str, usize>,
}

impl World {
    fn snapshot(&self) -> BTreeMap<ServiceName, Vec<IpAddr>> {
        self.alloc.services().map(|s| (s.clone(), self.alloc.assignment(s).unwrap().ips)).collect()
    }

    fn held(&self) -> BTreeSet<IpAddr> {
        self.snapshot().into_values().flatten().collect()
    }

    fn check(&self, at: &str) {
        let mut by_ip: BTreeMap<IpAddr, Vec<&ServiceName>> = BTreeMap::new();
        for s in self.alloc.services() {
            for ip in self.alloc.assignment(s).unwrap().ips {
                by_ip.entry(ip).or_default().push(s);
            }
        }
        for (ip, holders) in &by_ip {
            assert_eq!(self.alloc.holders(*ip).len(), holders.len(), "{at}: holders of {ip}");
            for (i, a) in holders.iter().enumerate() {
                for b in &holders[i + 1..] {
                    assert!(
                        compatible(&self.requests[*a], &self.requests[*b]),
                        "{at}: {a} and {b} share {ip}"
                    );
                }
            }
        }
        for status in self.alloc.pool_status() {
            let spec = self.pools.iter().find(|p| p.name == status.name).unwrap();
            let mine = addresses(spec);
            let v4 = |ip: &&IpAddr| ip.is_ipv4();
            let held_v4 = mine.iter().filter(v4).filter(|ip| by_ip.contains_key(ip)).count() as u64;
            assert_eq!(status.stats.assigned_ipv4, held_v4, "{at}: {} assigned", status.name);
            let total_v4 = mine.iter().filter(v4).count() as u64;
            assert_eq!(status.stats.available_ipv4, total_v4 - held_v4, "{at}: {} available", status.name);
        }
    }

    /// A fresh automatic pick took the lowest free address of its pool.
    fn check_lowest(&self, r: &LbRequest, a: &Assignment, held_before: &BTreeSet<IpAddr>, at: &str) {
        let spec = self.pools.iter().find(|p| p.name == a.pool).unwrap();
        for (family, ip) in r.families.iter().zip(&a.ips) {
            let lowest =
                addresses(spec).into_iter().find(|x| IpFamily::of(x) == *family && !held_before.contains(x));
            assert_eq!(Some(*ip), lowest, "{at}: lowest free {family} of {}", a.pool);
        }
    }

    /// Exhaustion is real: each pool named lacks a free address of a needed family.
    fn check_exhausted(&self, r: &LbRequest, pools: &[String], at: &str) {
        let held = self.held();
        for name in pools {
            let spec = self.pools.iter().find(|p| p.name == *name).unwrap();
            let free = addresses(spec).into_iter().filter(|x| !held.contains(x)).collect::<Vec<_>>();
            let full = r.families.iter().any(|f| !free.iter().any(|x| IpFamily::of(x) == *f));
            assert!(full, "{at}: {name} is not exhausted: {free:?}");
        }
    }
}

fn assign(w: &mut World, r: LbRequest, at: &str) {
    let before = w.snapshot();
    let held_before: BTreeSet<IpAddr> =
        before.iter().filter(|(s, _)| **s != r.service).flat_map(|(_, v)| v.iter().copied()).collect();
    w.requests.insert(r.service.clone(), r.clone());
    let out = w.alloc.assign(&r);
    let after = w.snapshot();
    let others = |m: &BTreeMap<ServiceName, Vec<IpAddr>>| {
        m.iter().filter(|(s, _)| **s != r.service).map(|(s, v)| (s.clone(), v.clone())).collect::<Vec<_>>()
    };
    assert_eq!(others(&before), others(&after), "{at}: assign touched another Service");
    match &out {
        Ok(a) => {
            assert_eq!(after.get(&r.service), Some(&a.ips), "{at}");
            let again = w.alloc.assign(&r).unwrap();
            assert_eq!((&again.ips, &again.cleared), (&a.ips, &None), "{at}: repeated assign");
            let fresh = !before.contains_key(&r.service) || a.cleared.is_some();
            if fresh && r.requested.is_empty() && r.sharing_key.is_none() {
                w.check_lowest(&r, a, &held_before, at);
                *w.seen.entry("lowest free").or_default() += 1;
            }
            if a.cleared.is_some() {
                *w.seen.entry("cleared").or_default() += 1;
            }
            if w.alloc.holders(a.ips[0]).len() > 1 {
                *w.seen.entry("shared").or_default() += 1;
            }
        }
        Err(e) => {
            assert_eq!(after.get(&r.service), None, "{at}: holds nothing after {e}");
            if let AllocError::Exhausted { pools } = e {
                w.check_exhausted(&r, pools, at);
                *w.seen.entry("exhausted").or_default() += 1;
            } else {
                *w.seen.entry("other error").or_default() += 1;
            }
        }
    }
}

fn walk(seed: u64, steps: usize) -> BTreeMap<&'static str, usize> {
    let mut rng = Rng(seed);
    let sets = pool_sets();
    let space: Vec<IpAddr> =
        sets[0].iter().flat_map(addresses).chain([IpAddr::from([10, 9, 9, 9])]).collect();
    let mut w = World {
        alloc: Allocator::new(),
        pools: sets[0].clone(),
        requests: BTreeMap::new(),
        seen: BTreeMap::new(),
    };
    w.alloc.set_pools(w.pools.clone());
    for n in 0..steps {
        let at = format!("seed {seed} step {n}");
        let i = rng.below(SERVICES);
        let name = ServiceName::new("ns", format!("s{i}"));
        match rng.below(12) {
            0 => {
                let before = w.snapshot();
                w.pools = sets[rng.below(sets.len() as u64) as usize].clone();
                let report = w.alloc.set_pools(w.pools.clone());
                assert_eq!(w.snapshot(), before, "{at}: set_pools took addresses away");
                *w.seen.entry("orphaned").or_default() += report.orphaned.len();
                *w.seen.entry("kept in invalid").or_default() += report.kept_in_invalid.len();
                for s in report.orphaned {
                    let r = w.requests[&s].clone();
                    assign(&mut w, r, &at);
                }
            }
            1 => {
                let before = w.snapshot();
                w.alloc.release(&name);
                let mut want = before;
                want.remove(&name);
                assert_eq!(w.snapshot(), want, "{at}: release");
            }
            2 if w.requests.contains_key(&name) => {
                // Restart: a new allocator restores every status, then everyone reassigns.
                let statuses = w.snapshot();
                w.alloc = Allocator::new();
                w.alloc.set_pools(w.pools.clone());
                for (s, ips) in &statuses {
                    let restored = w.alloc.restore(&w.requests[s], ips);
                    assert!(restored.is_ok(), "{at}: restore {s}: {restored:?}");
                }
                assert_eq!(w.snapshot(), statuses, "{at}: restore rebuilt the same state");
                *w.seen.entry("restored").or_default() += statuses.len();
            }
            3 | 4 if w.requests.contains_key(&name) => {
                let r = w.requests[&name].clone();
                assign(&mut w, r, &at);
            }
            _ => {
                let r = random_request(&mut rng, i, &space);
                assign(&mut w, r, &at);
            }
        }
        w.check(&at);
    }
    w.seen
}

#[test]
fn allocator_walk() {
    for seed in [1, 2, 3, 4, 5, 6] {
        let seen = walk(seed * 7919, 1500);
        let situations = [
            "lowest free",
            "cleared",
            "shared",
            "exhausted",
            "other error",
            "orphaned",
            "kept in invalid",
            "restored",
        ];
        for s in situations {
            assert!(seen.get(s).copied().unwrap_or(0) >= 5, "seed {seed}: {s} too rare: {seen:?}");
        }
    }
}
