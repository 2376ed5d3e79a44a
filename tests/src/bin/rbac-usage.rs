//! Least privilege, checked: every rule the chart grants a Tideway component is used by some
//! request that component made on a real API server in the tests (the audit log of every
//! test on the lab's control plane, [`tideway_tests::audit`], recorded into the directory given
//! as the argument, see `TIDEWAY_RBAC_USAGE`), or is listed in
//! `helm/tideway/tests/rbac-outside-tests.txt` with the reason it is needed outside them. What
//! the test API server saw is printed but proves nothing. The list cannot grow quietly: a line
//! without its reason, or one naming a grant that a test uses or the chart no longer makes,
//! fails the check. Prints each component's grants; fails on an unused grant nobody explained.
//!
//! Usage: `rbac-usage DIR` (after the tests ran with `TIDEWAY_RBAC_USAGE=DIR`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use tideway_tests::audit::AUDIT_PREFIX;
use tideway_tests::fake_api::rbac::{Account, Attributes, Rbac};

/// One grant at the grain RBAC checks it: a verb on a resource of a group, in a role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Triple {
    account: &'static str,
    verb: String,
    group: String,
    resource: String,
}

impl std::fmt::Display for Triple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {} {} {}", self.account, self.verb, group, self.resource)
    }
}

/// Whether a grant was used, and whether a real API server saw it used.
#[derive(Debug, Default)]
struct Seen {
    used: bool,
    real: bool,
}

/// The grants listed as needed outside the tests (`account verb group resource  # why`), and
/// the lines that give no reason.
fn explained(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let (mut grants, mut unreasoned) = (BTreeSet::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let (grant, why) = line.split_once('#').unwrap_or((line, ""));
        let grant = grant.split_whitespace().collect::<Vec<_>>().join(" ");
        if grant.is_empty() {
            continue;
        }
        if why.trim().is_empty() {
            unreasoned.push(grant.clone());
        }
        grants.insert(grant);
    }
    (grants, unreasoned)
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: rbac-usage DIR (the TIDEWAY_RBAC_USAGE directory of a test run)");
        return ExitCode::from(2);
    };
    // Each request, and whether a real API server's audit log recorded it.
    let mut used: Vec<(String, Attributes, bool)> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.expect("entry").path();
        let real = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(AUDIT_PREFIX));
        let text = std::fs::read_to_string(&path).expect("usage file");
        used.extend(text.lines().filter_map(Attributes::parse_line).map(|(who, a)| (who, a, real)));
    }
    let outside = tideway_tests::root().join("../helm/tideway/tests/rbac-outside-tests.txt");
    let (explained, unreasoned) = explained(&std::fs::read_to_string(&outside).unwrap_or_default());
    // Each grant of each value set's chart, at the grain RBAC checks: used or not.
    let mut grants: BTreeMap<(Triple, String), Seen> = BTreeMap::new();
    for rbac in Rbac::value_sets().values() {
        for account in Account::COMPONENTS {
            for grant in rbac.grants_of(&rbac.user(account)) {
                let r = &grant.rule;
                for ((group, resource), verb) in r
                    .groups
                    .iter()
                    .flat_map(|g| r.resources.iter().map(move |res| (g, res)))
                    .flat_map(|gr| r.verbs.iter().map(move |v| (gr, v)))
                {
                    let t = Triple {
                        account: account.token(),
                        verb: verb.clone(),
                        group: group.clone(),
                        resource: resource.clone(),
                    };
                    let hits = used.iter().filter(|(who, a, _)| {
                        who == account.token()
                            && a.verb == *verb
                            && a.group == *group
                            && a.resource_path() == *resource
                            && grant.allows(a)
                    });
                    let seen = grants.entry((t, grant.role.clone())).or_default();
                    for (_, _, real) in hits {
                        seen.used = true;
                        seen.real |= *real;
                    }
                }
            }
        }
    }
    let (mut out, mut unexplained, mut listed) = (std::io::stdout().lock(), 0, BTreeSet::new());
    for ((t, role), seen) in &grants {
        let why = if seen.real {
            "used on the real API server"
        } else if explained.contains(&t.to_string()) {
            listed.insert(t.to_string());
            "needed outside the tests"
        } else if seen.used {
            unexplained += 1;
            "UNUSED on a real API server (the test API server's use proves nothing)"
        } else {
            unexplained += 1;
            "UNUSED"
        };
        let _ = writeln!(out, "{:<62} {:<42} {why}", t.to_string(), role);
    }
    let stale: Vec<&String> = explained.difference(&listed).collect();
    for line in &stale {
        let _ = writeln!(out, "{line}: listed in {} but used by a test or not granted", outside.display());
    }
    for line in &unreasoned {
        let _ = writeln!(out, "{line}: listed in {} without its reason (`# why`)", outside.display());
    }
    let real = grants.values().filter(|s| s.real).count();
    let _ = writeln!(
        out,
        "{} records from {dir} ({} from real API servers' audit logs); {real} of {} grants used on a real API server",
        used.len(),
        used.iter().filter(|u| u.2).count(),
        grants.len()
    );
    if used.is_empty() {
        eprintln!("no requests recorded: run the tests with TIDEWAY_RBAC_USAGE={dir} first");
        return ExitCode::FAILURE;
    }
    if !stale.is_empty() || !unreasoned.is_empty() {
        eprintln!(
            "{} stale and {} unexplained lines in {}: remove them, or give the reason",
            stale.len(),
            unreasoned.len(),
            outside.display()
        );
        return ExitCode::FAILURE;
    }
    if unexplained > 0 {
        eprintln!(
            "{unexplained} grants no test used on a real API server: remove them from the chart, add \
             a test that needs them, or say in {} why they are needed",
            outside.display()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
