//! A cluster moving from MetalLB keeps its addresses and BGP objects: MetalLB's own example
//! pool (its own `IPAddressPool` and `L2Advertisement` as they are, or the pool moved over by
//! changing `apiVersion` and `kind`) and Services as MetalLB users
//! annotate them (`metallb.universe.tf/*` and the newer `metallb.io/*`), some already holding the
//! address MetalLB gave them, read by the manifest loader and decided by the operator's core.

use std::net::IpAddr;

use tideway_api::crd::{IPAddressPool, L2Advertisement, LoadBalancerPool, load_balancer_pools};
use tideway_api::manifest::load_str;
use tideway_core::cluster::{Changes, ClusterState};
use tideway_core::operator::{Action, Reconciler};

/// MetalLB's documented `first-pool`, plus a second pool for the pool annotation.
const POOLS: &str = r#"
apiVersion: tideway.io/v1alpha1
kind: LoadBalancerPool
metadata: {name: first-pool}
spec:
  addresses: [192.168.10.0/24, 192.168.9.1-192.168.9.5, "fc00:f853:0ccd:e799::/124"]
---
apiVersion: tideway.io/v1alpha1
kind: LoadBalancerPool
metadata: {name: second-pool}
spec:
  addresses: [192.168.20.0/24]
  autoAssign: false
"#;

/// The same pools as MetalLB holds them: its own kinds, as its documentation writes them, and
/// an `L2Advertisement` (MetalLB announces no pool without one).
const METALLB_POOLS: &str = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec:
  addresses: [192.168.10.0/24, 192.168.9.1-192.168.9.5, "fc00:f853:0ccd:e799::/124"]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: second-pool, namespace: metallb-system}
spec:
  addresses: [192.168.20.0/24]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: example, namespace: metallb-system}
"#;

fn service(name: &str, annotations: &str, status_ip: Option<&str>) -> String {
    service_on(name, annotations, status_ip, "{port: 80}")
}

fn service_on(name: &str, annotations: &str, status_ip: Option<&str>, port: &str) -> String {
    let status = status_ip
        .map_or(String::new(), |ip| format!("status: {{loadBalancer: {{ingress: [{{ip: {ip}}}]}}}}\n"));
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\n  annotations: {{{annotations}}}\n\
         spec:\n  type: LoadBalancer\n  clusterIP: 10.96.0.{n}\n  selector: {{app: {name}}}\n  ports: [{port}]\n{status}",
        n = name.bytes().map(usize::from).sum::<usize>() % 250 + 1
    )
}

fn cluster(pools: &str) -> ClusterState {
    let text = [
        pools.to_string(),
        // MetalLB's usage examples: a pinned address, in both spellings.
        service("nginx", "metallb.universe.tf/loadBalancerIPs: 192.168.10.100", None),
        service("pinned-new", "metallb.io/loadBalancerIPs: 192.168.10.101", None),
        // A pool chosen by annotation.
        service("from-second", "metallb.universe.tf/address-pool: second-pool", None),
        // Two Services sharing one address with a sharing key.
        service_on(
            "dns-tcp",
            "metallb.universe.tf/allow-shared-ip: dns, metallb.universe.tf/loadBalancerIPs: 192.168.10.53",
            None,
            "{port: 53, protocol: TCP}",
        ),
        service_on(
            "dns-udp",
            "metallb.io/allow-shared-ip: dns, metallb.io/loadBalancerIPs: 192.168.10.53",
            None,
            "{port: 53, protocol: UDP}",
        ),
        // An address MetalLB assigned earlier, only in the status.
        service("assigned", "", Some("192.168.9.3")),
        // Both spellings, disagreeing: Tideway's is used, and an Event names both.
        service(
            "both",
            "tideway.io/load-balancer-ips: 192.168.10.7, metallb.io/loadBalancerIPs: 192.168.10.8",
            None,
        ),
    ]
    .concat();
    let m = load_str("metallb.yaml", &text);
    assert!(m.errors.is_empty(), "{:?}", m.errors);
    ClusterState::from_snapshot(m.snapshot)
}

