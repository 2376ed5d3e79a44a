//! Negative answers, ExternalNames, case, pod records, PTR, sync state and settings.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::*;
use crate::answer::{Outcome, answer};
use crate::records::{IndexSettings, PodsMode, RecordIndex};

use RecordType::{A, AAAA, CNAME, MX, NS, PTR, SOA, SRV, TXT};

#[test]
fn negative_answers() {
    run(
        &index_with_pods(PodsMode::Disabled),
        &[
            // NODATA: the name exists without the type.
            nodata("svc1.testns.svc.cluster.local.", AAAA),
            nodata("svc1.testns.svc.cluster.local.", TXT),
            nodata("svc1.testns.svc.cluster.local.", MX),
            nodata("svc1.testns.svc.cluster.local.", CNAME),
            nodata("svc1.testns.svc.cluster.local.", SOA),
            nodata("svc6.testns.svc.cluster.local.", A),
            nodata("dns-version.cluster.local.", A),
            nodata("ns.dns.cluster.local.", AAAA),
            // Empty non-terminals.
            nodata("cluster.local.", A),
            nodata("svc.cluster.local.", A),
            nodata("pod.cluster.local.", A),
            nodata("testns.svc.cluster.local.", A),
            nodata("svc.cluster.local.", NS),
            nodata("testns.svc.cluster.local.", NS),
            nodata("dns.cluster.local.", A),
            // A Namespace without Services exists (CoreDNS asks the Namespace lister).
            nodata("emptyns.svc.cluster.local.", A),
            nodata("EmptyNS.svc.cluster.local.", SRV),
            nxdomain("svc1.emptyns.svc.cluster.local.", A),
            nxdomain("_http._tcp.svc1.emptyns.svc.cluster.local.", SRV),
            // NXDOMAIN: the name does not exist.
            nxdomain("svc0.testns.svc.cluster.local.", A),
            nxdomain("svc0.testns.svc.cluster.local.", AAAA),
            nxdomain("svc0.testns.svc.cluster.local.", TXT),
            nxdomain("svc0.svc-nons.svc.cluster.local.", A),
            nxdomain("svc-nons.svc.cluster.local.", A),
            nxdomain("foo.cluster.local.", A),
            nxdomain("foo.cluster.local.", NS),
            nxdomain("foo.svc.cluster.local.", NS),
            nxdomain("bogusendpoint.hdls1.testns.svc.cluster.local.", A),
            nxdomain("bogusendpoint.svc0.testns.svc.cluster.local.", A),
            nxdomain("a.b.c.svc1.testns.svc.cluster.local.", A),
            nxdomain("a.b.c.d.e.f.svc1.testns.svc.cluster.local.", A),
            nxdomain("x.ns.dns.cluster.local.", A),
            nxdomain("endpoint.external.testns.svc.cluster.local.", CNAME),
            nxdomain("_http._tcp.external.testns.svc.cluster.local.", SRV),
            // An ExternalName that is an address is not published (as in CoreDNS).
            nxdomain("external-ip.testns.svc.cluster.local.", A),
            // Search-path expansions as produced by ndots:5.
            nxdomain("svc1.testns.testns.svc.cluster.local.", A),
            nxdomain("www.example.com.testns.svc.cluster.local.", A),
            nxdomain("www.example.com.svc.cluster.local.", A),
            nxdomain("www.example.com.cluster.local.", A),
        ],
    );
}

#[test]
fn external_names() {
    let index = index_with_pods(PodsMode::Disabled);
    run(
        &index,
        &[
            ok(
                "external.testns.svc.cluster.local.",
                CNAME,
                &["external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."],
                &[],
            ),
            // Pointing back into the cluster: chased here.
            ok(
                "external-to-service.testns.svc.cluster.local.",
                A,
                &[
                    "external-to-service.testns.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local.",
                    "svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1",
                ],
                &[],
            ),
        ],
    );
    // Pointing outside: the caller chases the target upstream.
    match answer(&index, &query("External.testns.svc.cluster.local.", A)) {
        Outcome::Chase { answer, target } => {
            assert_eq!(target.to_string(), "ext.interwebs.test.");
            assert_eq!(
                sorted(&answer.answers),
                ["External.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."]
            );
        }
        other => panic!("expected a chase, got {other:?}"),
    }
}

