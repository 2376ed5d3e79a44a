//! iptables-restore text (kube-proxy's argument order) for programs and change sets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::LazyLock;

use crate::net::IpNet;
use crate::program::{Action, Assembled, ChainRef, ChangeSet, CtState, Field, Match, Program, Rule, Verdict};
use crate::render::fmt;

use crate::render::chains::{FILTER, NAT, RAW};

/// `1/n` with ten decimals, as kube-proxy writes it (`%0.10f`); common values are cached.
fn push_probability(out: &mut String, n: u32) {
    static CACHE: LazyLock<Vec<String>> =
        LazyLock::new(|| (0..=1024u32).map(|n| format!("{:.10}", 1.0 / f64::from(n.max(1)))).collect());
    match CACHE.get(n as usize) {
        Some(s) if n > 0 => out.push_str(s),
        _ => {
            let _ = write!(out, "{:.10}", 1.0 / f64::from(n));
        }
    }
}

fn push_comment(out: &mut String, c: &str) {
    if c.chars().all(|ch| ch.is_ascii_alphanumeric() || "/:._-".contains(ch)) {
        out.push_str(c);
    } else {
        out.push('"');
        out.push_str(&c.replace('"', "'"));
        out.push('"');
    }
}

fn push_net(out: &mut String, n: &IpNet) {
    if n.prefix_len() == n.max_prefix_len() {
        fmt::push_ip(out, &n.addr());
    } else {
        fmt::push_net(out, n);
    }
}

fn neg(b: bool) -> &'static str {
    if b { "! " } else { "" }
}

fn set_dirs(out: &mut String, key: &[Field]) {
    let mut first = true;
    for f in key {
        let dir = match f {
            Field::SrcIp => "src",
            Field::DstIp | Field::DstPort => "dst",
            Field::Proto | Field::Random(_) | Field::Jhash { .. } => continue,
        };
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(dir);
    }
}

