//! Table tests of the allocator's decisions.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::*;
use crate::config::LabelSelector;
use crate::model::{ServiceName, TrafficPolicy};
use crate::net::IpFamily::{V4, V6};
use crate::net::Protocol;
use crate::testing::ip;

fn name(n: &str) -> ServiceName {
    ServiceName::new("ns", n)
}

fn req(n: &str) -> LbRequest {
    LbRequest::new(name(n), vec![V4])
}

fn dual(n: &str) -> LbRequest {
    LbRequest::new(name(n), vec![V4, V6])
}

fn with(mut r: LbRequest, f: impl FnOnce(&mut LbRequest)) -> LbRequest {
    f(&mut r);
    r
}

fn shared(n: &str, key: &str, ports: &[(Protocol, u16)]) -> LbRequest {
    with(req(n), |r| {
        r.sharing_key = Some(key.into());
        r.ports = ports.to_vec();
    })
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector { match_labels: labels(pairs), match_expressions: vec![] }
}

fn allocator(pools: Vec<Pool>) -> Allocator {
    let mut a = Allocator::new();
    let report = a.set_pools(pools);
    assert!(report.orphaned.is_empty());
    a
}

fn got(a: &mut Allocator, r: &LbRequest) -> Vec<IpAddr> {
    a.assign(r).unwrap_or_else(|e| panic!("{}: {e}", r.service)).ips
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

const TCP: Protocol = Protocol::Tcp;
const UDP: Protocol = Protocol::Udp;

#[test]
fn lowest_free_address_first_and_reuse_after_release() {
    let mut a = allocator(vec![Pool::new("p", &["192.168.10.0/30", "192.168.9.1-192.168.9.2"])]);
    let want = ["192.168.9.1", "192.168.9.2", "192.168.10.0", "192.168.10.1"];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got(&mut a, &req(&format!("s{i}"))), ips(&[w]));
    }
    assert_eq!(a.release(&name("s1")).unwrap().ips, ips(&["192.168.9.2"]));
    assert_eq!(a.release(&name("s1")), None, "release is idempotent");
    assert_eq!(got(&mut a, &req("s9")), ips(&["192.168.9.2"]));
    assert_eq!(got(&mut a, &req("s9")), ips(&["192.168.9.2"]), "assign again: stable");
}

#[test]
fn exhaustion_names_the_pools() {
    let mut a =
        allocator(vec![Pool::new("small", &["10.0.0.1/32"]), Pool::new("tiny", &["10.0.1.1-10.0.1.1"])]);
    got(&mut a, &req("a"));
    got(&mut a, &req("b"));
    let err = a.assign(&req("c")).unwrap_err();
    assert_eq!(err, AllocError::Exhausted { pools: vec!["small".into(), "tiny".into()] });
    assert!(err.to_string().contains("small"), "{err}");
    assert_eq!(a.assignment(&name("c")), None);
}

#[test]
fn requested_addresses() {
    let mut reserved = Pool::new("reserved", &["10.9.0.0/29"]);
    reserved.auto_assign = false;
    let mut a = allocator(vec![Pool::new("p", &["10.0.0.0/29"]), reserved]);
    let ask = |n: &str, addrs: &[&str]| with(req(n), |r| r.requested = ips(addrs));
    // Inside an autoAssign=false pool: fine.
    assert_eq!(a.assign(&ask("a", &["10.9.0.3"])).unwrap().pool, "reserved");
    // Outside every pool.
    let err = a.assign(&ask("b", &["172.16.0.1"])).unwrap_err();
    assert_eq!(err, AllocError::NotInAnyPool { ip: ip("172.16.0.1") });
    // In use, no sharing key.
    let err = a.assign(&ask("c", &["10.9.0.3"])).unwrap_err();
    assert!(matches!(&err, AllocError::InUse { by, .. } if *by == name("a")), "{err}");
    assert!(err.to_string().contains("ns/a"), "{err}");
    // Family mismatch.
    let err = a.assign(&ask("d", &["fc00::1"])).unwrap_err();
    assert!(matches!(err, AllocError::RequestedFamilies { .. }), "{err}");
    // Outside the named pool.
    let err = a.assign(&with(ask("e", &["10.0.0.1"]), |r| r.pool = Some("reserved".into()))).unwrap_err();
    assert_eq!(err, AllocError::NotInNamedPool { ip: ip("10.0.0.1"), pool: "reserved".into() });
    // Automatic picks never take a requested address, nor the reserved pool.
    assert_eq!(got(&mut a, &req("f")), ips(&["10.0.0.0"]));
}

