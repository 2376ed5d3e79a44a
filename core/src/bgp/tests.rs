//! Who advertises what to whom, table by table; then the FRR text of a small case.

use super::*;
use crate::announce::{LocalEndpoints, NodeInfo};
use crate::model::{AgentLiveness, LABEL_EXCLUDE_FROM_EXTERNAL_LB, TrafficPolicy};
use crate::testing::{ip, mk_node_info, mk_service_address, net, rack};

fn node(name: &str, r: &str) -> NodeInfo {
    mk_node_info(name, r)
}

fn peer(name: &str, asn: u32, addr: &str) -> BgpPeer {
    BgpPeer::new(name, 64512, asn, ip(addr))
}

fn routes(bgp: &NodeBgp, peer: &str) -> Vec<String> {
    let s = bgp.sessions.iter().find(|s| s.peer.name == peer).expect("session");
    s.routes.keys().map(ToString::to_string).collect()
}

fn decide_simple(
    n: &NodeInfo,
    peers: &[BgpPeer],
    ads: &[BgpAdvertisement],
    addrs: &[ServiceAddress],
) -> NodeBgp {
    decide(
        n,
        Some(ip("172.18.0.3")),
        Objects { peers, advertisements: ads, bfd_profiles: &[], communities: &[] },
        addrs,
    )
}

/// (policy, local endpoints on the node, what is true of the node, advertised?)
type Row<'a> = (TrafficPolicy, LocalEndpoints, &'a dyn Fn(&mut NodeInfo), bool);

#[test]
fn cluster_services_are_advertised_by_every_eligible_node_local_ones_only_where_an_endpoint_serves() {
    use LocalEndpoints::{Absent, Ready, ServingTerminating};
    use TrafficPolicy::{Cluster, Local};
    let peers = [peer("router", 64513, "172.18.0.1")];
    let ads = [BgpAdvertisement::new("all")];
    let excluded = |n: &mut NodeInfo| {
        n.labels.insert(LABEL_EXCLUDE_FROM_EXTERNAL_LB.into(), String::new());
    };
    let not_ready = |n: &mut NodeInfo| n.ready = false;
    let agent_dead = |n: &mut NodeInfo| n.agent = AgentLiveness::Dead;
    let leaving = |n: &mut NodeInfo| n.to_be_deleted = true;
    let same = |_: &mut NodeInfo| {};
    let table: [Row<'_>; 9] = [
        (Cluster, Absent, &same, true),
        (Local, Ready, &same, true),
        (Local, ServingTerminating, &same, true),
        (Local, Absent, &same, false),
        (Cluster, Absent, &not_ready, false),
        (Cluster, Absent, &agent_dead, false),
        (Cluster, Absent, &excluded, false),
        (Cluster, Absent, &leaving, false),
        (Local, Ready, &agent_dead, false),
    ];
    for (i, (policy, local, tweak, advertised)) in table.into_iter().enumerate() {
        let mut n = node("n1", "a");
        tweak(&mut n);
        let addrs = [mk_service_address("web", "203.0.113.10", "public", policy, &n, local)];
        let bgp = decide_simple(&n, &peers, &ads, &addrs);
        let want: Vec<String> = if advertised { vec!["203.0.113.10/32".into()] } else { vec![] };
        assert_eq!(routes(&bgp, "router"), want, "row {i}: {policy:?} {local:?}");
    }
}

#[test]
fn a_cluster_service_without_any_serving_endpoint_is_withdrawn_everywhere() {
    let n = node("n1", "a");
    let mut addr = mk_service_address(
        "web",
        "203.0.113.10",
        "public",
        TrafficPolicy::Cluster,
        &n,
        LocalEndpoints::Absent,
    );
    addr.traffic.serving_endpoints = false;
    let bgp =
        decide_simple(&n, &[peer("router", 64513, "172.18.0.1")], &[BgpAdvertisement::new("all")], &[addr]);
    assert!(bgp.prefixes().is_empty());
}

