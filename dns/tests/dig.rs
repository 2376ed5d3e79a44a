//! `dig` against the running server: UDP and TCP, truncation, forwarding and the cache,
//! ExternalName chasing through a local upstream, sync/readiness, reload, lameduck, loops,
//! replayed answers.

mod common;

use std::time::{Duration, Instant};

use common::{Upstream, cluster, dig, http_get, require_dig, runtime, settings, start};
use tideway_core::testing::mk_service;
use tideway_dns::server::{ServerConfig, Sockets};
use tideway_dns::view::ClusterView;
use tideway_sources::SharedCluster;

fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn answers_over_udp_and_tcp() {
    require_dig();
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let at = server.dns_addr;
    for transport in ["+notcp", "+tcp"] {
        assert_eq!(lines(&dig(at, &[transport, "+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"]);
        let out = dig(at, &[transport, "+short", "hl.ns1.svc.cluster.local"]);
        let mut hl = lines(&out);
        hl.sort();
        assert_eq!(hl, ["10.244.1.5", "10.244.2.5"], "ready endpoints only ({transport})");
    }
    // Query case is kept in owners, the targets are named as CoreDNS names them (the
    // Service and namespace as the objects spell them); the AA bit is set; SRV carries the
    // targets' addresses.
    let out = dig(
        at,
        &["+noall", "+answer", "+additional", "+comments", "_HTTP._tcp.Web.NS1.svc.cluster.local", "SRV"],
    );
    assert!(out.contains("flags: qr aa rd ra"), "{out}");
    assert!(
        out.contains("_HTTP._tcp.Web.NS1.svc.cluster.local. 5 IN SRV 0 100 80 web.ns1.svc.cluster.local."),
        "{out}"
    );
    assert!(out.contains("web.ns1.svc.cluster.local. 5 IN A 10.96.0.10"), "{out}");
    // ... and the negative answer's SOA names the zone as the query spells it (owner, server, mailbox).
    let out = dig(at, &["+noall", "+authority", "nope.ns1.svc.Cluster.LOCAL"]);
    assert!(
        out.starts_with("Cluster.LOCAL. 5 IN SOA ns.dns.Cluster.LOCAL. hostmaster.Cluster.LOCAL."),
        "{out}"
    );
    // A Namespace without Services: NODATA; a missing one: NXDOMAIN.
    let out = dig(at, &["+noall", "+comments", "quiet.svc.cluster.local"]);
    assert!(out.contains("status: NOERROR") && out.contains("ANSWER: 0"), "{out}");
    for name in ["web.quiet.svc.cluster.local", "missing.svc.cluster.local"] {
        let out = dig(at, &["+noall", "+comments", name]);
        assert!(out.contains("status: NXDOMAIN"), "{name}: {out}");
    }
    // NXDOMAIN and NODATA carry the SOA; dns-version answers.
    let out = dig(at, &["+noall", "+comments", "+authority", "nope.ns1.svc.cluster.local"]);
    assert!(out.contains("status: NXDOMAIN") && out.contains("flags: qr aa"), "{out}");
    assert!(out.contains("cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local."), "{out}");
    let out = dig(at, &["+noall", "+comments", "+authority", "web.ns1.svc.cluster.local", "AAAA"]);
    assert!(out.contains("status: NOERROR") && out.contains("ANSWER: 0") && out.contains("SOA"), "{out}");
    assert_eq!(lines(&dig(at, &["+short", "dns-version.cluster.local", "TXT"])), ["\"1.1.0\""]);
    assert_eq!(lines(&dig(at, &["+short", "-x", "10.96.0.10"])), ["web.ns1.svc.cluster.local."]);
    rt.block_on(server.shutdown());
}

#[test]
fn oversized_udp_answers_are_truncated_and_complete_over_tcp() {
    require_dig();
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let at = server.dns_addr;
    // As CoreDNS: the whole records that fit, TC set (a client that never retries over TCP,
    // musl before 1.2.4, still gets addresses).
    for (edns, limit) in [("+noedns", 512), ("+bufsize=4096", 1232)] {
        let args = ["+ignore", edns, "+noall", "+comments", "+answer", "+stats", "big.ns1.svc.cluster.local"];
        let out = dig(at, &args);
        let records = out.lines().filter(|l| l.contains(" IN A ")).count();
        assert!(out.contains(" tc") && records > 0 && records < 120, "{edns}: {records} records: {out}");
        let size: usize = out
            .lines()
            .find_map(|l| l.split("MSG SIZE rcvd: ").nth(1))
            .and_then(|n| n.trim().parse().ok())
            .expect("dig +stats prints the size");
        assert!(size <= limit, "{edns}: {size} bytes");
    }
    // dig retries over TCP on TC and gets every record.
    assert_eq!(lines(&dig(at, &["+short", "big.ns1.svc.cluster.local"])).len(), 120);
    // A small answer fits without TC.
    let out = dig(at, &["+ignore", "+noedns", "+noall", "+comments", "web.ns1.svc.cluster.local"]);
    assert!(!out.contains(" tc"), "{out}");
    // SRV rows that fit 512 bytes only without all their targets' addresses: every SRV
    // record, the addresses that fit, and TC because some were left out; with room, all.
    let srv = "_http._tcp.mid.ns1.svc.cluster.local";
    let out = dig(at, &["+ignore", "+noedns", "+noall", "+comments", srv, "SRV"]);
    assert!(out.contains(" tc") && out.contains("ANSWER: 6, AUTHORITY: 0, ADDITIONAL: "), "{out}");
    assert!(!out.contains("ADDITIONAL: 7"), "{out}");
    let out = dig(at, &["+ignore", "+bufsize=1232", "+noall", "+comments", srv, "SRV"]);
    assert!(!out.contains(" tc") && out.contains("ANSWER: 6, AUTHORITY: 0, ADDITIONAL: 7"), "{out}");
    rt.block_on(server.shutdown());
}

#[test]
fn forwarding_cache_and_external_names() {
    require_dig();
    let rt = runtime();
    let upstream = Upstream::start(&rt);
    let server = start(&rt, cluster(), settings(&[upstream.addr]));
    let at = server.dns_addr;
    // ExternalName: the CNAME first, then the target chased upstream.
    let out = dig(at, &["+noall", "+answer", "ext.ns1.svc.cluster.local"]);
    let ans = lines(&out);
    assert_eq!(ans.len(), 2, "{out}");
    assert!(ans[0].ends_with("IN CNAME ext.upstream.test.") && ans[1].ends_with("IN A 192.0.2.10"), "{out}");
    assert_eq!(lines(&dig(at, &["+short", "ext.ns1.svc.cluster.local", "CNAME"])), ["ext.upstream.test."]);
    // Other names are forwarded, then served from the cache.
    let before = upstream.count();
    assert_eq!(lines(&dig(at, &["+short", "www.example.test"])), ["192.0.2.80"]);
    assert_eq!(upstream.count(), before + 1);
    let out = dig(at, &["+noall", "+answer", "www.example.test"]);
    assert!(out.contains("192.0.2.80"), "{out}");
    assert_eq!(upstream.count(), before + 1, "second answer from the cache");
    let out = dig(at, &["+noall", "+comments", "+authority", "nosuch.example.test"]);
    assert!(out.contains("status: NXDOMAIN") && out.contains("test. 30 IN SOA"), "{out}");
    // An upstream answer too large for UDP: the forwarder retries over TCP, dig too.
    assert_eq!(lines(&dig(at, &["+short", "many.example.test"])).len(), 100);
    let (status, metrics) = http_get(server.metrics_addr.unwrap(), "/metrics");
    assert_eq!(status, 200);
    for want in [
        "coredns_dns_requests_total{server=\"dns://127.0.0.1:",
        "coredns_dns_responses_total{",
        "rcode=\"NXDOMAIN\",plugin=\"forward\"",
        "coredns_dns_request_duration_seconds_bucket{",
        "coredns_cache_hits_total{",
        "type=\"success\"",
        "coredns_cache_misses_total{",
        "coredns_cache_entries{",
        "coredns_forward_requests_total{to=\"127.0.0.1:",
        "coredns_forward_responses_total{",
        "coredns_build_info{",
        "coredns_plugin_enabled{",
    ] {
        assert!(metrics.contains(want), "missing {want} in\n{metrics}");
    }
    // CoreDNS's help texts, word for word: one period at the end, as in CoreDNS.
    assert!(
        metrics.lines().any(|l| l
            == "# HELP coredns_dns_requests Counter of DNS requests made per zone, protocol and family.")
    );
    let doubled: Vec<&str> =
        metrics.lines().filter(|l| l.starts_with("# HELP") && l.ends_with("..")).collect();
    assert!(doubled.is_empty(), "help texts ending in two periods: {doubled:?}");
    rt.block_on(server.shutdown());
}

#[test]
fn refuses_any_and_zone_transfers() {
    require_dig();
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let at = server.dns_addr;
    assert!(dig(at, &["+noall", "+comments", "cluster.local", "ANY"]).contains("status: REFUSED"));
    assert!(dig(at, &["+noall", "+comments", "+tcp", "cluster.local", "ANY"]).contains("status: REFUSED"));
    let out = dig(at, &["cluster.local", "AXFR"]);
    assert!(out.contains("Transfer failed") || out.contains("REFUSED"), "{out}");
    assert!(dig(at, &["+noall", "+comments", "-c", "CH", "version.bind", "TXT"]).contains("status: REFUSED"));
    rt.block_on(server.shutdown());
}

#[test]
fn servfail_before_sync_then_changes_apply_at_once() {
    require_dig();
    let rt = runtime();
    let cluster = SharedCluster::<ClusterView>::default();
    let server = start(&rt, cluster.clone(), settings(&[]));
    let at = server.dns_addr;
    let ready = server.ready_addr.unwrap();
    assert_eq!(http_get(ready, "/ready").0, 503);
    assert_eq!(http_get(server.health_addr.unwrap(), "/health"), (200, "OK".to_string()));
    let out = dig(at, &["+noall", "+comments", "web.ns1.svc.cluster.local"]);
    assert!(out.contains("status: SERVFAIL"), "never NXDOMAIN before the first sync: {out}");

    cluster.update(|s| s.reset(common::snapshot()));
    cluster.mark_synced();
    let deadline = Instant::now() + Duration::from_secs(5);
    while http_get(ready, "/ready").0 != 200 {
        assert!(Instant::now() < deadline, "ready after sync");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lines(&dig(at, &["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"]);
    assert!(dig(at, &["+noall", "+comments", "new.ns1.svc.cluster.local"]).contains("status: NXDOMAIN"));

    // A new Service is answered as soon as the index is rebuilt.
    cluster.update(|s| s.apply_service(mk_service("ns1", "new").cluster_ip("10.96.0.99").build()));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if lines(&dig(at, &["+short", "new.ns1.svc.cluster.local"])) == ["10.96.0.99"] {
            break;
        }
        assert!(Instant::now() < deadline, "new Service served");
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(server.shutdown());
}

#[test]
fn reload_and_lameduck() {
    require_dig();
    let rt = runtime();
    let server = start(&rt, cluster(), settings(&[]));
    let at = server.dns_addr;
    let mut new = server.settings();
    new.index.ttl = 30;
    new.lameduck = Duration::from_secs(3);
    server.apply(new).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !dig(at, &["+noall", "+answer", "web.ns1.svc.cluster.local"]).contains(" 30 IN A") {
        assert!(Instant::now() < deadline, "new TTL served");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Upstreams pointing at ourselves are refused; the old settings stay.
    let mut looping = server.settings();
    looping.forward.upstreams = vec![at];
    assert!(server.apply(looping).is_err());

    let (ready, health) = (server.ready_addr.unwrap(), server.health_addr.unwrap());
    let stopping = rt.spawn(server.shutdown());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(http_get(ready, "/ready").0, 503, "not ready during lameduck");
    assert_eq!(http_get(health, "/health").0, 200, "still healthy during lameduck");
    assert_eq!(lines(&dig(at, &["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"], "still serving");
    rt.block_on(stopping).unwrap();
    assert!(
        std::net::TcpStream::connect_timeout(&at, Duration::from_millis(500)).is_err(),
        "closed after lameduck"
    );
}

#[test]
fn forwarding_loops_are_detected() {
    let rt = runtime();
    // Two servers forwarding to each other: the probe comes back more than twice.
    let (a, b) = (
        Sockets::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap(),
        Sockets::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap(),
    );
    let (a_addr, b_addr) = (a.tcp.local_addr().unwrap(), b.tcp.local_addr().unwrap());
    let mut config = ServerConfig::new(a_addr, settings(&[b_addr]));
    config.loop_probe = true;
    let server_a = rt.block_on(tideway_dns::server::Server::start_with(config, cluster(), a)).unwrap();
    let server_b = common::start_with(&rt, cluster(), settings(&[a_addr]), b);
    let found = rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), server_a.failed()).await });
    let msg = found.expect("loop detected within 20 s");
    assert!(msg.contains("Loop") && msg.contains("HINFO"), "{msg}");
    // Forwarding to itself directly is refused at start.
    let own = Sockets::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let own_addr = own.tcp.local_addr().unwrap();
    let r = rt.block_on(tideway_dns::server::Server::start_with(
        ServerConfig::new(own_addr, settings(&[own_addr])),
        cluster(),
        own,
    ));
    assert!(matches!(r, Err(tideway_dns::server::ServeError::Loop(_))));
    rt.block_on(server_a.shutdown());
    rt.block_on(server_b.shutdown());
}

#[test]
fn load_balancer_ips_resolve_in_the_external_zone() {
    require_dig();
    let rt = runtime();
    let mut settings = settings(&[]);
    settings.index.external = Some(tideway_dns::records::ExternalZone::new("example.org").unwrap());
    let server = start(&rt, cluster(), settings);
    let at = server.dns_addr;
    assert_eq!(lines(&dig(at, &["+short", "lb.ns1.example.org"])), ["192.0.2.100"]);
    let out = dig(at, &["+noall", "+answer", "_http._tcp.LB.ns1.example.org", "SRV"]);
    assert!(out.contains("IN SRV 0 100 80 LB.ns1.example.org."), "{out}");
    let out = dig(at, &["+noall", "+comments", "+authority", "web.ns1.example.org"]);
    assert!(
        out.contains("status: NXDOMAIN") && out.contains("example.org. 5 IN SOA ns1.dns.example.org."),
        "{out}"
    );
    assert!(dig(at, &["+noall", "+answer", "example.org", "SOA"]).contains("hostmaster.dns.example.org."));
    // The cluster zone answers as before.
    assert_eq!(lines(&dig(at, &["+short", "lb.ns1.svc.cluster.local"])), ["10.96.0.11"]);
    rt.block_on(server.shutdown());
}

/// Several cluster zones (`--zone` twice) and `--fallthrough=example.local`: the second zone
/// answers as the first, spelled as asked; a name it does not have is asked upstream, while the
/// first zone still denies.
#[test]
fn a_second_cluster_zone_answers_alike_and_falls_through() {
    use tideway_dns::records::{Fallthrough, parse_zone};
    require_dig();
    let rt = runtime();
    let upstream = Upstream::start(&rt);
    let mut settings = settings(&[upstream.addr]);
    settings.index.extra_zones = vec![parse_zone("example.local").unwrap()];
    settings.index.fallthrough = Fallthrough::In(vec![parse_zone("example.local").unwrap()]);
    let server = start(&rt, cluster(), settings);
    let at = server.dns_addr;
    assert_eq!(lines(&dig(at, &["+short", "web.ns1.svc.example.local"])), ["10.96.0.10"]);
    let out = dig(at, &["+noall", "+answer", "+additional", "_http._tcp.web.ns1.svc.Example.Local", "SRV"]);
    assert!(out.contains("IN SRV 0 100 80 web.ns1.svc.Example.Local."), "{out}");
    assert!(out.contains("web.ns1.svc.Example.Local. 5 IN A 10.96.0.10"), "{out}");
    assert_eq!(lines(&dig(at, &["+short", "-x", "10.96.0.10"])), ["web.ns1.svc.cluster.local."]);
    // Not in the cluster: upstream answers for the zone that falls through...
    let before = upstream.count();
    assert_eq!(lines(&dig(at, &["+short", "db.example.local"])), ["192.0.2.21"]);
    assert_eq!(upstream.count(), before + 1);
    let out = dig(at, &["+noall", "+comments", "+authority", "nope.ns1.svc.example.local"]);
    assert!(out.contains("status: NXDOMAIN") && out.contains("test. 30 IN SOA"), "upstream's denial: {out}");
    // ... and the first zone, which does not fall through, denies what upstream has.
    let out = dig(at, &["+noall", "+comments", "+authority", "legacy.ns1.svc.cluster.local"]);
    assert!(out.contains("status: NXDOMAIN") && out.contains("SOA ns.dns.cluster.local."), "{out}");
    rt.block_on(server.shutdown());

    // `--fallthrough` alone: every cluster zone.
    let mut settings = common::settings(&[upstream.addr]);
    settings.index.fallthrough = Fallthrough::Everywhere;
    let server = start(&rt, cluster(), settings);
    assert_eq!(lines(&dig(server.dns_addr, &["+short", "legacy.ns1.svc.cluster.local"])), ["192.0.2.20"]);
    assert_eq!(lines(&dig(server.dns_addr, &["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"]);
    rt.block_on(server.shutdown());
}

#[test]
fn hickory_udp_engine_answers_the_same() {
    require_dig();
    let rt = runtime();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), settings(&[]));
    config.udp_engine = tideway_dns::server::UdpEngine::Hickory;
    let server = rt.block_on(tideway_dns::server::Server::start(config, cluster())).unwrap();
    let at = server.dns_addr;
    assert_eq!(lines(&dig(at, &["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"]);
    assert!(dig(at, &["+noall", "+comments", "nope.ns1.svc.cluster.local"]).contains("status: NXDOMAIN"));
    let out = dig(at, &["+ignore", "+noedns", "+noall", "+comments", "big.ns1.svc.cluster.local"]);
    assert!(out.contains(" tc") && !out.contains("ANSWER: 0,"), "{out}");
    let out = dig(
        at,
        &["+ignore", "+noedns", "+noall", "+comments", "_http._tcp.mid.ns1.svc.cluster.local", "SRV"],
    );
    assert!(out.contains(" tc") && out.contains("ANSWER: 6, AUTHORITY: 0, ADDITIONAL: "), "{out}");
    assert!(!out.contains("ADDITIONAL: 7"), "{out}");
    rt.block_on(server.shutdown());
}

/// `--endpoint-pod-names` (CoreDNS's `endpoint_pod_names`): an endpoint without a hostname is
/// named after the pod it targets; a hostname still wins, and an endpoint without a pod, or
/// whose pod name is no single label, keeps its dashed address. Off, the dashed address.
#[test]
fn endpoint_pod_names_name_endpoints_after_their_pods() {
    use tideway_core::net::Protocol::Tcp;
    use tideway_core::testing::mk_slice;
    require_dig();
    let rt = runtime();
    let mut snap = common::snapshot();
    snap.services.push(mk_service("ns1", "db").headless().port("pg", Tcp, 5432).build());
    snap.endpoint_slices.push(
        mk_slice("ns1", "db")
            .port("pg", Tcp, 5432)
            .ready("10.244.3.5", "node-a")
            .pod("db-0")
            .ready("10.244.3.6", "node-a")
            .pod("db-1")
            .hostname("primary")
            .ready("10.244.3.7", "node-b")
            .ready("10.244.3.8", "node-b")
            .pod("db.dotted")
            .build(),
    );
    let shared = || {
        let c = SharedCluster::<ClusterView>::default();
        c.update(|s| s.reset(snap.clone()));
        c.mark_synced();
        c
    };
    let mut on = settings(&[]);
    on.index.endpoint_pod_names = true;
    for (pod_names, s) in [(true, on), (false, settings(&[]))] {
        let server = start(&rt, shared(), s);
        let at = server.dns_addr;
        let a =
            |name: &str| lines(&dig(at, &["+short", &format!("{name}.db.ns1.svc.cluster.local")])).join(",");
        assert_eq!(a("primary"), "10.244.3.6", "a hostname wins ({pod_names})");
        assert_eq!(a("10-244-3-7"), "10.244.3.7", "no pod: dashed ({pod_names})");
        assert_eq!(a("10-244-3-8"), "10.244.3.8", "a dotted pod name: dashed ({pod_names})");
        assert_eq!(a("db-0"), if pod_names { "10.244.3.5" } else { "" });
        assert_eq!(a("10-244-3-5"), if pod_names { "" } else { "10.244.3.5" });
        let mut srv = lines(&dig(at, &["+short", "_pg._tcp.db.ns1.svc.cluster.local", "SRV"]))
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
            .collect::<Vec<_>>();
        srv.sort();
        let first = if pod_names { "db-0" } else { "10-244-3-5" };
        let mut want: Vec<String> = [first, "10-244-3-7", "10-244-3-8", "primary"]
            .iter()
            .map(|h| format!("{h}.db.ns1.svc.cluster.local."))
            .collect();
        want.sort();
        assert_eq!(srv, want, "SRV targets ({pod_names})");
        assert_eq!(
            lines(&dig(at, &["+short", "-x", "10.244.3.5"])),
            [format!("{first}.db.ns1.svc.cluster.local.")]
        );
        rt.block_on(server.shutdown());
    }
}

/// The `tideway_dns_replayed_answers` counter.
fn replayed(server: &tideway_dns::server::Server) -> u64 {
    let (_, metrics) = http_get(server.metrics_addr.unwrap(), "/metrics");
    let line =
        metrics.lines().find(|l| l.starts_with("tideway_dns_replayed_answers_total ")).expect("the counter");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn repeated_queries_get_replayed_answers_that_follow_changes() {
    require_dig();
    let rt = runtime();
    let cluster = cluster();
    let server = start(&rt, cluster.clone(), settings(&[]));
    let at = server.dns_addr;
    // Without a cookie, the same question is the same query bytes: the second is a copy.
    let ask = |args: &[&str]| dig(at, &[&["+nocookie"], args].concat());
    let before = replayed(&server);
    for _ in 0..5 {
        assert_eq!(lines(&ask(&["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.10"]);
        let mut hl = lines(&ask(&["+short", "hl.ns1.svc.cluster.local"]))
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        hl.sort();
        assert_eq!(hl, ["10.244.1.5", "10.244.2.5"]);
        assert!(ask(&["+noall", "+comments", "nosuch.ns1.svc.cluster.local"]).contains("status: NXDOMAIN"));
    }
    // Each of the two workers answers a name in full once at most: of 15 queries, 9 or more
    // are copies.
    assert!(replayed(&server) >= before + 9, "copies: {}", replayed(&server) - before);

    // A change reaches the copies at once.
    cluster.update(|s| {
        s.apply_service(
            mk_service("ns1", "web")
                .cluster_ip("10.96.0.77")
                .port("http", tideway_core::net::Protocol::Tcp, 80)
                .build(),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while lines(&ask(&["+short", "web.ns1.svc.cluster.local"])) != ["10.96.0.77"] {
        assert!(Instant::now() < deadline, "the new address served");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lines(&ask(&["+short", "web.ns1.svc.cluster.local"])), ["10.96.0.77"], "and kept");
    rt.block_on(server.shutdown());
}
