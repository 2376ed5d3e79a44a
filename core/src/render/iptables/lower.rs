//! iptables layout: kube-proxy's chains, names and rule shapes (pkg/proxy/iptables/proxier.go).

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use crate::net::{IpFamily, IpNet};
use crate::plan::{Backend, NodePlan, NodePortDestinations, Ruleset, ServicePortPlan, Target};
use crate::program::{
    Action, BaseHook, Chain, ChainKind, ChainRef, CtState, Fragment, Hook, Match, Name, Rule, Verdict, name,
};
use crate::render::chains::{
    FILTER, KUBE_EXTERNAL_SERVICES, KUBE_FIREWALL, KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_NODEPORTS,
    KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_SERVICES, NAT,
};
use crate::render::local_traffic::detector;
use crate::render::names;

/// kube-proxy drops per-endpoint comments above this many endpoints ("large cluster mode").
pub const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

fn cref(table: &'static str, chain: &str) -> ChainRef {
    ChainRef { table, name: name(chain) }
}

fn jump(c: &str) -> Action {
    Action::Verdict(Verdict::Jump(name(c)))
}

fn jump_to(c: &Name) -> Action {
    Action::Verdict(Verdict::Jump(c.clone()))
}

fn comment(s: impl Into<Name>) -> Match {
    Match::Comment(s.into())
}

fn host(ip: IpAddr) -> Match {
    Match::Dst(IpNet::from(ip), false)
}

