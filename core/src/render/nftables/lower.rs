//! nftables layout: verdict maps and DNAT maps, chains O(distinct behaviours).
//!
//! ```text
//! nat-prerouting/nat-output -> services:  daddr.proto.dport @to-<behaviour>     goto behaviour chain
//!                                         fib daddr local: proto.dport @to-nodeport[-local] goto ...
//! behaviour chains (cluster-ip, cluster-ip-local, external, external-local, nodeport, nodeport-local):
//!     masquerade decision, then  jump <pool>-dispatch
//! <pool>-dispatch: key vmap @<pool>-lb (affinity and Maglev chains), then one rule per
//!               endpoint count in use: key @<pool>-lb-N-frontends goto <pool>-lb-N
//! <pool>-lb-N:  dnat to key . numgen random mod N map @<pool>-endpoints
//! <pool>-maglev-M: dnat to key . jhash ip saddr . th sport mod M seed S map @<pool>-endpoints
//!               (a Maglev Service's M table buckets share the slot map; see crate::maglev)
//! ClientIP affinity: a chain per Service (the client's endpoint while its affinity lasts, else
//!               random, or with Maglev `jhash ip saddr mod M vmap @service-maglev-<svc>`)
//! filter hooks: firewall-check (source ranges, pre-DNAT), service-endpoints-check and
//!               nodeport-endpoints-check (reject/drop via @no-endpoint-* sets), after DNAT
//!               cluster-ips-check (an undefined port of @cluster-ips rejected, an address of
//!               @service-cidrs no Service holds dropped)
//! nat-postrouting -> masquerading: hairpin (ct dnat, saddr.daddr @hairpin), mark 0x4000
//! node-dns-prerouting/-output (raw priority, with a node-local DNS listener): see
//!               crate::render::node_dns
//! ```
//! Only Services with ClientIP affinity get their own chains (per-endpoint affinity sets, as
//! kube-proxy), because affinity state must die with the endpoint.
//!
//! What churn changes is data: a Service added or removed, an endpoint turning ready or not, a
//! pod replaced, each writes elements of sets without a verdict (frontends, endpoint slots)
//! and no rule. The kernel validates the whole table on a commit that adds a rule or a `goto`
//! element (every chain reachable from the base chains, every verdict map's elements), which
//! at 100,000 Services costs tens of milliseconds a commit; only an endpoint count no Service
//! had before (a rule in `<pool>-dispatch`), a Maglev table size or a Service with ClientIP
//! affinity still adds one.

use std::net::IpAddr;

use smallvec::smallvec;

use crate::net::{IpFamily, IpNet};
use crate::plan::{Backend, LocalTraffic, NodePlan, NodePortDestinations, ServicePortPlan, Target};
use crate::program::{
    Action, BaseHook, Chain, ChainKind, ChainRef, CtState, DataType, ElemData, Element, Field, Fragment,
    Hook, Key, KeyType, Match, Name, Rule, Set, SetFlags, SetRef, Value, Verdict, name,
};
use crate::render::local_traffic::detector;
use crate::render::{names, node_dns};

/// The table every object lives in (`table ip tideway` / `table ip6 tideway`).
pub const TABLE: &str = "tideway";

const FRONTEND: [Field; 3] = [Field::DstIp, Field::Proto, Field::DstPort];
const NODEPORT: [Field; 2] = [Field::Proto, Field::DstPort];

fn set_ref(n: &str) -> SetRef {
    SetRef { table: TABLE, name: name(n) }
}

fn jump(c: &str) -> Action {
    Action::Verdict(Verdict::Jump(name(c)))
}

fn goto(c: &str) -> Verdict {
    Verdict::Goto(name(c))
}

fn set(name: &str, key: Vec<KeyType>, data: Option<DataType>) -> Set {
    Set {
        table: TABLE,
        name: name.into(),
        key,
        data,
        flags: SetFlags::default(),
        ipset_type: None,
        shared: false,
        elements: Vec::new(),
        comment: None,
    }
}

/// An interval set holding `nets` (their minimal cover: interval sets refuse overlapping
/// elements).
fn network_set(name: &str, f: IpFamily, nets: &Vec<IpNet>) -> Set {
    Set {
        flags: SetFlags { interval: true, ..SetFlags::default() },
        elements: IpNet::aggregate(nets)
            .into_iter()
            .map(|n| Element { key: smallvec![Value::Net(n)], data: None })
            .collect(),
        ..set(name, vec![KeyType::Net(f)], None)
    }
}

