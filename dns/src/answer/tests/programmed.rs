//! `--require-programmed`: which queries wait for the asking pod's node.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::view::ClusterView;
use hickory_proto::rr::RecordType;
use tideway_core::cluster::Snapshot;
use tideway_core::model::{NodeProxyState, Pod};
use tideway_core::net::Protocol::Tcp;
use tideway_core::testing::{mk_service, mk_slice};

use super::{SERIAL, query};
use crate::answer::{Gate, gate};
use crate::records::{IndexSettings, RecordIndex};

use Gate::{Answer, NotProgrammed};
use RecordType::{A, AAAA, SRV, TXT};

fn client(ip: &str, node: &str) -> Pod {
    Pod {
        namespace: "clients".into(),
        name: format!("client-{node}"),
        ips: vec![ip.parse().unwrap()],
        hostname: None,
        subdomain: None,
        node_name: Some(node.into()),
        labels: BTreeMap::new(),
    }
}

fn report(node: &str, programmed_version: Option<u64>) -> NodeProxyState {
    NodeProxyState { node: node.into(), programmed_version, ..Default::default() }
}

fn index(require: bool) -> RecordIndex {
    let versioned = |name: &str, ip: &str, version: Option<u64>| {
        let mut svc = mk_service("testns", name).cluster_ip(ip).port("http", Tcp, 80).build();
        svc.generation = 2;
        svc.resource_version = version;
        svc
    };
    let snapshot = Snapshot {
        services: vec![
            versioned("svc1", "10.0.0.1", Some(20)),
            versioned("fresh", "10.0.0.2", Some(30)),
            // From an API server whose versions do not compare.
            versioned("opaque", "10.0.0.3", None),
            mk_service("testns", "hdls").headless().port("http", Tcp, 80).build(),
        ],
        endpoint_slices: vec![
            mk_slice("testns", "svc1")
                .port("http", Tcp, 80)
                .ready("172.0.0.1", "node-a")
                .hostname("ep")
                .build(),
            mk_slice("testns", "hdls").port("http", Tcp, 80).ready("172.0.0.2", "node-a").build(),
        ],
        pods: vec![
            client("10.1.0.5", "node-a"),
            client("10.2.0.5", "node-b"),
            client("10.3.0.5", "node-c"),
            client("10.4.0.5", "node-d"),
        ],
        node_states: vec![report("node-a", Some(25)), report("node-b", Some(15)), report("node-d", None)],
        ..Default::default()
    };
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.require_programmed = require;
    settings.extra_zones = vec![crate::records::parse_zone("example.local").unwrap()];
    RecordIndex::build(&ClusterView::from_snapshot(snapshot), &settings, SERIAL)
}

fn check(ix: &RecordIndex, cases: &[(&str, &str, RecordType, Gate)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(from, name, qtype, want)| {
            let got = gate(ix, &query(name, *qtype), from.parse::<IpAddr>().unwrap());
            (got != *want).then(|| format!("{name} {qtype} from {from}: want {want:?}, got {got:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_cluster_ip_waits_for_the_asking_pods_node() {
    check(
        &index(true),
        &[
            // node-a programmed up to version 25: svc1 (its generation since 20), not fresh (30).
            ("10.1.0.5", "svc1.testns.svc.cluster.local.", A, Answer),
            ("10.1.0.5", "fresh.testns.svc.cluster.local.", A, NotProgrammed),
            ("10.1.0.5", "Fresh.TestNS.svc.cluster.local.", AAAA, NotProgrammed),
            ("10.1.0.5", "fresh.testns.svc.cluster.local.", SRV, NotProgrammed),
            ("10.1.0.5", "_http._tcp.fresh.testns.svc.cluster.local.", SRV, NotProgrammed),
            ("::ffff:10.1.0.5", "fresh.testns.svc.cluster.local.", A, NotProgrammed),
            // Under every cluster zone alike.
            ("10.1.0.5", "fresh.testns.svc.example.local.", A, NotProgrammed),
            ("10.1.0.5", "svc1.testns.svc.example.local.", A, Answer),
            // node-b programmed up to 15: neither.
            ("10.2.0.5", "svc1.testns.svc.cluster.local.", A, NotProgrammed),
            ("10.2.0.5", "fresh.testns.svc.cluster.local.", A, NotProgrammed),
            // Nothing behind these needs proxy rules, or nothing can be told.
            ("10.1.0.5", "fresh.testns.svc.cluster.local.", TXT, Answer),
            ("10.1.0.5", "hdls.testns.svc.cluster.local.", A, Answer),
            ("10.2.0.5", "ep.svc1.testns.svc.cluster.local.", A, Answer),
            ("10.1.0.5", "nope.testns.svc.cluster.local.", A, Answer),
            ("10.1.0.5", "www.example.com.", A, Answer),
            // A Service without a comparable version; node-c reports nothing, node-d's agent
            // has no comparable version; a client that is no pod.
            ("10.1.0.5", "opaque.testns.svc.cluster.local.", A, Answer),
            ("10.3.0.5", "fresh.testns.svc.cluster.local.", A, Answer),
            ("10.4.0.5", "fresh.testns.svc.cluster.local.", A, Answer),
            ("10.9.9.9", "fresh.testns.svc.cluster.local.", A, Answer),
        ],
    );
    // Off by default.
    check(&index(false), &[("10.1.0.5", "fresh.testns.svc.cluster.local.", A, Answer)]);
}