#[test]
fn sharing_by_key() {
    let mut a = allocator(vec![Pool::new("p", &["10.0.0.0/28"])]);
    let dns_tcp = shared("dns-tcp", "dns", &[(TCP, 53)]);
    let dns_udp = shared("dns-udp", "dns", &[(UDP, 53)]);
    let first = got(&mut a, &dns_tcp);
    assert_eq!(got(&mut a, &dns_udp), first, "same key, no port clash: one address");
    assert_eq!(a.holders(first[0]), vec![name("dns-tcp"), name("dns-udp")]);

    let ask = |r: LbRequest| with(r, |r| r.requested = first.clone());
    let cases: Vec<(LbRequest, &str)> = vec![
        (ask(shared("clash", "dns", &[(UDP, 53)])), "port udp/53"),
        (ask(shared("other-key", "web", &[(TCP, 80)])), "sharing key \"web\" differs"),
        (ask(req("no-key")), "this Service has no sharing key"),
        (
            ask(with(shared("local", "dns", &[(TCP, 853)]), |r| {
                r.external_traffic_policy = TrafficPolicy::Local;
                r.selector = labels(&[("app", "other")]);
            })),
            "Local here and Cluster there",
        ),
    ];
    for (r, want) in cases {
        let err = a.assign(&r).unwrap_err().to_string();
        assert!(err.contains(want), "{}: {err}", r.service);
        assert_eq!(a.assignment(&r.service), None);
    }
    // A clashing port under the key, asked automatically: a fresh address instead.
    assert_ne!(got(&mut a, &shared("dns-udp-2", "dns", &[(UDP, 53)])), first);
}

#[test]
fn sharing_with_local_policy_needs_the_same_selector() {
    let mut a = allocator(vec![Pool::new("p", &["10.0.0.0/28"])]);
    let local = |n: &str, port: u16, app: &str| {
        with(shared(n, "k", &[(TCP, port)]), |r| {
            r.external_traffic_policy = TrafficPolicy::Local;
            r.selector = labels(&[("app", app)]);
        })
    };
    let ip0 = got(&mut a, &local("a", 80, "web"));
    assert_eq!(got(&mut a, &local("b", 443, "web")), ip0, "same selector");
    let c = with(local("c", 8080, "db"), |r| r.requested = ip0.clone());
    let err = a.assign(&c).unwrap_err();
    assert!(matches!(err, AllocError::SharingConflict { conflict: SharingConflict::Selector, .. }), "{err}");
    // Cluster policy with the same selector joins too.
    let d = with(local("d", 9090, "web"), |r| r.external_traffic_policy = TrafficPolicy::Cluster);
    assert_eq!(got(&mut a, &d), ip0);
}

#[test]
fn changed_ports_that_now_clash_move_the_service() {
    let mut a = allocator(vec![Pool::new("p", &["10.0.0.0/28"])]);
    let first = got(&mut a, &shared("a", "k", &[(TCP, 80)]));
    assert_eq!(got(&mut a, &shared("b", "k", &[(TCP, 443)])), first);
    let moved = a.assign(&shared("b", "k", &[(TCP, 80)])).unwrap();
    assert_ne!(moved.ips, first);
    let reason = moved.cleared.unwrap().reason;
    assert!(matches!(&reason, ClearReason::Sharing(e) if e.to_string().contains("tcp/80")), "{reason}");
}

#[test]
fn dual_stack_needs_one_pool_with_both_families() {
    let mut a = allocator(vec![
        Pool::new("a-v4", &["10.0.0.0/30"]),
        Pool::new("b-v6", &["fc00::/126"]),
        Pool::new("c-both", &["10.1.0.0/30", "fc00:1::/126"]),
    ]);
    let d = a.assign(&dual("d")).unwrap();
    assert_eq!((d.ips, d.pool.as_str()), (ips(&["10.1.0.0", "fc00:1::"]), "c-both"));
    let six_first = LbRequest::new(name("e"), vec![V6, V4]);
    assert_eq!(got(&mut a, &six_first), ips(&["fc00:1::1", "10.1.0.1"]), "primary family first");
    assert_eq!(got(&mut a, &LbRequest::new(name("f"), vec![V6])), ips(&["fc00::"]), "single v6: first pool");

    let mut only_single =
        allocator(vec![Pool::new("a-v4", &["10.0.0.0/30"]), Pool::new("b-v6", &["fc00::/126"])]);
    let err = only_single.assign(&dual("g")).unwrap_err();
    assert_eq!(
        err,
        AllocError::FamilyUnavailable { families: vec![V4, V6], pools: vec!["a-v4".into(), "b-v6".into()] }
    );
    assert!(err.to_string().contains("IPv4 and IPv6"), "{err}");
    let err = only_single.assign(&LbRequest::new(name("h"), vec![V4, V4])).unwrap_err();
    assert!(matches!(err, AllocError::BadFamilies { .. }), "{err}");
}

