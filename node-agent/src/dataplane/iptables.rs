//! iptables: kube-proxy's chains written with `iptables-restore --noflush` (one commit per
//! table), jumps from the built-in chains ensured with `-C`/`-I`, stale chains deleted.
//!
//! The host's iptables backend (nft or legacy) is detected the way kube-proxy's image does it:
//! the one already holding Kubernetes rules wins, then the one holding more rules, then nft.

use std::collections::{BTreeMap, BTreeSet};

use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::program::{ChainRef, Program, name};
use tideway_core::render::iptables::text;

use super::observe::Counts;
use super::{Dataplane, DataplaneError, Drift, Keep, Update};
use crate::exec;

/// Which iptables implementation the host uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesBackend {
    /// iptables-nft (Debian's default).
    Nft,
    /// iptables-legacy.
    Legacy,
}

/// Chains this project creates in iptables and IPVS modes (besides per-Service chains).
const OWN_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-NODE-PORT",
    "KUBE-FORWARD",
    "KUBE-PROXY-FIREWALL",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-LOAD-BALANCER",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
];
const SERVICE_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

fn owned(chain: &str) -> bool {
    OWN_CHAINS.contains(&chain) || SERVICE_PREFIXES.iter().any(|p| chain.starts_with(p))
}

/// The iptables backend (also used by IPVS mode for its rules).
#[derive(Debug, Clone)]
pub struct Iptables {
    backend: IptablesBackend,
}

/// Splits rule arguments like a shell would (double quotes group words).
pub(super) fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut cur, mut quoted, mut any) = (String::new(), false, false);
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// iptables-save output: rule argument lines per (table, chain), in order.
pub(super) type Saved = BTreeMap<(String, String), Vec<String>>;

impl Iptables {
    /// Uses the given backend.
    pub fn new(backend: IptablesBackend) -> Self {
        Iptables { backend }
    }

    /// Detects the host's backend.
    pub fn detect() -> Self {
        let lines = |variant: &str, needle: &str| -> usize {
            ["iptables", "ip6tables"]
                .iter()
                .filter_map(|t| exec::run(&format!("{t}-{variant}-save"), &[], None).ok())
                .map(|out| out.lines().filter(|l| l.contains(needle)).count())
                .sum()
        };
        let backend = match (lines("legacy", "KUBE-"), lines("nft", "KUBE-")) {
            (l, n) if l > n => IptablesBackend::Legacy,
            (l, n) if n > l => IptablesBackend::Nft,
            _ if lines("legacy", "-A ") > lines("nft", "-A ") => IptablesBackend::Legacy,
            _ => IptablesBackend::Nft,
        };
        Iptables { backend }
    }

    /// The detected backend.
    pub fn backend(&self) -> IptablesBackend {
        self.backend
    }

    fn bin(&self, family: IpFamily, tool: &str) -> String {
        let base = if family == IpFamily::V4 { "iptables" } else { "ip6tables" };
        let variant = match self.backend {
            IptablesBackend::Nft => "nft",
            IptablesBackend::Legacy => "legacy",
        };
        if tool.is_empty() { format!("{base}-{variant}") } else { format!("{base}-{variant}-{tool}") }
    }

    pub(super) fn restore(&self, family: IpFamily, input: &str) -> Result<(), DataplaneError> {
        if input.lines().all(|l| l.is_empty() || l.starts_with('#')) {
            return Ok(());
        }
        exec::run(&self.bin(family, "restore"), &["--noflush", "--wait"], Some(input))?;
        Ok(())
    }

    /// Reads the filter and nat tables.
    pub(super) fn save(&self, family: IpFamily) -> Result<Saved, DataplaneError> {
        let mut saved = Saved::new();
        for table in ["filter", "nat"] {
            let out = exec::run(&self.bin(family, "save"), &["-t", table], None)?;
            for line in out.lines() {
                if let Some(decl) = line.strip_prefix(':') {
                    let chain = decl.split_whitespace().next().unwrap_or_default();
                    saved.entry((table.to_string(), chain.to_string())).or_default();
                } else if let Some(rule) = line.strip_prefix("-A ") {
                    let (chain, args) = rule.split_once(' ').unwrap_or((rule, ""));
                    saved.entry((table.to_string(), chain.to_string())).or_default().push(args.to_string());
                }
            }
        }
        Ok(saved)
    }

    /// Makes sure every jump from a built-in chain exists (kube-proxy's EnsureRule(Prepend)).
    pub(super) fn ensure_jumps(&self, p: &Program) -> Result<(), DataplaneError> {
        let bin = self.bin(p.family, "");
        for (table, chain, args) in text::builtin_jumps(p).into_iter().rev() {
            let argv = split_args(&args);
            let mut check = vec!["-w", "5", "-t", table, "-C", &chain];
            check.extend(argv.iter().map(String::as_str));
            if exec::run(&bin, &check, None).is_err() {
                // The target chain must exist first (kube-proxy's EnsureChain); "already
                // exists" is fine, and any other failure shows up in the insert below.
                let target = argv.last().map(String::as_str).unwrap_or_default();
                let _ = exec::run(&bin, &["-w", "5", "-t", table, "-N", target], None);
                let mut insert = vec!["-w", "5", "-t", table, "-I", &chain, "1"];
                insert.extend(argv.iter().map(String::as_str));
                exec::run(&bin, &insert, None)?;
            }
        }
        Ok(())
    }

