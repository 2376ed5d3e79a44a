//! TokenReview and SubjectAccessReview, as the API server answers them: tokens the test
//! registers authenticate as their user; a user may do what the test granted, nothing else.

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// The audience of the API server's own tokens (a ServiceAccount token without `--audience`).
pub(super) const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// Tokens and grants.
#[derive(Debug, Default)]
pub(super) struct Reviews {
    /// token -> (user, groups, audiences the token was issued for).
    pub(super) tokens: std::collections::BTreeMap<String, (String, Vec<String>, Vec<String>)>,
    /// (user, verb, group, resource).
    pub(super) grants: BTreeSet<(String, String, String, String)>,
}

impl Reviews {
    /// The answer to a POST of `review` to `path`, if `path` is a review.
    pub(super) fn answer(&self, path: &str, review: &Value) -> Option<Value> {
        let mut out = review.clone();
        if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
            let token = review["spec"]["token"].as_str().unwrap_or("");
            // As the API server: the review's audiences (default: its own) must meet the
            // token's, and the answer names the ones they share.
            let wanted: Vec<String> = match review["spec"]["audiences"].as_array() {
                Some(list) if !list.is_empty() => {
                    list.iter().filter_map(|a| a.as_str().map(str::to_string)).collect()
                }
                _ => vec![API_AUDIENCE.to_string()],
            };
            out["status"] = match self.tokens.get(token) {
                Some((user, groups, audiences)) => {
                    let shared: Vec<&String> = wanted.iter().filter(|a| audiences.contains(a)).collect();
                    if shared.is_empty() {
                        json!({"authenticated": false, "error": "token audiences are invalid for the target audiences"})
                    } else {
                        json!({"authenticated": true, "user": {"username": user, "groups": groups}, "audiences": shared})
                    }
                }
                None => json!({"authenticated": false, "error": "invalid bearer token"}),
            };
            return Some(out);
        }
        if path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
            let spec = &review["spec"];
            let attrs = &spec["resourceAttributes"];
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            let key = (s(&spec["user"]), s(&attrs["verb"]), s(&attrs["group"]), s(&attrs["resource"]));
            out["status"] = if self.grants.contains(&key) {
                json!({"allowed": true, "reason": "granted by the test"})
            } else {
                json!({"allowed": false, "reason": format!("no RBAC policy matched {key:?}")})
            };
            return Some(out);
        }
        None
    }
}