#[test]
fn restart_restores_before_allocating() {
    let pools = || vec![Pool::new("p", &["10.0.0.0/29"]), Pool::new("q", &["10.0.1.0/29", "fc00::/64"])];
    let mut a = allocator(pools());
    assert_eq!(a.restore(&req("old-1"), &ips(&["10.0.0.3"])).unwrap().pool, "p");
    assert_eq!(a.restore(&dual("old-2"), &ips(&["10.0.1.5", "fc00::7"])).unwrap().pool, "q");
    let err = a.restore(&req("old-3"), &ips(&["10.0.0.3"])).unwrap_err();
    assert!(matches!(err, AllocError::InUse { .. }), "clash: {err}");
    let err = a.restore(&req("old-4"), &ips(&["192.0.2.1"])).unwrap_err();
    assert_eq!(err, AllocError::NotInAnyPool { ip: ip("192.0.2.1") });
    let err = a.restore(&req("old-5"), &ips(&["10.0.0.1", "fc00::1"])).unwrap_err();
    assert!(matches!(err, AllocError::SplitAcrossPools { .. }), "{err}");
    // Restored addresses stay put and are never handed out again.
    assert_eq!(got(&mut a, &req("old-1")), ips(&["10.0.0.3"]));
    assert_eq!(got(&mut a, &dual("old-2")), ips(&["10.0.1.5", "fc00::7"]));
    let fresh: Vec<IpAddr> = (0..6).flat_map(|i| got(&mut a, &req(&format!("new-{i}")))).collect();
    assert!(!fresh.contains(&ip("10.0.0.3")) && !fresh.contains(&ip("10.0.1.5")), "{fresh:?}");
    assert_eq!(fresh[..3], ips(&["10.0.0.0", "10.0.0.1", "10.0.0.2"]));
    assert_eq!(fresh[3], ip("10.0.0.4"));
}

#[test]
fn pool_priority_and_selectors() {
    let alloc = |priority, namespaces: &[&str], ns_sel: Vec<LabelSelector>, svc_sel: Vec<LabelSelector>| {
        Some(ServiceAllocation {
            priority,
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            namespace_selectors: ns_sel,
            service_selectors: svc_sel,
        })
    };
    let pool = |n: &str, cidr: &str, allocation| Pool { allocation, ..Pool::new(n, &[cidr]) };
    let mut a = allocator(vec![
        pool("a-open", "10.0.0.0/28", None),
        pool("b-team", "10.0.1.0/28", alloc(Some(20), &["team"], vec![], vec![])),
        pool(
            "c-premium",
            "10.0.2.0/28",
            alloc(Some(10), &[], vec![], vec![selector(&[("tier", "premium")])]),
        ),
        pool("d-prod", "10.0.3.0/28", alloc(None, &[], vec![selector(&[("env", "prod")])], vec![])),
        pool("e-prod-first", "10.0.4.0/28", alloc(Some(5), &[], vec![selector(&[("env", "prod")])], vec![])),
        pool("f-tie", "10.0.5.0/28", alloc(Some(20), &["team"], vec![], vec![])),
    ]);
    let in_ns = |n: &str, ns: &str| LbRequest::new(ServiceName::new(ns, n), vec![V4]);
    let cases = [
        (in_ns("plain", "ns"), "a-open"),
        (in_ns("teamed", "team"), "b-team"),
        (with(in_ns("premium", "team"), |r| r.labels = labels(&[("tier", "premium")])), "c-premium"),
        (with(in_ns("prod", "ns"), |r| r.namespace_labels = labels(&[("env", "prod")])), "e-prod-first"),
    ];
    for (r, want) in cases {
        assert_eq!(a.assign(&r).unwrap().pool, want, "{}", r.service);
    }
    // Pools that admit nobody in particular are not tried while a pinned pool has room.
    let mut full = allocator(vec![
        pool("a-open", "10.0.0.0/28", None),
        pool("z-team", "10.0.1.1/32", alloc(None, &["team"], vec![], vec![])),
    ]);
    assert_eq!(full.assign(&in_ns("t1", "team")).unwrap().pool, "z-team");
    assert_eq!(full.assign(&in_ns("t2", "team")).unwrap().pool, "a-open", "falls back when full");
    // Only pools with selectors, none matching: no pool.
    let mut none = allocator(vec![pool("b-team", "10.0.1.0/28", alloc(Some(1), &["team"], vec![], vec![]))]);
    assert_eq!(none.assign(&req("x")).unwrap_err(), AllocError::NoMatchingPool);
    let err = none.assign(&with(req("y"), |r| r.pool = Some("b-team".into()))).unwrap_err();
    assert_eq!(err, AllocError::NotAdmitted { pool: "b-team".into() });
}

