//! The components' REST APIs from the command line (`http://` or `https://host:port`, JSON in
//! and out): what `tideway status`, `explain`, `mode` and `trace --agent` speak. HTTPS verifies
//! the server with `--ca-file` (a lab's own CA by default), else the system's roots. Answers that
//! are problem details become errors carrying their detail and the fields they name.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tideway_telemetry::client::{ClientError, HttpClient, ServerCheck};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// No answer.
    #[error(transparent)]
    Http(#[from] ClientError),
    /// No runtime to send with.
    #[error("starting the HTTP client: {0}")]
    Runtime(#[from] std::io::Error),
    /// The answer is not JSON.
    #[error("{0}: the answer is not JSON")]
    NotJson(String),
    /// The server answered with an error status.
    #[error("{url}: {status} {detail}")]
    Status {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The problem's detail (with the fields it names).
        detail: String,
    },
}

/// A REST API at a base URL, with an optional bearer token.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    base: String,
    token: Option<String>,
    http: HttpClient,
    runtime: Arc<tokio::runtime::Runtime>,
}

/// The detail of a problem answer, with the fields it names.
fn problem_detail(value: &Value) -> String {
    let detail = value["detail"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
    let fields: Vec<String> = value["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some(format!("{}: {}", e["field"].as_str()?, e["message"].as_str()?)))
        .filter(|f| !detail.contains(f.as_str()))
        .collect();
    if fields.is_empty() { detail } else { format!("{detail} ({})", fields.join("; ")) }
}

impl ApiClient {
    /// A client of the API at `base` (`https://127.0.0.1:8080`), checking HTTPS as `check` says.
    pub(crate) fn new(
        base: &str,
        token: Option<String>,
        check: &ServerCheck,
    ) -> Result<ApiClient, CallError> {
        let http = HttpClient::new(check, Duration::from_secs(30))?;
        let runtime = Arc::new(tokio::runtime::Builder::new_current_thread().enable_all().build()?);
        Ok(ApiClient { base: base.trim_end_matches('/').to_string(), token, http, runtime })
    }

    /// `GET path` as JSON.
    pub(crate) fn get(&self, path: &str) -> Result<Value, CallError> {
        self.call("GET", path, None)
    }

    /// `POST path` with a JSON body.
    pub(crate) fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call("POST", path, Some(("application/json", body)))
    }

    /// `PATCH path` with a JSON merge patch.
    pub(crate) fn patch(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call("PATCH", path, Some(("application/merge-patch+json", body)))
    }

    fn call(&self, method: &str, path: &str, body: Option<(&str, &Value)>) -> Result<Value, CallError> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![("Accept", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        if let Some((content_type, _)) = body {
            headers.push(("Content-Type", content_type));
        }
        let payload = body.map(|(_, v)| v.to_string()).unwrap_or_default();
        let answer =
            self.runtime.block_on(self.http.request(method, &url, &headers, payload.into_bytes()))?;
        let value: Result<Value, _> = serde_json::from_slice(&answer.body);
        if answer.status >= 400 {
            let detail = match &value {
                Ok(v) => problem_detail(v),
                Err(_) => String::from_utf8_lossy(&answer.body).into_owned(),
            };
            return Err(CallError::Status { url, status: answer.status, detail });
        }
        value.map_err(|_| CallError::NotJson(url))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn problems_read_with_their_fields() {
        let p = json!({"detail": "spec.mode: unknown proxy mode", "errors": [{"field": "spec.mode", "message": "unknown proxy mode"}]});
        assert_eq!(problem_detail(&p), "spec.mode: unknown proxy mode");
        let p = json!({"detail": "bad body", "errors": [{"field": "port", "message": "invalid type"}]});
        assert_eq!(problem_detail(&p), "bad body (port: invalid type)");
        assert_eq!(problem_detail(&json!({"x": 1})), r#"{"x":1}"#);
    }
}
