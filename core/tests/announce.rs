//! The layer-2 announcer moves only when it must.
//!
//! A deterministic random walk churns nodes (join, leave, readiness, agent liveness, the node
//! rules, zone labels) and each
//! Service's endpoints (per node, and elsewhere) and sometimes its traffic policy. After every
//! step, for every address: the eligible set equals a model's, the announcer is eligible
//! whenever any node is, it moves exactly when the previous one became ineligible (or there
//! was none), a forced choice is the model's smallest sha256(node#ip), the reason names what
//! the model says, and the choice does not depend on input order.

use std::collections::BTreeMap;
use std::net::IpAddr;

use sha2::{Digest, Sha256};
use tideway_core::announce::{
    Change, Ineligible, LocalEndpoints, NodeInfo, ServiceTraffic, choose_announcer, decide,
};
use tideway_core::config::LabelSelector;
use tideway_core::model::{AgentLiveness, LABEL_EXCLUDE_FROM_EXTERNAL_LB, TrafficPolicy};
use tideway_core::testing::random::Rng;

const NODES: u64 = 10;
const ZONES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
struct Node {
    ready: bool,
    agent: AgentLiveness,
    zone: &'static str,
    /// Which node rule bars it, if any (mostly none).
    rule: Option<Ineligible>,
}

fn random_rule(rng: &mut Rng) -> Option<Ineligible> {
    match rng.below(9) {
        0 => Some(Ineligible::Excluded),
        1 => Some(Ineligible::NetworkUnavailable),
        2 => Some(Ineligible::ToBeDeleted),
        3 => Some(Ineligible::NoInterface),
        _ => None,
    }
}

fn random_agent(rng: &mut Rng) -> AgentLiveness {
    [AgentLiveness::Unknown, AgentLiveness::Alive, AgentLiveness::Dead][rng.below(3) as usize]
}

#[derive(Debug, Clone)]
struct Svc {
    ip: IpAddr,
    policy: TrafficPolicy,
    /// Pool L2 node selectors: zones (empty: every node).
    zones: Vec<&'static str>,
    local: BTreeMap<String, LocalEndpoints>,
    /// A serving endpoint on a node nobody lists (or without a node name).
    elsewhere: bool,
    announcer: Option<String>,
}

fn node_name(i: u64) -> String {
    format!("node-{i}")
}

fn random_local(rng: &mut Rng) -> LocalEndpoints {
    [LocalEndpoints::Absent, LocalEndpoints::Ready, LocalEndpoints::ServingTerminating][rng.below(3) as usize]
}

fn new_service(rng: &mut Rng, i: u8) -> Svc {
    let ip =
        if i.is_multiple_of(3) { format!("fd00:192::2{i:02}") } else { format!("192.168.0.{}", 200 + i) };
    let zones = match rng.below(4) {
        0 => vec![ZONES[rng.below(3) as usize]],
        1 => vec!["a", "b"],
        _ => vec![],
    };
    let policy = if rng.below(2) == 0 { TrafficPolicy::Cluster } else { TrafficPolicy::Local };
    Svc { ip: ip.parse().unwrap(), policy, zones, local: BTreeMap::new(), elsewhere: false, announcer: None }
}

fn mutate(rng: &mut Rng, nodes: &mut BTreeMap<String, Node>, services: &mut [Svc]) {
    let name = node_name(rng.below(NODES));
    match rng.below(8) {
        0 => {
            let agent = random_agent(rng);
            let (ready, zone, rule) = (rng.below(4) != 0, ZONES[rng.below(3) as usize], random_rule(rng));
            nodes.insert(name, Node { ready, agent, zone, rule });
        }
        1 => {
            nodes.remove(&name);
        }
        2 => {
            nodes.entry(name).and_modify(|n| n.ready = !n.ready);
        }
        3 => {
            let zone = ZONES[rng.below(3) as usize];
            nodes.entry(name).and_modify(|n| n.zone = zone);
        }
        4 if rng.below(2) == 0 => {
            let agent = random_agent(rng);
            nodes.entry(name).and_modify(|n| n.agent = agent);
        }
        5 if rng.below(2) == 0 => {
            let rule = random_rule(rng);
            nodes.entry(name).and_modify(|n| n.rule = rule);
        }
        4 => {
            let s = rng.below(services.len() as u64) as usize;
            services[s].elsewhere = !services[s].elsewhere;
        }
        5 if rng.below(10) == 0 => {
            let s = rng.below(services.len() as u64) as usize;
            services[s].policy = match services[s].policy {
                TrafficPolicy::Cluster => TrafficPolicy::Local,
                TrafficPolicy::Local => TrafficPolicy::Cluster,
            };
        }
        _ => {
            let s = rng.below(services.len() as u64) as usize;
            let local = random_local(rng);
            services[s].local.insert(name, local);
        }
    }
}

fn view(rng: &mut Rng, nodes: &BTreeMap<String, Node>, svc: &Svc) -> Vec<NodeInfo> {
    let mut list: Vec<NodeInfo> = nodes
        .iter()
        .map(|(name, n)| {
            let mut labels: BTreeMap<String, String> = [("zone".to_string(), n.zone.to_string())].into();
            if n.rule == Some(Ineligible::Excluded) {
                labels.insert(LABEL_EXCLUDE_FROM_EXTERNAL_LB.to_string(), "true".to_string());
            }
            NodeInfo {
                name: name.clone(),
                ready: n.ready,
                agent: n.agent,
                network_unavailable: n.rule == Some(Ineligible::NetworkUnavailable),
                to_be_deleted: n.rule == Some(Ineligible::ToBeDeleted),
                labels,
                local: svc.local.get(name).copied().unwrap_or_default(),
                lacks_interfaces: n.rule == Some(Ineligible::NoInterface),
            }
        })
        .collect();
    // Input order must not matter.
    for i in (1..list.len()).rev() {
        list.swap(i, rng.below(i as u64 + 1) as usize);
    }
    list
}