#[test]
fn auto_assign_false_serves_only_explicit_requests() {
    let mut reserved = Pool::new("reserved", &["10.9.0.0/30"]);
    reserved.auto_assign = false;
    let mut a = allocator(vec![reserved]);
    assert_eq!(a.assign(&req("auto")).unwrap_err(), AllocError::NoMatchingPool);
    let named = with(req("named"), |r| r.pool = Some("reserved".into()));
    assert_eq!(got(&mut a, &named), ips(&["10.9.0.0"]));
    let err = a.assign(&with(req("typo"), |r| r.pool = Some("reserverd".into()))).unwrap_err();
    assert_eq!(err, AllocError::UnknownPool { pool: "reserverd".into() });
}

#[test]
fn avoid_buggy_ips_skips_dot_zero_and_dot_255() {
    let mut p = Pool::new("p", &["10.0.0.254-10.0.1.1"]);
    p.avoid_buggy_ips = true;
    let mut a = allocator(vec![p]);
    assert_eq!(a.pool_stats("p").unwrap().available_ipv4, 2);
    assert_eq!(got(&mut a, &req("a")), ips(&["10.0.0.254"]));
    assert_eq!(got(&mut a, &req("b")), ips(&["10.0.1.1"]));
    assert!(matches!(a.assign(&req("c")).unwrap_err(), AllocError::Exhausted { .. }));
    let err = a.assign(&with(req("d"), |r| r.requested = ips(&["10.0.1.0"]))).unwrap_err();
    assert_eq!(err, AllocError::NotInAnyPool { ip: ip("10.0.1.0") });
}

#[test]
fn overlapping_and_malformed_pools_are_reported_and_assignments_kept() {
    let mut a = allocator(vec![Pool::new("b", &["10.0.0.0/28"]), Pool::new("c", &["10.0.1.0/28"])]);
    let kept_b = got(&mut a, &req("on-b"));
    assert_eq!((kept_b.clone(), got(&mut a, &req("on-b2"))), (ips(&["10.0.0.0"]), ips(&["10.0.0.1"])));
    let on_c = a.assign(&with(req("on-c2"), |r| r.pool = Some("c".into()))).unwrap();
    // "a" now overlaps "b" (b sorts later: b is invalid); "c" gains a malformed entry.
    let report = a.set_pools(vec![
        Pool::new("a", &["10.0.0.0/29"]),
        Pool::new("b", &["10.0.0.0/28"]),
        Pool::new("c", &["10.0.1.0/28", "10.0.2.0/33"]),
        Pool::new("d", &["10.0.3.0/28", "10.0.3.8/29"]),
    ]);
    let invalid: Vec<&str> = report.invalid.keys().map(String::as_str).collect();
    assert_eq!(invalid, ["b", "c", "d"]);
    assert!(report.invalid["b"].to_string().contains("of pool \"a\""), "{}", report.invalid["b"]);
    assert!(report.invalid["c"].to_string().contains("10.0.2.0/33"), "{}", report.invalid["c"]);
    assert!(matches!(report.invalid["d"], PoolError::OverlapWithin { .. }), "{}", report.invalid["d"]);
    assert_eq!(report.kept_in_invalid, vec![name("on-c2")], "on-b and on-b2 now lie in valid pool a");
    assert!(report.orphaned.is_empty());
    // Assignments stay; the invalid pools give nothing new.
    assert_eq!(got(&mut a, &req("on-b")), kept_b);
    assert_eq!(a.assign(&with(req("on-c2"), |r| r.pool = Some("c".into()))).unwrap(), on_c);
    let err = a.assign(&with(req("new"), |r| r.pool = Some("c".into()))).unwrap_err();
    assert!(matches!(err, AllocError::InvalidPool { .. }), "{err}");
    assert_eq!(got(&mut a, &req("new")), ips(&["10.0.0.2"]));
    let status = a.pool_status();
    assert_eq!(status.iter().filter(|s| s.error.is_none()).count(), 1);
}

