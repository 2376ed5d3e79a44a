//! iptables-restore text (kube-proxy's argument order) for programs and change sets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::net::{IpNet, join_host_port};
use crate::program::{Action, Assembled, ChainRef, ChangeSet, CtState, Field, Match, Program, Rule, Verdict};

use super::lower::{FILTER, NAT};

fn quote(c: &str) -> String {
    if c.chars()
        .all(|ch| ch.is_ascii_alphanumeric() || "/:._-".contains(ch))
    {
        c.to_string()
    } else {
        format!("\"{}\"", c.replace('"', "'"))
    }
}

fn net(n: &IpNet) -> String {
    if n.prefix_len() == n.max_prefix_len() {
        n.addr().to_string()
    } else {
        n.to_string()
    }
}

fn neg(b: bool) -> &'static str {
    if b { "! " } else { "" }
}

fn set_dirs(key: &[Field]) -> String {
    key.iter()
        .filter_map(|f| match f {
            Field::SrcIp => Some("src"),
            Field::DstIp | Field::DstPort => Some("dst"),
            Field::Proto | Field::Random(_) => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The arguments of a rule (everything after `-A CHAIN`).
pub fn rule_args(r: &Rule) -> String {
    let mut parts: Vec<String> = Vec::new();
    for m in &r.matches {
        parts.push(match m {
            Match::Comment(c) => format!("-m comment --comment {}", quote(c)),
            Match::Proto(p) => format!("-m {p} -p {p}"),
            Match::Src(n, ng) => format!("{}-s {}", neg(*ng), net(n)),
            Match::Dst(n, ng) => format!("{}-d {}", neg(*ng), net(n)),
            Match::DstPort(p) => format!("--dport {p}"),
            Match::SrcLocal(yes) => format!("-m addrtype {}--src-type LOCAL", neg(!yes)),
            Match::DstLocal(yes) => format!("-m addrtype {}--dst-type LOCAL", neg(!yes)),
            Match::Mark(m, ng) => format!("-m mark {}--mark {m:#x}/{m:#x}", neg(*ng)),
            Match::Ct(CtState::New) => "-m conntrack --ctstate NEW".into(),
            Match::Ct(CtState::Invalid) => "-m conntrack --ctstate INVALID".into(),
            Match::Ct(CtState::RelatedEstablished) => "-m conntrack --ctstate RELATED,ESTABLISHED".into(),
            Match::Ct(CtState::NotRelatedEstablishedDnat) => {
                "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT".into()
            }
            Match::CtDnat => "-m conntrack --ctstate DNAT".into(),
            Match::InSet { set, key, neg: ng } => {
                format!("-m set {}--match-set {set} {}", neg(*ng), set_dirs(key))
            }
            Match::Recent { name, seconds } => {
                format!("-m recent --name {name} --rcheck --seconds {seconds} --reap")
            }
            Match::RecentSet(name) => format!("-m recent --name {name} --set"),
            Match::Probability(n) => format!(
                "-m statistic --mode random --probability {:.10}",
                1.0 / f64::from(*n)
            ),
        });
    }
    for a in &r.actions {
        let s = match a {
            Action::Verdict(Verdict::Jump(c)) => format!("-j {c}"),
            Action::Verdict(Verdict::Goto(c)) => format!("-g {c}"),
            Action::Verdict(Verdict::Return) => "-j RETURN".into(),
            Action::Verdict(Verdict::Accept) => "-j ACCEPT".into(),
            Action::Verdict(Verdict::Drop) => "-j DROP".into(),
            Action::Verdict(Verdict::Reject) => "-j REJECT".into(),
            Action::Dnat(ip, port) => format!("-j DNAT --to-destination {}", join_host_port(ip, *port)),
            Action::MarkOr(m) => format!("-j MARK --or-mark {m:#x}"),
            Action::MarkXor(m) => format!("-j MARK --xor-mark {m:#x}"),
            Action::Masquerade { fully_random: true } => "-j MASQUERADE --random-fully".into(),
            Action::Masquerade { fully_random: false } => "-j MASQUERADE".into(),
            Action::Nothing => continue,
            Action::DnatMap { .. }
            | Action::VerdictMap { .. }
            | Action::RandomVerdict(_)
            | Action::UpdateSet(_) => {
                unreachable!("nftables-only action in an iptables program")
            }
        };
        parts.push(s);
    }
    parts.join(" ")
}

/// `-A CHAIN args`.
pub fn rule(chain: &str, r: &Rule) -> String {
    let args = rule_args(r);
    if args.is_empty() {
        format!("-A {chain}")
    } else {
        format!("-A {chain} {args}")
    }
}

/// Jump rules that must exist in built-in chains (ensured with `iptables -C`/`-I`, not restored):
/// (table, built-in chain, rule arguments), in chain order.
pub fn builtin_jumps(p: &Program) -> Vec<(&'static str, String, String)> {
    p.base
        .chains
        .iter()
        .filter(|c| c.builtin)
        .flat_map(|c| {
            c.rules
                .iter()
                .map(move |r| (c.table, c.name.to_string(), rule_args(r)))
        })
        .collect()
}

fn table_section(out: &mut String, table: &str, asm: &Assembled<'_>, stale: &[ChainRef]) {
    let _ = writeln!(out, "*{table}");
    let chains: Vec<_> = asm
        .chains
        .iter()
        .filter(|c| c.def.table == table && !c.def.builtin)
        .collect();
    for c in &chains {
        let _ = writeln!(out, ":{} - [0:0]", c.def.name);
    }
    for s in stale.iter().filter(|s| s.table == table) {
        let _ = writeln!(out, ":{} - [0:0]", s.name);
    }
    for c in &chains {
        for r in &c.rules {
            out.push_str(&rule(&c.def.name, r));
            out.push('\n');
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
    out
}

/// Partial `iptables-restore --noflush` input applying `changes`. `program` is the new full
/// program (for full replacements and to place rules before a chain's tail).
pub fn changes(program: &Program, changes: &ChangeSet) -> String {
    if changes.full {
        return self::program(program, &[]);
    }
    let mut out = String::new();
    for table in [FILTER, NAT] {
        let mut section = String::new();
        let declared: Vec<_> = changes
            .add_chains
            .iter()
            .chain(&changes.flush_chains)
            .filter(|c| c.table == table)
            .collect();
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