/// True when the ruleset is big enough for kube-proxy's large-cluster mode.
pub fn is_large(ruleset: &Ruleset, family: IpFamily) -> bool {
    ruleset.endpoint_total(family) > LARGE_CLUSTER_ENDPOINTS
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

fn new_conn() -> Match {
    Match::Ct(CtState::New)
}

/// Constant chains, the jumps from built-in chains, masquerade and forwarding rules.
pub fn base(np: &NodePlan) -> Fragment {
    let mark = np.masquerade_mark;
    let portals = || comment("kubernetes service portals");
    let external = || comment("kubernetes externally-visible service portals");
    let firewall = || comment("kubernetes load balancer firewall");
    let r = |m: Vec<Match>, c: &str| Rule::new(m, jump(c));
    // Built-in chains in the order kube-proxy's prepends leave them.
    let mut chains = vec![
        builtin(
            FILTER,
            "INPUT",
            Hook::Input,
            ChainKind::Filter,
            0,
            vec![
                r(vec![new_conn(), firewall()], KUBE_PROXY_FIREWALL),
                r(vec![comment("kubernetes health check service ports")], KUBE_NODEPORTS),
                r(vec![new_conn(), external()], KUBE_EXTERNAL_SERVICES),
            ],
        ),
        builtin(
            FILTER,
            "FORWARD",
            Hook::Forward,
            ChainKind::Filter,
            0,
            vec![
                r(vec![new_conn(), firewall()], KUBE_PROXY_FIREWALL),
                r(vec![comment("kubernetes forwarding rules")], KUBE_FORWARD),
                r(vec![new_conn(), portals()], KUBE_SERVICES),
                r(vec![new_conn(), external()], KUBE_EXTERNAL_SERVICES),
            ],
        ),
        builtin(
            FILTER,
            "OUTPUT",
            Hook::Output,
            ChainKind::Filter,
            0,
            vec![
                r(vec![new_conn(), firewall()], KUBE_PROXY_FIREWALL),
                r(vec![new_conn(), portals()], KUBE_SERVICES),
            ],
        ),
        builtin(
            NAT,
            "PREROUTING",
            Hook::Prerouting,
            ChainKind::Nat,
            -100,
            vec![r(vec![portals()], KUBE_SERVICES)],
        ),
        builtin(NAT, "OUTPUT", Hook::Output, ChainKind::Nat, -100, vec![r(vec![portals()], KUBE_SERVICES)]),
        builtin(
            NAT,
            "POSTROUTING",
            Hook::Postrouting,
            ChainKind::Nat,
            100,
            vec![r(vec![comment("kubernetes postrouting rules")], KUBE_POSTROUTING)],
        ),
    ];
    for name in [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL] {
        chains.push(Chain::new(FILTER, name, vec![]));
    }
    if np.localhost_node_ports {
        localnet_firewall(&mut chains);
    }
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
    // NodePorts: "this must be the last rule in this chain".
    let np_comment = "kubernetes service nodeports; NOTE: this must be the last rule in this chain";
    let tail = match &np.node_ports {
        NodePortDestinations::AllLocal => {
            let mut m = vec![comment(np_comment), Match::DstLocal(true)];
            if !np.localhost_node_ports {
                m.push(Match::Dst(np.family.loopback_net(), true));
            }
            vec![r(m, KUBE_NODEPORTS)]
        }
        NodePortDestinations::Ips(ips) => {
            ips.iter().map(|ip| r(vec![comment(np_comment), host(*ip)], KUBE_NODEPORTS)).collect()
        }
    };
    chains.push(Chain { tail, ..Chain::new(NAT, KUBE_SERVICES, vec![]) });
    chains.push(Chain::new(NAT, KUBE_NODEPORTS, vec![]));
    chains.push(Chain::new(
        NAT,
        KUBE_POSTROUTING,
        vec![
            Rule::new(vec![Match::Mark(mark, true)], Action::Verdict(Verdict::Return)),
            Rule::new(vec![], Action::MarkXor(mark)),
            Rule::new(
                vec![comment("kubernetes service traffic requiring SNAT")],
                Action::Masquerade { fully_random: true },
            ),
        ],
    ));
    chains.push(Chain::new(NAT, KUBE_MARK_MASQ, vec![Rule::new(vec![], Action::MarkOr(mark))]));
    if let Some(dns) = &np.node_dns {
        chains.extend(crate::render::node_dns::raw_chains(dns));
    }
    Fragment { chains, ..Fragment::default() }
}

/// Serving NodePorts on 127.0.0.1 needs `route_localnet`, which would let outside packets
/// addressed to 127.0.0.0/8 in: kube-proxy then writes kubelet's `KUBE-FIREWALL` rule that
/// drops them (kubernetes issue 90259), jumped to first from INPUT and OUTPUT.
fn localnet_firewall(chains: &mut Vec<Chain>) {
    for c in chains.iter_mut().filter(|c| c.table == FILTER && c.builtin) {
        if matches!(&*c.name, "INPUT" | "OUTPUT") {
            c.rules.insert(0, Rule::new(vec![], jump(KUBE_FIREWALL)));
        }
    }
    let loopback = IpFamily::V4.loopback_net();
    let drop = Rule::new(
        vec![
            comment("block incoming localnet connections"),
            Match::Dst(loopback, false),
            Match::Src(loopback, true),
            Match::Ct(CtState::NotRelatedEstablishedDnat),
        ],
        Action::Verdict(Verdict::Drop),
    );
    chains.push(Chain::new(FILTER, KUBE_FIREWALL, vec![drop]));
}

/// Lowers one service port exactly as kube-proxy writes it.
pub fn lower_plan(np: &NodePlan, plan: &ServicePortPlan, compact: bool) -> Fragment {
    let spn = plan.name.to_string();
    let spn_name: Name = spn.as_str().into();
    let proto = plan.name.protocol;
    let port = plan.port;
    let hash = names::port_proto_hash(&plan.name);
    let svc_chain = format!("KUBE-SVC-{hash}");
    let svl_chain = format!("KUBE-SVL-{hash}");
    let ext_chain = format!("KUBE-EXT-{hash}");
    let fw_chain = format!("KUBE-FW-{hash}");
    let mut frag = Fragment::default();
    let mut nat = |chain: &str, rule: Rule| frag.rules.push((cref(NAT, chain), rule));
    let mut filter_rules: Vec<(ChainRef, Rule)> = Vec::new();
    let mut filter = |chain: &str, rule: Rule| filter_rules.push((cref(FILTER, chain), rule));

    let internal = plan.internal_target();
    let external = plan.external_target();
    let seps = endpoint_chains(plan);
    let has_internal = matches!(internal, Target::Cluster | Target::Local);
    let has_external = matches!(external, Target::Cluster | Target::Local);
    let internal_chain = if plan.internal_local { &svl_chain } else { &svc_chain };
    let external_policy_chain = if plan.external_local { &svl_chain } else { &svc_chain };
    let filter_for = |t: Target| -> (Verdict, String) {
        match t {
            Target::Reject => (Verdict::Reject, format!("{spn} has no endpoints")),
            _ => (Verdict::Drop, format!("{spn} has no local endpoints")),
        }
    };
    let uses_external_chain = plan.has_endpoints && plan.externally_accessible();
    let uses_fw = plan.uses_firewall();
    let lb_chain = if uses_fw { &fw_chain } else { &ext_chain };
    let dport = |m: &mut Vec<Match>, p: u16| {
        m.push(Match::Proto(proto));
        m.push(Match::DstPort(p));
    };
    let capture = |c: String, ip: IpAddr| {
        let mut m = vec![comment(c)];
        m.push(Match::Proto(proto));
        m.push(host(ip));
        m.push(Match::DstPort(port));
        m
    };

    // Capture the ClusterIP.
    if let Some(cip) = plan.cluster_ip {
        if has_internal {
            nat(KUBE_SERVICES, Rule::new(capture(format!("{spn} cluster IP"), cip), jump(internal_chain)));
        } else {
            let (v, c) = filter_for(internal);
            filter(KUBE_SERVICES, Rule::new(capture(c, cip), Action::Verdict(v)));
        }
    }
    // Capture externalIPs.
    for ip in &plan.external_ips {
        if plan.has_endpoints {
            nat(KUBE_SERVICES, Rule::new(capture(format!("{spn} external IP"), *ip), jump(&ext_chain)));
        }
        if !has_external {
            let (v, c) = filter_for(external);
            filter(KUBE_EXTERNAL_SERVICES, Rule::new(capture(c, *ip), Action::Verdict(v)));
        }
    }
    // Capture load-balancer ingress.
    for ip in &plan.load_balancer_ips {
        if plan.has_endpoints {
            nat(KUBE_SERVICES, Rule::new(capture(format!("{spn} loadbalancer IP"), *ip), jump(lb_chain)));
        }
        if uses_fw {
            filter(
                KUBE_PROXY_FIREWALL,
                Rule::new(
                    capture(format!("{spn} traffic not accepted by {fw_chain}"), *ip),
                    Action::Verdict(Verdict::Drop),
                ),
            );
        }
    }
    if !has_external {
        for ip in &plan.load_balancer_ips {
            let (v, c) = filter_for(external);
            filter(KUBE_EXTERNAL_SERVICES, Rule::new(capture(c, *ip), Action::Verdict(v)));
        }
    }
    // Capture NodePorts.
    if let Some(node_port) = plan.node_port {
        if plan.has_endpoints {
            let mut m = vec![Match::Comment(spn_name.clone())];
            dport(&mut m, node_port);
            nat(KUBE_NODEPORTS, Rule::new(m, jump(&ext_chain)));
        }
        if !has_external {
            let (v, c) = filter_for(external);
            let mut m = vec![comment(c), Match::DstLocal(true)];
            dport(&mut m, node_port);
            filter(KUBE_EXTERNAL_SERVICES, Rule::new(m, Action::Verdict(v)));
        }
    }
    // Health-check NodePort: accepted regardless of local endpoints.
    if let Some(hc) = plan.health_check_node_port {
        let mut m = vec![comment(format!("{spn} health check node port"))];
        m.push(Match::Proto(crate::net::Protocol::Tcp));
        m.push(Match::DstPort(hc));
        filter(KUBE_NODEPORTS, Rule::new(m, Action::Verdict(Verdict::Accept)));
    }
    frag.rules.extend(filter_rules);

    let mut chains: Vec<Chain> = Vec::new();
    let chain_rules = |name: &str, rules: &mut Vec<(String, Vec<Rule>)>| -> usize {
        match rules.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                rules.push((name.to_string(), Vec::new()));
                rules.len() - 1
            }
        }
    };
    let mut per_chain: Vec<(String, Vec<Rule>)> = Vec::new();

    // Internal traffic: masquerade off-cluster (or all) traffic to the ClusterIP.
    if let (true, Some(cip)) = (has_internal, plan.cluster_ip) {
        let base = capture(format!("{spn} cluster IP"), cip);
        let i = chain_rules(internal_chain, &mut per_chain);
        if np.masquerade_all {
            per_chain[i].1.push(Rule::new(base, jump(KUBE_MARK_MASQ)));
        } else if let Some(not_local) = detector(np, false) {
            let mut m = base;
            m.push(not_local);
            per_chain[i].1.push(Rule::new(m, jump(KUBE_MARK_MASQ)));
        }
    }
    // External traffic.
    if uses_external_chain {
        let i = chain_rules(&ext_chain, &mut per_chain);
        let rules = &mut per_chain[i].1;
        if !plan.external_local {
            rules.push(Rule::new(
                vec![comment(format!("masquerade traffic for {spn} external destinations"))],
                jump(KUBE_MARK_MASQ),
            ));
        } else {
            if let Some(local) = detector(np, true) {
                rules.push(Rule::new(
                    vec![comment(format!("pod traffic for {spn} external destinations")), local],
                    jump(&svc_chain),
                ));
            }
            rules.push(Rule::new(
                vec![
                    comment(format!("masquerade LOCAL traffic for {spn} external destinations")),
                    Match::SrcLocal(true),
                ],
                jump(KUBE_MARK_MASQ),
            ));
            rules.push(Rule::new(
                vec![
                    comment(format!("route LOCAL traffic for {spn} external destinations")),
                    Match::SrcLocal(true),
                ],
                jump(&svc_chain),
            ));
        }
        if has_external {
            rules.push(Rule::new(vec![], jump(external_policy_chain)));
        }
    }
    // Firewall chain.
    if uses_fw {
        let i = chain_rules(&fw_chain, &mut per_chain);
        let rules = &mut per_chain[i].1;
        let c = format!("{spn} loadbalancer IP");
        for range in &plan.source_ranges {
            rules.push(Rule::new(vec![comment(c.clone()), Match::Src(*range, false)], jump(&ext_chain)));
        }
        if plan.allow_from_node {
            for ip in &plan.load_balancer_ips {
                rules.push(Rule::new(
                    vec![comment(c.clone()), Match::Src(IpNet::from(*ip), false)],
                    jump(&ext_chain),
                ));
            }
        }
        rules.push(Rule::new(
            vec![comment(format!("other traffic to {spn} will be dropped by KUBE-PROXY-FIREWALL"))],
            Action::Nothing,
        ));
    }
    // Endpoint dispatch chains.
    let uses_cluster_chain =
        !plan.cluster_endpoints.is_empty() && (!plan.internal_local || plan.externally_accessible());
    let uses_local_chain = !plan.local_endpoints.is_empty() && (plan.internal_local || plan.external_local);
    for (chain, eps, used) in [
        (&svc_chain, &plan.cluster_endpoints, uses_cluster_chain),
        (&svl_chain, &plan.local_endpoints, uses_local_chain),
    ] {
        if !used {
            continue;
        }
        let i = chain_rules(chain, &mut per_chain);
        service_to_endpoint_rules(&mut per_chain[i].1, plan, eps, &seps, compact);
    }
    // Endpoint chains.
    if uses_cluster_chain || uses_local_chain {
        for ep in plan.reachable_endpoints() {
            let sep = &seps[&(ep.ip, ep.port)];
            let head: Vec<Match> = if compact { vec![] } else { vec![Match::Comment(spn_name.clone())] };
            let mut masq = head.clone();
            masq.push(Match::Src(IpNet::from(ep.ip), false));
            let mut dnat = head;
            if plan.affinity_timeout.is_some() {
                dnat.push(Match::RecentSet(sep.clone()));
            }
            dnat.push(Match::Proto(proto));
            chains.push(Chain::new(
                NAT,
                sep.clone(),
                vec![Rule::new(masq, jump(KUBE_MARK_MASQ)), Rule::new(dnat, Action::Dnat(ep.ip, ep.port))],
            ));
        }
    }
    let mut owned: Vec<Chain> = per_chain.into_iter().map(|(n, rules)| Chain::new(NAT, n, rules)).collect();
    owned.extend(chains);
    frag.chains = owned;
    frag.shrunk()
}