#[test]
fn addresses_that_left_every_pool_are_reported_then_replaced() {
    let mut a = allocator(vec![Pool::new("a-old", &["10.0.0.0/28"]), Pool::new("b-new", &["10.0.1.0/28"])]);
    let before = got(&mut a, &req("s"));
    let report = a.set_pools(vec![Pool::new("b-new", &["10.0.1.0/28"])]);
    assert_eq!(report.orphaned, vec![name("s")]);
    assert_eq!(a.assignment(&name("s")).unwrap().ips, before, "kept until the caller reassigns");
    let after = a.assign(&req("s")).unwrap();
    assert_eq!(after.ips, ips(&["10.0.1.0"]));
    assert_eq!(after.cleared, Some(Cleared { ips: before, reason: ClearReason::LeftPools }));
}

#[test]
fn assignments_are_stable_when_better_pools_appear() {
    let mut a = allocator(vec![Pool::new("z", &["10.0.9.0/28"])]);
    let before = got(&mut a, &req("s"));
    let first = Pool {
        allocation: Some(ServiceAllocation { priority: Some(1), ..ServiceAllocation::default() }),
        ..Pool::new("a", &["10.0.0.0/28"])
    };
    a.set_pools(vec![first, Pool::new("z", &["10.0.9.0/28"])]);
    assert_eq!(got(&mut a, &req("s")), before);
    assert_eq!(got(&mut a, &req("t")), ips(&["10.0.0.0"]));
}

#[test]
fn changed_requests_clear_with_a_reason() {
    let mut a =
        allocator(vec![Pool::new("p", &["10.0.0.0/28", "fc00::/120"]), Pool::new("q", &["10.0.1.0/28"])]);
    got(&mut a, &req("s"));
    let cases: Vec<(LbRequest, ClearReason)> = vec![
        (with(req("s"), |r| r.requested = ips(&["10.0.0.9"])), ClearReason::RequestedChanged),
        (with(req("s"), |r| r.pool = Some("q".into())), ClearReason::PoolChanged),
        (dual("s"), ClearReason::FamiliesChanged),
    ];
    for (r, want) in cases {
        let out = a.assign(&r).unwrap();
        assert_eq!(out.cleared.map(|c| c.reason), Some(want));
    }
    assert_eq!(got(&mut a, &dual("s")), ips(&["10.0.0.0", "fc00::"]));
}

#[test]
fn stats_count_distinct_addresses_and_saturate() {
    let mut a = allocator(vec![Pool::new("p", &["10.0.0.0/24", "fc00::/64"])]);
    got(&mut a, &shared("a", "k", &[(TCP, 80)]));
    got(&mut a, &shared("b", "k", &[(TCP, 443)]));
    got(&mut a, &dual("c"));
    let p = a.pool_stats("p").unwrap();
    assert_eq!(
        p,
        PoolStats { assigned_ipv4: 2, available_ipv4: 254, assigned_ipv6: 1, available_ipv6: (1 << 64) - 1 }
    );
    let huge = allocator(vec![Pool::new("huge", &["::/0"])]);
    assert_eq!(huge.pool_stats("huge").unwrap().available_ipv6, u128::MAX);
}

#[test]
fn ten_thousand_services_take_distinct_addresses() {
    let mut a =
        allocator(vec![Pool::new("a", &["10.0.0.0/20"]), Pool::new("b", &["10.1.0.0/16", "fc00::/64"])]);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..10_000 {
        let r = if i % 4 == 0 { dual(&format!("s{i}")) } else { req(&format!("s{i}")) };
        for addr in got(&mut a, &r) {
            assert!(seen.insert(addr), "{addr} twice");
        }
    }
    assert_eq!(a.pool_stats("a").unwrap().available_ipv4, 0);
}

#[test]
fn request_for_service_reads_the_model() {
    use crate::model::{LoadBalancerRequest, ServiceType};
    use crate::testing::mk_service;
    let mut svc = mk_service("ns", "web")
        .cluster_ip("10.96.0.1")
        .cluster_ip("fd00:96::1")
        .port("http", TCP, 80)
        .build();
    svc.service_type = ServiceType::LoadBalancer;
    svc.load_balancer = Some(Box::new(LoadBalancerRequest {
        pool: Some("p".into()),
        sharing_key: Some("k".into()),
        ..LoadBalancerRequest::default()
    }));
    let r = LbRequest::for_service(&svc, &BTreeMap::new()).unwrap();
    assert_eq!(
        (r.families, r.ports, r.pool, r.sharing_key),
        (vec![V4, V6], vec![(TCP, 80)], Some("p".into()), Some("k".into()))
    );
    svc.service_type = ServiceType::NodePort;
    assert_eq!(LbRequest::for_service(&svc, &BTreeMap::new()), None);
}
