//! The API server's `Status` answer to a request it refuses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A `Status` (`Failure`) with HTTP status `code`, `reason` and `message`.
pub(super) fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (StatusCode::from_u16(code).expect("status"), axum::Json(body)).into_response()
}