#[test]
fn query_case_is_kept_and_matching_ignores_it() {
    run(
        &index_with_pods(PodsMode::Insecure),
        &[
            ok("SVC1.TestNS.svc.Cluster.Local.", A, &["SVC1.TestNS.svc.Cluster.Local. 5 IN A 10.0.0.1"], &[]),
            ok(
                "_HTTP._Tcp.svc1.testns.SVC.cluster.local.",
                SRV,
                &[
                    "_HTTP._Tcp.svc1.testns.SVC.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local.",
                ],
                &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"],
            ),
            // SRV targets: host, Service and namespace as the objects name them, the zone as
            // the query spells it (CoreDNS).
            ok(
                "_Web._TCP.STS.TestNS.svc.Cluster.Local.",
                SRV,
                &[
                    "_Web._TCP.STS.TestNS.svc.Cluster.Local. 5 IN SRV 0 100 8080 web-0.sts.testns.svc.Cluster.Local.",
                ],
                &["web-0.sts.testns.svc.Cluster.Local. 5 IN A 172.0.1.1"],
            ),
            // The apex: SOA and NS in the query's case, the NS target and its glue too.
            ok(
                "Cluster.LOCAL.",
                SOA,
                &[
                    "Cluster.LOCAL. 5 IN SOA ns.dns.Cluster.LOCAL. hostmaster.Cluster.LOCAL. 1499347823 7200 1800 86400 5",
                ],
                &[],
            ),
            ok(
                "Cluster.LOCAL.",
                NS,
                &["Cluster.LOCAL. 5 IN NS ns.dns.Cluster.LOCAL."],
                &["ns.dns.Cluster.LOCAL. 5 IN A 10.0.0.10"],
            ),
            // Negative answers: the SOA's owner, server and mailbox in the zone as queried.
            Case {
                name: "Nope.TestNS.svc.Cluster.Local.",
                qtype: A,
                rcode: ResponseCode::NXDomain,
                answer: &[],
                authority: &[
                    "Cluster.Local. 5 IN SOA ns.dns.Cluster.Local. hostmaster.Cluster.Local. 1499347823 7200 1800 86400 5",
                ],
                extra: &[],
            },
            Case {
                name: "SVC1.TestNS.svc.Cluster.Local.",
                qtype: TXT,
                rcode: ResponseCode::NoError,
                answer: &[],
                authority: &[
                    "Cluster.Local. 5 IN SOA ns.dns.Cluster.Local. hostmaster.Cluster.Local. 1499347823 7200 1800 86400 5",
                ],
                extra: &[],
            },
            ok(
                "Dup-Name.HDLS1.testns.svc.cluster.local.",
                A,
                &[
                    "Dup-Name.HDLS1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "Dup-Name.HDLS1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
                &[],
            ),
            ok(
                "10-240-0-1.PodNS.Pod.cluster.local.",
                A,
                &["10-240-0-1.PodNS.Pod.cluster.local. 5 IN A 10.240.0.1"],
                &[],
            ),
            nxdomain("SVC0.testns.svc.cluster.local.", A),
        ],
    );
}

/// CoreDNS's own case table (plugin/kubernetes/handler_case_test.go), row for row.
#[test]
fn coredns_preserve_case_table() {
    run(
        &index_with_pods(PodsMode::Disabled),
        &[
            Case {
                name: "not-a-service.testns.svc.ClUsTeR.lOcAl.",
                qtype: A,
                rcode: ResponseCode::NXDomain,
                answer: &[],
                authority: &[
                    "ClUsTeR.lOcAl. 5 IN SOA ns.dns.ClUsTeR.lOcAl. hostmaster.ClUsTeR.lOcAl. 1499347823 7200 1800 86400 5",
                ],
                extra: &[],
            },
            ok("SvC1.TeStNs.SvC.cLuStEr.LoCaL.", A, &["SvC1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN A 10.0.0.1"], &[]),
            ok(
                "_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL.",
                SRV,
                &[
                    "_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN SRV 0 100 80 svc1.testns.svc.cLuStEr.LoCaL.",
                ],
                &["svc1.testns.svc.cLuStEr.LoCaL. 5 IN A 10.0.0.1"],
            ),
            ok(
                "Cluster.local.",
                SOA,
                &[
                    "Cluster.local. 5 IN SOA ns.dns.Cluster.local. hostmaster.Cluster.local. 1499347823 7200 1800 86400 5",
                ],
                &[],
            ),
        ],
    );
}

#[test]
fn pod_records() {
    // disabled (CoreDNS's default): nothing below pod.<zone> exists.
    run(
        &index_with_pods(PodsMode::Disabled),
        &[
            nxdomain("10-240-0-1.podns.pod.cluster.local.", A),
            nxdomain("podns.pod.cluster.local.", A),
            nodata("pod.cluster.local.", A),
        ],
    );
    // insecure (kubeadm's default): any well-formed address in an existing namespace.
    run(
        &index_with_pods(PodsMode::Insecure),
        &[
            ok(
                "10-240-0-1.podns.pod.cluster.local.",
                A,
                &["10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"],
                &[],
            ),
            ok(
                "172-0-0-99.testns.pod.cluster.local.",
                A,
                &["172-0-0-99.testns.pod.cluster.local. 5 IN A 172.0.0.99"],
                &[],
            ),
            ok(
                "fd00-244--5.testns.pod.cluster.local.",
                AAAA,
                &["fd00-244--5.testns.pod.cluster.local. 5 IN AAAA fd00:244::5"],
                &[],
            ),
            nodata("10-240-0-1.podns.pod.cluster.local.", AAAA),
            nodata("podns.pod.cluster.local.", A),
            nodata("emptyns.pod.cluster.local.", A),
            ok(
                "10-240-0-9.emptyns.pod.cluster.local.",
                A,
                &["10-240-0-9.emptyns.pod.cluster.local. 5 IN A 10.240.0.9"],
                &[],
            ),
            nxdomain("10-240-0-1.pod-nons.pod.cluster.local.", A),
            nxdomain("pod-nons.pod.cluster.local.", A),
            nxdomain("not-an-ip.podns.pod.cluster.local.", A),
            nxdomain("10-240-0-999.podns.pod.cluster.local.", A),
            nxdomain("x.10-240-0-1.podns.pod.cluster.local.", A),
        ],
    );
    // verified: the pod must exist with that address in that namespace.
    run(
        &index_with_pods(PodsMode::Verified),
        &[
            ok(
                "10-240-0-1.podns.pod.cluster.local.",
                A,
                &["10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"],
                &[],
            ),
            nxdomain("10-240-0-2.podns.pod.cluster.local.", A),
            nxdomain("10-240-0-1.testns.pod.cluster.local.", A),
        ],
    );
}

#[test]
fn reverse_records() {
    let index = index_with_pods(PodsMode::Disabled);
    run(
        &index,
        &[
            ok(
                "1.0.0.10.in-addr.arpa.",
                PTR,
                &["1.0.0.10.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."],
                &[],
            ),
            // Endpoint addresses: one PTR per Service selecting the pod, by endpoint name.
            ok(
                "2.0.0.172.in-addr.arpa.",
                PTR,
                &["2.0.0.172.in-addr.arpa. 5 IN PTR 172-0-0-2.hdls1.testns.svc.cluster.local."],
                &[],
            ),
            ok(
                "4.0.0.172.in-addr.arpa.",
                PTR,
                &["4.0.0.172.in-addr.arpa. 5 IN PTR dup-name.hdls1.testns.svc.cluster.local."],
                &[],
            ),
            ok(
                "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.",
                PTR,
                &[
                    "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa. 5 IN PTR svc6.testns.svc.cluster.local.",
                ],
                &[],
            ),
            ok(
                "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.8.7.6.5.ip6.arpa.",
                PTR,
                &[
                    "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.8.7.6.5.ip6.arpa. 5 IN PTR 5678-abcd--1.hdls1.testns.svc.cluster.local.",
                ],
                &[],
            ),
        ],
    );
    // Unknown addresses, partial names and other types in the reverse trees go upstream.
    for (name, qtype) in [
        ("9.9.9.9.in-addr.arpa.", PTR),
        ("10.in-addr.arpa.", PTR),
        ("1.0.0.10.in-addr.arpa.", A),
        ("example.com.", A),
    ] {
        assert_eq!(answer(&index, &query(name, qtype)), Outcome::Forward, "{name} {qtype}");
    }
}

#[test]
fn before_the_first_sync_denials_are_servfail() {
    let index = RecordIndex::unsynced(&IndexSettings::new("cluster.local").unwrap());
    let soa = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 5";
    for name in ["svc0.testns.svc.cluster.local.", "foo.cluster.local.", "testns.svc.cluster.local."] {
        let Outcome::Answer(a) = answer(&index, &query(name, A)) else { panic!("{name}") };
        assert_eq!(a.rcode, ResponseCode::ServFail, "{name}");
        assert_eq!(sorted(&a.authority), [soa], "{name}");
    }
    // What exists regardless of the cluster still answers.
    let Outcome::Answer(a) = answer(&index, &query("dns-version.cluster.local.", TXT)) else { panic!() };
    assert_eq!(a.rcode, ResponseCode::NoError);
    assert_eq!(a.answers.len(), 1);
}

#[test]
fn ttl_and_zone_are_configurable() {
    let mut settings = IndexSettings::new("Example.Org").unwrap();
    settings.ttl = 30;
    let index = RecordIndex::build(&fixture(), &settings, 7);
    run(
        &index,
        &[
            ok("svc1.testns.svc.example.org.", A, &["svc1.testns.svc.example.org. 30 IN A 10.0.0.1"], &[]),
            Case {
                name: "svc0.testns.svc.example.org.",
                qtype: A,
                rcode: ResponseCode::NXDomain,
                answer: &[],
                authority: &[
                    "example.org. 30 IN SOA ns.dns.example.org. hostmaster.example.org. 7 7200 1800 86400 30",
                ],
                extra: &[],
            },
        ],
    );
    assert_eq!(
        answer(&index, &query("svc1.testns.svc.cluster.local.", A)),
        Outcome::Forward,
        "other zones are not ours"
    );
}

/// The names the operator's API lists for a Service ([`Service::dns_names`]) are the names
/// this server answers: the Service's own name with its ClusterIPs, and an SRV record for each
/// named port.
///
/// [`Service::dns_names`]: tideway_core::model::Service::dns_names
#[test]
fn the_names_a_service_is_listed_under_are_answered() {
    let index = index_with_pods(PodsMode::Disabled);
    let services = [
        mk_service("testns", "svc1").cluster_ip("10.0.0.1").port("http", Tcp, 80).build(),
        mk_service("testns", "svc6").cluster_ip("1234:abcd::1").port("http", Tcp, 80).build(),
        mk_service("testns", "multiport")
            .cluster_ip("10.0.0.4")
            .port("http", Tcp, 80)
            .port("dns", Udp, 53)
            .build(),
    ];
    for svc in &services {
        let names = svc.dns_names("cluster.local.");
        assert_eq!(names.len(), 1 + svc.ports.len(), "{names:?}");
        for (i, name) in names.iter().enumerate() {
            let qtype = match (i, svc.cluster_ips[0].is_ipv4()) {
                (0, true) => A,
                (0, false) => AAAA,
                _ => SRV,
            };
            let Outcome::Answer(got) = answer(&index, &query(&format!("{name}."), qtype)) else {
                panic!("{name} {qtype}: no answer")
            };
            assert_eq!(got.rcode, ResponseCode::NoError, "{name} {qtype}");
            assert!(!got.answers.is_empty(), "{name} {qtype}: nothing answered");
        }
    }
}