#[test]
fn selectors_choose_the_peers_the_nodes_the_pools_and_the_family() {
    let peers = [
        BgpPeer { node_selectors: vec![rack("a")], ..peer("tor-a", 64513, "172.18.0.1") },
        BgpPeer { node_selectors: vec![rack("b")], ..peer("tor-b", 64514, "172.19.0.1") },
        peer("spine", 64515, "10.0.0.1"),
        peer("spine6", 64515, "fd00::1"),
    ];
    let ads = [
        BgpAdvertisement {
            pools: vec!["public".into()],
            peers: vec!["tor-a".into(), "spine6".into()],
            ..BgpAdvertisement::new("public")
        },
        BgpAdvertisement {
            pools: vec!["internal".into()],
            node_selectors: vec![rack("b")],
            ..BgpAdvertisement::new("internal")
        },
    ];
    let (a, b) = (node("n1", "a"), node("n2", "b"));
    let of = |n: &NodeInfo| {
        let addrs = [
            mk_service_address(
                "web",
                "203.0.113.10",
                "public",
                TrafficPolicy::Cluster,
                n,
                LocalEndpoints::Absent,
            ),
            mk_service_address(
                "web",
                "2001:db8::10",
                "public",
                TrafficPolicy::Cluster,
                n,
                LocalEndpoints::Absent,
            ),
            mk_service_address(
                "db",
                "10.20.0.5",
                "internal",
                TrafficPolicy::Cluster,
                n,
                LocalEndpoints::Absent,
            ),
            mk_service_address(
                "other",
                "198.51.100.1",
                "unadvertised",
                TrafficPolicy::Cluster,
                n,
                LocalEndpoints::Absent,
            ),
        ];
        decide_simple(n, &peers, &ads, &addrs)
    };
    let on_a = of(&a);
    let names: Vec<&str> = on_a.sessions.iter().map(|s| s.peer.name.as_str()).collect();
    assert_eq!(names, ["spine", "spine6", "tor-a"], "rack a opens no session to tor-b");
    assert_eq!(routes(&on_a, "tor-a"), ["203.0.113.10/32"]);
    assert_eq!(routes(&on_a, "spine"), Vec::<String>::new(), "public names its peers; internal its nodes");
    assert_eq!(routes(&on_a, "spine6"), ["2001:db8::10/128"]);
    let on_b = of(&b);
    assert_eq!(routes(&on_b, "tor-b"), ["10.20.0.5/32"]);
    assert_eq!(routes(&on_b, "spine"), ["10.20.0.5/32"]);
    assert_eq!(on_a.asn, Some(64512));
}

#[test]
fn aggregation_rolls_cluster_addresses_up_but_never_a_local_one() {
    let n = node("n1", "a");
    let ads = [BgpAdvertisement {
        aggregation_length: 24,
        aggregation_length_v6: 64,
        ..BgpAdvertisement::new("agg")
    }];
    let addrs = [
        mk_service_address("a", "203.0.113.10", "p", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent),
        mk_service_address("b", "203.0.113.99", "p", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent),
        mk_service_address("c", "203.0.113.7", "p", TrafficPolicy::Local, &n, LocalEndpoints::Ready),
        mk_service_address("d", "2001:db8::7:1", "p", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent),
    ];
    let peers = [peer("router", 64513, "172.18.0.1"), peer("router6", 64513, "fd00::1")];
    let bgp = decide_simple(&n, &peers, &ads, &addrs);
    assert_eq!(routes(&bgp, "router"), ["203.0.113.0/24", "203.0.113.7/32"]);
    assert_eq!(routes(&bgp, "router6"), ["2001:db8::/64"]);
}