fn selectors(svc: &Svc) -> Vec<LabelSelector> {
    let zone = |z: &str| [("zone".to_string(), z.to_string())].into();
    svc.zones.iter().map(|z| LabelSelector { match_labels: zone(z), match_expressions: vec![] }).collect()
}

/// The model: why `name` may not announce for `svc`, if it may not.
fn model_ineligible(nodes: &BTreeMap<String, Node>, svc: &Svc, name: &str) -> Option<Ineligible> {
    let Some(n) = nodes.get(name) else { return Some(Ineligible::Gone) };
    let local = |name: &str| svc.local.get(name).is_some_and(|l| *l != LocalEndpoints::Absent);
    let serving_anywhere = svc.elsewhere || nodes.keys().any(|n| local(n));
    if !n.ready {
        Some(Ineligible::NotReady)
    } else if n.agent == AgentLiveness::Dead {
        Some(Ineligible::AgentDown)
    } else if n.rule.is_some() {
        n.rule
    } else if !svc.zones.is_empty() && !svc.zones.contains(&n.zone) {
        Some(Ineligible::Selector)
    } else if svc.policy == TrafficPolicy::Local && !local(name) {
        Some(Ineligible::NoLocalEndpoint)
    } else if svc.policy == TrafficPolicy::Cluster && !serving_anywhere {
        Some(Ineligible::NoServingEndpoints)
    } else {
        None
    }
}

fn model_hash_first(eligible: &[String], ip: IpAddr) -> Option<String> {
    let key = |n: &String| <[u8; 32]>::from(Sha256::digest(format!("{n}#{ip}").as_bytes()));
    eligible.iter().min_by_key(|n| key(n)).cloned()
}

#[derive(Debug, Default)]
struct Counts {
    moves: usize,
    forced: usize,
    kept_against_hash: usize,
}

fn step(rng: &mut Rng, nodes: &BTreeMap<String, Node>, svc: &mut Svc, counts: &mut Counts, at: &str) {
    let list = view(rng, nodes, svc);
    let local_anywhere = list.iter().any(|n| n.local.usable());
    let traffic = ServiceTraffic { policy: svc.policy, serving_endpoints: svc.elsewhere || local_anywhere };
    let current = svc.announcer.clone();
    let d = decide(svc.ip, &traffic, &list, &selectors(svc), current.as_deref());

    let want: Vec<String> =
        nodes.keys().filter(|n| model_ineligible(nodes, svc, n).is_none()).cloned().collect();
    assert_eq!(d.eligible, want, "{at}: eligible set");
    assert_eq!(d.announcer.is_some(), !want.is_empty(), "{at}: announcer iff any node is eligible");
    if let Some(a) = &d.announcer {
        assert!(want.contains(a), "{at}: announcer {a} not eligible");
    }
    let forced = match &current {
        Some(c) => !want.contains(c),
        None => !want.is_empty(),
    };
    let moved = d.announcer != current;
    assert_eq!(moved, forced, "{at}: moved={moved} forced={forced} ({current:?} -> {:?})", d.announcer);
    counts.moves += usize::from(moved);
    counts.forced += usize::from(forced);
    let hash_first = model_hash_first(&want, svc.ip);
    if forced {
        assert_eq!(d.announcer, hash_first, "{at}: a forced choice follows the hash");
    } else if d.announcer != hash_first {
        counts.kept_against_hash += 1;
    }
    let want_change = match (&current, forced) {
        (_, false) => None,
        (None, true) => Some(Change::FirstChoice),
        (Some(prev), true) => {
            let why = model_ineligible(nodes, svc, prev).expect("forced: previous is ineligible");
            let previous = prev.clone();
            Some(match d.announcer {
                Some(_) => Change::PreviousIneligible { previous, why },
                None => Change::NoneEligible { previous, why },
            })
        }
    };
    assert_eq!(d.change, want_change, "{at}: reason");
    let mut reversed = d.eligible.clone();
    reversed.reverse();
    assert_eq!(choose_announcer(svc.ip, &reversed, current.as_deref()), d.announcer, "{at}: pure");
    svc.announcer = d.announcer;
}

fn walk(seed: u64, steps: usize) -> Counts {
    let mut rng = Rng(seed);
    let mut nodes = BTreeMap::new();
    let mut services: Vec<Svc> = (0..12).map(|i| new_service(&mut rng, i)).collect();
    let mut counts = Counts::default();
    for n in 0..steps {
        mutate(&mut rng, &mut nodes, &mut services);
        for (i, svc) in services.iter_mut().enumerate() {
            step(&mut rng, &nodes, svc, &mut counts, &format!("seed {seed} step {n} svc {i}"));
        }
    }
    counts
}

#[test]
fn announcers_move_only_when_forced() {
    for seed in [1, 2, 3, 4] {
        let counts = walk(seed * 7919, 2000);
        assert_eq!(counts.moves, counts.forced);
        assert!(counts.forced > 100, "seed {seed}: the walk forces moves: {counts:?}");
        assert!(counts.kept_against_hash > 100, "seed {seed}: stickiness is exercised: {counts:?}");
    }
}
