//! The interpreter behind [`trace`](super::trace).

use std::collections::HashMap;
use std::net::IpAddr;

use super::packet::{Origin, Packet, TraceEnv};
use super::path::{Outcome, Step, Trace, TracePath};
use crate::config::ProxyMode;
use crate::net::Protocol;
use crate::program::{
    Action, Assembled, AssembledChain, AssembledSet, ChainKind, CtState, ElemData, Element, Field, Hook,
    Match, Program, Rule, Value, Verdict,
};
use crate::render;

/// Chains deeper than this are a loop in the program (a bug): the path is dropped.
const MAX_DEPTH: usize = 64;

/// IPVS's netfilter hooks: LOCAL_IN after filter, LOCAL_OUT right after DNAT.
const IPVS_INPUT_PRIORITY: i32 = 98;
const IPVS_OUTPUT_PRIORITY: i32 = -99;

#[derive(Debug, Clone)]
struct State {
    src: IpAddr,
    dst: IpAddr,
    proto: Protocol,
    dport: u16,
    sport: Option<u16>,
    mark: u32,
    /// Exempted from connection tracking: no NAT chain sees it.
    untracked: bool,
    dnat: bool,
    masq: bool,
    /// IPVS picked a real server at the input hook: the packet leaves via postrouting.
    ipvs: bool,
    /// IPVS found no real server.
    rejected: bool,
    hook: Hook,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Fell off the end, or RETURN: continue in the caller / next base chain.
    Continue,
    /// ACCEPT (or a terminal NAT statement): stop this base chain.
    Accept,
    Drop,
    Reject,
}

struct Interp<'a> {
    program: &'a Program,
    env: TraceEnv,
    /// The interface the packet arrived on (empty: sent by the node).
    input_interface: String,
    chains: HashMap<(&'a str, &'a str), &'a AssembledChain<'a>>,
    sets: HashMap<&'a str, &'a AssembledSet<'a>>,
    asm: &'a Assembled<'a>,
}

/// Traces `packet` through `program` on a node described by `env`.
pub fn trace(program: &Program, packet: &Packet, env: &TraceEnv) -> Trace {
    let asm = program.assemble();
    let mut env = env.clone();
    if program.mode == ProxyMode::Ipvs {
        // Every IPVS service address sits on the dummy interface: it is local.
        env.local.extend(asm.virtual_servers.iter().map(|v| crate::net::IpNet::from(v.ip)));
    }
    let chains = asm.chains.iter().map(|c| ((c.def.table, &*c.def.name), c)).collect();
    let sets = asm.sets.iter().map(|s| (&*s.def.name, s)).collect();
    let input_interface = env.input_interface(packet.origin).to_string();
    let arrives_on = Some(input_interface.clone()).filter(|i| !i.is_empty());
    let interp = Interp { program, env, input_interface, chains, sets, asm: &asm };
    let start = State {
        src: packet.src,
        dst: packet.dst,
        proto: packet.protocol,
        dport: packet.dport,
        sport: packet.sport,
        mark: 0,
        untracked: false,
        dnat: false,
        masq: false,
        ipvs: false,
        rejected: false,
        hook: Hook::Prerouting,
        steps: Vec::new(),
    };
    let paths = interp.run(packet.origin, start);
    Trace { packet: *packet, input_interface: arrives_on, paths }
}

impl<'a> Interp<'a> {
    fn run(&self, origin: Origin, start: State) -> Vec<TracePath> {
        let mut done = Vec::new();
        let first = if origin == Origin::Node { Hook::Output } else { Hook::Prerouting };
        for (st, flow) in self.hook(first, start) {
            if let Some(o) = stopped(flow) {
                done.push(path(st, o));
                continue;
            }
            if origin == Origin::Node {
                for (st, flow) in self.hook(Hook::Postrouting, st) {
                    match stopped(flow) {
                        Some(o) => done.push(path(st, o)),
                        None if self.env.is_local(&st.dst) => self.deliver_local(st, &mut done),
                        None => done.push(path(st.clone(), leaving(&st))),
                    }
                }
            } else if self.env.is_local(&st.dst) || self.env.routes_local(st.mark) {
                self.deliver_local(st, &mut done);
            } else {
                for (st, flow) in self.hook(Hook::Forward, st) {
                    self.post(st, flow, &mut done);
                }
            }
        }
        done
    }

