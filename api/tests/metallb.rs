//! A cluster moving from MetalLB keeps its addresses: MetalLB's own example pool (its
//! `IPAddressPool`, moved over by changing `apiVersion` and `kind`) and Services as MetalLB users
//! annotate them (`metallb.universe.tf/*` and the newer `metallb.io/*`), some already holding the
//! address MetalLB gave them, read by the manifest loader and decided by the operator's core.

use std::net::IpAddr;

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

fn cluster() -> ClusterState {
    let text = [
        POOLS.to_string(),
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
    let state = cluster();
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
