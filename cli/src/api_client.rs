//! The components' REST APIs from the command line (`http://host:port`, JSON in and out):
//! what `tideway status`, `explain`, `mode` and `trace --agent` speak. Answers that are problem
//! details become errors carrying their detail and the fields they name.

use std::time::Duration;

use serde_json::Value;
use tideway_telemetry::http1::{self, Http1Error};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// No answer.
    #[error(transparent)]
    Http(#[from] Http1Error),
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
    timeout: Duration,
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
    /// A client of the API at `base` (`http://127.0.0.1:8080`).
    pub(crate) fn new(base: &str, token: Option<String>) -> ApiClient {
        ApiClient { base: base.trim_end_matches('/').to_string(), token, timeout: Duration::from_secs(30) }
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
        let answer = http1::request(method, &url, &headers, payload.as_bytes(), self.timeout)?;
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
