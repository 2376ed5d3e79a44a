//! Authorization as the API server's RBAC authorizer decides it, from the chart's own
//! ClusterRoles, Roles and their bindings (the committed rendered chart snapshots: the default
//! values unless a test names another value set). Each Tideway component talks to the test API
//! server as its ServiceAccount and may do what the chart grants it, nothing else; a cluster
//! admin (`system:masters`) may do anything.
//!
//! Every allowed request can be recorded (see [`USAGE_ENV`]) so that a check after the test
//! run finds the grants no test used: the chart grants what the components need and no more.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

/// When set to a directory, every distinct allowed request of a Tideway component is
/// appended there (one file per process), for the least-privilege check.
pub const USAGE_ENV: &str = "TIDEWAY_RBAC_USAGE";

/// Who a kubeconfig of the test API server authenticates as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Account {
    /// The node agent's ServiceAccount.
    Agent,
    /// The DNS server's ServiceAccount.
    Dns,
    /// The operator's ServiceAccount.
    Operator,
    /// The uninstall hook Job's ServiceAccount (`tideway cleanup-nodes`).
    Cleanup,
    /// A person with cluster-admin rights (`system:masters`, which RBAC never denies).
    ClusterAdmin,
}

impl Account {
    /// Every Tideway component's account.
    pub const COMPONENTS: [Account; 4] = [Account::Agent, Account::Dns, Account::Operator, Account::Cleanup];

    /// The ServiceAccount's name in the chart (and the default bearer token of its kubeconfig).
    pub fn token(self) -> &'static str {
        match self {
            Account::Agent => "tideway-agent",
            Account::Dns => "tideway-dns",
            Account::Operator => "tideway-operator",
            Account::Cleanup => "tideway-cleanup",
            Account::ClusterAdmin => "cluster-admin",
        }
    }
}

/// What a request asks to do, as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group ("" for the core group).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Namespace ("" for a cluster-scoped or all-namespaces request).
    pub namespace: String,
    /// Object name ("" for a collection).
    pub name: String,
}

impl Attributes {
    /// `resource` or `resource/subresource`, as a rule names it.
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// One tab-separated line (the usage record of `user`'s request).
    pub fn line(&self, user: &str) -> String {
        let a = self;
        format!(
            "{user}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            a.verb, a.group, a.resource, a.subresource, a.namespace, a.name
        )
    }

    /// Reads a usage record line: (user, attributes).
    pub fn parse_line(line: &str) -> Option<(String, Attributes)> {
        let f: Vec<&str> = line.split('\t').collect();
        let [user, verb, group, resource, subresource, namespace, name] = f[..] else { return None };
        let s = str::to_string;
        let attrs = Attributes {
            verb: s(verb),
            group: s(group),
            resource: s(resource),
            subresource: s(subresource),
            namespace: s(namespace),
            name: s(name),
        };
        Some((s(user), attrs))
    }
}

/// One rule of a role.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    /// API groups.
    pub groups: Vec<String>,
    /// Resources, `resource/subresource` for a subresource.
    pub resources: Vec<String>,
    /// Verbs.
    pub verbs: Vec<String>,
    /// Object names it is limited to (none: any).
    pub names: Vec<String>,
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == v || x == "*")
}

impl Rule {
    /// Whether the rule allows `a`.
    pub fn allows(&self, a: &Attributes) -> bool {
        has(&self.groups, &a.group)
            && has(&self.resources, &a.resource_path())
            && has(&self.verbs, &a.verb)
            && (self.names.is_empty() || self.names.contains(&a.name))
    }
}

/// A role's rule as bound to a user: where it applies.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `ClusterRole/name` or `Role/namespace/name`.
    pub role: String,
    /// The namespace a RoleBinding limits it to ("" for a ClusterRoleBinding: everywhere).
    pub namespace: String,
    /// The rule.
    pub rule: Rule,
}

impl Grant {
    /// Whether this grant allows `a`.
    pub fn allows(&self, a: &Attributes) -> bool {
        (self.namespace.is_empty() || self.namespace == a.namespace) && self.rule.allows(a)
    }
}

/// The chart's grants per user.
#[derive(Debug, Default)]
pub struct Rbac {
    grants: BTreeMap<String, Vec<Grant>>,
    /// ServiceAccount name -> its user name (`system:serviceaccount:NAMESPACE:NAME`).
    accounts: BTreeMap<String, String>,
}

