//! Golden FRR configurations: the BGP decisions of a few nodes rendered as `frr.conf`, each
//! compared with its committed file and checked by FRR's own parser (`vtysh --dryrun`, which
//! reads every daemon's commands without starting one).

use std::process::Command;

use tideway_core::announce::LocalEndpoints;
use tideway_core::bgp::{self, BfdProfile, BgpAdvertisement, BgpPeer, Objects};
use tideway_core::model::TrafficPolicy;
use tideway_core::testing::{ip, mk_node_info, mk_service_address, rack};
use tideway_tests::{check_golden, root};

/// A dual-stack node under two top-of-rack routers and a spine, with every attribute used.
fn dual_stack() -> String {
    let n = mk_node_info("node-a", "a");
    let rack_a = rack("a");
    let peers = [
        BgpPeer {
            bfd_profile: Some("fast".into()),
            hold_time: 9,
            keepalive_time: Some(3),
            node_selectors: vec![rack_a],
            ..BgpPeer::new("tor-a", 64512, 64512, ip("172.18.0.1"))
        },
        BgpPeer {
            port: 1179,
            password: Some("s3cret!".into()),
            ebgp_multihop: true,
            source_address: Some(ip("172.18.0.3")),
            ..BgpPeer::new("spine", 64512, 65000, ip("10.0.0.1"))
        },
        BgpPeer {
            bfd_profile: Some("echo".into()),
            ..BgpPeer::new("tor-a-v6", 64512, 64512, ip("fd00:18::1"))
        },
    ];
    let advertisements = [
        BgpAdvertisement {
            pools: vec!["public".into()],
            local_pref: Some(200),
            communities: vec!["65535:65281".parse().unwrap(), "large:64512:7:1".parse().unwrap()],
            ..BgpAdvertisement::new("public")
        },
        BgpAdvertisement {
            pools: vec!["public".into()],
            aggregation_length: 24,
            aggregation_length_v6: 64,
            peers: vec!["spine".into()],
            ..BgpAdvertisement::new("public-aggregate")
        },
    ];
    let bfd_profiles = [
        BfdProfile { receive_interval: 100, transmit_interval: 100, ..BfdProfile::new("fast") },
        BfdProfile { echo_mode: true, passive_mode: true, minimum_ttl: 250, ..BfdProfile::new("echo") },
    ];
    let addresses = [
        mk_service_address(
            "web",
            "203.0.113.10",
            "public",
            TrafficPolicy::Cluster,
            &n,
            LocalEndpoints::Absent,
        ),
        mk_service_address(
            "web",
            "2001:db8:10::10",
            "public",
            TrafficPolicy::Cluster,
            &n,
            LocalEndpoints::Absent,
        ),
        mk_service_address("api", "203.0.113.20", "public", TrafficPolicy::Local, &n, LocalEndpoints::Ready),
        mk_service_address(
            "batch",
            "203.0.113.30",
            "public",
            TrafficPolicy::Local,
            &n,
            LocalEndpoints::Absent,
        ),
    ];
    let objects = Objects {
        peers: &peers,
        advertisements: &advertisements,
        bfd_profiles: &bfd_profiles,
        communities: &[],
    };
    let decided = bgp::decide(&n, Some(ip("172.18.0.3")), objects, &addresses);
    assert!(decided.conflicts.is_empty(), "{:?}", decided.conflicts);
    bgp::frr::render(&decided)
}

/// A node no peer selects: no `router bgp` at all.
fn no_sessions() -> String {
    let n = mk_node_info("node-b", "b");
    let rack_a = rack("a");
    let peers =
        [BgpPeer { node_selectors: vec![rack_a], ..BgpPeer::new("tor-a", 64512, 64512, ip("172.18.0.1")) }];
    let objects = Objects { peers: &peers, advertisements: &[], bfd_profiles: &[], communities: &[] };
    bgp::frr::render(&bgp::decide(&n, None, objects, &[]))
}

#[test]
fn golden_frr_configurations_that_frr_accepts() {
    let mut failures = Vec::new();
    for (name, text) in [("dual-stack", dual_stack()), ("no-sessions", no_sessions())] {
        let path = root().join("golden").join("frr").join(format!("{name}.conf"));
        if let Err(e) = check_golden(&path, &text) {
            failures.push(e);
        }
        let out = Command::new("vtysh")
            .args(["--dryrun", "-f"])
            .arg(&path)
            .output()
            .expect("vtysh runs (FRR is installed by the test command: make deps)");
        if !out.status.success() {
            failures.push(format!(
                "{}: FRR refuses it:\n{}{}",
                path.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