/// `KUBE-SEP-*` names of a plan's endpoints, hashed once each.
fn endpoint_chains(plan: &ServicePortPlan) -> FxHashMap<(IpAddr, u16), Name> {
    plan.reachable_endpoints()
        .iter()
        .map(|ep| ((ep.ip, ep.port), names::endpoint_chain(&plan.name, ep).into()))
        .collect()
}

fn service_to_endpoint_rules(
    rules: &mut Vec<Rule>,
    plan: &ServicePortPlan,
    eps: &[Backend],
    seps: &FxHashMap<(IpAddr, u16), Name>,
    compact: bool,
) {
    let spn = plan.name.to_string();
    let comments: Vec<Vec<Match>> = eps
        .iter()
        .map(|ep| if compact { vec![] } else { vec![Match::Comment(format!("{spn} -> {ep}").into())] })
        .collect();
    if let Some(seconds) = plan.affinity_timeout {
        for (ep, head) in eps.iter().zip(&comments) {
            let sep = &seps[&(ep.ip, ep.port)];
            let mut m = head.clone();
            m.push(Match::Recent { name: sep.clone(), seconds });
            rules.push(Rule::new(m, jump_to(sep)));
        }
    }
    let n = eps.len();
    for (i, (ep, head)) in eps.iter().zip(comments).enumerate() {
        let mut m = head;
        if i < n - 1 {
            m.push(Match::Probability((n - i) as u32));
        }
        rules.push(Rule::new(m, jump_to(&seps[&(ep.ip, ep.port)])));
    }
}
