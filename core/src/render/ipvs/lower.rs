//! IPVS layout: one virtual server per frontend, ipsets for classification, a few iptables rules.
//!
//! Follows kube-proxy's IPVS mode (ipset and chain names), with two deliberate differences so
//! every backend behaves alike: Local-policy frontends without local endpoints are dropped by
//! explicit rules (kube-proxy's IPVS mode forwards them), and every rule exists even when its
//! ipset is empty (the rule set does not change with Services).

use std::net::IpAddr;

use smallvec::smallvec;

use crate::config::Scheduler;
use crate::net::{IpFamily, Protocol};
use crate::plan::{Backend, NodePlan, NodePortDestinations, ServicePortPlan, Target};
use crate::program::{
    Action, BaseHook, Chain, ChainKind, CtState, Element, Field, Fragment, Hook, KeyType, Match, Name,
    RealServer, Rule, Set, SetFlags, SetRef, Value, Verdict, VirtualServer,
};
use crate::render::chains::*;
use crate::render::local_traffic::detector;

/// The dummy interface holding every service address.
pub const DUMMY_INTERFACE: &str = "kube-ipvs0";

/// The ipset holding every address bound to the dummy interface.
pub const IPVS_IPS: &str = KUBE_IPVS_IPS;

/// The longest ipset name the kernel accepts.
const MAX_SET_NAME: usize = 31;

/// ipset name for a family: kube-proxy's `KUBE-6-` prefix for IPv6, cut to 31 characters as
/// kube-proxy does (`KUBE-6-LOAD-BALANCER-SOURCE-CIDR` becomes `KUBE-6-LOAD-BALANCER-SOURCE-CID`).
pub fn set_name(family: IpFamily, name: &str) -> String {
    match family {
        IpFamily::V4 => name.to_string(),
        IpFamily::V6 => {
            let mut n = name.replacen("KUBE-", "KUBE-6-", 1);
            n.truncate(MAX_SET_NAME);
            n
        }
    }
}

const IP_PORT: [Field; 3] = [Field::DstIp, Field::Proto, Field::DstPort];

fn jump(c: &str) -> Action {
    Action::Verdict(Verdict::Jump(c.into()))
}

fn comment(c: &str) -> Match {
    Match::Comment(c.into())
}

struct Sets {
    family: IpFamily,
}

impl Sets {
    fn name(&self, n: &str) -> Name {
        set_name(self.family, n).into()
    }

    fn r(&self, n: &str) -> SetRef {
        SetRef { table: FILTER, name: self.name(n) }
    }

    fn matches(&self, n: &str, key: &[Field], neg: bool) -> Match {
        Match::InSet { set: self.name(n), key: key.to_vec(), neg }
    }

    fn def(&self, n: &str, kind: &'static str, shared: bool) -> Set {
        let addr = KeyType::Addr(self.family);
        let key = match kind {
            "hash:ip,port" => vec![addr, KeyType::Proto, KeyType::Port],
            "hash:ip,port,ip" => vec![addr, KeyType::Proto, KeyType::Port, addr],
            "hash:ip,port,net" => vec![addr, KeyType::Proto, KeyType::Port, KeyType::Net(self.family)],
            "hash:ip" => vec![addr],
            _ => vec![KeyType::Port],
        };
        Set {
            table: FILTER,
            name: self.name(n),
            key,
            data: None,
            flags: SetFlags::default(),
            ipset_type: Some(kind),
            shared,
            elements: Vec::new(),
            comment: None,
        }
    }
}