/// Appends the arguments of a rule (everything after `-A CHAIN`), space-separated.
pub fn write_rule_args(out: &mut String, r: &Rule) {
    let start = out.len();
    let sep = |out: &mut String| {
        if out.len() > start {
            out.push(' ');
        }
    };
    for m in &r.matches {
        sep(out);
        match m {
            Match::Comment(c) => {
                out.push_str("-m comment --comment ");
                push_comment(out, c);
            }
            Match::Proto(p) => {
                let p = p.as_str();
                out.push_str("-m ");
                out.push_str(p);
                out.push_str(" -p ");
                out.push_str(p);
            }
            Match::Src(n, ng) => {
                out.push_str(neg(*ng));
                out.push_str("-s ");
                push_net(out, n);
            }
            Match::Dst(n, ng) => {
                out.push_str(neg(*ng));
                out.push_str("-d ");
                push_net(out, n);
            }
            Match::DstPort(p) => {
                out.push_str("--dport ");
                fmt::push_u32(out, (*p).into());
            }
            Match::SrcPort(p) => {
                out.push_str("--sport ");
                fmt::push_u32(out, (*p).into());
            }
            Match::TransparentSocket => out.push_str("-m socket --transparent"),
            Match::InInterface { name, prefix, neg: ng } => {
                out.push_str(neg(*ng));
                out.push_str("-i ");
                out.push_str(name);
                if *prefix {
                    out.push('+');
                }
            }
            Match::SrcLocal(yes) => {
                let _ = write!(out, "-m addrtype {}--src-type LOCAL", neg(!yes));
            }
            Match::DstLocal(yes) => {
                let _ = write!(out, "-m addrtype {}--dst-type LOCAL", neg(!yes));
            }
            Match::Mark(m, ng) => {
                let _ = write!(out, "-m mark {}--mark {m:#x}/{m:#x}", neg(*ng));
            }
            Match::Ct(CtState::New) => out.push_str("-m conntrack --ctstate NEW"),
            Match::Ct(CtState::Invalid) => out.push_str("-m conntrack --ctstate INVALID"),
            Match::Ct(CtState::RelatedEstablished) => {
                out.push_str("-m conntrack --ctstate RELATED,ESTABLISHED")
            }
            Match::Ct(CtState::NotRelatedEstablishedDnat) => {
                out.push_str("-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT")
            }
            Match::CtDnat => out.push_str("-m conntrack --ctstate DNAT"),
            Match::InSet { set, key, neg: ng } => {
                let _ = write!(out, "-m set {}--match-set {set} ", neg(*ng));
                set_dirs(out, key);
            }
            Match::Recent { name, seconds } => {
                let _ = write!(out, "-m recent --name {name} --rcheck --seconds {seconds} --reap");
            }
            Match::RecentSet(name) => {
                let _ = write!(out, "-m recent --name {name} --set");
            }
            Match::Probability(n) => {
                out.push_str("-m statistic --mode random --probability ");
                push_probability(out, *n);
            }
        }
    }
    for a in &r.actions {
        if matches!(a, Action::Nothing) {
            continue;
        }
        sep(out);
        match a {
            Action::Verdict(Verdict::Jump(c)) => {
                out.push_str("-j ");
                out.push_str(c);
            }
            Action::Verdict(Verdict::Goto(c)) => {
                out.push_str("-g ");
                out.push_str(c);
            }
            Action::Verdict(Verdict::Return) => out.push_str("-j RETURN"),
            Action::Verdict(Verdict::Accept) => out.push_str("-j ACCEPT"),
            Action::Verdict(Verdict::Drop) => out.push_str("-j DROP"),
            Action::Verdict(Verdict::Reject) => out.push_str("-j REJECT"),
            Action::Dnat(ip, port) => {
                out.push_str("-j DNAT --to-destination ");
                fmt::push_host_port(out, ip, *port);
            }
            Action::MarkOr(m) => {
                let _ = write!(out, "-j MARK --or-mark {m:#x}");
            }
            Action::MarkXor(m) => {
                let _ = write!(out, "-j MARK --xor-mark {m:#x}");
            }
            Action::Masquerade { fully_random: true } => out.push_str("-j MASQUERADE --random-fully"),
            Action::Masquerade { fully_random: false } => out.push_str("-j MASQUERADE"),
            Action::Notrack => out.push_str("-j CT --notrack"),
            Action::Nothing => {}
            Action::DnatMap { .. }
            | Action::VerdictMap { .. }
            | Action::RandomVerdict(_)
            | Action::UpdateSet(_) => {
                unreachable!("nftables-only action in an iptables program")
            }
        }
    }
}

/// The arguments of a rule (everything after `-A CHAIN`).
pub fn rule_args(r: &Rule) -> String {
    let mut out = String::with_capacity(96);
    write_rule_args(&mut out, r);
    out
}

/// Appends `-A CHAIN args` and a newline.
pub fn write_rule(out: &mut String, chain: &str, r: &Rule) {
    out.push_str("-A ");
    out.push_str(chain);
    if !(r.matches.is_empty() && r.actions.iter().all(|a| matches!(a, Action::Nothing))) {
        out.push(' ');
        write_rule_args(out, r);
    }
    out.push('\n');
}

/// `-A CHAIN args`.
pub fn rule(chain: &str, r: &Rule) -> String {
    let mut out = String::with_capacity(128);
    write_rule(&mut out, chain, r);
    out.pop();
    out
}

/// Jump rules that must exist in built-in chains (ensured with `iptables -C`/`-I`, not restored):
/// (table, built-in chain, rule arguments), in chain order.
pub fn builtin_jumps(p: &Program) -> Vec<(&'static str, String, String)> {
    p.base
        .chains
        .iter()
        .filter(|c| c.builtin)
        .flat_map(|c| c.rules.iter().map(move |r| (c.table, c.name.to_string(), rule_args(r))))
        .collect()
}