fn ingress(actions: &[Action], name: &str) -> Vec<IpAddr> {
    actions
        .iter()
        .find_map(|a| match a {
            Action::SetIngress { service, ips } if service.name == name => Some(ips.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn every_metallb_address_and_annotation_is_kept() {
    every_address_and_annotation_is_kept_with(POOLS);
}

#[test]
fn every_address_is_kept_with_metallbs_own_objects() {
    every_address_and_annotation_is_kept_with(METALLB_POOLS);
    let state = cluster(METALLB_POOLS);
    let pools: Vec<(&str, bool)> = state.pools().map(|p| (p.name(), p.l2.enabled)).collect();
    assert_eq!(pools, [("first-pool", true), ("second-pool", true)], "the empty advertisement covers both");
    // MetalLB's pools have no LoadBalancerPool status to write.
    let actions = Reconciler::new(None).reconcile(&state, &Changes::default(), &Default::default());
    assert!(!actions.iter().any(|a| matches!(a, Action::PoolStatus { .. })), "{actions:#?}");
}

fn every_address_and_annotation_is_kept_with(pools: &str) {
    let state = cluster(pools);
    let mut rec = Reconciler::new(None);
    let actions = rec.reconcile(&state, &Changes::default(), &Default::default());
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(ingress(&actions, "nginx"), [ip("192.168.10.100")]);
    assert_eq!(ingress(&actions, "pinned-new"), [ip("192.168.10.101")]);
    let second = ingress(&actions, "from-second");
    assert!(second.len() == 1 && second[0].to_string().starts_with("192.168.20."), "{second:?}");
    assert_eq!(ingress(&actions, "dns-tcp"), [ip("192.168.10.53")]);
    assert_eq!(ingress(&actions, "dns-udp"), [ip("192.168.10.53")], "{actions:#?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::SetIngress { service, .. } if service.name == "assigned")),
        "the address MetalLB assigned stays as it is: {actions:#?}"
    );
    assert_eq!(ingress(&actions, "both"), [ip("192.168.10.7")]);
    let conflicts: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) if e.reason == "AnnotationConflict" => Some(e.message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert!(
        conflicts[0].contains("tideway.io/load-balancer-ips")
            && conflicts[0].contains("metallb.io/loadBalancerIPs"),
        "{conflicts:?}"
    );
    // Decided again (a resync): the conflict is not recorded twice.
    rec.resync();
    let again = rec.reconcile(&state, &Changes::default(), &Default::default());
    assert!(!again.iter().any(|a| matches!(a, Action::Event(e) if e.reason == "AnnotationConflict")));
}

#[test]
fn a_bad_address_in_a_metallb_annotation_is_named_by_its_key() {
    let text =
        format!("{POOLS}{}", service("typo", "metallb.universe.tf/loadBalancerIPs: 192.168.10.300", None));
    let m = load_str("typo.yaml", &text);
    let svc = m.snapshot.services.iter().find(|s| s.name.name == "typo").expect("the Service still converts");
    let error = svc.load_balancer.as_ref().and_then(|lb| lb.error.clone()).unwrap_or_default();
    assert!(error.contains("metadata.annotations[metallb.universe.tf/loadBalancerIPs]"), "{error}");
}

/// MetalLB's objects as `tideway migrate` reads them: every object of a YAML stream.
fn metallb_objects(text: &str) -> (Vec<IPAddressPool>, Vec<L2Advertisement>) {
    let (mut pools, mut ads) = (Vec::new(), Vec::new());
    for doc in text.split("\n---\n").filter(|d| !d.trim().is_empty()) {
        let v: serde_json::Value = serde_saphyr::from_str(doc).expect("yaml");
        match v["kind"].as_str() {
            Some("IPAddressPool") => pools.push(serde_json::from_value(v).expect("pool")),
            Some("L2Advertisement") => ads.push(serde_json::from_value(v).expect("advertisement")),
            other => panic!("{other:?}"),
        }
    }
    (pools, ads)
}

fn as_yaml(pools: &[LoadBalancerPool]) -> String {
    pools.iter().map(|p| format!("---\n{}", serde_saphyr::to_string(p).expect("yaml"))).collect()
}

/// The `LoadBalancerPool`s written for MetalLB's example objects keep every address and
/// annotation, as MetalLB's own objects do.
#[test]
fn every_address_is_kept_with_the_pools_written_for_metallbs_objects() {
    let (pools, ads) = metallb_objects(METALLB_POOLS);
    let (written, conflicts) = load_balancer_pools(&pools, &ads).expect("converts");
    assert!(conflicts.is_empty());
    let text = as_yaml(&written);
    assert!(!text.contains("metallb"), "{text}");
    every_address_and_annotation_is_kept_with(&text);
}

/// Pools selected by name and by label, node selectors, interfaces, a pool no advertisement
/// covers, a pool named twice: the written pools convert to exactly the pools the operator
/// makes of MetalLB's objects.
#[test]
fn written_pools_convert_to_the_pools_made_of_metallbs_objects() {
    let objects = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: gold, namespace: metallb-system, labels: {tier: gold}}
spec:
  addresses: [192.168.10.0/24]
  avoidBuggyIPs: true
  serviceAllocation: {priority: 5, namespaces: [shop], serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: [web]}]}]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: silver, namespace: metallb-system}
