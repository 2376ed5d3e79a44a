//! [`Recorded`]: a request the server received, kept for a test's assertions.

use std::collections::BTreeMap;

use serde_json::Value;

use super::rbac::Account;

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it arrived.
    pub at: std::time::Instant,
    /// Who sent it: the bearer token (see [`FakeApi::kubeconfig_as`](super::FakeApi::kubeconfig_as)).
    pub user: Option<String>,
    /// The account the token authenticated as.
    pub account: Option<Account>,
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Query parameters.
    pub query: BTreeMap<String, String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// Body, parsed as JSON (kube sends apply patches as JSON), or Null.
    pub body: Value,
}

impl Recorded {
    /// A GET for the state of a collection rather than its changes: a list (or a read of one
    /// object), or a watch that streams a list (`sendInitialEvents=true`).
    pub fn is_first_view(&self) -> bool {
        let watch = self.query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let streamed = self.query.get("sendInitialEvents").is_some_and(|s| s == "true");
        self.method == "GET" && (!watch || streamed)
    }
}