fn base_chain(name: &str, hook: Hook, kind: ChainKind, priority: i32, rules: Vec<Rule>) -> Chain {
    Chain { hook: Some(BaseHook { hook, kind, priority }), ..Chain::new(TABLE, name, rules) }
}

/// The constant part: hooks, behaviour chains, and the maps services fill in.
pub fn base(np: &NodePlan) -> Fragment {
    let f = np.family;
    let addr = KeyType::Addr(f);
    let fe = || frontend_key(f);
    let npk = || vec![KeyType::Proto, KeyType::Port];
    let mut sets: Vec<Set> =
        FRONTEND_BEHAVIOURS.iter().map(|b| set(&format!("to-{b}"), fe(), None)).collect();
    sets.extend(NODEPORT_BEHAVIOURS.iter().map(|b| set(&format!("to-{b}"), npk(), None)));
    sets.extend([
        set("no-endpoint-reject", fe(), None),
        set("no-endpoint-drop", fe(), None),
        set("no-endpoint-nodeport-reject", npk(), None),
        set("no-endpoint-nodeport-drop", npk(), None),
        set("firewall-ips", fe(), None),
        Set {
            flags: SetFlags { interval: true, ..SetFlags::default() },
            ..set("firewall-allow", vec![addr, KeyType::Proto, KeyType::Port, KeyType::Net(f)], None)
        },
        Set { shared: true, ..set("hairpin", vec![addr, addr], None) },
        // Every ClusterIP, once however many ports it has.
        Set { shared: true, ..set("cluster-ips", vec![addr], None) },
    ]);
    if !np.service_cidrs.is_empty() {
        sets.push(network_set("service-cidrs", f, &np.service_cidrs));
    }
    for pool in ["cluster", "local"] {
        sets.push(set(&format!("{pool}-lb"), fe(), Some(DataType::Verdict)));
        sets.push(set(&format!("nodeport-{pool}-lb"), npk(), Some(DataType::Verdict)));
        let mut key = fe();
        key.push(KeyType::Slot);
        sets.push(set(&format!("{pool}-endpoints"), key, Some(DataType::AddrPort(f))));
        sets.push(set(
            &format!("nodeport-{pool}-endpoints"),
            vec![KeyType::Proto, KeyType::Port, KeyType::Slot],
            Some(DataType::AddrPort(f)),
        ));
    }
    if let LocalTraffic::Sources(nets) = &np.local {
        sets.push(network_set("local-cidrs", f, nets));
    }
    let nodeport_dst: Vec<Match> = match &np.node_ports {
        NodePortDestinations::AllLocal => vec![Match::DstLocal(true), Match::Dst(f.loopback_net(), true)],
        NodePortDestinations::Ips(ips) => {
            sets.push(Set {
                elements: ips
                    .iter()
                    .map(|ip| Element { key: smallvec![Value::Ip(*ip)], data: None })
                    .collect(),
                ..set("nodeport-ips", vec![addr], None)
            });
            vec![Match::InSet { set: "nodeport-ips".into(), key: vec![Field::DstIp], neg: false }]
        }
    };
    let mark = np.masquerade_mark;
    let new = || Match::Ct(CtState::New);
    let vmap = |map: &str, key: &[Field]| Action::VerdictMap { map: map.into(), key: key.to_vec() };
    let mut chains = vec![
        base_chain(
            "filter-prerouting",
            Hook::Prerouting,
            ChainKind::Filter,
            -110,
            vec![Rule::new(vec![new()], jump("firewall-check"))],
        ),
        base_chain(
            "filter-input",
            Hook::Input,
            ChainKind::Filter,
            -110,
            vec![
                Rule::new(vec![new()], jump("nodeport-endpoints-check")),
                Rule::new(vec![new()], jump("service-endpoints-check")),
            ],
        ),
        base_chain(
            "filter-forward",
            Hook::Forward,
            ChainKind::Filter,
            -110,
            vec![
                Rule::new(vec![new()], jump("service-endpoints-check")),
                Rule::new(vec![new()], jump("cluster-ips-check")),
            ],
        ),
        base_chain(
            "filter-output",
            Hook::Output,
            ChainKind::Filter,
            -110,
            vec![Rule::new(vec![new()], jump("firewall-check"))],
        ),
        // After nat-output: locally generated traffic that was not DNATed is checked here,
        // so short-circuited node traffic to Local-policy frontends is not dropped.
        base_chain(
            "filter-output-post-dnat",
            Hook::Output,
            ChainKind::Filter,
            -90,
            vec![
                Rule::new(vec![new()], jump("service-endpoints-check")),
                Rule::new(vec![new()], jump("cluster-ips-check")),
            ],
        ),
        base_chain(
            "nat-prerouting",
            Hook::Prerouting,
            ChainKind::Nat,
            -100,
            vec![Rule::new(vec![], jump("services"))],
        ),
        base_chain(
            "nat-output",
            Hook::Output,
            ChainKind::Nat,
            -100,
            vec![Rule::new(vec![], jump("services"))],
        ),
        base_chain(
            "nat-postrouting",
            Hook::Postrouting,
            ChainKind::Nat,
            100,
            vec![Rule::new(vec![], jump("masquerading"))],
        ),
        Chain::new(TABLE, "mark-for-masquerade", vec![Rule::new(vec![], Action::MarkOr(mark))]),
        Chain::new(
            TABLE,
            "masquerading",
            vec![
                Rule::new(
                    vec![
                        Match::CtDnat,
                        Match::InSet {
                            set: "hairpin".into(),
                            key: vec![Field::SrcIp, Field::DstIp],
                            neg: false,
                        },
                    ],
                    Action::Masquerade { fully_random: true },
                ),
                Rule::new(vec![Match::Mark(mark, true)], Action::Verdict(Verdict::Return)),
                Rule::new(vec![], Action::MarkXor(mark)),
                Rule::new(vec![], Action::Masquerade { fully_random: true }),
            ],
        ),
        Chain::new(TABLE, "reject-chain", vec![Rule::new(vec![], Action::Verdict(Verdict::Reject))]),
        cluster_ips_check(np),
        Chain::new(
            TABLE,
            "firewall-check",
            vec![Rule::new(
                vec![
                    Match::InSet { set: "firewall-ips".into(), key: FRONTEND.to_vec(), neg: false },
                    Match::InSet {
                        set: "firewall-allow".into(),
                        key: vec![Field::DstIp, Field::Proto, Field::DstPort, Field::SrcIp],
                        neg: true,
                    },
                ],
                Action::Verdict(Verdict::Drop),
            )],
        ),
        Chain::new(
            TABLE,
            "service-endpoints-check",
            vec![
                Rule::new(
                    vec![in_set("no-endpoint-reject", &FRONTEND)],
                    Action::Verdict(goto("reject-chain")),
                ),
                Rule::new(vec![in_set("no-endpoint-drop", &FRONTEND)], Action::Verdict(Verdict::Drop)),
            ],
        ),
        Chain::new(
            TABLE,
            "nodeport-endpoints-check",
            vec![
                Rule::new(
                    with_match(&nodeport_dst, in_set("no-endpoint-nodeport-reject", &NODEPORT)),
                    Action::Verdict(goto("reject-chain")),
                ),
                Rule::new(
                    with_match(&nodeport_dst, in_set("no-endpoint-nodeport-drop", &NODEPORT)),
                    Action::Verdict(Verdict::Drop),
                ),
            ],
        ),
        Chain::new(TABLE, "services", services_rules(&nodeport_dst)),
    ];
    for pool in ["cluster", "local", "nodeport-cluster", "nodeport-local"] {
        let key = if pool.starts_with("nodeport") { &NODEPORT[..] } else { &FRONTEND[..] };
        chains.push(Chain::new(
            TABLE,
            format!("{pool}-dispatch"),
            vec![Rule::new(vec![], vmap(&format!("{pool}-lb"), key))],
        ));
    }
    let masq_internal: Vec<Rule> = if np.masquerade_all {
        vec![Rule::new(vec![], jump("mark-for-masquerade"))]
    } else {
        local(np, false).map(|m| Rule::new(vec![m], jump("mark-for-masquerade"))).into_iter().collect()
    };
    let with = |mut head: Vec<Rule>, tail: Rule| {
        head.push(tail);
        head
    };
    chains.push(Chain::new(
        TABLE,
        "cluster-ip",
        with(masq_internal.clone(), Rule::new(vec![], jump("cluster-dispatch"))),
    ));
    chains.push(Chain::new(
        TABLE,
        "cluster-ip-local",
        with(masq_internal, Rule::new(vec![], jump("local-dispatch"))),
    ));
    for (chain, pool) in [("external", "cluster"), ("nodeport", "nodeport-cluster")] {
        chains.push(Chain::new(
            TABLE,
            chain,
            vec![
                Rule::new(vec![], jump("mark-for-masquerade")),
                Rule::new(vec![], jump(&format!("{pool}-dispatch"))),
            ],
        ));
    }
    for (chain, cluster, local_pool) in
        [("external-local", "cluster", "local"), ("nodeport-local", "nodeport-cluster", "nodeport-local")]
    {
        let (cluster, local_pool) = (format!("{cluster}-dispatch"), format!("{local_pool}-dispatch"));
        let mut rules = Vec::new();
        if let Some(pods) = local(np, true) {
            // Pod traffic to an external destination is short-circuited to every endpoint.
            rules.push(Rule::new(vec![pods], jump(&cluster)));
        }
        // Node traffic keeps working too, but its source (a node or LB IP) must be rewritten.
        rules.push(Rule::new(vec![Match::SrcLocal(true)], jump("mark-for-masquerade")));
        rules.push(Rule::new(vec![Match::SrcLocal(true)], jump(&cluster)));
        rules.push(Rule::new(vec![], jump(&local_pool)));
        chains.push(Chain::new(TABLE, chain, rules));
    }
    if let Some(dns) = &np.node_dns {
        let raw = node_dns::RAW_PRIORITY;
        chains.push(base_chain(
            "node-dns-prerouting",
            Hook::Prerouting,
            ChainKind::Filter,
            raw,
            node_dns::prerouting(dns, false),
        ));
        chains.push(base_chain(
            "node-dns-output",
            Hook::Output,
            ChainKind::Filter,
            raw,
            node_dns::output(dns),
        ));
    }
    Fragment { chains, sets, ..Fragment::default() }
}

