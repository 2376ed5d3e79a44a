//! The reconciler against a cluster that carries out its writes (as the API server would), over
//! a sequence of changes.

use std::collections::BTreeMap;

use super::*;
use crate::ipam::Pool;
use crate::model::{
    EndpointSlice, IpMode, L2Announcement, L2Settings, LoadBalancerIngress, LoadBalancerPool, NodeProxyState,
    Service,
};
use crate::net::Protocol;
use crate::testing::{ip, mk_node, mk_service, mk_slice};

/// A cluster state that applies the reconciler's writes, and what it was asked.
struct Cluster {
    state: ClusterState,
    rec: Reconciler,
    events: Vec<Event>,
}

impl Cluster {
    fn new(class: Option<&str>) -> Cluster {
        let mut state = ClusterState::new();
        for (n, addr) in [("node-a", "192.168.0.10"), ("node-b", "192.168.0.11"), ("node-c", "192.168.0.12")]
        {
            state.apply(mk_node(n, addr, "z"));
        }
        state.apply(pool("default", &["172.18.255.200-172.18.255.250"]));
        Cluster { state, rec: Reconciler::new(class.map(str::to_string)), events: Vec::new() }
    }

    /// One reconcile; applies its writes; returns them without the Events (kept apart).
    fn step(&mut self) -> Vec<Action> {
        self.step_with(&BTreeMap::new())
    }

    fn step_with(&mut self, invalid: &BTreeMap<String, String>) -> Vec<Action> {
        let refused = Refused { proxy_configs: invalid.clone(), ..Default::default() };
        self.step_refusing(&refused)
    }

    fn step_refusing(&mut self, refused: &Refused) -> Vec<Action> {
        let changes = self.state.take_changes();
        let actions = self.rec.reconcile(&self.state, &changes, refused);
        let mut writes = Vec::new();
        for a in actions {
            match a {
                Action::Event(e) => self.events.push(e),
                Action::SetIngress { service, ips } => {
                    let mut svc = self.state.service(&service).cloned().expect("written Service exists");
                    svc.load_balancer_ingress = ips
                        .iter()
                        .map(|ip| LoadBalancerIngress { ip: Some(*ip), hostname: None, ip_mode: IpMode::Vip })
                        .collect();
                    self.state.apply(svc);
                    writes.push(Action::SetIngress { service, ips });
                }
                Action::Announce(a) => {
                    self.state.apply(a.clone());
                    writes.push(Action::Announce(a));
                }
                Action::Withdraw(s) => {
                    self.state.delete::<L2Announcement>(&s.namespace, &s.name);
                    writes.push(Action::Withdraw(s));
                }
                other => writes.push(other),
            }
        }
        writes
    }

    fn ips(&self, name: &str) -> Vec<String> {
        let svc = self.state.service(&ServiceName::new("ns", name)).expect("service");
        observed_ips(svc).iter().map(ToString::to_string).collect()
    }

    fn announcer(&self, name: &str) -> Option<String> {
        self.state.announcement(&ServiceName::new("ns", name)).and_then(|a| a.node.clone())
    }

    fn reasons(&mut self) -> Vec<&'static str> {
        std::mem::take(&mut self.events).into_iter().map(|e| e.reason).collect()
    }
}

fn pool(name: &str, addresses: &[&str]) -> LoadBalancerPool {
    LoadBalancerPool {
        pool: Pool::new(name, addresses),
        l2: L2Settings::default(),
        generation: 1,
        origin: Default::default(),
    }
}

fn lb(name: &str, cluster_ip: &str) -> Service {
    mk_service("ns", name).cluster_ip(cluster_ip).port("http", Protocol::Tcp, 80).load_balancer().build()
}

fn with_status(mut svc: Service, addr: &str) -> Service {
    svc.load_balancer_ingress.push(LoadBalancerIngress {
        ip: Some(ip(addr)),
        hostname: None,
        ip_mode: IpMode::Vip,
    });
    svc
}

fn endpoints(svc: &str, on: &[(&str, &str)]) -> crate::model::EndpointSlice {
    on.iter()
        .fold(mk_slice("ns", svc).port("http", Protocol::Tcp, 8080), |s, (addr, node)| s.ready(addr, node))
        .build()
}

