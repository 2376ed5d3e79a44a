//! nft script text: full programs (one atomic `nft -f` transaction) and change sets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::net::{IpFamily, join_host_port};
use crate::program::{
    Action, Assembled, ChainKind, ChangeSet, CtState, DataType, ElemData, Element, Field, KeyType, Match,
    Program, Rule, Set, SetRef, Value, Verdict,
};

use super::lower::TABLE;

/// `ip` or `ip6`.
pub fn family_kw(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}

fn field(f: IpFamily, x: &Field) -> String {
    let fam = family_kw(f);
    match x {
        Field::SrcIp => format!("{fam} saddr"),
        Field::DstIp => format!("{fam} daddr"),
        Field::Proto => "meta l4proto".into(),
        Field::DstPort => "th dport".into(),
        Field::Random(n) => format!("numgen random mod {n}"),
    }
}

fn key(f: IpFamily, fields: &[Field]) -> String {
    fields.iter().map(|x| field(f, x)).collect::<Vec<_>>().join(" . ")
}

fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
        Verdict::Return => "return".into(),
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Reject => "reject".into(),
    }
}

fn neq(neg: bool) -> &'static str {
    if neg { "!= " } else { "" }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "'"))
}

/// One rule in nft syntax (as in `nft list ruleset`, without the trailing newline).
pub fn rule(f: IpFamily, r: &Rule) -> String {
    let fam = family_kw(f);
    let mut parts: Vec<String> = Vec::new();
    for m in &r.matches {
        parts.push(match m {
            Match::Proto(p) => format!("meta l4proto {p}"),
            Match::Src(net, neg) => format!("{fam} saddr {}{net}", neq(*neg)),
            Match::Dst(net, neg) => format!("{fam} daddr {}{net}", neq(*neg)),
            Match::DstPort(p) => format!("th dport {p}"),
            Match::SrcLocal(yes) => format!("fib saddr type {}local", neq(!yes)),
            Match::DstLocal(yes) => format!("fib daddr type {}local", neq(!yes)),
            Match::Mark(m, true) => format!("meta mark & {m:#x} == 0"),
            Match::Mark(m, false) => format!("meta mark & {m:#x} == {m:#x}"),
            Match::Ct(CtState::New) => "ct state new".into(),
            Match::Ct(CtState::Invalid) => "ct state invalid".into(),
            Match::Ct(CtState::RelatedEstablished) => "ct state related,established".into(),
            Match::Ct(CtState::NotRelatedEstablishedDnat) => {
                "ct state != related,established ct status != dnat".into()
            }
            Match::CtDnat => "ct status dnat".into(),
            Match::InSet { set, key: k, neg } => format!("{} {}@{set}", key(f, k), neq(*neg)),
            Match::Comment(_) => continue,
            Match::Recent { .. } | Match::RecentSet(_) | Match::Probability(_) => {
                unreachable!("iptables-only match in an nftables program")
            }
        });
    }
    for a in &r.actions {
        parts.push(match a {
            Action::Verdict(v) => verdict(v),
            Action::Dnat(ip, port) => format!("dnat {fam} to {}", join_host_port(ip, *port)),
            Action::DnatMap { map, key: k } => format!("dnat {fam} to {} map @{map}", key(f, k)),
            Action::VerdictMap { map, key: k } => format!("{} vmap @{map}", key(f, k)),
            Action::RandomVerdict(vs) => {
                let arms: Vec<String> = vs
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("{i} : {}", verdict(v)))
                    .collect();
                format!("numgen random mod {} vmap {{ {} }}", vs.len(), arms.join(", "))
            }
            Action::MarkOr(m) => format!("meta mark set meta mark | {m:#x}"),
            Action::MarkXor(m) => format!("meta mark set meta mark ^ {m:#x}"),
            Action::Masquerade { fully_random: true } => "masquerade fully-random".into(),
            Action::Masquerade { fully_random: false } => "masquerade".into(),
            Action::UpdateSet(set) => format!("update @{set} {{ {fam} saddr }}"),
            Action::Nothing => "continue".into(),
        });
    }
    if let Some(c) = &r.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    parts.join(" ")
}

