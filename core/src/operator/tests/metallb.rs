//! Taking over from MetalLB (`--metallb-compat`): an address Tideway never announced stays on
//! the node MetalLB announces it from (its `ServiceL2Status`) while that node is eligible.

use super::*;
use crate::announce::Change;
use crate::model::ServiceL2Status;

/// A Service MetalLB left: its address in its status, one ready endpoint on node-a.
fn taken_over(c: &mut Cluster, name: &str, cluster_ip: &str, addr: &str) {
    c.state.apply(with_status(lb(name, cluster_ip), addr));
    c.state.apply(endpoints(name, &[("10.244.1.5", "node-a")]));
}

/// MetalLB's record that it announces `ns/name` from `node` (a speaker's object: one per
/// Service and node, under a generated name).
fn metallb_status(name: &str, node: &str) -> ServiceL2Status {
    ServiceL2Status {
        namespace: "metallb-system".into(),
        name: format!("l2-{name}-{node}"),
        service: ServiceName::new("ns", name),
        node: node.into(),
    }
}

/// Where Tideway alone would put `web` (no MetalLB status), after `prepare` on a fresh cluster.
fn balanced_choice(prepare: impl Fn(&mut Cluster)) -> Option<String> {
    let mut c = Cluster::new(None);
    taken_over(&mut c, "web", "10.96.0.1", "172.18.255.210");
    prepare(&mut c);
    c.step();
    c.announcer("web")
}

fn other_than(node: &str) -> &'static str {
    if node == "node-b" { "node-c" } else { "node-b" }
}

fn messages(c: &mut Cluster) -> Vec<String> {
    std::mem::take(&mut c.events).into_iter().map(|e| e.message).collect()
}

/// MetalLB announces the address from another node than Tideway would choose: that node keeps
/// it, and the Event says so.
#[test]
fn metallbs_announcer_is_kept_over_the_balanced_choice() {
    let balanced = balanced_choice(|_| {}).expect("announced");
    let metallb = other_than(&balanced);
    let mut c = Cluster::new(None);
    taken_over(&mut c, "web", "10.96.0.1", "172.18.255.210");
    c.state.apply(metallb_status("web", metallb));
    c.step();
    assert_eq!(c.announcer("web").as_deref(), Some(metallb), "not {balanced}");
    assert_eq!(c.ips("web"), ["172.18.255.210"], "the address is kept too");
    let said = messages(&mut c);
    assert!(
        said.iter()
            .any(|m| *m == format!("node {metallb} announces 172.18.255.210: {}", Change::KeptFromMetalLb)),
        "{said:?}"
    );
    assert!(said.iter().any(|m| m.ends_with("first announcer: MetalLB's announcing node, kept")), "{said:?}");
}

/// MetalLB's node is not ready, or excluded from load balancers: the balanced choice applies,
/// and the Event says why MetalLB's node was not kept.
#[test]
fn an_ineligible_metallb_announcer_gives_way_to_the_balanced_choice() {
    type Bar = fn(&mut crate::model::Node);
    let bars: [(&str, Bar); 2] = [
        ("node is not ready", |n| n.ready = false),
        ("exclude-from-external-load-balancers", |n| {
            n.labels.insert(crate::model::LABEL_EXCLUDE_FROM_EXTERNAL_LB.into(), "true".into());
        }),
    ];
    for (why, bar) in bars {
        for metallb in ["node-a", "node-b", "node-c"] {
            let barred = |c: &mut Cluster| {
                let mut n = c.state.node(metallb).cloned().expect("node");
                bar(&mut n);
                c.state.apply(n);
            };
            let balanced = balanced_choice(barred).expect("another node");
            let mut c = Cluster::new(None);
            taken_over(&mut c, "web", "10.96.0.1", "172.18.255.210");
            barred(&mut c);
            c.state.apply(metallb_status("web", metallb));
            c.step();
            assert_eq!(c.announcer("web"), Some(balanced), "{why}: MetalLB's {metallb}");
            let said = messages(&mut c);
            let told = format!("MetalLB's announcing node {metallb} is not eligible: ");
            assert!(said.iter().any(|m| m.contains(&told) && m.contains(why)), "{said:?}");
        }
    }
}

