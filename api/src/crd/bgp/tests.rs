//! The BGP objects' conversions: MetalLB's documented examples, read from `metallb.io` and
//! `tideway.io` alike, and what is refused.

use tideway_core::bgp::{BgpPeer as CorePeer, Community as CoreCommunity, CommunityRef};

use super::*;
use crate::crd::{MetalLbBgpAdvertisement, MetalLbBgpPeer};

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_saphyr::from_str(text).expect("parses")
}

/// MetalLB's BGP example (its configuration docs), one peer with BFD and a password Secret.
const PEER: &str = "metadata: {name: sample, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.1
  holdTime: 90s
  keepaliveTime: 30s
  bfdProfile: full1
  passwordSecret: {name: secretname, namespace: metallb-system}
  nodeSelectors: [{matchLabels: {kubernetes.io/hostname: hostA}}]";

#[test]
fn a_metallb_peer_converts_as_the_same_tideway_peer() {
    let metallb: MetalLbBgpPeer = yaml(PEER);
    let tideway: BGPPeer = yaml(PEER);
    let from_metallb = bgp_peer(Source::MetalLb, &metallb.metadata, &metallb.spec).unwrap();
    let from_tideway = bgp_peer(Source::Tideway, &tideway.metadata, &tideway.spec).unwrap();
    assert_eq!(from_metallb, from_tideway);
    let p = from_metallb;
    assert_eq!((p.my_asn, p.peer_asn, p.port, p.hold_time, p.keepalive()), (64500, 64501, 179, 90, 30));
    assert_eq!((p.bfd_profile.as_deref(), p.password_secret.as_deref()), (Some("full1"), Some("secretname")));
    assert_eq!(p.node_selectors.len(), 1);
    assert_eq!(<MetalLbBgpPeer as kube::Resource>::api_version(&()), "metallb.io/v1beta2");
}

#[test]
fn peer_defaults_are_metallbs() {
    let o: BGPPeer = yaml("metadata: {name: p}\nspec: {myASN: 1, peerASN: 2, peerAddress: 'fc00::1'}");
    let p = bgp_peer(Source::Tideway, &o.metadata, &o.spec).unwrap();
    assert_eq!(p, CorePeer::new("p", 1, 2, "fc00::1".parse().unwrap()));
    assert_eq!(p.keepalive(), 30, "a third of the 90 s hold time");
}

#[test]
fn refusals_name_the_object_and_the_field() {
    let refused = |spec: &str| {
        let o: MetalLbBgpPeer =
            yaml(&format!("metadata: {{name: p, namespace: metallb-system}}\nspec: {spec}"));
        let e = bgp_peer(Source::MetalLb, &o.metadata, &o.spec).unwrap_err();
        (e.to_string(), e.field)
    };
    let base = "myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1";
    for (spec, field) in [
        ("{myASN: 0, peerASN: 64501, peerAddress: 10.0.0.1}".to_string(), "spec.myASN"),
        ("{myASN: 64500, peerAddress: 10.0.0.1}".to_string(), "spec.peerASN"),
        ("{myASN: 64500, peerASN: 64501}".to_string(), "spec.peerAddress"),
        (format!("{{{base}, interface: eth1}}"), "spec.interface"),
        (format!("{{{base}, vrf: red}}"), "spec.vrf"),
        (format!("{{{base}, routerID: 10.0.0.9}}"), "spec.routerID"),
        (format!("{{{base}, enableGracefulRestart: true}}"), "spec.enableGracefulRestart"),
        (format!("{{{base}, holdTime: 1500ms}}"), "spec.holdTime"),
        (format!("{{{base}, holdTime: 70000s}}"), "spec.holdTime"),
    ] {
        let (text, got) = refused(&spec);
        assert_eq!(got, field, "{spec}: {text}");
        assert!(text.contains("BGPPeer metallb-system/p"), "{text}");
    }
    // A zero hold time (no keepalives) is BGP's own choice, with any keepalive.
    let o: BGPPeer =
        yaml(&format!("metadata: {{name: p}}\nspec: {{{base}, holdTime: 0s, keepaliveTime: 10s}}"));
    assert_eq!(bgp_peer(Source::Tideway, &o.metadata, &o.spec).unwrap().hold_time, 0);
}