#[test]
fn communities_add_up_and_the_higher_local_pref_wins_on_ibgp_only() {
    let n = node("n1", "a");
    let community = |s: &str| s.parse::<Community>().expect("community");
    let ads = [
        BgpAdvertisement {
            local_pref: Some(100),
            communities: vec![community("65535:65282").into()],
            ..BgpAdvertisement::new("low")
        },
        BgpAdvertisement {
            local_pref: Some(200),
            communities: vec![community("large:64512:1:2").into()],
            ..BgpAdvertisement::new("high")
        },
    ];
    let peers = [peer("ibgp", 64512, "172.18.0.1"), peer("ebgp", 64513, "172.18.0.2")];
    let addrs =
        [mk_service_address("a", "203.0.113.10", "p", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent)];
    let bgp = decide_simple(&n, &peers, &ads, &addrs);
    let attrs = |peer: &str| {
        bgp.sessions.iter().find(|s| s.peer.name == peer).unwrap().routes[&net("203.0.113.10/32")].clone()
    };
    assert_eq!(attrs("ibgp").local_pref, Some(200));
    assert_eq!(attrs("ebgp").local_pref, None, "LOCAL_PREF is not sent over eBGP");
    assert_eq!(attrs("ebgp").communities, [community("65535:65282"), community("large:64512:1:2")].into());
    assert_eq!(
        bgp.conflicts,
        [Conflict::LocalPref {
            prefix: net("203.0.113.10/32"),
            peer: "ibgp".into(),
            kept: 200,
            kept_by: "high".into(),
            dropped: 100,
            dropped_by: "low".into(),
        }]
    );
}

#[test]
fn a_node_speaks_one_asn_and_bad_peers_are_named() {
    let n = node("n1", "a");
    let peers = [
        peer("a", 64513, "172.18.0.1"),
        BgpPeer { my_asn: 65000, ..peer("b", 64513, "172.18.0.2") },
        BgpPeer { password: Some("two words".into()), ..peer("c", 64513, "172.18.0.3") },
        BgpPeer { bfd_profile: Some("missing".into()), ..peer("d", 64513, "172.18.0.4") },
        BgpPeer { password_secret: Some("bgp-auth".into()), ..peer("e", 64513, "172.18.0.5") },
    ];
    let bgp = decide_simple(&n, &peers, &[], &[]);
    let names: Vec<&str> = bgp.sessions.iter().map(|s| s.peer.name.as_str()).collect();
    assert_eq!(names, ["a", "d"]);
    assert!(bgp.sessions[1].bfd.is_none());
    let said: Vec<String> = bgp.conflicts.iter().map(ToString::to_string).collect();
    assert_eq!(said.len(), 4, "{said:#?}");
    assert!(said.iter().any(|s| s.contains("peer e: no password from Secret bgp-auth")));
    assert!(said.iter().any(|s| s.contains("peer b asks for myASN 65000, but this node speaks 64512")));
    assert!(said.iter().any(|s| s.contains("peer c: the password")));
    assert!(said.iter().any(|s| s.contains("BFD profile missing")));
}

#[test]
fn communities_parse_as_metallb_writes_them() {
    assert_eq!("65535:65282".parse(), Ok(Community::Standard(65535, 65282)));
    assert_eq!("large:4200000000:1:2".parse(), Ok(Community::Large(4_200_000_000, 1, 2)));
    for bad in ["65536:1", "1:2:3", "large:1:2", "no-export", "large:1:2:x"] {
        assert!(bad.parse::<Community>().is_err(), "{bad}");
    }
}