/// Once Tideway announces the address, MetalLB's status no longer counts: it moving to
/// another node, or going, moves nothing (nor after an operator restart).
#[test]
fn tideways_own_announcement_outweighs_metallbs_status() {
    let mut c = Cluster::new(None);
    taken_over(&mut c, "web", "10.96.0.1", "172.18.255.210");
    c.state.apply(metallb_status("web", "node-b"));
    c.step();
    assert_eq!(c.announcer("web").as_deref(), Some("node-b"));
    c.events.clear();
    // MetalLB's speaker on node-c takes over (its object replaces node-b's).
    c.state.delete::<ServiceL2Status>("metallb-system", "l2-web-node-b");
    c.state.apply(metallb_status("web", "node-c"));
    let writes = c.step();
    assert_eq!(c.announcer("web").as_deref(), Some("node-b"));
    assert!(writes.is_empty() && c.events.is_empty(), "{writes:?} {:?}", c.events);
    let mut again = Cluster { state: c.state.clone(), rec: Reconciler::new(None), events: Vec::new() };
    let writes = again.step();
    assert!(!writes.iter().any(|w| matches!(w, Action::Announce(_))), "{writes:?}");
    assert_eq!(again.announcer("web").as_deref(), Some("node-b"));
    // Gone entirely: still nothing moves.
    again.state.delete::<ServiceL2Status>("metallb-system", "l2-web-node-c");
    assert!(again.step().is_empty());
    assert_eq!(again.announcer("web").as_deref(), Some("node-b"));
}

/// MetalLB's placements count as load on the pass that takes them over: an address MetalLB
/// never announced avoids the node MetalLB announces the others from.
#[test]
fn metallbs_placements_count_as_load() {
    let mut alone = Cluster::new(None);
    taken_over(&mut alone, "a-new", "10.96.0.1", "172.18.255.210");
    alone.step();
    let crowded = alone.announcer("a-new").expect("announced");
    let mut c = Cluster::new(None);
    taken_over(&mut c, "a-new", "10.96.0.1", "172.18.255.210");
    for (i, name) in ["m1", "m2"].into_iter().enumerate() {
        taken_over(&mut c, name, &format!("10.96.0.{}", i + 2), &format!("172.18.255.{}", 211 + i));
        c.state.apply(metallb_status(name, &crowded));
    }
    c.step();
    assert_eq!((c.announcer("m1"), c.announcer("m2")), (Some(crowded.clone()), Some(crowded.clone())));
    let placed = c.announcer("a-new").expect("announced");
    assert_ne!(placed, crowded, "{crowded} already announces two addresses");
}

/// Services sharing an address agree on MetalLB's announcer, whichever of them has the status.
#[test]
fn services_sharing_an_address_keep_metallbs_announcer_together() {
    let shared = |c: &mut Cluster| {
        for (name, proto, cip) in
            [("dns-tcp", Protocol::Tcp, "10.96.0.10"), ("dns-udp", Protocol::Udp, "10.96.0.11")]
        {
            let svc = mk_service("ns", name)
                .cluster_ip(cip)
                .port("dns", proto, 53)
                .lb_request(|r| r.sharing_key = Some("dns".into()))
                .build();
            c.state.apply(with_status(svc, "172.18.255.220"));
            c.state.apply(endpoints(name, &[("10.244.1.5", "node-a")]));
        }
    };
    let mut alone = Cluster::new(None);
    shared(&mut alone);
    alone.step();
    let balanced = alone.announcer("dns-tcp").expect("announced");
    let metallb = other_than(&balanced);
    let mut c = Cluster::new(None);
    shared(&mut c);
    c.state.apply(metallb_status("dns-udp", metallb));
    c.step();
    assert_eq!(c.announcer("dns-tcp").as_deref(), Some(metallb), "not {balanced}");
    assert_eq!(c.announcer("dns-udp").as_deref(), Some(metallb));
}