spec: {addresses: [192.168.20.1-192.168.20.9], autoAssign: false}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: dark, namespace: metallb-system}
spec: {addresses: ["fc00::/120"]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: gold, namespace: other}
spec: {addresses: [10.0.0.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: by-label, namespace: metallb-system}
spec:
  ipAddressPoolSelectors: [{matchLabels: {tier: gold}}]
  nodeSelectors: [{matchLabels: {kubernetes.io/hostname: node-a}}, {matchExpressions: [{key: edge, operator: Exists}]}]
  interfaces: [eth1]
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: by-name, namespace: metallb-system}
spec: {ipAddressPools: [silver]}
"#;
    let state = ClusterState::from_snapshot(load_str("metallb.yaml", objects).snapshot);
    let (pools, ads) = metallb_objects(objects);
    let (written, conflicts) = load_balancer_pools(&pools, &ads).expect("converts");
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!((conflicts[0].name.as_str(), conflicts[0].ignored.as_str()), ("gold", "other"));
    let mut written: Vec<_> = written
        .iter()
        .map(|p| tideway_api::crd::load_balancer_pool(p).expect("the written pool converts"))
        .collect();
    written.sort_by(|a, b| a.name().cmp(b.name()));
    let from_metallb: Vec<_> = state.pools().cloned().collect();
    assert_eq!(written.len(), 3);
    assert_eq!(from_metallb.len(), 3);
    for (w, m) in written.iter().zip(&from_metallb) {
        assert_eq!((&w.pool, &w.l2), (&m.pool, &m.l2), "{}", m.name());
    }
    let dark = written.iter().find(|p| p.name() == "dark").expect("dark");
    assert!(!dark.l2.enabled, "no advertisement covers it: not announced, as in MetalLB");
}

/// MetalLB's BGP objects as its documentation writes them, beside a Tideway `BGPPeer` of one of
/// their names: the Tideway peer is used and the clash named; a MetalLB object Tideway cannot
/// honour (`vrf`) is refused with its field and skipped; the rest reach the decision.
#[test]
fn metallb_bgp_objects_are_read_as_they_are_and_tideway_objects_win_their_names() {
    let objects = r#"
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: sample, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1, bfdProfile: full}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: in-vrf, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.2, vrf: red}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: full, namespace: metallb-system}
spec: {receiveInterval: 380, transmitInterval: 270, detectMultiplier: 37, echoMode: true}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: local, namespace: metallb-system}
spec: {ipAddressPools: [bgp-pool], aggregationLength: 32, localPref: 100, communities: [vpn-only]}
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec: {communities: [{name: vpn-only, value: "1234:1"}]}
---
apiVersion: tideway.io/v1alpha1
kind: BGPPeer
metadata: {name: sample}
spec: {myASN: 64512, peerASN: 64513, peerAddress: 172.30.0.1}
"#;
    let manifest = load_str("bgp.yaml", objects);
    assert_eq!(manifest.errors.len(), 1, "{:?}", manifest.errors);
    assert!(manifest.errors[0].message.contains("spec.vrf"), "{}", manifest.errors[0].message);
    assert!(manifest.ignored.is_empty(), "{:?}", manifest.ignored);
    let state = ClusterState::from_snapshot(manifest.snapshot);
    let bgp = state.bgp();
    let peers: Vec<_> = bgp.peers.iter().map(|p| (p.name.as_str(), p.my_asn)).collect();
    assert_eq!(peers, [("sample", 64512)], "the Tideway peer is used");
    assert_eq!(bgp.conflicts.len(), 1);
    assert_eq!(
        bgp.conflicts[0].to_string(),
        "BGPPeer metallb-system/sample (metallb.io) is not used: BGPPeer sample has the name \"sample\""
    );
    assert_eq!(bgp.bfd_profiles[0].detect_multiplier, 37);
    assert_eq!(bgp.advertisements[0].local_pref, Some(100));
    assert_eq!(bgp.communities[0].name, "vpn-only");
}
