//! iptables: kube-proxy's chains written with `iptables-restore --noflush` (one commit per
//! table), jumps from the built-in chains ensured with `-C`/`-I`, stale chains deleted.
//! Drift is found by rule count and by content ([`tideway_core::drift::rules`]): after a full
//! sync the chains are read back once and digested, and the periodic check compares with those
//! digests (chains an incremental sync wrote are learnt at the next check).
//!
//! The host's iptables backend (nft or legacy) is detected the way kube-proxy's image does it:
//! the one already holding Kubernetes rules wins, then the one holding more rules, then nft.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use tideway_core::config::ProxyMode;
use tideway_core::drift::rules::{ChainId, LearntRules, SavedRules, written};
use tideway_core::net::IpFamily;
use tideway_core::program::{ChainRef, ChangeSet, Program};
use tideway_core::render::iptables::stale_chains;
use tideway_core::render::iptables::text;
use tideway_core::render::names::is_own_chain;

use super::backend::{Dataplane, DataplaneError, Drift, Retired, Update};
use super::desired::Desired;
use super::keep::{Keep, OWNER_MARK};
use super::observe::Counts;
use crate::exec;
use tideway_core::drift::DriftKind;

/// Which iptables implementation the host uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesBackend {
    /// iptables-nft (Debian's default).
    Nft,
    /// iptables-legacy.
    Legacy,
}

/// Overrides the backend detection.
pub const BACKEND_ENV: &str = "TIDEWAY_IPTABLES_BACKEND";

/// Rules beyond which `iptables-nft-restore` gets slow (its time grows much faster than the
/// input: about 6 s for 31,000 rules and 70 s for 62,000 here, where legacy takes 0.3 s and 1 s).
const NFT_BACKEND_SLOW_RULES: usize = 20_000;

/// Lines mentioning `KUBE-` and rules (`-A`) in one variant's saved tables, both families.
fn census(variant: &str) -> (usize, usize) {
    let (mut kube, mut rules) = (0, 0);
    for tool in ["iptables", "ip6tables"] {
        if let Ok(out) = exec::run(&format!("{tool}-{variant}-save"), &[], None) {
            for line in out.lines() {
                kube += usize::from(line.contains("KUBE-"));
                rules += usize::from(line.starts_with("-A "));
            }
        }
    }
    (kube, rules)
}

fn detect_backend() -> IptablesBackend {
    choose_backend(census("legacy"), census("nft"))
}

/// The backend `TIDEWAY_IPTABLES_BACKEND` names, if it names one (anything else is reported
/// and ignored: detection decides).
fn backend_override(value: Option<&str>) -> Option<IptablesBackend> {
    match value? {
        "nft" => Some(IptablesBackend::Nft),
        "legacy" => Some(IptablesBackend::Legacy),
        other => {
            tracing::warn!(
                value = other,
                "{BACKEND_ENV} must be nft or legacy; detecting the backend instead"
            );
            None
        }
    }
}

/// The variant already holding Kubernetes rules wins, then the one holding more rules, then nft.
fn choose_backend(legacy: (usize, usize), nft: (usize, usize)) -> IptablesBackend {
    match (legacy, nft) {
        ((lk, _), (nk, _)) if lk != nk => {
            if lk > nk {
                IptablesBackend::Legacy
            } else {
                IptablesBackend::Nft
            }
        }
        ((_, lr), (_, nr)) if lr > nr => IptablesBackend::Legacy,
        _ => IptablesBackend::Nft,
    }
}

/// The iptables backend (also used by IPVS mode for its rules).
#[derive(Debug, Clone)]
pub struct Iptables {
    backend: IptablesBackend,
    /// Rule digests of our chains as read back right after they were written.
    learnt: LearntRules,
}

/// The tables Tideway writes.
const TABLES: [&str; 3] = ["filter", "nat", "raw"];

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

/// The filter, nat and raw tables of `iptables-save` output.
fn parse_saved(out: &str) -> SavedRules {
    let mut saved = SavedRules::new();
    let mut table = "";
    for line in out.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim();
        } else if !TABLES.contains(&table) {
            continue;
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split_whitespace().next().unwrap_or_default();
            saved.entry((table.to_string(), chain.to_string())).or_default();
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let (chain, args) = rule.split_once(' ').unwrap_or((rule, ""));
            saved.entry((table.to_string(), chain.to_string())).or_default().push(args.to_string());
        }
    }
    saved
}

