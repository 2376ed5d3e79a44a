//! The external zone (CoreDNS's `k8s_external` tables, with this fixture's addresses).

use crate::view::ClusterView;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use tideway_core::cluster::Snapshot;
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::testing::mk_service;

use super::{Case, SERIAL, nxdomain, ok, run};
use crate::records::{ExternalZone, IndexSettings, RecordIndex};

use RecordType::{A, AAAA, NS, SOA, SRV, TXT};

const EXT_SOA: &str =
    "example.org. 5 IN SOA ns1.dns.example.org. hostmaster.dns.example.org. 1499347823 7200 1800 86400 5";

fn index(synced: bool) -> RecordIndex {
    let snapshot = Snapshot {
        services: vec![
            mk_service("testns", "lb")
                .cluster_ip("10.0.0.20")
                .port("http", Tcp, 80)
                .port("dns", Udp, 53)
                .load_balancer()
                .lb_ip("192.0.2.10")
                .lb_ip("2001:db8::10")
                .external_ip("198.51.100.7")
                .build(),
            mk_service("testns", "ext-only")
                .cluster_ip("10.0.0.21")
                .port("http", Tcp, 80)
                .external_ip("198.51.100.8")
                .build(),
            mk_service("testns", "svc1").cluster_ip("10.0.0.1").port("http", Tcp, 80).build(),
            mk_service("kube-system", "kube-dns")
                .cluster_ip("10.0.0.10")
                .load_balancer()
                .lb_ip("192.0.2.53")
                .build(),
        ],
        ..Default::default()
    };
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.external = Some(ExternalZone::new("example.org").unwrap());
    let mut ix = RecordIndex::build(&ClusterView::from_snapshot(snapshot), &settings, SERIAL);
    ix.synced = synced;
    ix
}

const fn ext_negative(name: &'static str, qtype: RecordType, rcode: ResponseCode) -> Case {
    Case { name, qtype, rcode, answer: &[], authority: &[EXT_SOA], extra: &[] }
}

#[test]
fn load_balancer_and_external_ips_resolve_under_the_external_zone() {
    run(
        &index(true),
        &[
            ok(
                "lb.testns.example.org.",
                A,
                &["lb.testns.example.org. 5 IN A 198.51.100.7", "lb.testns.example.org. 5 IN A 192.0.2.10"],
                &[],
            ),
            ok("lb.testns.example.org.", AAAA, &["lb.testns.example.org. 5 IN AAAA 2001:db8::10"], &[]),
            ok("ext-only.testns.example.org.", A, &["ext-only.testns.example.org. 5 IN A 198.51.100.8"], &[]),
            // SRV: one row per port; every (address, port) pair is a candidate for the weight.
            ok(
                "_http._tcp.lb.testns.example.org.",
                SRV,
                &["_http._tcp.lb.testns.example.org. 5 IN SRV 0 33 80 lb.testns.example.org."],
                &[
                    "lb.testns.example.org. 5 IN A 198.51.100.7",
                    "lb.testns.example.org. 5 IN A 192.0.2.10",
                    "lb.testns.example.org. 5 IN AAAA 2001:db8::10",
                ],
            ),
            ok(
                "lb.testns.example.org.",
                SRV,
                &[
                    "lb.testns.example.org. 5 IN SRV 0 16 53 lb.testns.example.org.",
                    "lb.testns.example.org. 5 IN SRV 0 16 80 lb.testns.example.org.",
                ],
                &[
                    "lb.testns.example.org. 5 IN A 198.51.100.7",
                    "lb.testns.example.org. 5 IN A 192.0.2.10",
                    "lb.testns.example.org. 5 IN AAAA 2001:db8::10",
                ],
            ),
            // The query's case is kept, in owners and in the target.
            ok(
                "_DNS._UDP.LB.TestNS.Example.ORG.",
                SRV,
                &["_DNS._UDP.LB.TestNS.Example.ORG. 5 IN SRV 0 33 53 LB.TestNS.Example.ORG."],
                &[
                    "LB.TestNS.Example.ORG. 5 IN A 198.51.100.7",
                    "LB.TestNS.Example.ORG. 5 IN A 192.0.2.10",
                    "LB.TestNS.Example.ORG. 5 IN AAAA 2001:db8::10",
                ],
            ),
            // The apex: SOA, NS and the name server's address (the DNS Service's own LB IP).
            ok("example.org.", SOA, &[EXT_SOA], &[]),
            ok(
                "example.org.",
                NS,
                &["example.org. 5 IN NS ns1.dns.example.org."],
                &["ns1.dns.example.org. 5 IN A 192.0.2.53"],
            ),
            ok("ns1.dns.example.org.", A, &["ns1.dns.example.org. 5 IN A 192.0.2.53"], &[]),
            // Negative answers.
            ext_negative("svc1.testns.example.org.", A, ResponseCode::NXDomain),
            ext_negative("nope.testns.example.org.", A, ResponseCode::NXDomain),
            ext_negative("lb.nons.example.org.", A, ResponseCode::NXDomain),
            ext_negative("_https._tcp.lb.testns.example.org.", SRV, ResponseCode::NXDomain),
            ext_negative("a.b.c.d.e.example.org.", A, ResponseCode::NXDomain),
            ext_negative("ext-only.testns.example.org.", AAAA, ResponseCode::NoError),
            ext_negative("lb.testns.example.org.", TXT, ResponseCode::NoError),
            ext_negative("example.org.", A, ResponseCode::NoError),
            ext_negative("dns.example.org.", A, ResponseCode::NoError),
            // The cluster zone is untouched: the ClusterIP only.
            ok("lb.testns.svc.cluster.local.", A, &["lb.testns.svc.cluster.local. 5 IN A 10.0.0.20"], &[]),
            nxdomain("lb.testns.example.org.testns.svc.cluster.local.", A),
        ],
    );
}

#[test]
fn before_the_first_sync_a_denial_is_servfail() {
    run(&index(false), &[ext_negative("nope.testns.example.org.", A, ResponseCode::ServFail)]);
}