/// The rendered chart snapshots, one per value set (`default`, and those of `helm/tideway/ci`).
pub fn chart_snapshots() -> PathBuf {
    crate::root().join("../helm/tideway/tests/snapshots")
}

/// The value set a test API server authorizes by unless told otherwise.
pub const DEFAULT_VALUES: &str = "default";

impl Rbac {
    /// The chart's RBAC rendered with each value set, read once per process.
    pub fn value_sets() -> &'static BTreeMap<String, Rbac> {
        static SETS: OnceLock<BTreeMap<String, Rbac>> = OnceLock::new();
        SETS.get_or_init(|| {
            let dir = chart_snapshots();
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let mut sets = BTreeMap::new();
            for path in entries.map(|e| e.expect("snapshot").path()) {
                let Some(set) = path.file_name().and_then(|n| n.to_str()?.strip_suffix(".yaml")) else {
                    continue;
                };
                let text = std::fs::read_to_string(&path).expect("chart snapshot");
                let rbac = Rbac::from_manifest(&text);
                for account in Account::COMPONENTS {
                    assert!(
                        !rbac.grants_of(&rbac.user(account)).is_empty(),
                        "{set}: nothing bound to {account:?}"
                    );
                }
                sets.insert(set.to_string(), rbac);
            }
            sets
        })
    }

    /// The chart's RBAC with the value set `set`.
    pub fn chart(set: &str) -> &'static Rbac {
        Rbac::value_sets().get(set).unwrap_or_else(|| panic!("no chart snapshot for the value set {set}"))
    }

    /// The user name the API server gives `account`'s tokens.
    pub fn user(&self, account: Account) -> String {
        match account {
            Account::ClusterAdmin => "kubernetes-admin".to_string(),
            _ => self
                .accounts
                .get(account.token())
                .cloned()
                .unwrap_or_else(|| panic!("the chart binds no ServiceAccount {}", account.token())),
        }
    }

    /// Reads the roles and bindings of a multi-document manifest.
    pub fn from_manifest(text: &str) -> Rbac {
        const KINDS: [&str; 4] =
            ["kind: ClusterRole", "kind: Role", "kind: ClusterRoleBinding", "kind: RoleBinding"];
        let docs: Vec<Value> = text
            .split("\n---")
            .filter(|d| d.lines().any(|l| KINDS.contains(&l.trim_end())))
            .map(|d| serde_saphyr::from_str::<Value>(d).expect("chart document"))
            .collect();
        let mut roles: BTreeMap<String, Vec<Rule>> = BTreeMap::new();
        for d in &docs {
            let role = match d["kind"].as_str() {
                Some("ClusterRole") => format!("ClusterRole/{}", str_of(&d["metadata"]["name"])),
                Some("Role") => {
                    format!("Role/{}/{}", str_of(&d["metadata"]["namespace"]), str_of(&d["metadata"]["name"]))
                }
                _ => continue,
            };
            let rules = d["rules"].as_array().into_iter().flatten().map(rule).collect();
            roles.insert(role, rules);
        }
        let mut grants: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
        let mut accounts = BTreeMap::new();
        for d in &docs {
            let namespace = match d["kind"].as_str() {
                Some("ClusterRoleBinding") => String::new(),
                Some("RoleBinding") => str_of(&d["metadata"]["namespace"]),
                _ => continue,
            };
            let role_ref = &d["roleRef"];
            let role = match role_ref["kind"].as_str() {
                Some("Role") => format!("Role/{namespace}/{}", str_of(&role_ref["name"])),
                _ => format!("ClusterRole/{}", str_of(&role_ref["name"])),
            };
            let rules =
                roles.get(&role).unwrap_or_else(|| panic!("a binding names {role}, not in the chart"));
            for subject in d["subjects"].as_array().into_iter().flatten() {
                let user = match subject["kind"].as_str() {
                    Some("ServiceAccount") => {
                        let (ns, name) = (str_of(&subject["namespace"]), str_of(&subject["name"]));
                        let user = format!("system:serviceaccount:{ns}:{name}");
                        accounts.insert(name, user.clone());
                        user
                    }
                    _ => str_of(&subject["name"]),
                };
                let entry = grants.entry(user).or_default();
                entry.extend(rules.iter().map(|r| Grant {
                    role: role.clone(),
                    namespace: namespace.clone(),
                    rule: r.clone(),
                }));
            }
        }
        Rbac { grants, accounts }
    }

    /// What `user` is granted.
    pub fn grants_of(&self, user: &str) -> &[Grant] {
        self.grants.get(user).map_or(&[], Vec::as_slice)
    }

    /// Whether `account` may do `a`.
    pub fn allows(&self, account: Account, a: &Attributes) -> bool {
        account == Account::ClusterAdmin || self.grants_of(&self.user(account)).iter().any(|g| g.allows(a))
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn rule(v: &Value) -> Rule {
    let list = |k: &str| -> Vec<String> {
        v[k].as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)).collect()
    };
    Rule {
        groups: list("apiGroups"),
        resources: list("resources"),
        verbs: list("verbs"),
        names: list("resourceNames"),
    }
}

