//! The query table: the categories CoreDNS tests its `kubernetes` plugin with
//! (`plugin/kubernetes/handler_test.go` and the `handler_*_test.go`/`reverse_test.go` files),
//! run against the same kind of fixture: namespace `testns` with `svc1`, `svcempty`, `svc6`,
//! `svc-dual-stack`, headless `hdls1` (v4 + v6, a duplicated hostname) and `hdlsprtls`
//! (no ports), ExternalNames, plus readiness and pod cases.

use crate::view::ClusterView;
use hickory_proto::op::{LowerQuery, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tideway_core::cluster::Snapshot;
use tideway_core::model::{Namespace, Pod, ServiceType};
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::testing::{mk_service, mk_slice};

use super::{Outcome, answer};
use crate::records::{IndexSettings, PodsMode, RecordIndex};

use RecordType::CNAME;

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
pub(crate) fn fixture() -> ClusterView {
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
        // A namespace with nothing in it: it exists all the same.
        namespaces: vec![Namespace { name: "emptyns".into(), labels: Default::default() }],
        ..Default::default()
    };
    ClusterView::from_snapshot(snapshot)
}

pub(super) fn index_with_pods(pods: PodsMode) -> RecordIndex {
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

mod external;
mod names;
mod programmed;
mod records;
mod zones;