    /// Local delivery goes through the input hook (where IPVS may still redirect it).
    fn deliver_local(&self, st: State, done: &mut Vec<TracePath>) {
        for (st, flow) in self.hook(Hook::Input, st) {
            if let Some(o) = stopped(flow) {
                done.push(path(st, o));
            } else if st.ipvs {
                // IPVS picked a real server: it leaves through postrouting.
                for (st, flow) in self.hook(Hook::Postrouting, st) {
                    let o = stopped(flow).unwrap_or_else(|| leaving(&st));
                    done.push(path(st, o));
                }
            } else if st.dnat {
                done.push(path(st.clone(), leaving(&st)));
            } else {
                done.push(path(st, Outcome::Local));
            }
        }
    }

    fn post(&self, st: State, flow: Flow, done: &mut Vec<TracePath>) {
        if let Some(o) = stopped(flow) {
            done.push(path(st, o));
            return;
        }
        for (st, flow) in self.hook(Hook::Postrouting, st) {
            let o = stopped(flow).unwrap_or_else(|| leaving(&st));
            done.push(path(st, o));
        }
    }

    /// Runs every base chain registered at `hook`, by priority.
    fn hook(&self, hook: Hook, mut st: State) -> Vec<(State, Flow)> {
        st.hook = hook;
        let mut bases: Vec<(i32, Option<&AssembledChain<'a>>)> = self
            .asm
            .chains
            .iter()
            .filter_map(|c| c.def.hook.filter(|h| h.hook == hook).map(|h| (h.priority, Some(c))))
            .collect();
        if self.program.mode == ProxyMode::Ipvs {
            match hook {
                Hook::Input => bases.push((IPVS_INPUT_PRIORITY, None)),
                Hook::Output => bases.push((IPVS_OUTPUT_PRIORITY, None)),
                _ => {}
            }
        }
        bases.sort_by_key(|(p, _)| *p);
        let mut states = vec![(st, Flow::Continue)];
        for (_, chain) in bases {
            let mut next = Vec::new();
            for (st, flow) in states {
                // NAT never sees an untracked packet.
                let nat = chain.and_then(|c| c.def.hook).is_some_and(|h| h.kind == ChainKind::Nat);
                if matches!(flow, Flow::Drop | Flow::Reject) || (nat && st.untracked) {
                    next.push((st, flow));
                    continue;
                }
                match chain {
                    Some(c) => {
                        for (st, f) in self.chain(c, st, 0) {
                            let f = if f == Flow::Accept { Flow::Continue } else { f };
                            next.push((st, f));
                        }
                    }
                    None => next.extend(self.ipvs(st).into_iter().map(|s| {
                        let f = if s.rejected { Flow::Reject } else { Flow::Continue };
                        (s, f)
                    })),
                }
            }
            states = next;
        }
        states
    }

    /// IPVS: a packet to a virtual server is sent to one of its real servers.
    fn ipvs(&self, st: State) -> Vec<State> {
        if st.dnat {
            return vec![st];
        }
        let vs = self
            .asm
            .virtual_servers
            .iter()
            .find(|v| v.ip == st.dst && v.protocol == st.proto && v.port == st.dport);
        let Some(vs) = vs else { return vec![st] };
        let live: Vec<_> = vs.real_servers.iter().filter(|r| r.weight > 0).collect();
        if live.is_empty() {
            // No destination: IPVS answers ICMP port unreachable and drops (ip_vs_leave).
            let mut s = st;
            s.steps.push(Step {
                hook: s.hook,
                chain: "ipvs".into(),
                rule: render::ipvs::text::virtual_server_line(vs),
                note: Some("no real server: ICMP port unreachable".into()),
            });
            s.rejected = true;
            return vec![s];
        }
        live.into_iter()
            .map(|rs| {
                let mut s = st.clone();
                s.steps.push(Step {
                    hook: st.hook,
                    chain: "ipvs".into(),
                    rule: render::ipvs::text::virtual_server_line(vs),
                    note: Some(format!("real server {}", crate::net::join_host_port(&rs.ip, rs.port))),
                });
                s.dst = rs.ip;
                s.dport = rs.port;
                s.dnat = true;
                s.ipvs = true;
                s
            })
            .collect()
    }

    fn chain(&self, c: &AssembledChain<'a>, st: State, depth: usize) -> Vec<(State, Flow)> {
        if depth > MAX_DEPTH {
            return vec![(st, Flow::Drop)];
        }
        let mut out = Vec::new();
        let mut pending = vec![(st, 0usize)];
        while let Some((st, i)) = pending.pop() {
            let Some(rule) = c.rules.get(i) else {
                out.push((st, Flow::Continue));
                continue;
            };
            for (st, matched) in self.matches(rule, st) {
                if !matched {
                    pending.push((st, i + 1));
                    continue;
                }
                for (st, flow) in self.actions(c, rule, st, depth) {
                    match flow {
                        // The rule did not decide (no verdict, map miss, returned jump).
                        None => pending.push((st, i + 1)),
                        Some(f) => out.push((st, f)),
                    }
                }
            }
        }
        out
    }

    fn step(&self, c: &AssembledChain<'a>, rule: &Rule, st: &mut State, note: Option<String>) {
        let text = match self.program.mode {
            ProxyMode::Nftables => render::nftables::text::rule(self.program.family, rule),
            ProxyMode::Iptables | ProxyMode::Ipvs => render::iptables::text::rule(&c.def.name, rule),
        };
        st.steps.push(Step {
            hook: st.hook,
            chain: format!("{}/{}", c.def.table, c.def.name),
            rule: text,
            note,
        });
    }

    /// Runs a rule's actions. `None` = continue with the next rule.
    fn actions(
        &self,
        c: &AssembledChain<'a>,
        rule: &Rule,
        st: State,
        depth: usize,
    ) -> Vec<(State, Option<Flow>)> {
        let mut states = vec![(st, None::<Flow>, false)];
        for action in &rule.actions {
            let mut next = Vec::new();
            for (mut st, flow, logged) in states {
                if flow.is_some() {
                    next.push((st, flow, logged));
                    continue;
                }
                match action {
                    Action::MarkOr(m) => {
                        st.mark |= m;
                        next.push((st, None, logged));
                    }
                    Action::MarkXor(m) => {
                        st.mark ^= m;
                        next.push((st, None, logged));
                    }
                    Action::Notrack => {
                        if !logged {
                            self.step(c, rule, &mut st, None);
                        }
                        st.untracked = true;
                        next.push((st, None, true));
                    }
                    Action::UpdateSet(_) | Action::Nothing => next.push((st, None, logged)),
                    Action::Masquerade { .. } => {
                        if !logged {
                            self.step(c, rule, &mut st, None);
                        }
                        st.masq = true;
                        next.push((st, Some(Flow::Accept), true));
                    }
                    Action::Dnat(ip, port) => {
                        if !logged {
                            self.step(c, rule, &mut st, None);
                        }
                        st.dst = *ip;
                        st.dport = *port;
                        st.dnat = true;
                        next.push((st, Some(Flow::Accept), true));
                    }
                    Action::Verdict(v) => {
                        if !logged {
                            self.step(c, rule, &mut st, None);
                        }
                        next.extend(
                            self.verdict(c.def.table, v, st, depth).into_iter().map(|(s, f)| (s, f, true)),
                        );
                    }
                    Action::VerdictMap { map, key } => {
                        for kv in self.keys(key, &st) {
                            let found = self.lookup(map, &kv).cloned();
                            let mut st = st.clone();
                            match found {
                                Some(ElemData::Verdict(v)) => {
                                    self.step(c, rule, &mut st, Some(format!("element {}", show(&kv))));
                                    let out = self.verdict(c.def.table, &v, st, depth);
                                    next.extend(out.into_iter().map(|(s, f)| (s, f, true)));
                                }
                                _ => next.push((st, None, logged)),
                            }
                        }
                    }
                    Action::DnatMap { map, key } if self.hash_unknown(key, &st) => {
                        // Every endpoint of the table is possible: one path each, not one per bucket.
                        for (kv, ip, port, buckets) in self.hashed_endpoints(map, key, &st) {
                            let mut st = st.clone();
                            let size = key.iter().find_map(|f| match f {
                                Field::Jhash { modulus, .. } => Some(*modulus),
                                _ => None,
                            });
                            let note = format!(
                                "{buckets} of {} buckets (element {} ...) -> {}; source port unknown",
                                size.unwrap_or(0),
                                show(&kv),
                                crate::net::join_host_port(&ip, port)
                            );
                            self.step(c, rule, &mut st, Some(note));
                            st.dst = ip;
                            st.dport = port;
                            st.dnat = true;
                            next.push((st, Some(Flow::Accept), true));
                        }
                        if next.is_empty() {
                            next.push((st, None, logged));
                        }
                    }
                    Action::DnatMap { map, key } => {
                        for kv in self.keys(key, &st) {
                            let mut st = st.clone();
                            match self.lookup(map, &kv) {
                                Some(ElemData::AddrPort(ip, port)) => {
                                    let note = match hash_note(key, &st) {
                                        Some(h) => format!(
                                            "{h}: element {} -> table entry {}",
                                            show(&kv),
                                            crate::net::join_host_port(ip, *port)
                                        ),
                                        None => format!(
                                            "slot {} -> {}",
                                            show(&kv),
                                            crate::net::join_host_port(ip, *port)
                                        ),
                                    };
                                    self.step(c, rule, &mut st, Some(note));
                                    st.dst = *ip;
                                    st.dport = *port;
                                    st.dnat = true;
                                    next.push((st, Some(Flow::Accept), true));
                                }
                                _ => next.push((st, None, logged)),
                            }
                        }
                    }
                    Action::RandomVerdict(vs) => {
                        for (i, v) in vs.iter().enumerate() {
                            let mut st = st.clone();
                            self.step(c, rule, &mut st, Some(format!("random choice {i}")));
                            let out = self.verdict(c.def.table, v, st, depth);
                            next.extend(out.into_iter().map(|(s, f)| (s, f, true)));
                        }
                    }
                }
            }
            states = next;
        }
        states.into_iter().map(|(s, f, _)| (s, f)).collect()
    }

    fn verdict(&self, table: &str, v: &Verdict, st: State, depth: usize) -> Vec<(State, Option<Flow>)> {
        match v {
            Verdict::Accept => vec![(st, Some(Flow::Accept))],
            Verdict::Drop => vec![(st, Some(Flow::Drop))],
            Verdict::Reject => vec![(st, Some(Flow::Reject))],
            Verdict::Return => vec![(st, Some(Flow::Continue))],
            Verdict::Jump(name) | Verdict::Goto(name) => {
                let Some(target) = self.find_chain(table, name) else {
                    return vec![(st, Some(Flow::Drop))];
                };
                self.chain(target, st, depth + 1)
                    .into_iter()
                    .map(|(s, f)| match (v, f) {
                        // A jump that returns continues after the jump rule.
                        (Verdict::Jump(_), Flow::Continue) => (s, None),
                        // A goto that returns leaves the calling chain too.
                        (_, f) => (s, Some(f)),
                    })
                    .collect()
            }
        }
    }

    fn find_chain(&self, table: &str, name: &str) -> Option<&'a AssembledChain<'a>> {
        self.chains.get(&(table, name)).copied()
    }

    /// Evaluates a rule's matches; statistic matches split the state in two.
    fn matches(&self, rule: &Rule, st: State) -> Vec<(State, bool)> {
        let mut states = vec![(st, true)];
        for m in &rule.matches {
            let mut next = Vec::new();
            for (st, ok) in states {
                if !ok {
                    next.push((st, false));
                    continue;
                }
                if let Match::Probability(_) = m {
                    next.push((st.clone(), true));
                    next.push((st, false));
                    continue;
                }
                let ok = self.test(m, &st);
                next.push((st, ok));
            }
            states = next;
        }
        states
    }

    fn test(&self, m: &Match, st: &State) -> bool {
        match m {
            Match::Proto(p) => st.proto == *p,
            Match::Src(net, neg) => net.contains(&st.src) != *neg,
            Match::Dst(net, neg) => net.contains(&st.dst) != *neg,
            Match::DstPort(p) => st.dport == *p,
            Match::SrcPort(p) => st.sport == Some(*p),
            // The node-local DNS listener is taken to be up where one is planned.
            Match::TransparentSocket => self.env.local_route_mark.is_some(),
            Match::InInterface { name, prefix, neg } => {
                let iif = self.input_interface.as_str();
                let arrived = if *prefix { iif.starts_with(&**name) } else { iif == &**name };
                arrived != *neg
            }
            Match::SrcLocal(yes) => self.env.is_local(&st.src) == *yes,
            Match::DstLocal(yes) => self.env.is_local(&st.dst) == *yes,
            Match::Mark(m, neg) => (st.mark & m == *m) != *neg,
            Match::Ct(CtState::New) => !st.untracked,
            Match::Ct(CtState::Invalid | CtState::RelatedEstablished) => false,
            Match::Ct(CtState::NotRelatedEstablishedDnat) => !st.dnat,
            Match::CtDnat => st.dnat,
            Match::InSet { set, key, neg } => {
                let found = self.keys(key, st).iter().any(|k| self.member(set, k));
                found != *neg
            }
            Match::Recent { .. } => false,
            Match::RecentSet(_) | Match::Comment(_) | Match::Probability(_) => true,
        }
    }

    /// Key values for a packet; a random field yields one key per slot.
    fn keys(&self, fields: &[Field], st: &State) -> Vec<Vec<Value>> {
        let mut keys: Vec<Vec<Value>> = vec![Vec::new()];
        for f in fields {
            match f {
                Field::Jhash { modulus, address_only, .. } if *address_only || st.sport.is_some() => {
                    let b =
                        crate::maglev::flow_bucket(&st.src, st.sport.unwrap_or(0), *address_only, *modulus);
                    keys.iter_mut().for_each(|k| k.push(Value::Int(b)));
                }
                Field::Random(n) | Field::Jhash { modulus: n, .. } => {
                    keys = keys
                        .into_iter()
                        .flat_map(|k| {
                            (0..*n).map(move |i| {
                                let mut k = k.clone();
                                k.push(Value::Int(i));
                                k
                            })
                        })
                        .collect();
                }
                other => {
                    let v = match other {
                        Field::SrcIp => Value::Ip(st.src),
                        Field::DstIp => Value::Ip(st.dst),
                        Field::Proto => Value::Proto(st.proto),
                        Field::DstPort => Value::Port(st.dport),
                        Field::Random(_) | Field::Jhash { .. } => unreachable!(),
                    };
                    keys.iter_mut().for_each(|k| k.push(v));
                }
            }
        }
        keys
    }

    /// A key hashes the source port, which the packet does not give.
    fn hash_unknown(&self, fields: &[Field], st: &State) -> bool {
        st.sport.is_none() && fields.iter().any(|f| matches!(f, Field::Jhash { address_only: false, .. }))
    }

    /// The endpoints a hashed lookup can reach when the bucket is unknown: one walk of the
    /// map (not one lookup per bucket), each endpoint with its first element and bucket count.
    fn hashed_endpoints(
        &self,
        map: &str,
        fields: &[Field],
        st: &State,
    ) -> Vec<(Vec<Value>, IpAddr, u16, usize)> {
        let zero = State { sport: Some(0), ..st.clone() };
        let Some(probe) = self.keys(fields, &zero).pop() else { return Vec::new() };
        let hashed: Vec<bool> = fields.iter().map(|f| matches!(f, Field::Jhash { .. })).collect();
        let mut found: Vec<(Vec<Value>, IpAddr, u16, usize)> = Vec::new();
        for e in self.elements(map) {
            let Some(ElemData::AddrPort(ip, port)) = &e.data else { continue };
            let same = e.key.len() == probe.len()
                && e.key.iter().zip(&probe).zip(&hashed).all(|((a, b), h)| *h || key_matches(&[*a], &[*b]));
            if !same {
                continue;
            }
            match found.iter_mut().find(|f| (f.1, f.2) == (*ip, *port)) {
                Some(f) => f.3 += 1,
                None => found.push((e.key.to_vec(), *ip, *port, 1)),
            }
        }
        found.sort_by_key(|f| (f.1, f.2));
        found
    }

    fn elements(&self, set: &str) -> &[&'a Element] {
        self.sets.get(set).map(|s| s.elements.as_slice()).unwrap_or(&[])
    }

    fn member(&self, set: &str, key: &[Value]) -> bool {
        self.elements(set).iter().any(|e| key_matches(&e.key, key))
    }

    fn lookup(&self, set: &str, key: &[Value]) -> Option<&'a ElemData> {
        self.elements(set).iter().find(|e| key_matches(&e.key, key)).and_then(|e| e.data.as_ref())
    }
}

