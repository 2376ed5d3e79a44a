//! A real API server's audit log as RBAC usage: the requests the chart's components made
//! there (their ServiceAccounts `tideway-agent`, `tideway-dns`, `tideway-operator`, in any
//! namespace) and were not refused, written to the usage directory (`TIDEWAY_RBAC_USAGE`) as
//! the test API server writes its own, so `make check-rbac` counts both and says which grants
//! the real server saw used.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::fake_api::rbac::{Account, Attributes, USAGE_ENV, append_usage};

/// The file-name prefix of usage recorded from an audit log.
pub const AUDIT_PREFIX: &str = "audit-";

/// The component and the request of one audit event, if a component made it and it was allowed.
pub fn usage_of(event: &Value) -> Option<(&'static str, Attributes)> {
    let user = event["user"]["username"].as_str()?;
    let account = user.strip_prefix("system:serviceaccount:")?.split(':').nth(1)?;
    let account = Account::COMPONENTS.into_iter().find(|a| a.token() == account)?;
    if event["responseStatus"]["code"].as_u64().is_some_and(|c| c == 401 || c == 403) {
        return None;
    }
    let object = event.get("objectRef")?;
    let field = |f: &str| object[f].as_str().unwrap_or_default().to_string();
    let attributes = Attributes {
        verb: event["verb"].as_str()?.to_string(),
        group: field("apiGroup"),
        resource: field("resource"),
        subresource: field("subresource"),
        namespace: field("namespace"),
        name: field("name"),
    };
    Some((account.token(), attributes))
}

/// Appends the distinct allowed requests of `audit_log` to the usage directory, when
/// `TIDEWAY_RBAC_USAGE` names one; returns how many it wrote.
pub fn record_usage(audit_log: &Path) -> usize {
    if std::env::var_os(USAGE_ENV).is_none() {
        return 0;
    }
    let Ok(text) = std::fs::read_to_string(audit_log) else { return 0 };
    let seen: BTreeSet<(&str, Attributes)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| usage_of(&e))
        .collect();
    let file = format!("{AUDIT_PREFIX}{}-{}.tsv", std::process::id(), seen.len());
    let lines: String = seen.iter().map(|(account, a)| a.line(account)).collect();
    if append_usage(&file, &lines) { seen.len() } else { 0 }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_components_allowed_requests_count_and_nothing_else() {
        let event = |user: &str, code: u64| {
            json!({"user": {"username": user}, "verb": "watch", "responseStatus": {"code": code},
                   "objectRef": {"resource": "endpointslices", "apiGroup": "discovery.k8s.io"}})
        };
        let (account, a) =
            usage_of(&event("system:serviceaccount:tideway-system:tideway-agent", 200)).unwrap();
        assert_eq!(account, "tideway-agent");
        assert_eq!(
            (a.verb.as_str(), a.group.as_str(), a.resource_path()),
            ("watch", "discovery.k8s.io", "endpointslices".into())
        );
        assert!(usage_of(&event("system:serviceaccount:tideway-system:tideway-agent", 403)).is_none());
        assert!(usage_of(&event("system:serviceaccount:kube-system:coredns", 200)).is_none());
        assert!(usage_of(&event("system:node:node-a", 200)).is_none());
        let mut status = event("system:serviceaccount:tideway-system:tideway-operator", 200);
        status["objectRef"] =
            json!({"resource": "services", "subresource": "status", "namespace": "ns1", "name": "svc1"});
        let (_, a) = usage_of(&status).unwrap();
        assert_eq!(
            (a.resource_path(), a.namespace.as_str(), a.name.as_str()),
            ("services/status".into(), "ns1", "svc1")
        );
        let no_object = json!({"user": {"username": "system:serviceaccount:x:tideway-dns"}, "verb": "get"});
        assert!(usage_of(&no_object).is_none(), "a non-resource request is no grant's");
    }
}
