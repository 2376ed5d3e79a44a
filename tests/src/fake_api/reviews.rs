//! TokenReview and SubjectAccessReview, as the API server answers them: tokens the test
//! registers authenticate as their user; a user may do what the test granted, nothing else.

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// Tokens and grants.
#[derive(Debug, Default)]
pub(super) struct Reviews {
    /// token -> (user, groups).
    pub(super) tokens: std::collections::BTreeMap<String, (String, Vec<String>)>,
    /// (user, verb, group, resource).
    pub(super) grants: BTreeSet<(String, String, String, String)>,
}

impl Reviews {
    /// The answer to a POST of `review` to `path`, if `path` is a review.
    pub(super) fn answer(&self, path: &str, review: &Value) -> Option<Value> {
        let mut out = review.clone();
        if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
            let token = review["spec"]["token"].as_str().unwrap_or("");
            out["status"] = match self.tokens.get(token) {
                Some((user, groups)) => {
                    json!({"authenticated": true, "user": {"username": user, "groups": groups}})
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