/// The behaviour chains a Service's frontend leads to, each through its set `to-<chain>`.
const FRONTEND_BEHAVIOURS: [&str; 4] = ["cluster-ip", "cluster-ip-local", "external", "external-local"];
/// The behaviour chains a node port leads to.
const NODEPORT_BEHAVIOURS: [&str; 2] = ["nodeport", "nodeport-local"];

/// `services`: each frontend to its behaviour chain, through the data set of the frontends
/// that lead there (a frontend is in one set at most).
fn services_rules(nodeport_dst: &[Match]) -> Vec<Rule> {
    let to = |b: &str, key: &[Field], head: &[Match]| {
        Rule::new(with_match(head, in_set(&format!("to-{b}"), key)), Action::Verdict(goto(b)))
    };
    let mut rules: Vec<Rule> = FRONTEND_BEHAVIOURS.iter().map(|b| to(b, &FRONTEND, &[])).collect();
    rules.extend(NODEPORT_BEHAVIOURS.iter().map(|b| to(b, &NODEPORT, nodeport_dst)));
    rules
}

fn in_set(set: &str, key: &[Field]) -> Match {
    Match::InSet { set: name(set), key: key.to_vec(), neg: false }
}

/// `head`'s matches, then `last`.
fn with_match(head: &[Match], last: Match) -> Vec<Match> {
    let mut all = head.to_vec();
    all.push(last);
    all
}