fn value(v: &Value) -> String {
    match v {
        Value::Ip(ip) => ip.to_string(),
        Value::Net(n) => n.to_string(),
        Value::Proto(p) => p.as_str().into(),
        Value::Port(p) => p.to_string(),
        Value::Int(i) => i.to_string(),
    }
}

/// One element (`key . key : data`).
pub fn element(e: &Element) -> String {
    let k = e.key.iter().map(value).collect::<Vec<_>>().join(" . ");
    match &e.data {
        None => k,
        Some(ElemData::Verdict(v)) => format!("{k} : {}", verdict(v)),
        Some(ElemData::AddrPort(ip, port)) => format!("{k} : {ip} . {port}"),
    }
}

fn key_only(e: &Element) -> String {
    e.key.iter().map(value).collect::<Vec<_>>().join(" . ")
}

fn set_header(f: IpFamily, s: &Set) -> String {
    let kind = if s.data.is_some() { "map" } else { "set" };
    let mut spec = String::new();
    if s.key.contains(&KeyType::Slot) {
        // numgen has no named type: describe the key by expression.
        let exprs: Vec<String> = s
            .key
            .iter()
            .map(|k| match k {
                KeyType::Addr(fam) | KeyType::Net(fam) => format!("{} daddr", family_kw(*fam)),
                KeyType::Proto => "meta l4proto".into(),
                KeyType::Port => "th dport".into(),
                KeyType::Slot => "numgen random mod 1".into(),
            })
            .collect();
        let _ = write!(spec, "typeof {}", exprs.join(" . "));
        if let Some(DataType::AddrPort(fam)) = s.data {
            let _ = write!(spec, " : {} daddr . th dport", family_kw(fam));
        }
    } else {
        let types: Vec<&str> = s
            .key
            .iter()
            .map(|k| match k {
                KeyType::Addr(IpFamily::V4) | KeyType::Net(IpFamily::V4) => "ipv4_addr",
                KeyType::Addr(IpFamily::V6) | KeyType::Net(IpFamily::V6) => "ipv6_addr",
                KeyType::Proto => "inet_proto",
                KeyType::Port => "inet_service",
                KeyType::Slot => "integer",
            })
            .collect();
        let _ = write!(spec, "type {}", types.join(" . "));
        match s.data {
            Some(DataType::Verdict) => spec.push_str(" : verdict"),
            Some(DataType::AddrPort(fam)) => {
                let _ = write!(
                    spec,
                    " : {} . inet_service",
                    if fam == IpFamily::V4 {
                        "ipv4_addr"
                    } else {
                        "ipv6_addr"
                    }
                );
            }
            None => {}
        }
    }
    let mut flags = Vec::new();
    if s.flags.interval {
        flags.push("interval");
    }
    if s.flags.dynamic_timeout.is_some() {
        flags.push("dynamic");
        flags.push("timeout");
    }
    if !flags.is_empty() {
        let _ = write!(spec, "; flags {}", flags.join(","));
    }
    if let Some(t) = s.flags.dynamic_timeout {
        let _ = write!(spec, "; timeout {t}s");
    }
    if let Some(c) = &s.comment {
        let _ = write!(spec, "; comment {}", quote(c));
    }
    let _ = f;
    format!("{kind} {} {{ {spec};", s.name)
}

fn write_set(out: &mut String, f: IpFamily, s: &Set, elems: &[&Element]) {
    let _ = write!(out, "\t{}", set_header(f, s));
    if !elems.is_empty() {
        out.push_str(" elements = { ");
        for (i, e) in elems.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&element(e));
        }
        out.push_str(" }");
    }
    out.push_str(" }\n");
}

fn chain_spec(c: &crate::program::Chain) -> String {
    match c.hook {
        Some(h) => {
            let kind = match h.kind {
                ChainKind::Filter => "filter",
                ChainKind::Nat => "nat",
            };
            format!(
                "type {kind} hook {} priority {}; policy accept;",
                h.hook.as_str(),
                h.priority
            )
        }
        None => String::new(),
    }
}

