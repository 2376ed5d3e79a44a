//! nft script text: full programs (one atomic `nft -f` transaction) and change sets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::net::IpFamily;
use crate::program::{
    Action, Assembled, ChainKind, ChangeSet, CtState, DataType, ElemData, Element, Field, KeyType, Match,
    Program, Rule, Set, SetRef, Value, Verdict,
};
use crate::render::fmt;

use super::lower::TABLE;

/// `ip` or `ip6`.
pub fn family_kw(f: IpFamily) -> &'static str {
    match f {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}

fn write_field(out: &mut String, f: IpFamily, x: &Field) {
    let fam = family_kw(f);
    match x {
        Field::SrcIp => {
            out.push_str(fam);
            out.push_str(" saddr");
        }
        Field::DstIp => {
            out.push_str(fam);
            out.push_str(" daddr");
        }
        Field::Proto => out.push_str("meta l4proto"),
        Field::DstPort => out.push_str("th dport"),
        Field::Random(n) => {
            out.push_str("numgen random mod ");
            fmt::push_u32(out, *n);
        }
        Field::Jhash { modulus, seed, address_only } => {
            out.push_str("jhash ");
            out.push_str(fam);
            out.push_str(" saddr");
            if !address_only {
                out.push_str(" . th sport");
            }
            out.push_str(" mod ");
            fmt::push_u32(out, *modulus);
            let _ = write!(out, " seed 0x{seed:x}");
        }
    }
}

fn write_key(out: &mut String, f: IpFamily, fields: &[Field]) {
    for (i, x) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(" . ");
        }
        write_field(out, f, x);
    }
}

fn write_verdict(out: &mut String, v: &Verdict) {
    match v {
        Verdict::Jump(c) => {
            out.push_str("jump ");
            out.push_str(c);
        }
        Verdict::Goto(c) => {
            out.push_str("goto ");
            out.push_str(c);
        }
        Verdict::Return => out.push_str("return"),
        Verdict::Accept => out.push_str("accept"),
        Verdict::Drop => out.push_str("drop"),
        Verdict::Reject => out.push_str("reject"),
    }
}

fn neq(neg: bool) -> &'static str {
    if neg { "!= " } else { "" }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "'"))
}

/// Appends one rule in nft syntax (as in `nft list ruleset`, without a newline).
pub fn write_rule(out: &mut String, f: IpFamily, r: &Rule) {
    let fam = family_kw(f);
    let start = out.len();
    let sep = |out: &mut String| {
        if out.len() > start {
            out.push(' ');
        }
    };
    for m in &r.matches {
        if matches!(m, Match::Comment(_)) {
            continue;
        }
        sep(out);
        match m {
            Match::Proto(p) => {
                out.push_str("meta l4proto ");
                out.push_str(p.as_str());
            }
            Match::Src(net, neg) | Match::Dst(net, neg) => {
                let dir = if matches!(m, Match::Src(..)) { "saddr" } else { "daddr" };
                let _ = write!(out, "{fam} {dir} {}", neq(*neg));
                fmt::push_net(out, net);
            }
            Match::DstPort(p) => {
                out.push_str("th dport ");
                fmt::push_u32(out, (*p).into());
            }
            Match::SrcPort(p) => {
                out.push_str("th sport ");
                fmt::push_u32(out, (*p).into());
            }
            Match::TransparentSocket => out.push_str("socket transparent 1"),
            Match::InInterface { name, prefix, neg } => {
                let wildcard = if *prefix { "*" } else { "" };
                let _ = write!(out, "iifname {}\"{name}{wildcard}\"", neq(*neg));
            }
            Match::SrcLocal(yes) => {
                let _ = write!(out, "fib saddr type {}local", neq(!yes));
            }
            Match::DstLocal(yes) => {
                let _ = write!(out, "fib daddr type {}local", neq(!yes));
            }
            Match::Mark(m, true) => {
                let _ = write!(out, "meta mark & {m:#x} == 0");
            }
            Match::Mark(m, false) => {
                let _ = write!(out, "meta mark & {m:#x} == {m:#x}");
            }
            Match::Ct(CtState::New) => out.push_str("ct state new"),
            Match::Ct(CtState::Invalid) => out.push_str("ct state invalid"),
            Match::Ct(CtState::RelatedEstablished) => out.push_str("ct state related,established"),
            Match::Ct(CtState::NotRelatedEstablishedDnat) => {
                out.push_str("ct state != related,established ct status != dnat")
            }
            Match::CtDnat => out.push_str("ct status dnat"),
            Match::InSet { set, key, neg } => {
                write_key(out, f, key);
                let _ = write!(out, " {}@{set}", neq(*neg));
            }
            Match::Comment(_) => {}
            Match::Recent { .. } | Match::RecentSet(_) | Match::Probability(_) => {
                unreachable!("iptables-only match in an nftables program")
            }
        }
    }
    for a in &r.actions {
        sep(out);
        match a {
            Action::Verdict(v) => write_verdict(out, v),
            Action::Dnat(ip, port) => {
                let _ = write!(out, "dnat {fam} to ");
                fmt::push_host_port(out, ip, *port);
            }
            Action::DnatMap { map, key } => {
                let _ = write!(out, "dnat {fam} to ");
                write_key(out, f, key);
                let _ = write!(out, " map @{map}");
            }
            Action::VerdictMap { map, key } => {
                write_key(out, f, key);
                let _ = write!(out, " vmap @{map}");
            }
            Action::RandomVerdict(vs) => {
                let _ = write!(out, "numgen random mod {} vmap {{ ", vs.len());
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    fmt::push_u32(out, i as u32);
                    out.push_str(" : ");
                    write_verdict(out, v);
                }
                out.push_str(" }");
            }
            Action::MarkOr(m) => {
                let _ = write!(out, "meta mark set meta mark | {m:#x}");
            }
            Action::MarkXor(m) => {
                let _ = write!(out, "meta mark set meta mark ^ {m:#x}");
            }
            Action::Masquerade { fully_random: true } => out.push_str("masquerade fully-random"),
            Action::Masquerade { fully_random: false } => out.push_str("masquerade"),
            Action::UpdateSet(set) => {
                let _ = write!(out, "update @{set} {{ {fam} saddr }}");
            }
            Action::Notrack => out.push_str("notrack"),
            Action::Nothing => out.push_str("continue"),
        }
    }
    if let Some(c) = &r.comment {
        sep(out);
        out.push_str("comment ");
        out.push_str(&quote(c));
    }
}

