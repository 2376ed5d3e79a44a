//! The agent's REST API under `/api/v1` (on the metrics port, loopback by default): what is
//! programmed and why. Questions are answered from the plan the sync loop last published
//! ([`crate::agent::query`]), off the loop, on a blocking thread: a question never waits for a
//! sync, nor a sync for a question. Every call needs a bearer token (`get` on
//! `nodeproxystates`), on loopback too, unless the agent runs with `--api-anonymous-reads`.
//! Errors are problem details; `/openapi.json` describes every operation from the types below.
//!
//! * `GET /api/v1/status`: mode, config, last sync, counts, drift, what it waits for.
//! * `GET /api/v1/ruleset?family=ipv4|ipv6`: the rules, as `nft`/`iptables-save` would print.
//! * `POST /api/v1/trace`: a packet in, its path through the rules and the verdict out.
//! * `GET /api/v1/services/{namespace}/{name}`: a Service's frontends and endpoints here.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query as UrlQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tideway_core::model::ServiceName;
use tideway_core::net::IpFamily;
use tideway_serve::bodies::{TraceRequest, trace_packet};
use tideway_serve::openapi::{Answer, OpenApi, path_parameter, query_parameter};
use tideway_serve::problem::{Problem, query_params};

use crate::agent::AgentStatus;
use crate::agent::query::{Programmed, Published};

/// Request bodies are small; anything larger is refused before it is read.
const BODY_LIMIT: usize = 16 << 10;

/// Where a packet goes.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TraceAnswer {
    /// This node.
    pub node: String,
    /// The proxy mode programmed.
    pub mode: String,
    /// The verdict over every path (`DNAT to 10.244.1.5:8080 (source kept)`, ...).
    pub verdict: String,
    /// Every path (one per random choice): the rules matched, in order, and the outcome.
    pub paths: Vec<serde_json::Value>,
    /// The trace as `tideway trace` prints it.
    pub text: String,
}

/// One Service on this node.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ServiceAnswer {
    /// This node.
    pub node: String,
    /// The proxy mode programmed.
    pub mode: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Each port and family: frontends (ClusterIP, NodePort, external and LoadBalancer IPs),
    /// traffic policies, and the endpoints chosen for Cluster and Local policy here.
    pub ports: Vec<serde_json::Value>,
}

/// `?family=`.
#[derive(Debug, Deserialize)]
struct FamilyParam {
    family: Option<String>,
}

#[derive(Clone)]
struct Api {
    programmed: Programmed,
    status: Arc<RwLock<AgentStatus>>,
}

impl Api {
    /// `answer` of the plan last programmed, on a blocking thread (lowering a large plan is
    /// CPU work); before the first sync, a 503 saying so.
    async fn ask<T: Send + 'static>(
        &self,
        answer: impl FnOnce(&Published) -> T + Send + 'static,
    ) -> Result<(String, String, T), Problem> {
        let unavailable = |why: &str| Problem::new(StatusCode::SERVICE_UNAVAILABLE, why);
        let Some(published) = self.programmed.borrow().clone() else {
            return Err(unavailable("nothing is programmed yet: the first sync has not finished"));
        };
        let (node, mode) = (published.node.clone(), published.mode.to_string());
        let answer = tokio::task::spawn_blocking(move || answer(&published))
            .await
            .map_err(|e| Problem::new(StatusCode::INTERNAL_SERVER_ERROR, format!("answering failed: {e}")))?;
        Ok((node, mode, answer))
    }
}

async fn agent_status(State(api): State<Api>) -> Response {
    axum::Json(api.status.read().unwrap_or_else(|e| e.into_inner()).clone()).into_response()
}

async fn ruleset(
    State(api): State<Api>,
    q: Result<UrlQuery<FamilyParam>, QueryRejection>,
) -> Result<Response, Problem> {
    let q = query_params(q)?;
    let family = match q.family.as_deref() {
        None | Some("ipv4") => IpFamily::V4,
        Some("ipv6") => IpFamily::V6,
        Some(other) => return Err(Problem::bad_field("family", format!("{other:?}: expected ipv4 or ipv6"))),
    };
    let (_, _, answer) = api.ask(move |p| p.ruleset_text(family)).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], answer).into_response())
}

