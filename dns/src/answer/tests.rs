//! The query table: the categories CoreDNS tests its `kubernetes` plugin with
//! (`plugin/kubernetes/handler_test.go` and the `handler_*_test.go`/`reverse_test.go` files),
//! run against the same kind of fixture: namespace `testns` with `svc1`, `svcempty`, `svc6`,
//! `svc-dual-stack`, headless `hdls1` (v4 + v6, a duplicated hostname) and `hdlsprtls`
//! (no ports), ExternalNames, plus readiness and pod cases.

use hickory_proto::op::{LowerQuery, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::{Pod, ServiceType};
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::testing::{mk_service, mk_slice};

use super::{Outcome, answer};
use crate::records::{IndexSettings, PodsMode, RecordIndex};

use RecordType::{A, AAAA, CNAME, MX, NS, PTR, SOA, SRV, TXT};

const SERIAL: u32 = 1_499_347_823;
const SOA_LINE: &str =
    "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1499347823 7200 1800 86400 5";

fn pod(ns: &str, name: &str, ip: &str, hostname: Option<&str>, subdomain: Option<&str>) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        ips: vec![ip.parse().unwrap()],
        hostname: hostname.map(Into::into),
        subdomain: subdomain.map(Into::into),
        node_name: None,
        labels: Default::default(),
    }
}

fn external(name: &str, target: &str) -> tideway_core::model::Service {
    let mut s = mk_service("testns", name).port("http", Tcp, 80).build();
    s.service_type = ServiceType::ExternalName;
    s.external_name = Some(target.into());
    s
}

/// The fixture, after CoreDNS's `APIConnServeTest`.
pub(crate) fn fixture() -> ClusterState {
    let mut sts = mk_slice("testns", "sts").port("web", Tcp, 8080).ready("172.0.1.1", "node-a").build();
    sts.endpoints[0].pod_name = Some("web-0".into());
    let mut pnra = mk_service("testns", "hdls-pnra").headless().build();
    pnra.publish_not_ready_addresses = true;
    let snapshot = Snapshot {
        services: vec![
            mk_service("kube-system", "kube-dns").cluster_ip("10.0.0.10").port("dns", Udp, 53).build(),
            mk_service("testns", "svc1").cluster_ip("10.0.0.1").port("http", Tcp, 80).build(),
            mk_service("testns", "svcempty").cluster_ip("10.0.0.2").port("http", Tcp, 80).build(),
            mk_service("testns", "svc6").cluster_ip("1234:abcd::1").port("http", Tcp, 80).build(),
            mk_service("testns", "svc-dual-stack")
                .cluster_ip("10.0.0.3")
                .cluster_ip("10::3")
                .port("http", Tcp, 80)
                .build(),
            mk_service("testns", "multiport")
                .cluster_ip("10.0.0.4")
                .port("http", Tcp, 80)
                .port("dns", Udp, 53)
                .build(),
            mk_service("testns", "hdls1").headless().build(),
            mk_service("testns", "hdlsprtls").headless().build(),
            mk_service("testns", "hdls-notready").headless().build(),
            mk_service("testns", "sts").headless().build(),
            pnra,
            external("external", "ext.interwebs.test"),
            external("external-to-service", "svc1.testns.svc.cluster.local."),
            external("external-ip", "1.2.3.4"),
        ],
        endpoint_slices: vec![
            mk_slice("testns", "svc1")
                .port("http", Tcp, 80)
                .ready("172.0.0.1", "node-a")
                .hostname("ep1a")
                .build(),
            mk_slice("testns", "hdls1")
                .port("http", Tcp, 80)
                .ready("172.0.0.2", "node-a")
                .ready("172.0.0.3", "node-a")
                .ready("172.0.0.4", "node-a")
                .hostname("dup-name")
                .ready("172.0.0.5", "node-b")
                .hostname("dup-name")
                .build(),
            mk_slice("testns", "hdls1")
                .name("hdls1-v6")
                .port("http", Tcp, 80)
                .ready("5678:abcd::1", "node-a")
                .ready("5678:abcd::2", "node-b")
                .build(),
            mk_slice("testns", "hdlsprtls").ready("172.0.0.20", "node-a").build(),
            mk_slice("testns", "hdls-notready")
                .port("http", Tcp, 80)
                .endpoint("172.0.0.30", "node-a", false, false, false)
                .endpoint("172.0.0.31", "node-a", false, true, true)
                .build(),
            mk_slice("testns", "hdls-pnra")
                .port("http", Tcp, 80)
                .endpoint("172.0.0.40", "node-a", false, false, false)
                .build(),
            sts,
        ],
        pods: vec![
            pod("testns", "web-0", "172.0.1.1", Some("web-0"), Some("sts")),
            pod("podns", "foo", "10.240.0.1", None, None),
        ],
        ..Default::default()
    };
    ClusterState::from_snapshot(snapshot)
}

fn index_with(pods: PodsMode) -> RecordIndex {
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.pods = pods;
    RecordIndex::build(&fixture(), &settings, SERIAL)
}