/// How a hashed key was computed, for the trace: the hash, its input and the bucket.
fn hash_note(fields: &[Field], st: &State) -> Option<String> {
    fields.iter().find_map(|f| match f {
        Field::Jhash { modulus, seed, address_only } => {
            let sport = st.sport.unwrap_or(0);
            let input = if *address_only { st.src.to_string() } else { format!("{} . {sport}", st.src) };
            let hash = crate::maglev::jhash(&crate::maglev::flow_key(&st.src, sport, *address_only), *seed);
            let bucket = crate::maglev::reciprocal_scale(hash, *modulus);
            Some(format!("jhash({input}, seed 0x{seed:x}) = 0x{hash:08x}, bucket {bucket} of {modulus}"))
        }
        _ => None,
    })
}

fn key_matches(elem: &[Value], pkt: &[Value]) -> bool {
    // ipset keys leave the protocol implicit for some types: compare component-wise, allowing
    // the element to omit nothing but matching networks against addresses.
    elem.len() == pkt.len()
        && elem.iter().zip(pkt).all(|(e, p)| match (e, p) {
            (Value::Net(n), Value::Ip(ip)) => n.contains(ip),
            (a, b) => a == b,
        })
}

fn show(k: &[Value]) -> String {
    k.iter()
        .map(|v| match v {
            Value::Ip(ip) => ip.to_string(),
            Value::Net(n) => n.to_string(),
            Value::Proto(p) => p.to_string(),
            Value::Port(p) => p.to_string(),
            Value::Int(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" . ")
}

fn stopped(flow: Flow) -> Option<Outcome> {
    match flow {
        Flow::Drop => Some(Outcome::Drop),
        Flow::Reject => Some(Outcome::Reject),
        Flow::Continue | Flow::Accept => None,
    }
}

fn leaving(st: &State) -> Outcome {
    if st.dnat {
        Outcome::Dnat { ip: st.dst, port: st.dport, masquerade: st.masq }
    } else {
        Outcome::Forward { masquerade: st.masq }
    }
}

fn path(st: State, outcome: Outcome) -> TracePath {
    TracePath { steps: st.steps, outcome }
}
