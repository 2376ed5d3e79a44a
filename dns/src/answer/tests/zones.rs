//! Several cluster zones and `fallthrough`, as CoreDNS's `kubernetes cluster.local
//! example.local { fallthrough ... }` answers them.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType::{A, PTR, SOA, SRV};

use super::{Case, SERIAL, fixture, nxdomain, ok, query, run};
use crate::answer::{Outcome, answer};
use crate::records::{Fallthrough, IndexSettings, RecordIndex, parse_zone};

const EXAMPLE_SOA: &str =
    "example.local. 5 IN SOA ns.dns.example.local. hostmaster.example.local. 1499347823 7200 1800 86400 5";
const NESTED_SOA: &str = "in.cluster.local. 5 IN SOA ns.dns.in.cluster.local. hostmaster.in.cluster.local. \
    1499347823 7200 1800 86400 5";

fn index(extra: &[&str], fallthrough: Fallthrough) -> RecordIndex {
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.extra_zones = extra.iter().map(|z| parse_zone(z).unwrap()).collect();
    settings.fallthrough = fallthrough;
    RecordIndex::build(&fixture(), &settings, SERIAL)
}

fn zones(names: &[&str]) -> Fallthrough {
    Fallthrough::In(names.iter().map(|z| parse_zone(z).unwrap()).collect())
}

#[test]
fn every_cluster_zone_answers_alike_spelled_as_asked() {
    let ix = index(&["example.local", "in.cluster.local"], Fallthrough::Never);
    run(
        &ix,
        &[
            ok("svc1.testns.svc.cluster.local.", A, &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"], &[]),
            ok("svc1.testns.svc.example.local.", A, &["svc1.testns.svc.example.local. 5 IN A 10.0.0.1"], &[]),
            // SRV targets and their glue in the zone the query named, with its case.
            ok(
                "_http._tcp.svc1.testns.svc.Example.Local.",
                SRV,
                &[
                    "_http._tcp.svc1.testns.svc.Example.Local. 5 IN SRV 0 100 80 svc1.testns.svc.Example.Local.",
                ],
                &["svc1.testns.svc.Example.Local. 5 IN A 10.0.0.1"],
            ),
            // Negative answers carry the SOA of the zone asked.
            Case { authority: &[EXAMPLE_SOA], ..nxdomain("nope.testns.svc.example.local.", A) },
            ok("example.local.", SOA, &[EXAMPLE_SOA], &[]),
            // Nested zones: the deepest one holds the name.
            ok(
                "svc1.testns.svc.in.cluster.local.",
                A,
                &["svc1.testns.svc.in.cluster.local. 5 IN A 10.0.0.1"],
                &[],
            ),
            Case { authority: &[NESTED_SOA], ..nxdomain("nope.testns.svc.in.cluster.local.", A) },
            // PTR targets name the first zone, as CoreDNS's primary zone.
            ok(
                "1.0.0.10.in-addr.arpa.",
                PTR,
                &["1.0.0.10.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."],
                &[],
            ),
        ],
    );
    assert_eq!(answer(&ix, &query("svc1.testns.svc.example.org.", A)), Outcome::Forward, "not ours");
}

#[test]
fn fallthrough_sends_a_denial_upstream_only_where_asked() {
    let nx = |ix: &RecordIndex, name: &str| answer(ix, &query(name, A));
    let denied = |o: &Outcome| matches!(o, Outcome::Answer(a) if a.rcode == ResponseCode::NXDomain);
    let two = ["example.local"];

    let never = index(&two, Fallthrough::Never);
    assert!(denied(&nx(&never, "nope.testns.svc.cluster.local.")));

    let everywhere = index(&two, Fallthrough::Everywhere);
    for name in ["nope.testns.svc.cluster.local.", "nope.testns.svc.example.local.", "www.example.local."] {
        assert_eq!(nx(&everywhere, name), Outcome::Forward, "{name}");
    }
    // What exists is still answered, and NODATA is not a denial.
    assert!(
        matches!(nx(&everywhere, "svc1.testns.svc.cluster.local."), Outcome::Answer(a) if a.answers.len() == 1)
    );
    assert!(
        matches!(answer(&everywhere, &query("svc1.testns.svc.cluster.local.", PTR)), Outcome::Answer(a) if a.rcode == ResponseCode::NoError)
    );

    let only_example = index(&two, zones(&["example.local", "in-addr.arpa"]));
    assert_eq!(nx(&only_example, "nope.testns.svc.example.local."), Outcome::Forward);
    assert_eq!(nx(&only_example, "Nope.TestNS.svc.Example.Local."), Outcome::Forward);
    assert!(denied(&nx(&only_example, "nope.testns.svc.cluster.local.")));

    // A narrower zone inside a cluster zone.
    let svc_only = index(&[], zones(&["svc.cluster.local"]));
    assert_eq!(nx(&svc_only, "nope.testns.svc.cluster.local."), Outcome::Forward);
    assert!(denied(&nx(&svc_only, "a.b.pod.cluster.local.")));

    // Before the first sync the index answers SERVFAIL, not a denial: nothing goes upstream.
    let mut settings = IndexSettings::new("cluster.local").unwrap();
    settings.fallthrough = Fallthrough::Everywhere;
    let unsynced = RecordIndex::unsynced(&settings);
    assert!(
        matches!(nx(&unsynced, "svc1.testns.svc.cluster.local."), Outcome::Answer(a) if a.rcode == ResponseCode::ServFail)
    );
}