fn query(name: &str, qtype: RecordType) -> LowerQuery {
    LowerQuery::query(Query::query(Name::from_ascii(name).unwrap(), qtype))
}

/// One row: query, expected rcode and sections (records in zone-file form, any order).
struct Case {
    name: &'static str,
    qtype: RecordType,
    rcode: ResponseCode,
    answer: &'static [&'static str],
    authority: &'static [&'static str],
    extra: &'static [&'static str],
}

const fn ok(
    name: &'static str,
    qtype: RecordType,
    answer: &'static [&'static str],
    extra: &'static [&'static str],
) -> Case {
    Case { name, qtype, rcode: ResponseCode::NoError, answer, authority: &[], extra }
}

const fn nodata(name: &'static str, qtype: RecordType) -> Case {
    Case { name, qtype, rcode: ResponseCode::NoError, answer: &[], authority: &[SOA_LINE], extra: &[] }
}

const fn nxdomain(name: &'static str, qtype: RecordType) -> Case {
    Case { name, qtype, rcode: ResponseCode::NXDomain, answer: &[], authority: &[SOA_LINE], extra: &[] }
}

fn sorted(records: &[hickory_proto::rr::Record]) -> Vec<String> {
    let mut v: Vec<String> = records.iter().map(ToString::to_string).collect();
    v.sort();
    v
}