#[test]
fn advertisements_keep_values_and_names_and_communities_define_names() {
    let community: Community = yaml(
        "metadata: {name: c}\nspec: {communities: [{name: vpn-only, value: '1234:1'}, {name: big, value: 'large:1:2:3'}]}",
    );
    let aliases = community_aliases(Source::Tideway, &community.metadata, &community.spec).unwrap();
    assert_eq!(aliases[1], CoreAlias { name: "big".into(), value: CoreCommunity::Large(1, 2, 3) });
    let o: MetalLbBgpAdvertisement = yaml(
        "metadata: {name: local, namespace: metallb-system}
spec: {aggregationLength: 32, localPref: 100, communities: [vpn-only, '65535:65282'], ipAddressPools: [first-pool]}",
    );
    let ad = bgp_advertisement(Source::MetalLb, &o.metadata, &o.spec).unwrap();
    assert_eq!(
        ad.communities,
        [CommunityRef::Name("vpn-only".into()), CommunityRef::Value(CoreCommunity::Standard(65535, 65282))]
    );
    assert_eq!((ad.aggregation_length, ad.aggregation_length_v6, ad.local_pref), (32, 128, Some(100)));
    assert_eq!(ad.pools, ["first-pool"]);
    // A name defined twice is refused.
    let twice: Community =
        yaml("metadata: {name: c}\nspec: {communities: [{name: a, value: '1:1'}, {name: a, value: '1:2'}]}");
    let e = community_aliases(Source::Tideway, &twice.metadata, &twice.spec).unwrap_err();
    assert_eq!(e.field, "spec.communities[1].name", "{e}");
}

#[test]
fn bfd_profiles_take_metallbs_defaults_and_bounds() {
    let o: BFDProfile = yaml("metadata: {name: fast}\nspec: {receiveInterval: 100, echoMode: true}");
    let p = bfd_profile(Source::Tideway, &o.metadata, &o.spec).unwrap();
    assert_eq!((p.receive_interval, p.transmit_interval, p.detect_multiplier), (100, 300, 3));
    assert!(p.echo_mode && !p.passive_mode);
    assert_eq!((p.echo_interval, p.minimum_ttl), (50, 254));
    let o: BFDProfile = yaml("metadata: {name: slow}\nspec: {minimumTtl: 255}");
    let e = bfd_profile(Source::Tideway, &o.metadata, &o.spec).unwrap_err();
    assert_eq!(e.field, "spec.minimumTtl", "{e}");
}

/// A password FRR's configuration cannot carry (a newline would add configuration lines, a
/// space cuts it short, more than 80 bytes TCP MD5 cannot take) is refused, naming the field,
/// never the password.
#[test]
fn a_password_frr_cannot_carry_is_refused_without_being_shown() {
    let long = "x".repeat(81);
    for bad in ["s3cret\nrouter bgp 1", "two words", "tab\there", "caf\u{e9}-pass", long.as_str()] {
        let mut p: BGPPeer = yaml(PEER);
        p.spec.password_secret = None;
        p.spec.password = Some(bad.into());
        let e = bgp_peer(Source::Tideway, &p.metadata, &p.spec).expect_err(bad).to_string();
        assert!(e.contains("spec.password:"), "{e}");
        assert!(!e.contains(bad), "the password is shown: {e}");
    }
    let mut p: BGPPeer = yaml(PEER);
    p.spec.password_secret = None;
    p.spec.password = Some("Str0ng!pass~word#".into());
    assert!(bgp_peer(Source::Tideway, &p.metadata, &p.spec).is_ok());
}