/// What is left after DNAT of a new connection to a Service address is one the Services do not
/// define (KEP-1880, as kube-proxy's nftables mode): an undefined port of a ClusterIP is
/// rejected, an address of a Service CIDR that no Service holds is dropped.
fn cluster_ips_check(np: &NodePlan) -> Chain {
    let dst_in = |set: &str| Match::InSet { set: name(set), key: vec![Field::DstIp], neg: false };
    let mut rules = vec![
        Rule::new(vec![dst_in("cluster-ips")], Action::Verdict(Verdict::Reject))
            .with_comment("Reject traffic to invalid ports of ClusterIPs"),
    ];
    if !np.service_cidrs.is_empty() {
        rules.push(
            Rule::new(vec![dst_in("service-cidrs")], Action::Verdict(Verdict::Drop))
                .with_comment("Drop traffic to unallocated ClusterIPs"),
        );
    }
    Chain::new(TABLE, "cluster-ips-check", rules)
}

/// The local-traffic detector: the packet is pod traffic (`pods`) or it is not. Source
/// networks are the `local-cidrs` set (every network of the family, where kube-proxy's
/// iptables detector tests the first).
fn local(np: &NodePlan, pods: bool) -> Option<Match> {
    match &np.local {
        LocalTraffic::Sources(_) => {
            Some(Match::InSet { set: "local-cidrs".into(), key: vec![Field::SrcIp], neg: !pods })
        }
        _ => detector(np, pods),
    }
}