fn expect(lines: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn run(index: &RecordIndex, cases: &[Case]) {
    let mut failures = Vec::new();
    for c in cases {
        let got = match answer(index, &query(c.name, c.qtype)) {
            Outcome::Answer(a) => a,
            other => {
                failures.push(format!("{} {}: expected an answer, got {other:?}", c.name, c.qtype));
                continue;
            }
        };
        // CNAMEs must come before the records they lead to (glibc relies on it).
        if let Some(pos) = got.answers.iter().position(|r| r.record_type() == CNAME)
            && got.answers[..pos].iter().any(|r| r.record_type() != CNAME)
        {
            failures.push(format!("{} {}: CNAME after its target", c.name, c.qtype));
        }
        let want = (c.rcode, expect(c.answer), expect(c.authority), expect(c.extra));
        let have = (got.rcode, sorted(&got.answers), sorted(&got.authority), sorted(&got.additionals));
        if want != have {
            failures.push(format!("{} {}:\n  want {want:?}\n  have {have:?}", c.name, c.qtype));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn services_endpoints_and_srv() {
    run(
        &index_with(PodsMode::Disabled),
        &[
            // ClusterIP A/AAAA, also with no endpoints.
            ok("svc1.testns.svc.cluster.local.", A, &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"], &[]),
            ok(
                "svcempty.testns.svc.cluster.local.",
                A,
                &["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"],
                &[],
            ),
            ok(
                "svc6.testns.svc.cluster.local.",
                AAAA,
                &["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"],
                &[],
            ),
            // SRV on the bare name and on _port._proto, glue in the additional section.
            ok(
                "svc1.testns.svc.cluster.local.",
                SRV,
                &["svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."],
                &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"],
            ),
            ok(
                "svc6.testns.svc.cluster.local.",
                SRV,
                &["svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."],
                &["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"],
            ),
            ok(
                "_http._tcp.svc1.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local.",
                ],
                &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"],
            ),
            ok(
                "_http._tcp.svcempty.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.svcempty.testns.svc.cluster.local. 5 IN SRV 0 100 80 svcempty.testns.svc.cluster.local.",
                ],
                &["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"],
            ),
            ok(
                "multiport.testns.svc.cluster.local.",
                SRV,
                &[
                    "multiport.testns.svc.cluster.local. 5 IN SRV 0 50 53 multiport.testns.svc.cluster.local.",
                    "multiport.testns.svc.cluster.local. 5 IN SRV 0 50 80 multiport.testns.svc.cluster.local.",
                ],
                &["multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"],
            ),
            ok(
                "_dns._udp.multiport.testns.svc.cluster.local.",
                SRV,
                &[
                    "_dns._udp.multiport.testns.svc.cluster.local. 5 IN SRV 0 100 53 multiport.testns.svc.cluster.local.",
                ],
                &["multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"],
            ),
            nxdomain("_dns._tcp.multiport.testns.svc.cluster.local.", SRV),
            nxdomain("_nope._tcp.svc1.testns.svc.cluster.local.", SRV),
            // Dual stack: A and AAAA separately; SRV one row (weight over both IPs), A+AAAA glue.
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                A,
                &["svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3"],
                &[],
            ),
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                AAAA,
                &["svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"],
                &[],
            ),
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                SRV,
                &[
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.cluster.local.",
                ],
                &[
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3",
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3",
                ],
            ),
            // Headless: every ready endpoint of the family.
            ok(
                "hdls1.testns.svc.cluster.local.",
                A,
                &[
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
                &[],
            ),
            ok(
                "hdls1.testns.svc.cluster.local.",
                AAAA,
                &[
                    "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
                    "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
                ],
                &[],
            ),
            ok(
                "hdlsprtls.testns.svc.cluster.local.",
                A,
                &["hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"],
                &[],
            ),
            // Endpoint names: dashed IPv4/IPv6, explicit and duplicated hostnames, under
            // headless and ClusterIP Services; no ports needed.
            ok(
                "172-0-0-20.hdlsprtls.testns.svc.cluster.local.",
                A,
                &["172-0-0-20.hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"],
                &[],
            ),
            ok(
                "172-0-0-2.hdls1.testns.svc.cluster.local.",
                A,
                &["172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2"],
                &[],
            ),
            ok(
                "dup-name.hdls1.testns.svc.cluster.local.",
                A,
                &[
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
                &[],
            ),
            ok(
                "5678-abcd--2.hdls1.testns.svc.cluster.local.",
                AAAA,
                &["5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2"],
                &[],
            ),
            nodata("5678-abcd--2.hdls1.testns.svc.cluster.local.", A),
            ok(
                "ep1a.svc1.testns.svc.cluster.local.",
                A,
                &["ep1a.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.1"],
                &[],
            ),
            // Pod hostname + subdomain: the StatefulSet name.
            ok(
                "web-0.sts.testns.svc.cluster.local.",
                A,
                &["web-0.sts.testns.svc.cluster.local. 5 IN A 172.0.1.1"],
                &[],
            ),
            // Headless SRV: targets are endpoint names; weight over all 6 candidate rows.
            ok(
                "_http._tcp.hdls1.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-2.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-3.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--1.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--2.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 dup-name.hdls1.testns.svc.cluster.local.",
                ],
                &[
                    "172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
                    "172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
                    "5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
                    "5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
            ),
            ok(
                "_web._tcp.sts.testns.svc.cluster.local.",
                SRV,
                &[
                    "_web._tcp.sts.testns.svc.cluster.local. 5 IN SRV 0 100 8080 web-0.sts.testns.svc.cluster.local.",
                ],
                &["web-0.sts.testns.svc.cluster.local. 5 IN A 172.0.1.1"],
            ),
            // A headless Service without ports has no SRV rows.
            nodata("hdlsprtls.testns.svc.cluster.local.", SRV),
            // dns-version, apex and ns.dns.
            ok("dns-version.cluster.local.", TXT, &["dns-version.cluster.local. 28800 IN TXT 1.1.0"], &[]),
            ok("cluster.local.", SOA, &[SOA_LINE], &[]),
            ok(
                "cluster.local.",
                NS,
                &["cluster.local. 5 IN NS ns.dns.cluster.local."],
                &["ns.dns.cluster.local. 5 IN A 10.0.0.10"],
            ),
            ok("ns.dns.cluster.local.", A, &["ns.dns.cluster.local. 5 IN A 10.0.0.10"], &[]),
        ],
    );
}

#[test]
fn readiness_semantics() {
    run(
        &index_with(PodsMode::Disabled),
        &[
            // Not ready (including terminating) endpoints are not published; a headless
            // Service with no ready endpoint does not exist.
            nxdomain("hdls-notready.testns.svc.cluster.local.", A),
            nxdomain("172-0-0-30.hdls-notready.testns.svc.cluster.local.", A),
            nxdomain("_http._tcp.hdls-notready.testns.svc.cluster.local.", SRV),
            // publishNotReadyAddresses publishes them anyway.
            ok(
                "hdls-pnra.testns.svc.cluster.local.",
                A,
                &["hdls-pnra.testns.svc.cluster.local. 5 IN A 172.0.0.40"],
                &[],
            ),
        ],
    );
}

#[test]
fn negative_answers() {
    run(
        &index_with(PodsMode::Disabled),
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
    let index = index_with(PodsMode::Disabled);
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
        &index_with(PodsMode::Insecure),
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

#[test]
fn pod_records() {
    // disabled (CoreDNS's default): nothing below pod.<zone> exists.
    run(
        &index_with(PodsMode::Disabled),
        &[
            nxdomain("10-240-0-1.podns.pod.cluster.local.", A),
            nxdomain("podns.pod.cluster.local.", A),
            nodata("pod.cluster.local.", A),
        ],
    );
    // insecure (kubeadm's default): any well-formed address in an existing namespace.
    run(
        &index_with(PodsMode::Insecure),
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
            nxdomain("10-240-0-1.pod-nons.pod.cluster.local.", A),
            nxdomain("pod-nons.pod.cluster.local.", A),
            nxdomain("not-an-ip.podns.pod.cluster.local.", A),
            nxdomain("10-240-0-999.podns.pod.cluster.local.", A),
            nxdomain("x.10-240-0-1.podns.pod.cluster.local.", A),
        ],
    );
    // verified: the pod must exist with that address in that namespace.
    run(
        &index_with(PodsMode::Verified),
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
    let index = index_with(PodsMode::Disabled);
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