/// The message of the API server's 403 to `user`, as `kubectl` shows it.
pub fn forbidden_message(user: &str, a: &Attributes) -> String {
    let resource =
        if a.group.is_empty() { a.resource.clone() } else { format!("{}.{}", a.resource, a.group) };
    let what = if a.name.is_empty() { resource.clone() } else { format!("{resource} {:?}", a.name) };
    let sub =
        if a.subresource.is_empty() { String::new() } else { format!(" in subresource {:?}", a.subresource) };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", a.namespace)
    };
    format!(
        "{what} is forbidden: User {user:?} cannot {} resource {resource:?} in API group {:?}{sub} {scope}",
        a.verb, a.group
    )
}

/// Appends the distinct requests a component was allowed to make to the usage directory.
#[derive(Debug, Default)]
pub(super) struct Usage {
    seen: std::collections::BTreeSet<(Account, Attributes)>,
}

impl Usage {
    pub(super) fn record(&mut self, account: Account, a: &Attributes) {
        if account == Account::ClusterAdmin || self.seen.contains(&(account, a.clone())) {
            return;
        }
        self.seen.insert((account, a.clone()));
        // One short append per distinct request: whole lines even with several servers.
        append_usage(&format!("{}.tsv", std::process::id()), &a.line(account.token()));
    }
}

/// Appends `lines` to `file` in the usage directory, when [`USAGE_ENV`] names one; true
/// when they were written.
pub(crate) fn append_usage(file: &str, lines: &str) -> bool {
    let Some(dir) = std::env::var_os(USAGE_ENV) else { return false };
    let dir = Path::new(&dir);
    let _ = std::fs::create_dir_all(dir);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str) -> Attributes {
        let s = str::to_string;
        Attributes {
            verb: s(verb),
            group: s(group),
            resource: s(resource),
            subresource: s(sub),
            namespace: s(ns),
            name: s("x"),
        }
    }

    #[test]
    fn the_chart_grants_each_component_its_own_rules() {
        let rbac = Rbac::chart(DEFAULT_VALUES);
        let agent = Account::Agent;
        assert!(rbac.allows(agent, &attrs("watch", "discovery.k8s.io", "endpointslices", "", "")));
        assert!(!rbac.allows(agent, &attrs("delete", "discovery.k8s.io", "endpointslices", "", "demo")));
        assert!(!rbac.allows(Account::Dns, &attrs("list", "", "nodes", "", "")));
        // The Lease Role holds in the operator's namespace only.
        let lease = |ns| attrs("update", "coordination.k8s.io", "leases", "", ns);
        assert!(rbac.allows(Account::Operator, &lease("tideway-system")));
        assert!(!rbac.allows(Account::Operator, &lease("default")));
        assert!(!rbac.allows(Account::Agent, &lease("tideway-system")));
        // A subresource is a resource of its own.
        assert!(rbac.allows(Account::Operator, &attrs("patch", "", "services", "status", "demo")));
        assert!(!rbac.allows(Account::Operator, &attrs("patch", "", "services", "", "demo")));
        assert!(rbac.allows(Account::ClusterAdmin, &attrs("delete", "", "nodes", "", "")));
        // The DNS server reads NodeProxyStates only when the values ask it to hold answers back.
        let reports = attrs("watch", "tideway.io", "nodeproxystates", "", "");
        assert!(!rbac.allows(Account::Dns, &reports));
        assert!(Rbac::chart("custom-dns").allows(Account::Dns, &reports));
        assert_eq!(
            Rbac::chart("custom-dns").user(Account::Dns),
            "system:serviceaccount:tideway-dns:tideway-dns"
        );
        let line = attrs("get", "", "services", "status", "demo").line("u");
        assert_eq!(
            Attributes::parse_line(line.trim_end()),
            Some(("u".into(), attrs("get", "", "services", "status", "demo")))
        );
    }
}