/// Whether `chain` holds a rule jumping to `target`.
fn has_jump(saved: &SavedRules, table: &str, chain: &str, target: &str) -> bool {
    let jump = format!("-j {target}");
    saved
        .get(&(table.to_string(), chain.to_string()))
        .is_some_and(|rules| rules.iter().any(|r| r.ends_with(&jump)))
}

impl Iptables {
    /// Uses the given backend.
    pub fn new(backend: IptablesBackend) -> Self {
        Iptables { backend, learnt: LearntRules::default() }
    }

    /// The backend named by `TIDEWAY_IPTABLES_BACKEND` (`nft` or `legacy`), else the host's,
    /// detected once per process (kube-proxy decides at start too).
    pub fn detect() -> Self {
        static DETECTED: OnceLock<IptablesBackend> = OnceLock::new();
        let backend = backend_override(std::env::var(BACKEND_ENV).ok().as_deref())
            .unwrap_or_else(|| *DETECTED.get_or_init(detect_backend));
        Iptables::new(backend)
    }

    /// The detected backend.
    pub fn backend(&self) -> IptablesBackend {
        self.backend
    }

    /// The binary of `tool` (`""`, `save`, `restore`) for `family` on this backend.
    pub(crate) fn bin(&self, family: IpFamily, tool: &str) -> String {
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

    /// Reads the filter and nat tables (one `iptables-save`).
    pub(super) fn save(&self, family: IpFamily) -> Result<SavedRules, DataplaneError> {
        Ok(parse_saved(&exec::run(&self.bin(family, "save"), &[], None)?))
    }

    /// Makes sure every jump from a built-in chain exists (kube-proxy's EnsureChain and
    /// EnsureRule(Prepend)), reading what is there from `saved` instead of one `-C` per jump.
    pub(super) fn ensure_jumps(&self, p: &Program, saved: &SavedRules) -> Result<(), DataplaneError> {
        let bin = self.bin(p.family, "");
        let mut created = BTreeSet::new();
        for (table, chain, args) in text::builtin_jumps(p).into_iter().rev() {
            let argv = split_args(&args);
            let target = argv.last().map(String::as_str).unwrap_or_default();
            if has_jump(saved, table, &chain, target) {
                continue;
            }
            let key = (table.to_string(), target.to_string());
            if !saved.contains_key(&key) && created.insert(key) {
                exec::run(&bin, &["-w", "5", "-t", table, "-N", target], None)?;
            }
            let mut insert = vec!["-w", "5", "-t", table, "-I", &chain, "1"];
            insert.extend(argv.iter().map(String::as_str));
            exec::run(&bin, &insert, None)?;
        }
        Ok(())
    }

    /// Full sync of one family: jumps, then every chain flushed and refilled in one restore,
    /// stale per-Service chains deleted.
    pub(super) fn full(&mut self, p: &Program) -> Result<(), DataplaneError> {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if self.backend == IptablesBackend::Nft
            && p.rule_count() > NFT_BACKEND_SLOW_RULES
            && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                rules = p.rule_count(),
                "iptables-nft-restore slows down sharply at this size; nftables mode (or {BACKEND_ENV}=legacy) syncs far faster"
            );
        }
        let saved = self.save(p.family)?;
        self.ensure_jumps(p, &saved)?;
        let stale = stale_chains(p, saved.keys().map(|(t, c)| (t.as_str(), c.as_str())));
        self.unhook(p.family, &saved, &stale)?;
        let mark = format!("*filter\n:{OWNER_MARK} - [0:0]\nCOMMIT\n");
        self.restore(p.family, &format!("{}{mark}", text::program(p, &stale)))?;
        self.learn_all(p);
        Ok(())
    }

    /// Deletes the jumps from built-in chains to `stale` ones, which could not go otherwise.
    fn unhook(&self, family: IpFamily, saved: &SavedRules, stale: &[ChainRef]) -> Result<(), DataplaneError> {
        let bin = self.bin(family, "");
        for s in stale {
            let jump = format!("-j {}", s.name);
            let builtins = saved.iter().filter(|((t, c), _)| t == s.table && !is_own_chain(c));
            for ((table, chain), rules) in builtins {
                for args in rules.iter().filter(|a| a.ends_with(&jump)) {
                    let mut del = vec!["-w", "5", "-t", table.as_str(), "-D", chain.as_str()];
                    let argv = split_args(args);
                    del.extend(argv.iter().map(String::as_str));
                    exec::run(&bin, &del, None)?;
                }
            }
        }
        Ok(())
    }

    /// Learns the digests of every chain of `p` from one read-back; if that read fails, the
    /// next check adopts what it finds.
    fn learn_all(&mut self, p: &Program) {
        match self.save(p.family) {
            Ok(saved) => self.learnt.learn_all(p.family, Counts::of(p).chains.into_keys(), &saved),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read back the rules just applied");
                self.learnt.learn_all(p.family, [], &SavedRules::new());
            }
        }
    }

    /// Applies one family's change set. The chains it wrote are learnt at the next check, not
    /// read back now: an `iptables-save` costs about as much as a check (1.6 s at 10,000
    /// Services), which an incremental sync must not pay. An edit made between the two is
    /// adopted, and undone by the next full resync.
    fn apply_changes(&mut self, p: &Program, cs: &ChangeSet) -> Result<(), DataplaneError> {
        self.restore(p.family, &text::changes(p, cs))?;
        let (filled, deleted) = written(cs);
        self.learnt.forget(p.family, &filled);
        self.learnt.forget(p.family, &deleted);
        Ok(())
    }

    /// Our chains by rule count and by content, and the jumps into them, as the kernel holds
    /// them now.
    pub(super) fn verify_rules(&mut self, p: &Program, label: &str) -> Result<Vec<Drift>, DataplaneError> {
        let saved = self.save(p.family)?;
        let mut observed = Counts::default();
        for ((t, c), rules) in &saved {
            observed.chains.insert((t.clone(), c.clone()), rules.len());
        }
        let expected = Counts::of(p);
        let mut drift = expected.compare(&observed, false, label);
        let object = |(table, chain): &ChainId| format!("{label} chain {table}/{chain}");
        let by_count = |id: &ChainId| drift.iter().any(|d| d.object == object(id));
        let edited = self.learnt.differing(p.family, expected.chains.keys(), &saved, by_count);
        drift.extend(edited.iter().map(|id| Drift {
            kind: DriftKind::ChainRules,
            object: object(id),
            detail: "rules differ from the applied ones".into(),
        }));
        for (table, chain, args) in text::builtin_jumps(p) {
            let target = args.rsplit(' ').next().unwrap_or_default();
            if !has_jump(&saved, table, &chain, target) {
                drift.push(Drift {
                    kind: DriftKind::ChainRules,
                    object: format!("{label} chain {table}/{chain}"),
                    detail: format!("jump to {target} missing"),
                });
            }
        }
        Ok(drift)
    }

    /// Removes our jumps and chains from both families, except those in `keep`. Beside a
    /// kube-proxy the `KUBE-*` chains are its own: only our mark goes.
    pub(super) fn remove(&mut self, keep: &Keep) -> Result<(), DataplaneError> {
        self.learnt.clear();
        if let Some(seen) = super::peer::kube_proxy() {
            tracing::warn!(%seen, "leaving the KUBE-* chains to kube-proxy");
            return self.remove_mark();
        }
        for family in IpFamily::ALL {
            let saved = match self.save(family) {
                Ok(s) => s,
                Err(_) => continue,
            };
            let bin = self.bin(family, "");
            for ((table, chain), rules) in &saved {
                if is_own_chain(chain) {
                    continue;
                }
                for args in rules {
                    let target = args.rsplit(' ').next().unwrap_or_default();
                    let kept = keep
                        .jumps
                        .iter()
                        .any(|(t, c, a)| t == table && c == chain && a.ends_with(&format!("-j {target}")));
                    if is_own_chain(target) && !kept {
                        let mut del = vec!["-w", "5", "-t", table.as_str(), "-D", chain.as_str()];
                        let argv = split_args(args);
                        del.extend(argv.iter().map(String::as_str));
                        exec::run(&bin, &del, None)?;
                    }
                }
            }
            let mut input = String::new();
            for table in TABLES {
                let gone: Vec<&String> = saved
                    .keys()
                    .filter(|(t, c)| {
                        t == table
                            && (is_own_chain(c) || c == OWNER_MARK)
                            && !keep.chains.contains(&(t.clone(), c.clone()))
                    })
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

    /// Removes [`OWNER_MARK`] from both families, where it is.
    fn remove_mark(&self) -> Result<(), DataplaneError> {
        for family in IpFamily::ALL {
            if self.save(family).is_ok_and(|saved| saved.keys().any(|(_, c)| c == OWNER_MARK)) {
                self.restore(family, &format!("*filter\n:{OWNER_MARK} - [0:0]\n-X {OWNER_MARK}\nCOMMIT\n"))?;
            }
        }
        Ok(())
    }

    /// True when chains of Tideway's names exist, whoever wrote them (kube-proxy uses the same).
    pub(super) fn has_chains(&self) -> Result<bool, DataplaneError> {
        self.any_chain(is_own_chain)
    }

    /// True when Tideway wrote the `KUBE-*` chains here ([`OWNER_MARK`]).
    pub(super) fn marked(&self) -> Result<bool, DataplaneError> {
        self.any_chain(|c| c == OWNER_MARK)
    }

    fn any_chain(&self, name: impl Fn(&str) -> bool) -> Result<bool, DataplaneError> {
        for family in IpFamily::ALL {
            if let Ok(saved) = self.save(family)
                && saved.keys().any(|(_, c)| name(c))
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

    fn apply(&mut self, desired: &Desired<'_>, update: Update<'_>) -> Result<(), DataplaneError> {
        match update {
            Update::Changes(cs) if cs.iter().all(|c| !c.full) => {
                desired.skeletons().iter().zip(cs).try_for_each(|(p, c)| self.apply_changes(p, c))
            }
            _ => {
                if let Some(seen) = super::peer::kube_proxy() {
                    return Err(seen.into());
                }
                desired.programs().iter().try_for_each(|p| self.full(p))
            }
        }
    }

    fn verify(&mut self, desired: &Desired<'_>, _deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let mut drift = Vec::new();
        for p in desired.programs() {
            drift.extend(self.verify_rules(p, &format!("{} iptables", p.family))?);
        }
        Ok(drift)
    }

    fn cleanup(&mut self, keep: &Keep) -> Result<Retired, DataplaneError> {
        self.remove(keep).map(|()| Retired::Done)
    }

    /// Only chains Tideway marked as its own: kube-proxy's (same names) are not leftovers.
    fn present(&mut self) -> Result<bool, DataplaneError> {
        self.marked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_filter_and_nat_from_one_save() {
        let out = "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j KUBE-X\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n\
                   :KUBE-SERVICES - [0:0]\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
                   COMMIT\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";
        let saved = parse_saved(out);
        assert_eq!(saved.len(), 3, "{saved:?}");
        assert!(has_jump(&saved, "nat", "PREROUTING", "KUBE-SERVICES"));
        assert!(!has_jump(&saved, "nat", "OUTPUT", "KUBE-SERVICES"));
        assert!(!saved.contains_key(&("mangle".to_string(), "PREROUTING".to_string())));
        assert!(saved[&("nat".to_string(), "KUBE-SERVICES".to_string())].is_empty());
    }

    #[test]
    fn backend_follows_kubernetes_rules_then_rule_count() {
        assert_eq!(choose_backend((3, 10), (0, 50)), IptablesBackend::Legacy);
        assert_eq!(choose_backend((0, 0), (2, 2)), IptablesBackend::Nft);
        assert_eq!(choose_backend((0, 7), (0, 3)), IptablesBackend::Legacy);
        assert_eq!(choose_backend((0, 0), (0, 0)), IptablesBackend::Nft);
    }

    #[test]
    fn backend_override_names_nft_or_legacy_only() {
        assert_eq!(backend_override(Some("nft")), Some(IptablesBackend::Nft));
        assert_eq!(backend_override(Some("legacy")), Some(IptablesBackend::Legacy));
        assert_eq!(backend_override(Some("Legacy ")), None);
        assert_eq!(backend_override(None), None);
    }

    #[test]
    fn splits_quoted_arguments() {
        assert_eq!(
            split_args(r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#),
            vec!["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]
        );
        assert_eq!(split_args(r#"--comment """#), vec!["--comment", ""]);
    }
}