fn protos() -> [Protocol; 3] {
    [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
}

fn np_set(kind: &str, p: Protocol) -> String {
    format!("KUBE-NODE-PORT-{kind}{}", p.as_str().to_uppercase())
}

fn builtin(
    table: &'static str,
    name: &str,
    hook: Hook,
    kind: ChainKind,
    priority: i32,
    rules: Vec<Rule>,
) -> Chain {
    Chain { hook: Some(BaseHook { hook, kind, priority }), builtin: true, ..Chain::new(table, name, rules) }
}

/// ipsets, chains and rules that do not depend on Services.
pub fn base(np: &NodePlan) -> Fragment {
    let s = Sets { family: np.family };
    let mark = np.masquerade_mark;
    let new = || Match::Ct(CtState::New);
    let mut sets = vec![
        s.def(KUBE_CLUSTER_IP, "hash:ip,port", false),
        s.def(KUBE_LOOP_BACK, "hash:ip,port,ip", true),
        s.def(KUBE_EXTERNAL_IP, "hash:ip,port", false),
        s.def(KUBE_EXTERNAL_IP_LOCAL, "hash:ip,port", false),
        s.def(KUBE_LOAD_BALANCER, "hash:ip,port", false),
        s.def(KUBE_LOAD_BALANCER_LOCAL, "hash:ip,port", false),
        s.def(KUBE_LOAD_BALANCER_FW, "hash:ip,port", false),
        s.def(KUBE_LOAD_BALANCER_SOURCE_CIDR, "hash:ip,port,net", false),
        s.def(KUBE_LOAD_BALANCER_SOURCE_IP, "hash:ip,port,ip", false),
        s.def(KUBE_HEALTH_CHECK_NODE_PORT, "bitmap:port", true),
        s.def(IPVS_IPS, "hash:ip", true),
        s.def(KUBE_INTERNAL_NO_LOCAL, "hash:ip,port", false),
        s.def(KUBE_EXTERNAL_NO_LOCAL, "hash:ip,port", false),
    ];
    for p in protos() {
        for kind in ["", "LOCAL-", "NO-LOCAL-"] {
            sets.push(s.def(&np_set(kind, p), "bitmap:port", false));
        }
    }
    let portals = || comment("kubernetes service portals");
    let mut chains = vec![
        builtin(
            FILTER,
            "INPUT",
            Hook::Input,
            ChainKind::Filter,
            0,
            vec![
                Rule::new(vec![comment("kubernetes ipvs access filter")], jump(KUBE_IPVS_FILTER)),
                Rule::new(
                    vec![new(), comment("kubernetes load balancer firewall")],
                    jump(KUBE_PROXY_FIREWALL),
                ),
                Rule::new(vec![comment("kubernetes health check rules")], jump(KUBE_NODE_PORT)),
                Rule::new(
                    vec![new(), comment("kubernetes externally-visible service portals")],
                    jump(KUBE_EXTERNAL_SERVICES),
                ),
            ],
        ),
        builtin(
            FILTER,
            "FORWARD",
            Hook::Forward,
            ChainKind::Filter,
            0,
            vec![
                Rule::new(
                    vec![new(), comment("kubernetes load balancer firewall")],
                    jump(KUBE_PROXY_FIREWALL),
                ),
                Rule::new(vec![comment("kubernetes forwarding rules")], jump(KUBE_FORWARD)),
            ],
        ),
        builtin(
            FILTER,
            "OUTPUT",
            Hook::Output,
            ChainKind::Filter,
            0,
            vec![Rule::new(
                vec![new(), comment("kubernetes load balancer firewall")],
                jump(KUBE_PROXY_FIREWALL),
            )],
        ),
        builtin(
            NAT,
            "PREROUTING",
            Hook::Prerouting,
            ChainKind::Nat,
            -100,
            vec![Rule::new(vec![portals()], jump(KUBE_SERVICES))],
        ),
        builtin(
            NAT,
            "OUTPUT",
            Hook::Output,
            ChainKind::Nat,
            -100,
            vec![Rule::new(vec![portals()], jump(KUBE_SERVICES))],
        ),
        builtin(
            NAT,
            "POSTROUTING",
            Hook::Postrouting,
            ChainKind::Nat,
            100,
            vec![Rule::new(vec![comment("kubernetes postrouting rules")], jump(KUBE_POSTROUTING))],
        ),
    ];
    // nat KUBE-SERVICES: masquerade decisions; IPVS itself does the DNAT.
    let mut services =
        vec![Rule::new(vec![Match::Src(np.family.loopback_net(), false)], Action::Verdict(Verdict::Return))];
    services.push(Rule::new(
        vec![comment("Kubernetes service lb portal"), s.matches(KUBE_LOAD_BALANCER, &IP_PORT, false)],
        jump(KUBE_LOAD_BALANCER),
    ));
    let cluster_ip = || {
        vec![
            comment("Kubernetes service cluster ip + port for masquerade purpose"),
            s.matches(KUBE_CLUSTER_IP, &IP_PORT, false),
        ]
    };
    if np.masquerade_all {
        services.push(Rule::new(cluster_ip(), jump(KUBE_MARK_MASQ)));
    } else if let Some(not_local) = detector(np, false) {
        let mut m = cluster_ip();
        m.push(not_local);
        services.push(Rule::new(m, jump(KUBE_MARK_MASQ)));
    }
    let ext = || {
        vec![
            comment("Kubernetes service external ip + port for masquerade and filter purpose"),
            s.matches(KUBE_EXTERNAL_IP, &IP_PORT, false),
        ]
    };
    services.push(Rule::new(ext(), jump(KUBE_MARK_MASQ)));
    services.push(Rule::new(ext(), Action::Verdict(Verdict::Accept)));
    services.push(Rule::new(
        vec![
            comment("Kubernetes service external ip + port with externalTrafficPolicy=local"),
            s.matches(KUBE_EXTERNAL_IP_LOCAL, &IP_PORT, false),
        ],
        Action::Verdict(Verdict::Accept),
    ));
    services.push(Rule::new(vec![Match::DstLocal(true)], jump(KUBE_NODE_PORT)));
    services
        .push(Rule::new(vec![s.matches(KUBE_CLUSTER_IP, &IP_PORT, false)], Action::Verdict(Verdict::Accept)));
    services.push(Rule::new(
        vec![s.matches(KUBE_LOAD_BALANCER, &IP_PORT, false)],
        Action::Verdict(Verdict::Accept),
    ));
    chains.push(Chain::new(NAT, KUBE_SERVICES, services));
    chains.push(Chain::new(
        NAT,
        KUBE_LOAD_BALANCER,
        vec![
            Rule::new(
                vec![s.matches(KUBE_LOAD_BALANCER_LOCAL, &IP_PORT, false)],
                Action::Verdict(Verdict::Return),
            ),
            Rule::new(vec![], jump(KUBE_MARK_MASQ)),
        ],
    ));
    let mut nodeport_nat = Vec::new();
    for p in protos() {
        let port = [Field::DstPort];
        nodeport_nat.push(Rule::new(
            vec![Match::Proto(p), s.matches(&np_set("LOCAL-", p), &port, false)],
            Action::Verdict(Verdict::Return),
        ));
        nodeport_nat.push(Rule::new(
            vec![Match::Proto(p), s.matches(&np_set("", p), &port, false)],
            jump(KUBE_MARK_MASQ),
        ));
    }
    chains.push(Chain::new(NAT, KUBE_NODE_PORT, nodeport_nat));
    chains.push(Chain::new(
        NAT,
        KUBE_POSTROUTING,
        vec![
            Rule::new(
                vec![
                    comment("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
                    s.matches(
                        KUBE_LOOP_BACK,
                        &[Field::DstIp, Field::Proto, Field::DstPort, Field::SrcIp],
                        false,
                    ),
                ],
                Action::Masquerade { fully_random: false },
            ),
            Rule::new(vec![Match::Mark(mark, true)], Action::Verdict(Verdict::Return)),
            Rule::new(vec![], Action::MarkXor(mark)),
            Rule::new(
                vec![comment("kubernetes service traffic requiring SNAT")],
                Action::Masquerade { fully_random: true },
            ),
        ],
    ));
    chains.push(Chain::new(NAT, KUBE_MARK_MASQ, vec![Rule::new(vec![], Action::MarkOr(mark))]));

    // filter
    chains.push(Chain::new(
        FILTER,
        KUBE_FORWARD,
        vec![
            Rule::new(vec![Match::Ct(CtState::Invalid)], Action::Verdict(Verdict::Drop)),
            Rule::new(
                vec![comment("kubernetes forwarding rules"), Match::Mark(mark, false)],
                Action::Verdict(Verdict::Accept),
            ),
            Rule::new(
                vec![comment("kubernetes forwarding conntrack rule"), Match::Ct(CtState::RelatedEstablished)],
                Action::Verdict(Verdict::Accept),
            ),
        ],
    ));
    chains.push(Chain::new(
        FILTER,
        KUBE_NODE_PORT,
        vec![Rule::new(
            vec![
                comment("Kubernetes health check node port"),
                s.matches(KUBE_HEALTH_CHECK_NODE_PORT, &[Field::DstPort], false),
            ],
            Action::Verdict(Verdict::Accept),
        )],
    ));
    chains.push(Chain::new(
        FILTER,
        KUBE_PROXY_FIREWALL,
        vec![Rule::new(
            vec![s.matches(KUBE_LOAD_BALANCER_FW, &IP_PORT, false)],
            jump(KUBE_SOURCE_RANGES_FIREWALL),
        )],
    ));
    let with_src = [Field::DstIp, Field::Proto, Field::DstPort, Field::SrcIp];
    chains.push(Chain::new(
        FILTER,
        KUBE_SOURCE_RANGES_FIREWALL,
        vec![
            Rule::new(
                vec![s.matches(KUBE_LOAD_BALANCER_SOURCE_CIDR, &with_src, false)],
                Action::Verdict(Verdict::Return),
            ),
            Rule::new(
                vec![s.matches(KUBE_LOAD_BALANCER_SOURCE_IP, &with_src, false)],
                Action::Verdict(Verdict::Return),
            ),
            Rule::new(vec![], Action::Verdict(Verdict::Drop)),
        ],
    ));
    let mut ipvs_filter: Vec<Rule> =
        [KUBE_LOAD_BALANCER, KUBE_CLUSTER_IP, KUBE_EXTERNAL_IP, KUBE_EXTERNAL_IP_LOCAL]
            .iter()
            .map(|n| Rule::new(vec![s.matches(n, &IP_PORT, false)], Action::Verdict(Verdict::Return)))
            .collect();
    ipvs_filter.push(Rule::new(
        vec![s.matches(KUBE_HEALTH_CHECK_NODE_PORT, &[Field::DstPort], false)],
        Action::Verdict(Verdict::Return),
    ));
    ipvs_filter.push(Rule::new(
        vec![new(), s.matches(IPVS_IPS, &[Field::DstIp], false)],
        Action::Verdict(Verdict::Reject),
    ));
    chains.push(Chain::new(FILTER, KUBE_IPVS_FILTER, ipvs_filter));
    // Local policy without local endpoints: drop (internal: all sources; external: sources
    // that are neither pods nor the node, which are served by every endpoint instead).
    let mut external_only: Vec<Match> = Vec::new();
    external_only.extend(detector(np, false));
    external_only.push(Match::SrcLocal(false));
    let mut no_local = vec![Rule::new(
        vec![
            comment("internalTrafficPolicy=Local without local endpoints"),
            s.matches(KUBE_INTERNAL_NO_LOCAL, &IP_PORT, false),
        ],
        Action::Verdict(Verdict::Drop),
    )];
    let mut m = vec![
        comment("externalTrafficPolicy=Local without local endpoints"),
        s.matches(KUBE_EXTERNAL_NO_LOCAL, &IP_PORT, false),
    ];
    m.extend(external_only.clone());
    no_local.push(Rule::new(m, Action::Verdict(Verdict::Drop)));
    for p in protos() {
        let mut m = vec![
            Match::Proto(p),
            s.matches(&np_set("NO-LOCAL-", p), &[Field::DstPort], false),
            Match::DstLocal(true),
        ];
        m.extend(external_only.clone());
        no_local.push(Rule::new(m, Action::Verdict(Verdict::Drop)));
    }
    chains.push(Chain::new(FILTER, KUBE_EXTERNAL_SERVICES, no_local));
    // Link-local only: IPVS takes the ClusterIP's packets at LOCAL_IN, before any socket.
    if let Some(dns) = np.node_dns.as_ref().filter(|d| !d.local.is_empty()) {
        let link_local = crate::plan::NodeDnsPlan { diverted: Vec::new(), ..dns.clone() };
        chains.extend(crate::render::node_dns::raw_chains(&link_local));
    }
    Fragment { chains, sets, ..Fragment::default() }
}

fn ip_port(ip: IpAddr, p: &ServicePortPlan) -> Element {
    Element { key: smallvec![Value::Ip(ip), Value::Proto(p.name.protocol), Value::Port(p.port)], data: None }
}

fn real_servers(eps: &[Backend]) -> Vec<RealServer> {
    let mut rs: Vec<RealServer> =
        eps.iter().map(|b| RealServer { ip: b.ip, port: b.port, weight: 1 }).collect();
    rs.sort();
    rs
}

/// Lowers one service port: virtual servers and ipset entries.
pub fn lower_plan(np: &NodePlan, plan: &ServicePortPlan, scheduler: Scheduler) -> Fragment {
    // A Service's own scheduler (its load-balancing annotation) wins over the node's.
    let scheduler = match plan.balancing.balancing {
        crate::plan::Balancing::Scheduler(own) => own,
        crate::plan::Balancing::Maglev { .. } => Scheduler::Mh,
        crate::plan::Balancing::Random => scheduler,
    };
    let s = Sets { family: np.family };
    let mut frag = Fragment::default();
    let mut add = |set: &str, e: Element| frag.elements.push((s.r(set), e));
    let internal = plan.internal_target();
    let external = plan.external_target();
    let pick = |t: Target| -> Vec<RealServer> {
        match t {
            Target::Cluster => real_servers(&plan.cluster_endpoints),
            Target::Local => real_servers(&plan.local_endpoints),
            // No real server: IPVS answers ICMP port unreachable (reject); drops are rules.
            Target::Drop | Target::Reject => Vec::new(),
        }
    };
    let comment: Name = plan.name.to_string().into();
    let mut vs = Vec::new();
    let make = |ip: IpAddr, port: u16, rs: Vec<RealServer>| VirtualServer {
        ip,
        protocol: plan.name.protocol,
        port,
        scheduler,
        persistence: plan.affinity_timeout,
        real_servers: rs,
        comment: comment.clone(),
    };
    // External Drop only applies to outside sources (a rule drops them); pods and the node are
    // still served by every endpoint, as with the other backends' short-circuit.
    let ext_rs =
        if external == Target::Drop { real_servers(&plan.cluster_endpoints) } else { pick(external) };
    if let Some(cip) = plan.cluster_ip {
        vs.push(make(cip, plan.port, pick(internal)));
        add(KUBE_CLUSTER_IP, ip_port(cip, plan));
        add(IPVS_IPS, Element { key: smallvec![Value::Ip(cip)], data: None });
        if internal == Target::Drop {
            add(KUBE_INTERNAL_NO_LOCAL, ip_port(cip, plan));
        }
    }
    for ip in &plan.external_ips {
        vs.push(make(*ip, plan.port, ext_rs.clone()));
        add(if plan.external_local { KUBE_EXTERNAL_IP_LOCAL } else { KUBE_EXTERNAL_IP }, ip_port(*ip, plan));
        add(IPVS_IPS, Element { key: smallvec![Value::Ip(*ip)], data: None });
        if external == Target::Drop {
            add(KUBE_EXTERNAL_NO_LOCAL, ip_port(*ip, plan));
        }
    }
    for ip in &plan.load_balancer_ips {
        vs.push(make(*ip, plan.port, ext_rs.clone()));
        add(KUBE_LOAD_BALANCER, ip_port(*ip, plan));
        add(IPVS_IPS, Element { key: smallvec![Value::Ip(*ip)], data: None });
        if plan.external_local {
            add(KUBE_LOAD_BALANCER_LOCAL, ip_port(*ip, plan));
        }
        if external == Target::Drop {
            add(KUBE_EXTERNAL_NO_LOCAL, ip_port(*ip, plan));
        }
        if plan.uses_firewall() {
            add(KUBE_LOAD_BALANCER_FW, ip_port(*ip, plan));
            for range in &plan.source_ranges {
                let mut e = ip_port(*ip, plan);
                e.key.push(Value::Net(*range));
                add(KUBE_LOAD_BALANCER_SOURCE_CIDR, e);
            }
            if plan.allow_from_node {
                for src in &plan.load_balancer_ips {
                    let mut e = ip_port(*ip, plan);
                    e.key.push(Value::Ip(*src));
                    add(KUBE_LOAD_BALANCER_SOURCE_IP, e);
                }
            }
        }
    }
    if let Some(port) = plan.node_port {
        let node_ips = match &np.node_ports {
            NodePortDestinations::AllLocal => np.node_ips.clone(),
            NodePortDestinations::Ips(ips) => ips.clone(),
        };
        for ip in node_ips {
            vs.push(make(ip, port, ext_rs.clone()));
        }
        let p = plan.name.protocol;
        let kind = if plan.external_local { "LOCAL-" } else { "" };
        add(&np_set(kind, p), Element { key: smallvec![Value::Port(port)], data: None });
        if external == Target::Drop {
            add(&np_set("NO-LOCAL-", p), Element { key: smallvec![Value::Port(port)], data: None });
        }
    }
    if let Some(hc) = plan.health_check_node_port {
        add(KUBE_HEALTH_CHECK_NODE_PORT, Element { key: smallvec![Value::Port(hc)], data: None });
    }
    for ep in plan.reachable_endpoints() {
        let e = Element {
            key: smallvec![
                Value::Ip(ep.ip),
                Value::Proto(plan.name.protocol),
                Value::Port(ep.port),
                Value::Ip(ep.ip),
            ],
            data: None,
        };
        add(KUBE_LOOP_BACK, e);
    }
    frag.virtual_servers = vs;
    frag.shrunk()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_set_names_fit_the_kernel_limit() {
        assert_eq!(
            set_name(IpFamily::V6, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(set_name(IpFamily::V6, "KUBE-CLUSTER-IP"), "KUBE-6-CLUSTER-IP");
        assert_eq!(
            set_name(IpFamily::V4, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
            "KUBE-LOAD-BALANCER-SOURCE-CIDR"
        );
    }
}