struct Out<'a> {
    frag: Fragment,
    plan: &'a ServicePortPlan,
}

impl Out<'_> {
    fn elem(&mut self, set: &str, key: Key, data: Option<ElemData>) {
        self.frag.elements.push((set_ref(set), Element { key, data }));
    }

    fn fe(&self, ip: IpAddr) -> Key {
        smallvec![Value::Ip(ip), Value::Proto(self.plan.name.protocol), Value::Port(self.plan.port)]
    }

    fn np(&self, port: u16) -> Key {
        smallvec![Value::Proto(self.plan.name.protocol), Value::Port(port)]
    }
}

fn verdict(v: Verdict) -> Option<ElemData> {
    Some(ElemData::Verdict(v))
}

/// The set of frontends without endpoints that `t` (reject, or drop) applies to.
fn no_endpoint(nodeport: bool, t: Target) -> &'static str {
    match (nodeport, t == Target::Reject) {
        (false, true) => "no-endpoint-reject",
        (false, false) => "no-endpoint-drop",
        (true, true) => "no-endpoint-nodeport-reject",
        (true, false) => "no-endpoint-nodeport-drop",
    }
}

/// Lowers one service port.
pub fn lower_plan(np: &NodePlan, plan: &ServicePortPlan) -> Fragment {
    let mut out = Out { frag: Fragment::default(), plan };
    let internal = plan.internal_target();
    let external = plan.external_target();
    let affinity = plan.affinity_timeout.map(|t| affinity_chains(&mut out.frag, np.family, plan, t));

    // Endpoint pools keyed by frontend: (pool, endpoints, chain used with affinity).
    let pools = [
        ("cluster", &plan.cluster_endpoints, affinity.as_ref().and_then(|a| a.0.clone())),
        ("local", &plan.local_endpoints, affinity.as_ref().and_then(|a| a.1.clone())),
    ];
    let add_pool = |out: &mut Out<'_>, pool: &str, key: Key, nodeport: bool| {
        let (_, eps, aff) = pools.iter().find(|p| p.0 == pool).expect("known pool");
        if eps.is_empty() {
            return;
        }
        let prefix = if nodeport { format!("nodeport-{pool}") } else { pool.to_string() };
        let maglev = if aff.is_none() { out.plan.maglev_table(eps) } else { None };
        if let Some(table) = maglev {
            // The table's buckets in the pool's slot map: an endpoint change rewrites only the
            // buckets Maglev moves.
            let chain = format!("{prefix}-maglev-{}", table.size());
            if !out.frag.shared_chains.iter().any(|c| *c.name == *chain) {
                out.frag.shared_chains.push(maglev_chain(&chain, &prefix, table.size(), nodeport));
            }
            out.elem(&format!("{prefix}-lb"), key.clone(), verdict(goto(&chain)));
            let map = set_ref(&format!("{prefix}-endpoints"));
            for (bucket, ep) in table.entries().iter().enumerate() {
                let ep = &eps[*ep as usize];
                let mut k = key.clone();
                k.push(Value::Int(bucket as u32));
                let e = Element { key: k, data: Some(ElemData::AddrPort(ep.ip, ep.port)) };
                out.frag.elements.push((map.clone(), e));
            }
            return;
        }
        match aff {
            Some(chain) => out.elem(&format!("{prefix}-lb"), key.clone(), verdict(goto(chain))),
            None => {
                let chain = format!("{prefix}-lb-{}", eps.len());
                let frontends = format!("{chain}-frontends");
                if !out.frag.shared_chains.iter().any(|c| *c.name == *chain) {
                    out.frag.shared_chains.push(count_chain(&chain, &prefix, eps.len(), nodeport));
                    let key_type =
                        if nodeport { vec![KeyType::Proto, KeyType::Port] } else { frontend_key(np.family) };
                    let flags = SetFlags { resizable: true, ..SetFlags::default() };
                    out.frag.shared_sets.push(Set { flags, ..set(&frontends, key_type, None) });
                }
                out.elem(&frontends, key.clone(), None);
            }
        }
        if aff.is_none() {
            let map = set_ref(&format!("{prefix}-endpoints"));
            for (slot, ep) in eps.iter().enumerate() {
                let mut k = key.clone();
                k.push(Value::Int(slot as u32));
                let e = Element { key: k, data: Some(ElemData::AddrPort(ep.ip, ep.port)) };
                out.frag.elements.push((map.clone(), e));
            }
        }
    };

    if let Some(cip) = plan.cluster_ip {
        out.elem("cluster-ips", smallvec![Value::Ip(cip)], None);
        let key = out.fe(cip);
        match internal {
            Target::Cluster | Target::Local => {
                let (behaviour, pool) = if internal == Target::Local {
                    ("cluster-ip-local", "local")
                } else {
                    ("cluster-ip", "cluster")
                };
                out.elem(&format!("to-{behaviour}"), key.clone(), None);
                add_pool(&mut out, pool, key, false);
            }
            t => out.elem(no_endpoint(false, t), key, None),
        }
    }

    let behaviour = if plan.external_local { "external-local" } else { "external" };
    for ip in plan.external_ips.iter().chain(&plan.load_balancer_ips).copied().collect::<Vec<_>>() {
        let key = out.fe(ip);
        if plan.has_endpoints {
            out.elem(&format!("to-{behaviour}"), key.clone(), None);
            add_pool(&mut out, "cluster", key.clone(), false);
            if plan.external_local {
                add_pool(&mut out, "local", key.clone(), false);
            }
        }
        if !matches!(external, Target::Cluster | Target::Local) {
            out.elem(no_endpoint(false, external), key, None);
        }
    }

    if plan.uses_firewall() {
        for lb in plan.load_balancer_ips.clone() {
            let key = out.fe(lb);
            out.elem("firewall-ips", key.clone(), None);
            let mut allowed: Vec<IpNet> = plan.source_ranges.clone();
            if plan.allow_from_node {
                allowed.extend(plan.load_balancer_ips.iter().map(|ip| IpNet::from(*ip)));
            }
            for net in IpNet::aggregate(&allowed) {
                let mut k = key.clone();
                k.push(Value::Net(net));
                out.elem("firewall-allow", k, None);
            }
        }
    }

    if let Some(port) = plan.node_port {
        let key = out.np(port);
        if plan.has_endpoints {
            let behaviour = if plan.external_local { "nodeport-local" } else { "nodeport" };
            out.elem(&format!("to-{behaviour}"), key.clone(), None);
            add_pool(&mut out, "cluster", key.clone(), true);
            if plan.external_local {
                add_pool(&mut out, "local", key.clone(), true);
            }
        }
        if !matches!(external, Target::Cluster | Target::Local) {
            out.elem(no_endpoint(true, external), key, None);
        }
    }

    // Hairpin: an endpoint reaching itself through the Service. Only a pod on this node can
    // (a remote pod's connections are translated on its own node, or arrive as external
    // traffic that is masqueraded anyway), so the set holds local endpoints only.
    if plan.has_endpoints {
        for ep in plan.reachable_endpoints().into_iter().filter(|ep| ep.local) {
            out.elem("hairpin", smallvec![Value::Ip(ep.ip), Value::Ip(ep.ip)], None);
        }
    }
    out.frag.shrunk()
}