#[test]
fn the_frr_text_lets_each_peer_have_exactly_its_prefixes() {
    let n = node("n1", "a");
    let ads = [
        BgpAdvertisement {
            pools: vec!["public".into()],
            peers: vec!["tor".into()],
            ..BgpAdvertisement::new("public")
        },
        BgpAdvertisement { local_pref: Some(50), ..BgpAdvertisement::new("all") },
    ];
    let peers = [
        BgpPeer { bfd_profile: Some("fast".into()), hold_time: 9, ..peer("tor", 64512, "172.18.0.1") },
        peer("edge", 64513, "172.18.0.2"),
    ];
    let profiles = [BfdProfile { receive_interval: 100, transmit_interval: 100, ..BfdProfile::new("fast") }];
    let addrs = [
        mk_service_address(
            "web",
            "203.0.113.10",
            "public",
            TrafficPolicy::Cluster,
            &n,
            LocalEndpoints::Absent,
        ),
        mk_service_address("db", "10.20.0.5", "internal", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent),
    ];
    let objects = Objects { peers: &peers, advertisements: &ads, bfd_profiles: &profiles, communities: &[] };
    let text = frr::render(&decide(&n, Some(ip("172.18.0.3")), objects, &addrs));
    for line in [
        "router bgp 64512\n bgp router-id 172.18.0.3\n",
        " neighbor 172.18.0.1 timers 3 9\n",
        " neighbor 172.18.0.1 bfd profile fast\n",
        "  network 10.20.0.5/32\n  network 203.0.113.10/32\n",
        "  neighbor 172.18.0.2 route-map tideway-edge-out out\n",
        "ip prefix-list tideway-edge-out-1-v4 seq 10 permit 10.20.0.5/32\n\
         ip prefix-list tideway-edge-out-1-v4 seq 20 permit 203.0.113.10/32\n",
        "  receive-interval 100\n",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    // localPref goes to the iBGP peer only; the eBGP one gets both prefixes without it.
    assert!(text.contains("route-map tideway-tor-out permit 10\n match ip address prefix-list tideway-tor-out-1-v4\n set local-preference 50\n"), "{text}");
    assert!(
        !text.contains(
            "tideway-edge-out permit 10\n match ip address prefix-list tideway-edge-out-1-v4\n set"
        ),
        "{text}"
    );
    assert_eq!(
        text,
        frr::render(&decide(&n, Some(ip("172.18.0.3")), objects, &addrs)),
        "the same every time"
    );
}

#[test]
fn community_names_are_looked_up_when_the_node_decides() {
    let n = node("n1", "a");
    let ads = [BgpAdvertisement {
        communities: vec![
            "vpn-only".parse().unwrap(),
            "65535:65282".parse().unwrap(),
            "gone".parse().unwrap(),
        ],
        ..BgpAdvertisement::new("named")
    }];
    let aliases = [CommunityAlias { name: "vpn-only".into(), value: Community::Standard(1234, 1) }];
    let peers = [peer("tor", 64513, "172.18.0.1")];
    let addrs =
        [mk_service_address("a", "203.0.113.10", "p", TrafficPolicy::Cluster, &n, LocalEndpoints::Absent)];
    let objects = Objects { peers: &peers, advertisements: &ads, bfd_profiles: &[], communities: &aliases };
    let bgp = decide(&n, Some(ip("172.18.0.3")), objects, &addrs);
    let sent = &bgp.sessions[0].routes[&net("203.0.113.10/32")].communities;
    assert_eq!(*sent, [Community::Standard(1234, 1), Community::Standard(65535, 65282)].into());
    let said: Vec<String> = bgp.conflicts.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        ["advertisement named names community gone, which no Community defines: sent without it"]
    );
    // A value written wrong is no name.
    assert!("65535-1".parse::<CommunityRef>().is_ok_and(|c| c == CommunityRef::Name("65535-1".into())));
    for bad in ["65536:1", "large:1:2", ""] {
        assert!(bad.parse::<CommunityRef>().is_err(), "{bad}");
    }
}

/// What FRR answers about a configuration may echo a `neighbor ... password ...` line: every
/// password of the configuration is masked in it before it reaches a status or a log.
#[test]
fn passwords_are_masked_in_what_frr_answers() {
    let config = " neighbor 172.18.0.1 password s3cret!x\n neighbor 172.18.0.2 password other~pw\n";
    let answer = "line 12: % Unknown command: neighbor 172.18.0.1 password s3cret!x\nalso other~pw here";
    let masked = super::frr::mask_passwords(answer, config);
    assert!(!masked.contains("s3cret!x") && !masked.contains("other~pw"), "{masked}");
    assert!(masked.contains("neighbor 172.18.0.1 password ***"), "{masked}");
    assert_eq!(super::frr::mask_passwords("nothing secret", config), "nothing secret");
}

#[test]
fn a_peers_debug_shows_no_password() {
    let p = BgpPeer { password: Some("s3cret!x".into()), ..peer("a", 64513, "172.18.0.1") };
    let shown = format!("{p:?}");
    assert!(!shown.contains("s3cret!x") && shown.contains("password: Some(\"***\")"), "{shown}");
}