/// MetalLB's objects read (`--metallb-compat`): its pool of the demo's addresses.
fn metallb_pool() -> crate::model::MetalLbPool {
    crate::model::MetalLbPool {
        namespace: "metallb-system".into(),
        labels: Default::default(),
        pool: crate::model::Pool::new("my-ippool", &["172.18.255.200-172.18.255.250"]),
        generation: 1,
    }
}

/// The node MetalLB's election picks for `ip` among `nodes`: the smallest sha256(node#ip).
fn elected(ip: &str, nodes: &[&str]) -> String {
    let ip: std::net::IpAddr = ip.parse().unwrap();
    nodes.iter().min_by_key(|n| crate::announce::announcer_hash(n, ip)).unwrap().to_string()
}

/// Endpoints of `name` on every node: all three may announce, as MetalLB's speakers saw them.
fn everywhere(c: &mut Cluster, name: &str) {
    let eps = [("10.244.1.5", "node-a"), ("10.244.2.5", "node-b"), ("10.244.3.5", "node-c")];
    c.state.apply(endpoints(name, &eps));
}

/// Three Services MetalLB left (`web0`..`web2`) whose addresses its election piles on one
/// node, where spreading would not; that node. MetalLB's pool is read when `compat`.
fn piled_up(compat: bool) -> (Cluster, String) {
    let nodes = ["node-a", "node-b", "node-c"];
    let ips: Vec<String> = (200..250).map(|i| format!("172.18.255.{i}")).collect();
    let first = elected(&ips[0], &nodes);
    let piled: Vec<&String> = ips.iter().filter(|ip| elected(ip, &nodes) == first).take(3).collect();
    assert_eq!(piled.len(), 3, "three addresses MetalLB elects {first} for");
    let mut c = Cluster::new(None);
    if compat {
        c.state.apply(metallb_pool());
    }
    for (i, ip) in piled.iter().enumerate() {
        let name = format!("web{i}");
        c.state.apply(with_status(lb(&name, &format!("10.96.0.{}", i + 2)), ip));
        everywhere(&mut c, &name);
    }
    (c, first)
}

/// No `ServiceL2Status` was read (the speakers went first: their statuses go with their Pods):
/// each address MetalLB gave out goes where MetalLB's own election put it, even where
/// Tideway's spreading would choose another node; an address Tideway gives out is spread.
#[test]
fn without_metallbs_statuses_an_address_it_gave_out_goes_where_its_election_put_it() {
    let (mut c, first) = piled_up(true);
    c.step();
    for i in 0..3 {
        assert_eq!(c.announcer(&format!("web{i}")), Some(first.clone()), "web{i}");
    }
    let said: Vec<String> = messages(&mut c).into_iter().filter(|m| m.contains(" announces ")).collect();
    assert!(
        said.iter().all(|m| m.ends_with("first announcer: the node MetalLB's election picks")),
        "{said:?}"
    );
    assert_eq!(said.len(), 3, "{said:?}");

    // A new Service: its address is Tideway's to give and to place (away from the pile).
    c.state.apply(lb("new", "10.96.0.9"));
    everywhere(&mut c, "new");
    c.step();
    c.step();
    assert_ne!(c.announcer("new"), Some(first.clone()), "spread, not piled");
    assert!(messages(&mut c).iter().any(|m| m.ends_with(": first announcer")));
}

/// Without MetalLB's objects read (no compat), a Service's address in its status and no
/// announcement of Tideway's is placed by Tideway's spreading, as before.
#[test]
fn without_compat_a_status_address_is_spread() {
    let (mut c, _) = piled_up(false);
    c.step();
    let mut placed: Vec<Option<String>> = (0..3).map(|i| c.announcer(&format!("web{i}"))).collect();
    placed.sort();
    placed.dedup();
    assert_eq!(placed.len(), 3, "one address per node: {placed:?}");
}