/// `<prefix>-lb-N`: picks one of N endpoints of the frontend being dispatched; reached from
/// `<prefix>-dispatch` for the frontends in `<prefix>-lb-N-frontends`.
fn count_chain(chain: &str, prefix: &str, n: usize, nodeport: bool) -> Chain {
    let frontend: &[Field] = if nodeport { &NODEPORT } else { &FRONTEND };
    let mut key = frontend.to_vec();
    key.push(Field::Random(n as u32));
    let entry =
        Rule::new(vec![in_set(&format!("{chain}-frontends"), frontend)], Action::Verdict(goto(chain)));
    Chain {
        entry: Some((ChainRef { table: TABLE, name: name(&format!("{prefix}-dispatch")) }, entry)),
        ..Chain::new(
            TABLE,
            chain,
            vec![Rule::new(vec![], Action::DnatMap { map: format!("{prefix}-endpoints").into(), key })],
        )
    }
}

fn frontend_key(f: IpFamily) -> Vec<KeyType> {
    vec![KeyType::Addr(f), KeyType::Proto, KeyType::Port]
}

/// `<prefix>-maglev-M`: the endpoint in the bucket the flow's hash picks from an M-bucket
/// Maglev table of the frontend being dispatched.
fn maglev_chain(chain: &str, prefix: &str, size: u32, nodeport: bool) -> Chain {
    let mut key: Vec<Field> = if nodeport { NODEPORT.to_vec() } else { FRONTEND.to_vec() };
    key.push(Field::Jhash { modulus: size, seed: crate::maglev::FLOW_SEED, address_only: false });
    Chain::new(
        TABLE,
        chain,
        vec![Rule::new(vec![], Action::DnatMap { map: format!("{prefix}-endpoints").into(), key })],
    )
}