    /// Full sync of one family: jumps, then every chain flushed and refilled in one restore,
    /// stale per-Service chains deleted.
    pub(super) fn full(&self, p: &Program) -> Result<(), DataplaneError> {
        self.ensure_jumps(p)?;
        let desired: BTreeSet<(String, String)> =
            p.assemble().chains.iter().map(|c| (c.def.table.to_string(), c.def.name.to_string())).collect();
        let stale: Vec<ChainRef> = self
            .save(p.family)?
            .into_keys()
            .filter(|(t, c)| {
                SERVICE_PREFIXES.iter().any(|pre| c.starts_with(pre))
                    && !desired.contains(&(t.clone(), c.clone()))
            })
            .map(|(t, c)| ChainRef { table: if t == "nat" { "nat" } else { "filter" }, name: name(&c) })
            .collect();
        self.restore(p.family, &text::program(p, &stale))
    }

    pub(super) fn verify_rules(&self, p: &Program, label: &str) -> Result<Vec<Drift>, DataplaneError> {
        let saved = self.save(p.family)?;
        let mut observed = Counts::default();
        for ((t, c), rules) in &saved {
            observed.chains.insert((t.clone(), c.clone()), rules.len());
        }
        let mut drift = Counts::of(p).compare(&observed, false, label);
        for (table, chain, args) in text::builtin_jumps(p) {
            let target = args.rsplit(' ').next().unwrap_or_default();
            let present = saved
                .get(&(table.to_string(), chain.clone()))
                .is_some_and(|rules| rules.iter().any(|r| r.ends_with(&format!("-j {target}"))));
            if !present {
                drift.push(Drift {
                    object: format!("{label} chain {table}/{chain}"),
                    detail: format!("jump to {target} missing"),
                });
            }
        }
        Ok(drift)
    }

    /// Removes our jumps and chains from both families, except those in `keep`.
    pub(super) fn remove(&self, keep: &Keep) -> Result<(), DataplaneError> {
        for family in IpFamily::ALL {
            let saved = match self.save(family) {
                Ok(s) => s,
                Err(_) => continue,
            };
            let bin = self.bin(family, "");
            for ((table, chain), rules) in &saved {
                if owned(chain) {
                    continue;
                }
                for args in rules {
                    let target = args.rsplit(' ').next().unwrap_or_default();
                    let kept = keep
                        .jumps
                        .iter()
                        .any(|(t, c, a)| t == table && c == chain && a.ends_with(&format!("-j {target}")));
                    if owned(target) && !kept {
                        let mut del = vec!["-w", "5", "-t", table.as_str(), "-D", chain.as_str()];
                        let argv = split_args(args);
                        del.extend(argv.iter().map(String::as_str));
                        exec::run(&bin, &del, None)?;
                    }
                }
            }
            let mut input = String::new();
            for table in ["filter", "nat"] {
                let gone: Vec<&String> = saved
                    .keys()
                    .filter(|(t, c)| t == table && owned(c) && !keep.chains.contains(&(t.clone(), c.clone())))
                    .map(|(_, c)| c)
                    .collect();
                if gone.is_empty() {
                    continue;
                }
                input.push_str(&format!("*{table}\n"));
                gone.iter().for_each(|c| input.push_str(&format!(":{c} - [0:0]\n")));
                gone.iter().for_each(|c| input.push_str(&format!("-X {c}\n")));
                input.push_str("COMMIT\n");
            }
            self.restore(family, &input)?;
        }
        Ok(())
    }

    pub(super) fn has_chains(&self) -> Result<bool, DataplaneError> {
        for family in IpFamily::ALL {
            if let Ok(saved) = self.save(family)
                && saved.keys().any(|(_, c)| owned(c))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl Dataplane for Iptables {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Iptables
    }

    fn apply(&mut self, desired: [&Program; 2], update: Update<'_>) -> Result<(), DataplaneError> {
        match update {
            Update::Full => desired.iter().try_for_each(|p| self.full(p)),
            Update::Changes(cs) => {
                desired.iter().zip(cs).try_for_each(|(p, c)| self.restore(p.family, &text::changes(p, c)))
            }
        }
    }

    fn verify(&mut self, desired: [&Program; 2], _deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let mut drift = Vec::new();
        for p in desired {
            drift.extend(self.verify_rules(p, &format!("{} iptables", p.family))?);
        }
        Ok(drift)
    }

    fn cleanup(&mut self, keep: &Keep) -> Result<(), DataplaneError> {
        self.remove(keep)
    }

    fn present(&mut self) -> Result<bool, DataplaneError> {
        self.has_chains()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_quoted_arguments() {
        assert_eq!(
            split_args(r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#),
            vec!["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]
        );
        assert_eq!(split_args(r#"--comment """#), vec!["--comment", ""]);
    }
}