/// One rule in nft syntax.
pub fn rule(f: IpFamily, r: &Rule) -> String {
    let mut out = String::with_capacity(96);
    write_rule(&mut out, f, r);
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Ip(ip) => fmt::push_ip(out, ip),
        Value::Net(n) => fmt::push_net(out, n),
        Value::Proto(p) => out.push_str(p.as_str()),
        Value::Port(p) => fmt::push_u32(out, (*p).into()),
        Value::Int(i) => fmt::push_u32(out, *i),
    }
}

fn write_key_values(out: &mut String, e: &Element) {
    for (i, v) in e.key.iter().enumerate() {
        if i > 0 {
            out.push_str(" . ");
        }
        write_value(out, v);
    }
}

/// Appends one element (`key . key : data`).
pub fn write_element(out: &mut String, e: &Element) {
    write_key_values(out, e);
    match &e.data {
        None => {}
        Some(ElemData::Verdict(v)) => {
            out.push_str(" : ");
            write_verdict(out, v);
        }
        Some(ElemData::AddrPort(ip, port)) => {
            out.push_str(" : ");
            fmt::push_ip(out, ip);
            out.push_str(" . ");
            fmt::push_u32(out, (*port).into());
        }
    }
}

/// One element (`key . key : data`).
pub fn element(e: &Element) -> String {
    let mut out = String::with_capacity(48);
    write_element(&mut out, e);
    out
}

fn key_only(e: &Element) -> String {
    let mut out = String::with_capacity(40);
    write_key_values(&mut out, e);
    out
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
        match s.data {
            Some(DataType::AddrPort(fam)) => {
                let _ = write!(spec, " : {} daddr . th dport", family_kw(fam));
            }
            Some(DataType::Verdict) => spec.push_str(" : verdict"),
            None => {}
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
                    if fam == IpFamily::V4 { "ipv4_addr" } else { "ipv6_addr" }
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
        // One element per line keeps golden diffs readable.
        out.push_str(" elements = {\n");
        for (i, e) in elems.iter().enumerate() {
            out.push_str("\t\t");
            write_element(out, e);
            out.push_str(if i + 1 < elems.len() { ",\n" } else { "\n\t" });
        }
        out.push('}');
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
            format!("type {kind} hook {} priority {}; policy accept;", h.hook.as_str(), h.priority)
        }
        None => String::new(),
    }
}

/// The full script: (re)creates the table atomically with every object in it.
pub fn program(p: &Program) -> String {
    let asm = p.assemble();
    let fam = family_kw(p.family);
    let mut out = String::with_capacity(256 + asm.sets.iter().map(|s| s.elements.len() * 48).sum::<usize>());
    let _ = writeln!(out, "table {fam} {TABLE}\ndelete table {fam} {TABLE}\ntable {fam} {TABLE} {{");
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
            out.push_str("\t\t");
            write_rule(out, f, r);
            out.push('\n');
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
        ("delete", &changes.delete_elements, key_only as fn(&Element) -> String),
        ("add", &changes.add_elements, element as fn(&Element) -> String),
    ] {
        let mut by_set: BTreeMap<&SetRef, Vec<String>> = BTreeMap::new();
        for (s, e) in list {
            by_set.entry(s).or_default().push(render(e));
        }
        for (s, elems) in by_set {
            let _ = writeln!(out, "{verb} element {fam} {TABLE} {} {{ {} }}", s.name, elems.join(", "));
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