/// The full script: (re)creates the table atomically with every object in it.
pub fn program(p: &Program) -> String {
    let asm = p.assemble();
    let fam = family_kw(p.family);
    let mut out = String::with_capacity(256 + asm.sets.iter().map(|s| s.elements.len() * 48).sum::<usize>());
    let _ = writeln!(
        out,
        "table {fam} {TABLE}\ndelete table {fam} {TABLE}\ntable {fam} {TABLE} {{"
    );
    out.push_str("\tcomment \"rules for tideway\"\n");
    body(&mut out, p.family, &asm);
    out.push_str("}\n");
    out
}

fn body(out: &mut String, f: IpFamily, asm: &Assembled<'_>) {
    for s in &asm.sets {
        write_set(out, f, s.def, &s.elements);
    }
    for c in &asm.chains {
        let _ = writeln!(out, "\tchain {} {{", c.def.name);
        let spec = chain_spec(c.def);
        if !spec.is_empty() {
            let _ = writeln!(out, "\t\t{spec}");
        }
        for r in &c.rules {
            let _ = writeln!(out, "\t\t{}", rule(f, r));
        }
        out.push_str("\t}\n");
    }
}

/// A transaction applying `changes` on top of what is programmed. `program` is the new full
/// program, used when the change set asks for a full replacement.
pub fn changes(program: &Program, changes: &ChangeSet) -> String {
    if changes.full {
        return self::program(program);
    }
    let f = program.family;
    let fam = family_kw(f);
    let mut out = String::new();
    for s in &changes.add_sets {
        let elems: Vec<&Element> = s.elements.iter().collect();
        let mut def = String::new();
        write_set(&mut def, f, s, &elems);
        // "set NAME { ... }" becomes "add set ip tideway NAME { ... }".
        let (kind, rest) = def.trim().split_once(' ').unwrap_or(("set", ""));
        let _ = writeln!(out, "add {kind} {fam} {TABLE} {rest}");
    }
    for c in &changes.add_chains {
        let spec = chain_spec(c);
        if spec.is_empty() {
            let _ = writeln!(out, "add chain {fam} {TABLE} {}", c.name);
        } else {
            let _ = writeln!(out, "add chain {fam} {TABLE} {} {{ {spec} }}", c.name);
        }
        for r in c.rules.iter().chain(&c.tail) {
            let _ = writeln!(out, "add rule {fam} {TABLE} {} {}", c.name, rule(f, r));
        }
    }
    for c in &changes.flush_chains {
        let _ = writeln!(out, "flush chain {fam} {TABLE} {}", c.name);
        for r in c.rules.iter().chain(&c.tail) {
            let _ = writeln!(out, "add rule {fam} {TABLE} {} {}", c.name, rule(f, r));
        }
    }
    for (verb, list, render) in [
        (
            "delete",
            &changes.delete_elements,
            key_only as fn(&Element) -> String,
        ),
        ("add", &changes.add_elements, element as fn(&Element) -> String),
    ] {
        let mut by_set: BTreeMap<&SetRef, Vec<String>> = BTreeMap::new();
        for (s, e) in list {
            by_set.entry(s).or_default().push(render(e));
        }
        for (s, elems) in by_set {
            let _ = writeln!(
                out,
                "{verb} element {fam} {TABLE} {} {{ {} }}",
                s.name,
                elems.join(", ")
            );
        }
    }
    debug_assert!(
        changes.add_rules.is_empty() && changes.delete_rules.is_empty(),
        "nft programs use maps, not shared rules"
    );
    for c in &changes.delete_chains {
        let _ = writeln!(out, "delete chain {fam} {TABLE} {}", c.name);
    }
    for s in &changes.delete_sets {
        let _ = writeln!(out, "delete set {fam} {TABLE} {}", s.name);
    }
    out
}
