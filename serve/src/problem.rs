//! Errors of the REST API as RFC 9457 problem details (`application/problem+json`): a title,
//! the HTTP status, a detail for people and, for a body that does not parse, the field that is
//! wrong. Bad input is always a 4xx with a reason, never a 500.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status's reason phrase.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub detail: String,
    /// The fields of the body that are wrong.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// A field of a request body and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FieldError {
    /// The field's path (`dst`, `ports[0].port`); `.` for the body as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// A problem with `status`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// 400 for a body whose `field` is wrong.
    pub fn bad_field(field: impl Into<String>, message: impl Into<String>) -> Problem {
        let (field, message) = (field.into(), message.into());
        let mut p = Problem::new(StatusCode::BAD_REQUEST, format!("{field}: {message}"));
        p.errors.push(FieldError { field, message });
        p
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self).unwrap_or_default();
        (status, [(header::CONTENT_TYPE, "application/problem+json")], body).into_response()
    }
}

/// The answer to a path no route takes (a router's fallback).
pub async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "no such endpoint; /openapi.json lists them")
}

/// The query string of a request as `T`: one that does not read (a repeated or mistyped
/// parameter) is a 400 problem, as a bad body is.
pub fn query_params<T>(
    q: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, Problem> {
    q.map(|axum::extract::Query(t)| t).map_err(|r| {
        let message = r.body_text();
        let message = message.strip_prefix("Failed to deserialize query string: ").unwrap_or(&message);
        Problem::bad_field("?", message.to_string())
    })
}

/// The JSON body of a request as `T`: a body too large, not JSON, or with a wrong field is a
/// problem naming what is wrong (the field's path for a wrong field).
pub fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Problem> {
    let bytes = body.map_err(|r| Problem::new(r.status(), r.body_text()))?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        if e.inner().is_syntax() || e.inner().is_eof() {
            return Problem::bad_field(".", format!("not JSON: {}", e.inner()));
        }
        let field = e.path().to_string();
        let message = e.inner().to_string();
        // serde_json appends the position; the field says where.
        let message = message.split(" at line ").next().unwrap_or(&message).to_string();
        Problem::bad_field(field, message)
    })?;
    de.end().map_err(|e| Problem::bad_field(".", e.to_string()))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        port: u16,
        mode: Mode,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Iptables,
    }

    fn parse(s: &str) -> Result<Body, Problem> {
        json_body(Ok(Bytes::from(s.to_string())))
    }

    #[test]
    fn bad_bodies_name_the_field() {
        assert!(parse(r#"{"port": 80, "mode": "iptables"}"#).is_ok());
        let p = parse(r#"{"port": 80, "mode": "ipvz"}"#).unwrap_err();
        assert_eq!((p.status, p.errors[0].field.as_str()), (400, "mode"));
        assert!(p.errors[0].message.contains("unknown variant `ipvz`"), "{p:?}");
        let p = parse(r#"{"port": "eighty", "mode": "iptables"}"#).unwrap_err();
        assert_eq!(p.errors[0].field, "port");
        let p = parse(r#"{"port": 80, "mode": "iptables", "extra": 1}"#).unwrap_err();
        assert!(p.errors[0].message.contains("unknown field `extra`"), "{p:?}");
        let p = parse("not json").unwrap_err();
        assert_eq!((p.status, p.errors[0].field.as_str()), (400, "."));
        assert!(p.detail.contains("not JSON") && p.detail.contains("line 1"), "{p:?}");
        let p = parse(r#"{"port": 80, "mode": "iptables"} trailing"#).unwrap_err();
        assert_eq!(p.errors[0].field, ".");
    }

    #[test]
    fn problems_are_problem_json() {
        let r = Problem::new(StatusCode::SERVICE_UNAVAILABLE, "not synced yet").into_response();
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/problem+json");
    }
}