async fn trace(State(api): State<Api>, body: Result<Bytes, BytesRejection>) -> Result<Response, Problem> {
    let packet = trace_packet(body)?;
    let (node, mode, traced) = api.ask(move |p| p.trace(&packet)).await?;
    let paths = traced.paths.iter().filter_map(|path| serde_json::to_value(path).ok()).collect();
    let answer = TraceAnswer { node, mode, verdict: traced.verdict, paths, text: traced.text };
    Ok(axum::Json(answer).into_response())
}

async fn service(
    State(api): State<Api>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let key = ServiceName::new(&namespace, &name);
    let (node, mode, found) = api.ask(move |p| p.service(&key)).await?;
    if found.is_empty() {
        let why = format!("no port of Service {namespace}/{name} is programmed on {node}");
        return Err(Problem::new(StatusCode::NOT_FOUND, why));
    }
    let ports = found.iter().filter_map(|port| serde_json::to_value(port).ok()).collect();
    let answer = ServiceAnswer { node, mode, namespace, name, ports };
    Ok(axum::Json(answer).into_response())
}

/// The OpenAPI document of this API.
pub fn openapi() -> serde_json::Value {
    let mut doc = OpenApi::new("tideway agent");
    let status = serde_json::json!({"type": "object"});
    let trace = doc.schema::<TraceRequest>();
    let traced = doc.schema::<TraceAnswer>();
    let service = doc.schema::<ServiceAnswer>();
    let family = query_parameter("family", "address family (default ipv4)", &["ipv4", "ipv6"]);
    let (ns, name) =
        (path_parameter("namespace", "the Service's namespace"), path_parameter("name", "its name"));
    doc.operation(
        "get",
        "/api/v1/status",
        "the agent's status",
        vec![],
        None,
        vec![(200, "mode, config, last sync, counts, drift", Answer::Json(status))],
    );
    doc.operation(
        "get",
        "/api/v1/ruleset",
        "the programmed rules",
        vec![family],
        None,
        vec![(200, "the rules as the mode's tool prints them", Answer::Text)],
    );
    doc.operation(
        "post",
        "/api/v1/trace",
        "trace a packet",
        vec![],
        Some(trace),
        vec![(200, "its paths and the verdict", Answer::Json(traced))],
    );
    doc.operation(
        "get",
        "/api/v1/services/{namespace}/{name}",
        "a Service on this node",
        vec![ns, name],
        None,
        vec![(200, "its ports, frontends and endpoints here", Answer::Json(service))],
    );
    doc.build()
}

/// What a request to the REST API needs a token for (on loopback too, unless
/// `--api-anonymous-reads`): `get` on the node's `nodeproxystates` (what the agent reports),
/// for the trace too (it changes nothing).
pub fn access_of(_method: &axum::http::Method, path: &str) -> Option<tideway_serve::auth::Access> {
    path.starts_with("/api/v1/").then_some(tideway_serve::auth::Access {
        verb: "get",
        group: "tideway.io",
        resource: "nodeproxystates",
        namespace: None,
        name: None,
    })
}

/// The REST API: questions are answered from the plan last published on `programmed`; the
/// status is read from `status`.
pub fn router(programmed: Programmed, status: Arc<RwLock<AgentStatus>>) -> Router {
    Router::new()
        .route("/api/v1/status", get(agent_status))
        .route("/api/v1/ruleset", get(ruleset))
        .route("/api/v1/trace", post(trace))
        .route("/api/v1/services/{namespace}/{name}", get(service))
        .merge(tideway_serve::openapi::router(openapi()))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(Api { programmed, status })
}

/// Unknown paths as problems.
pub fn fallback(router: Router) -> Router {
    router.fallback(tideway_serve::problem::not_found)
}