fn table_section(out: &mut String, table: &str, asm: &Assembled<'_>, stale: &[ChainRef]) {
    let _ = writeln!(out, "*{table}");
    let chains: Vec<_> = asm.chains.iter().filter(|c| c.def.table == table && !c.def.builtin).collect();
    for c in &chains {
        let _ = writeln!(out, ":{} - [0:0]", c.def.name);
    }
    for s in stale.iter().filter(|s| s.table == table) {
        let _ = writeln!(out, ":{} - [0:0]", s.name);
    }
    for c in &chains {
        for r in &c.rules {
            write_rule(out, &c.def.name, r);
        }
    }
    for s in stale.iter().filter(|s| s.table == table) {
        let _ = writeln!(out, "-X {}", s.name);
    }
    out.push_str("COMMIT\n");
}

/// Full `iptables-restore --noflush` input: every chain we own is declared (which flushes it)
/// and refilled; `stale` chains (found in the kernel, no longer wanted) are flushed and deleted.
pub fn program(p: &Program, stale: &[ChainRef]) -> String {
    let asm = p.assemble();
    let mut out = String::with_capacity(asm.chains.iter().map(|c| c.rules.len() * 120).sum::<usize>() + 1024);
    for (table, chain, args) in builtin_jumps(p) {
        let _ = writeln!(out, "# ensure: -t {table} {chain} {args}");
    }
    table_section(&mut out, FILTER, &asm, stale);
    table_section(&mut out, NAT, &asm, stale);
    // The raw table only with a node-local DNS listener (or its chains to remove).
    if asm.chains.iter().any(|c| c.def.table == RAW) || stale.iter().any(|s| s.table == RAW) {
        table_section(&mut out, RAW, &asm, stale);
    }
    out
}

/// Partial `iptables-restore --noflush` input applying `changes`. `program` is the new full
/// program (for full replacements and to place rules before a chain's tail).
pub fn changes(program: &Program, changes: &ChangeSet) -> String {
    if changes.full {
        return self::program(program, &[]);
    }
    let mut out = String::new();
    for table in [FILTER, NAT, RAW] {
        let mut section = String::new();
        let declared: Vec<_> =
            changes.add_chains.iter().chain(&changes.flush_chains).filter(|c| c.table == table).collect();
        for c in &declared {
            let _ = writeln!(section, ":{} - [0:0]", c.name);
        }
        for c in changes.delete_chains.iter().filter(|c| c.table == table) {
            let _ = writeln!(section, ":{} - [0:0]", c.name);
        }
        for c in &declared {
            for r in c.rules.iter().chain(&c.tail) {
                section.push_str(&rule(&c.name, r));
                section.push('\n');
            }
        }
        for (c, r) in changes.delete_rules.iter().filter(|(c, _)| c.table == table) {
            let _ = writeln!(section, "-D {} {}", c.name, rule_args(r));
        }
        let heads: BTreeMap<&str, (usize, bool)> = program
            .base
            .chains
            .iter()
            .filter(|c| c.table == table)
            .map(|c| (&*c.name, (c.rules.len(), !c.tail.is_empty())))
            .collect();
        for (c, r) in changes.add_rules.iter().filter(|(c, _)| c.table == table) {
            match heads.get(&*c.name) {
                // Keep the chain's tail (the NodePort jump) last.
                Some((head, true)) => {
                    let _ = writeln!(section, "-I {} {} {}", c.name, head + 1, rule_args(r));
                }
                _ => {
                    let _ = writeln!(section, "-A {} {}", c.name, rule_args(r));
                }
            }
        }
        for c in changes.delete_chains.iter().filter(|c| c.table == table) {
            let _ = writeln!(section, "-X {}", c.name);
        }
        if !section.is_empty() {
            let _ = write!(out, "*{table}\n{section}COMMIT\n");
        }
    }
    out
}