/// Per-Service chains for ClientIP affinity: returns the cluster chain and the local chain.
fn affinity_chains(
    frag: &mut Fragment,
    family: IpFamily,
    plan: &ServicePortPlan,
    timeout: u32,
) -> (Option<String>, Option<String>) {
    let base = names::nft_service_base(&plan.name);
    let endpoint_chain = |frag: &mut Fragment, ep: &Backend| -> (Name, Name) {
        let ep_base = names::nft_endpoint_base(&plan.name, ep);
        let chain: Name = names::nft_name("endpoint", &ep_base).into();
        // The timeout is part of the set's identity (a set is never redefined in place).
        let aff: Name = names::nft_name("affinity", &format!("{ep_base}/{timeout}s")).into();
        if !frag.chains.iter().any(|c| c.name == chain) {
            frag.sets.push(Set {
                flags: SetFlags { dynamic_timeout: Some(timeout), ..SetFlags::default() },
                ..set(&aff, vec![KeyType::Addr(family)], None)
            });
            // Record (or refresh) the client, then DNAT: kube-proxy's endpoint chain.
            let rule = Rule {
                matches: vec![Match::Proto(plan.name.protocol)],
                actions: vec![Action::UpdateSet(aff.clone()), Action::Dnat(ep.ip, ep.port)],
                comment: None,
            };
            frag.chains.push(Chain::new(TABLE, chain.clone(), vec![rule]));
        }
        (chain, aff)
    };
    let dispatch = |frag: &mut Fragment, prefix: &str, eps: &[Backend]| -> Option<String> {
        if eps.is_empty() {
            return None;
        }
        let name = names::nft_name(prefix, &base);
        let mut rules = Vec::new();
        let mut targets = Vec::new();
        for ep in eps {
            let (chain, aff) = endpoint_chain(frag, ep);
            rules.push(Rule::new(
                vec![Match::InSet { set: aff, key: vec![Field::SrcIp], neg: false }],
                Action::Verdict(Verdict::Goto(chain.clone())),
            ));
            targets.push(Verdict::Goto(chain));
        }
        match plan.maglev_table(eps) {
            // A client without an affinity entry goes where the Maglev table puts its address
            // (its address only: every connection of a client, through any node, to one
            // endpoint, as the affinity then keeps it).
            Some(table) => {
                let map: Name = names::nft_name(&format!("{prefix}-maglev"), &base).into();
                frag.sets.push(set(&map, vec![KeyType::Slot], Some(DataType::Verdict)));
                for (bucket, ep) in table.entries().iter().enumerate() {
                    let e = Element {
                        key: smallvec![Value::Int(bucket as u32)],
                        data: Some(ElemData::Verdict(targets[*ep as usize].clone())),
                    };
                    frag.elements.push((set_ref(&map), e));
                }
                let hash = Field::Jhash {
                    modulus: table.size(),
                    seed: crate::maglev::FLOW_SEED,
                    address_only: true,
                };
                rules.push(Rule::new(vec![], Action::VerdictMap { map, key: vec![hash] }));
            }
            None => rules.push(Rule::new(vec![], Action::RandomVerdict(targets))),
        }
        frag.chains.push(Chain::new(TABLE, name.clone(), rules));
        Some(name)
    };
    let cluster = dispatch(frag, "service", &plan.cluster_endpoints);
    let local = dispatch(frag, "local", &plan.local_endpoints);
    (cluster, local)
}