fn set_ingress_for(writes: &[Action]) -> Vec<(String, Vec<String>)> {
    writes
        .iter()
        .filter_map(|a| match a {
            Action::SetIngress { service, ips } => {
                Some((service.name.clone(), ips.iter().map(ToString::to_string).collect()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_restart_keeps_every_address_and_new_services_take_the_lowest_free_one() {
    let mut c = Cluster::new(None);
    c.state.apply(with_status(lb("kept", "10.96.0.1"), "172.18.255.200"));
    c.state.apply(lb("new", "10.96.0.2"));
    let other_class = mk_service("ns", "theirs")
        .cluster_ip("10.96.0.3")
        .lb_ip("203.0.113.9")
        .lb_request(|r| r.class = Some("other.io/lb".into()))
        .build();
    c.state.apply(other_class);
    c.state.apply(mk_service("ns", "plain").cluster_ip("10.96.0.4").build());
    let writes = c.step();
    assert_eq!(set_ingress_for(&writes), vec![("new".into(), vec!["172.18.255.201".into()])]);
    assert_eq!(c.ips("kept"), ["172.18.255.200"], "restored before anything was handed out");
    assert_eq!(c.ips("theirs"), ["203.0.113.9"], "another class is not ours to touch");
    assert!(c.reasons().contains(&"IPAllocated"));
    // Every write has landed: a second pass writes nothing.
    assert!(c.step().is_empty());

    // A new operator (restart) over the same cluster moves nobody.
    let mut again = Cluster { state: c.state.clone(), rec: Reconciler::new(None), events: Vec::new() };
    let writes = again.step();
    assert!(set_ingress_for(&writes).is_empty(), "{writes:?}");
    assert!(!writes.iter().any(|w| matches!(w, Action::Announce(_))), "announcers are kept too: {writes:?}");
}

#[test]
fn addresses_are_released_on_delete_and_type_change_and_reused() {
    let mut c = Cluster::new(None);
    c.state.apply(lb("a", "10.96.0.1"));
    c.state.apply(lb("b", "10.96.0.2"));
    c.step();
    assert_eq!((c.ips("a"), c.ips("b")), (vec!["172.18.255.200".into()], vec!["172.18.255.201".into()]));
    // a becomes ClusterIP: its address goes, and the status we wrote is cleared.
    let mut a = c.state.service(&ServiceName::new("ns", "a")).cloned().unwrap();
    a.service_type = crate::model::ServiceType::ClusterIp;
    a.load_balancer = None;
    c.state.apply(a);
    let writes = c.step();
    assert_eq!(set_ingress_for(&writes), vec![("a".into(), vec![])]);
    assert!(writes.contains(&Action::Withdraw(ServiceName::new("ns", "a"))));
    // b is deleted; a new Service gets the lowest free address again.
    c.state.delete::<Service>("ns", "b");
    c.step();
    c.state.apply(lb("c", "10.96.0.5"));
    c.step();
    assert_eq!(c.ips("c"), ["172.18.255.200"]);
}

#[test]
fn failures_are_reported_once_and_nothing_assigned_is_lost() {
    let mut c = Cluster::new(None);
    c.state.apply(lb("a", "10.96.0.1"));
    c.step();
    c.reasons();
    let outside = mk_service("ns", "outside")
        .cluster_ip("10.96.0.2")
        .port("http", Protocol::Tcp, 80)
        .lb_request(|r| r.ips = vec![ip("10.1.2.3")])
        .build();
    let garbled = mk_service("ns", "garbled")
        .cluster_ip("10.96.0.3")
        .port("http", Protocol::Tcp, 80)
        .lb_request(|r| r.error = Some("annotation: \"1.2.3\" is not a valid IP address".into()))
        .build();
    c.state.apply(outside);
    c.state.apply(garbled);
    c.step();
    let failures: Vec<Event> = std::mem::take(&mut c.events);
    assert_eq!(failures.iter().filter(|e| e.reason == "AllocationFailed").count(), 2, "{failures:?}");
    assert!(failures.iter().any(|e| e.message.contains("10.1.2.3 is not in any address pool")));
    // Unrelated churn repeats no Event.
    c.state.apply(lb("d", "10.96.0.9"));
    c.step();
    assert!(!c.reasons().contains(&"AllocationFailed"));

    // A pool overlapping the first is invalid; what it would clash with is kept.
    c.state.apply(pool("zz-overlap", &["172.18.255.240/28"]));
    let writes = c.step();
    let report = writes.iter().find_map(|w| match w {
        Action::PoolStatus { name, status } if name == "zz-overlap" => Some(status.clone()),
        _ => None,
    });
    assert!(!report.expect("pool status").valid.status);
    assert!(c.reasons().contains(&"InvalidPool"));
    assert_eq!(c.ips("a"), ["172.18.255.200"]);
}

/// The `Valid` condition of pool `name` in `writes`, if its status was written.
fn pool_valid(writes: &[Action], name: &str) -> Option<Condition> {
    writes.iter().find_map(|w| match w {
        Action::PoolStatus { name: n, status } if n == name => Some(status.valid.clone()),
        _ => None,
    })
}

#[test]
fn a_pool_whose_stored_version_is_refused_says_why_and_keeps_its_last_valid_version() {
    let mut c = Cluster::new(None);
    c.state.apply(lb("a", "10.96.0.1"));
    c.step();
    assert_eq!(c.ips("a"), ["172.18.255.200"]);
    let why = "spec.addresses[0]: 172.18.255.250-172.18.255.200: the first address is after the last";
    let refused = |names: &[&str]| Refused {
        pools: names.iter().map(|n| (n.to_string(), why.to_string())).collect(),
        ..Default::default()
    };

    // An edit of a pool in use: the last valid version stays in force, and the status says so.
    let writes = c.step_refusing(&refused(&["default"]));
    let valid = pool_valid(&writes, "default").expect("the refused pool's status is written");
    assert_eq!((valid.status, valid.reason), (false, "InvalidSpec"), "{valid:?}");
    assert!(
        valid.message.contains("the last valid one stays in force") && valid.message.ends_with(why),
        "{valid:?}"
    );
    assert_eq!(c.ips("a"), ["172.18.255.200"]);
    assert_eq!(pool_valid(&c.step_refusing(&refused(&["default"])), "default"), None, "written once");

    // A pool never valid gets a status too, and hands out nothing.
    let writes = c.step_refusing(&refused(&["default", "new"]));
    let valid = pool_valid(&writes, "new").expect("the new pool's status is written");
    assert!(!valid.status && valid.message.contains("none was valid before"), "{valid:?}");

    // Mended: Valid again.
    c.state.apply(pool("default", &["172.18.255.200-172.18.255.250"]));
    let valid = pool_valid(&c.step(), "default").expect("status written again");
    assert!(valid.status, "{valid:?}");
}

#[test]
fn an_announcer_moves_only_when_it_becomes_ineligible() {
    let mut c = Cluster::new(None);
    let local = mk_service("ns", "web")
        .cluster_ip("10.96.0.1")
        .port("http", Protocol::Tcp, 80)
        .etp_local()
        .load_balancer()
        .build();
    c.state.apply(local);
    c.state.apply(endpoints("web", &[("10.244.1.5", "node-a"), ("10.244.2.5", "node-b")]));
    c.step();
    let first = c.announcer("web").expect("announced");
    assert!(first == "node-a" || first == "node-b", "only nodes with a local endpoint: {first}");
    let ann = c.state.announcement(&ServiceName::new("ns", "web")).unwrap().clone();
    assert_eq!(ann.eligible, ["node-a", "node-b"]);
    // An endpoint appears on node-c: eligible grows, the announcer stays.
    c.state.apply(endpoints(
        "web",
        &[("10.244.1.5", "node-a"), ("10.244.2.5", "node-b"), ("10.244.3.5", "node-c")],
    ));
    c.step();
    assert_eq!(c.announcer("web").as_deref(), Some(first.as_str()));
    c.reasons();
    // The announcer's endpoint leaves: another node takes over, and says why.
    let rest: Vec<(&str, &str)> =
        [("10.244.1.5", "node-a"), ("10.244.2.5", "node-b"), ("10.244.3.5", "node-c")]
            .into_iter()
            .filter(|(_, n)| *n != first)
            .collect();
    c.state.apply(endpoints("web", &rest));
    c.step();
    let second = c.announcer("web").expect("still announced");
    assert_ne!(second, first);
    let moved: Vec<Event> = std::mem::take(&mut c.events);
    assert!(
        moved
            .iter()
            .any(|e| e.reason == "AnnouncerChanged" && e.message.contains("no local serving endpoint")),
        "{moved:?}"
    );
    // The node goes not-ready: the announcer moves again; with no endpoint at all, nobody.
    let mut n = c.state.node(&second).cloned().unwrap();
    n.ready = false;
    c.state.apply(n);
    c.step();
    assert_ne!(c.announcer("web").as_deref(), Some(second.as_str()));
    c.state.delete::<EndpointSlice>("ns", "web-abcde");
    c.step();
    assert_eq!(c.announcer("web"), None);
    assert!(c.reasons().contains(&"NoAnnouncer"));
}

#[test]
fn services_sharing_an_address_share_its_announcer() {
    let mut c = Cluster::new(None);
    let dns = |name: &str, proto: Protocol, cip: &str| {
        mk_service("ns", name)
            .cluster_ip(cip)
            .port("dns", proto, 53)
            .lb_request(|r| r.sharing_key = Some("dns".into()))
            .build()
    };
    c.state.apply(dns("dns-tcp", Protocol::Tcp, "10.96.0.1"));
    c.state.apply(dns("dns-udp", Protocol::Udp, "10.96.0.2"));
    c.state.apply(endpoints("dns-tcp", &[("10.244.1.5", "node-a")]));
    c.state.apply(endpoints("dns-udp", &[("10.244.1.5", "node-a")]));
    c.step();
    assert_eq!(c.ips("dns-tcp"), c.ips("dns-udp"), "one address for both");
    assert_eq!(c.announcer("dns-tcp"), c.announcer("dns-udp"));
    assert!(c.announcer("dns-tcp").is_some());
}

#[test]
fn proxy_config_status_is_written_when_it_changes() {
    use crate::config::{ProxyConfig, ProxyMode};
    let mut c = Cluster::new(None);
    c.state.apply(ProxyConfig::every_node("default", 2, crate::config::ProxySettings::default()));
    let statuses = |w: &[Action]| -> Vec<ConfigStatus> {
        w.iter()
            .filter_map(|a| match a {
                Action::ProxyConfigStatus { status, .. } => Some(status.clone()),
                _ => None,
            })
            .collect()
    };
    let first = statuses(&c.step());
    assert_eq!((first[0].selected, first[0].programmed), (3, 0));
    assert!(statuses(&c.step()).is_empty(), "unchanged: not written again");
    c.state.apply(crate::model::NodeProxyState {
        node: "node-a".into(),
        mode: Some(ProxyMode::Nftables),
        proxy_config: Some("default".into()),
        proxy_config_generation: Some(2),
        ready: true,
        ..Default::default()
    });
    assert_eq!(statuses(&c.step())[0].programmed, 1);
    let invalid: BTreeMap<String, String> =
        [("default".to_string(), "spec.mode: unknown".to_string())].into();
    let degraded = statuses(&c.step_with(&invalid));
    assert!(degraded[0].conditions.iter().any(|k| k.kind == "Degraded" && k.status));
    assert!(c.reasons().contains(&"InvalidSpec"));
}

#[test]
fn a_dead_agent_moves_the_address_off_its_ready_node() {
    use crate::model::AgentLiveness;
    let mut c = Cluster::new(None);
    c.state.apply(lb("web", "10.96.0.1"));
    c.state.apply(endpoints("web", &[("10.244.1.5", "node-a")]));
    c.step();
    let first = c.announcer("web").expect("announced");
    c.reasons();
    // Liveness arrives for every node: alive moves nothing.
    for n in ["node-a", "node-b", "node-c"] {
        c.state.set_agent_liveness(n, AgentLiveness::Alive);
    }
    assert!(!c.step().iter().any(|w| matches!(w, Action::Announce(_))));
    // The announcer's agent dies; its Node stays Ready.
    c.state.set_agent_liveness(&first, AgentLiveness::Dead);
    c.step();
    let second = c.announcer("web").expect("another node announces");
    assert_ne!(second, first);
    assert!(c.state.node(&first).unwrap().ready, "the Node never changed");
    let ann = c.state.announcement(&ServiceName::new("ns", "web")).unwrap();
    assert!(!ann.eligible.contains(&first));
    let events = std::mem::take(&mut c.events);
    assert!(
        events.iter().any(|e| e.reason == "AnnouncerChanged" && e.message.contains("agent is down")),
        "{events:?}"
    );
    // It comes back: eligible again, but the address stays where it is.
    c.state.set_agent_liveness(&first, AgentLiveness::Alive);
    c.step();
    assert_eq!(c.announcer("web"), Some(second.clone()));
    // A restarted operator knows nothing yet (Unknown): it moves nothing.
    let mut fresh = c.state.clone();
    for n in ["node-a", "node-b", "node-c"] {
        fresh.set_agent_liveness(n, AgentLiveness::Unknown);
    }
    let mut again = Cluster { state: fresh, rec: Reconciler::new(None), events: Vec::new() };
    assert!(!again.step().iter().any(|w| matches!(w, Action::Announce(_))));
}

#[test]
fn a_node_lacking_the_pools_interfaces_is_left_out_until_it_has_one() {
    use crate::model::NodeProxyState;
    let mut c = Cluster::new(None);
    let mut vlan = pool("default", &["172.18.255.200-172.18.255.250"]);
    vlan.l2.interfaces = vec!["vlan100".into(), "vlan200".into()];
    c.state.apply(vlan);
    let lacking = |node: &str, missing: &[&str]| NodeProxyState {
        node: node.into(),
        missing_interfaces: missing.iter().map(|m| m.to_string()).collect(),
        ..Default::default()
    };
    // node-c lacks both interfaces; node-b lacks one, which leaves it eligible.
    c.state.apply(lacking("node-c", &["vlan100", "vlan200"]));
    c.state.apply(lacking("node-b", &["vlan200"]));
    for (i, name) in ["a", "b", "d", "e"].iter().enumerate() {
        c.state.apply(lb(name, &format!("10.96.0.{}", i + 1)));
        c.state.apply(endpoints(name, &[("10.244.1.5", "node-a")]));
    }
    c.step();
    let announcers: Vec<Option<String>> = ["a", "b", "d", "e"].iter().map(|n| c.announcer(n)).collect();
    assert!(announcers.iter().all(|a| matches!(a.as_deref(), Some("node-a" | "node-b"))), "{announcers:?}");
    c.reasons();
    // The announcer of `a` loses its last listed interface: `a` moves, and the Event says why.
    let first = c.announcer("a").expect("announced");
    c.state.apply(lacking(&first, &["vlan100", "vlan200"]));
    c.step();
    let second = c.announcer("a").expect("the other node");
    assert_ne!(second, first);
    assert_ne!(second, "node-c");
    let events = std::mem::take(&mut c.events);
    assert!(events.iter().any(|e| e.message.contains("L2 interfaces")), "{events:?}");
    // node-c gains one: it may announce again (nothing moves only for that).
    c.state.apply(lacking("node-c", &["vlan200"]));
    c.state.apply(lb("f", "10.96.0.9"));
    c.state.apply(endpoints("f", &[("10.244.1.5", "node-a")]));
    c.step();
    let ann = c.state.announcement(&ServiceName::new("ns", "f")).expect("announced");
    assert!(ann.eligible.contains(&"node-c".to_string()), "{ann:?}");
    assert!(!ann.eligible.contains(&first), "{ann:?}");
}

#[test]
fn the_node_rules_move_an_address_and_say_why() {
    let mut c = Cluster::new(None);
    c.state.apply(lb("web", "10.96.0.1"));
    c.state.apply(endpoints("web", &[("10.244.1.5", "node-a")]));
    c.step();
    let mut announcers = vec![c.announcer("web").expect("announced")];
    c.reasons();
    type Rule = fn(&mut crate::model::Node);
    let rules: [(&str, Rule); 3] = [
        ("exclude-from-external-load-balancers", |n| {
            n.labels.insert(crate::model::LABEL_EXCLUDE_FROM_EXTERNAL_LB.into(), "true".into());
        }),
        ("NetworkUnavailable", |n| n.network_unavailable = true),
        ("ToBeDeletedByClusterAutoscaler", |n| {
            let key = crate::model::TAINT_TO_BE_DELETED.into();
            n.taints.push(crate::model::Taint { key, value: String::new(), effect: "NoSchedule".into() });
        }),
    ];
    for (why, rule) in rules {
        let mut n = c.state.node(announcers.last().unwrap()).cloned().unwrap();
        rule(&mut n);
        c.state.apply(n);
        c.step();
        let events = std::mem::take(&mut c.events);
        let now = c.announcer("web");
        assert!(events.iter().any(|e| e.message.contains(why)), "{why}: {events:?} (now {now:?})");
        announcers.extend(now);
    }
    assert_eq!(announcers.len(), 3, "three nodes, each barred in turn: {announcers:?}");
    assert_eq!(c.announcer("web"), None);
}

#[test]
fn announcers_are_spread_and_never_moved_only_to_rebalance() {
    use crate::model::AgentLiveness;
    let mut c = Cluster::new(None);
    let names: Vec<String> = (0..6).map(|i| format!("web{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        c.state.apply(lb(name, &format!("10.96.0.{}", i + 1)));
        c.state.apply(endpoints(name, &[("10.244.1.5", "node-a")]));
    }
    c.step();
    let per_node = |c: &Cluster| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for n in &names {
            *counts.entry(c.announcer(n).expect("announced")).or_default() += 1;
        }
        counts
    };
    let even: BTreeMap<String, usize> =
        [("node-a".into(), 2), ("node-b".into(), 2), ("node-c".into(), 2)].into();
    assert_eq!(per_node(&c), even, "six addresses over three nodes");
    // node-b's agent dies: its two addresses go one to each of the others.
    c.state.set_agent_liveness("node-b", AgentLiveness::Dead);
    c.step();
    let three: BTreeMap<String, usize> = [("node-a".into(), 3), ("node-c".into(), 3)].into();
    assert_eq!(per_node(&c), three);
    // It comes back: nothing moves to rebalance; the next address goes to it.
    c.state.set_agent_liveness("node-b", AgentLiveness::Alive);
    c.step();
    assert_eq!(per_node(&c), three, "eligible again, but nothing moves");
    c.state.apply(lb("late", "10.96.0.99"));
    c.state.apply(endpoints("late", &[("10.244.1.5", "node-a")]));
    c.step();
    assert_eq!(c.announcer("late").as_deref(), Some("node-b"));
    // A restarted operator counts what the cluster shows: the next one goes to node-b too.
    let mut again = Cluster { state: c.state.clone(), rec: Reconciler::new(None), events: Vec::new() };
    again.step();
    again.state.apply(lb("later", "10.96.0.98"));
    again.state.apply(endpoints("later", &[("10.244.1.5", "node-a")]));
    again.step();
    assert_eq!(again.announcer("later").as_deref(), Some("node-b"));
}

#[test]
fn a_load_balancing_no_node_can_program_is_told_once_per_fallback() {
    use crate::config::{ProxyConfig, ProxyMode, ProxySettings};
    let mut c = Cluster::new(None);
    let settings = ProxySettings { mode: ProxyMode::Iptables, ..Default::default() };
    let config = ProxyConfig::every_node("default", 1, settings);
    c.state.apply(config);
    let mut svc = mk_service("ns", "web").cluster_ip("10.96.0.10").port("http", Protocol::Tcp, 80).build();
    svc.load_balancing = Some("maglev".into());
    c.state.apply(svc.clone());
    c.state.apply(mk_service("ns", "plain").cluster_ip("10.96.0.11").port("http", Protocol::Tcp, 80).build());
    c.step();
    let events = std::mem::take(&mut c.events);
    let told: Vec<_> = events.iter().filter(|e| e.reason == "LoadBalancingUnavailable").collect();
    assert_eq!(told.len(), 1, "{events:?}");
    assert_eq!(told[0].object, ObjectRef::service(&ServiceName::new("ns", "web")));
    assert!(told[0].warning);
    assert_eq!(
        told[0].message,
        "load-balancing maglev is not available in iptables mode; using random (on node-a, node-b, node-c)"
    );
    // The same fallback is not told again: not by a resync, an endpoint change or a report.
    c.rec.resync();
    c.state.apply(endpoints("web", &[("10.244.1.5", "node-a")]));
    c.state.apply(crate::model::NodeProxyState {
        node: "node-a".into(),
        mode: Some(ProxyMode::Iptables),
        ..Default::default()
    });
    c.step();
    assert!(!c.reasons().contains(&"LoadBalancingUnavailable"));
    // Another one is.
    svc.load_balancing = Some("lc".into());
    c.state.apply(svc.clone());
    c.step();
    assert_eq!(c.reasons(), ["LoadBalancingUnavailable"]);
    // A mode that can program it: nothing to tell; a fallback that comes back is told again.
    let mut nft = c.state.proxy_configs().next().cloned().expect("config");
    nft.settings.mode = ProxyMode::Nftables;
    nft.generation = 2;
    c.state.apply(nft.clone());
    c.state.delete::<NodeProxyState>("", "node-a");
    svc.load_balancing = Some("maglev".into());
    c.state.apply(svc.clone());
    c.step();
    assert!(c.reasons().is_empty());
    nft.settings.mode = ProxyMode::Iptables;
    nft.generation = 3;
    c.state.apply(nft);
    c.step();
    assert_eq!(c.reasons(), ["LoadBalancingUnavailable"]);
}

mod metallb;
