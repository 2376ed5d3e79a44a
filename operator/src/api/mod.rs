//! The operator's REST API: each ProxyConfig with the rollout status the operator computes
//! for it, each node's `NodeProxyState`, and one Service as the cluster sees it (addresses,
//! ports, who may receive its external traffic and who announces it, its DNS names). Answers
//! are computed from the operator's cluster view on each request with the same core functions
//! the reconciler uses; errors are problem details; `/openapi.json` describes the operations.
//!
//! `PATCH proxyconfigs/{name}` changes a config's spec (the proxy mode, say): a JSON merge
//! patch, checked against the spec the operator sees ([`patch_proxy_config`]), then written by
//! the source's writer (a merge patch to the API server, a spec file in the lab). It needs a
//! bearer token the [`Authorizer`](tideway_serve::auth::Authorizer) admits for verb `patch`;
//! reads need one too (verbs `get` and `list`) unless the API listens on loopback only.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tideway_api::crd::{
    NodeProxyStateStatus, ProxyConfigSpec, ProxyConfigStatus, node_proxy_state_status, patch_proxy_config,
    proxy_config_status, spec_of,
};
use tideway_core::operator::rollout::rollout;
use tideway_serve::auth::{Access, check};
use tideway_serve::openapi::{Answer, OpenApi, path_parameter};
use tideway_serve::problem::{Problem, json_body};
use tideway_sources::SharedCluster;
use tideway_sources::status::WriteError;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

mod service;
mod state;

use service::service;
pub use service::{BalancingView, EndpointView, PortSummary, ServiceSummary, ServiceView};
pub use state::ApiState;

/// One ProxyConfig and how its rollout stands, spelled as the custom resource is.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfigView {
    /// Its name.
    pub name: String,
    /// The generation the nodes run (the last valid one).
    pub generation: i64,
    /// Its spec as the nodes run it (the last valid version), with every default filled in.
    pub spec: Option<ProxyConfigSpec>,
    /// Nodes selected, programmed and failing, and the conditions, as the operator writes
    /// them to the resource's status.
    pub status: Option<ProxyConfigStatus>,
    /// Other configs tied with this one for some node, and one such node each.
    pub ties: BTreeMap<String, String>,
    /// Why the current version was rejected (the nodes keep the last valid one).
    pub invalid: Option<String>,
}

/// A change accepted: the spec the nodes will run once the operator sees it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchAnswer {
    /// The ProxyConfig.
    pub name: String,
    /// The generation the change was checked against (the object's next one carries it).
    pub based_on_generation: i64,
    /// Its spec after the change.
    pub spec: ProxyConfigSpec,
}

/// Bodies larger than this are refused (413).
const BODY_LIMIT: usize = 16 * 1024;

fn invalid_configs(cluster: &SharedCluster) -> BTreeMap<String, String> {
    crate::reconcile::refused(cluster).proxy_configs
}

fn config_views(cluster: &SharedCluster) -> Vec<ProxyConfigView> {
    let invalid = invalid_configs(cluster);
    let state = cluster.lock();
    let configs: Vec<_> = state.proxy_configs().cloned().collect();
    let statuses = rollout(&configs, &invalid, state.nodes(), |n| state.node_state(n));
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let view = |name: &str, generation: i64, spec: Option<ProxyConfigSpec>| {
        let status = statuses.get(name);
        ProxyConfigView {
            name: name.to_string(),
            generation,
            spec,
            status: status.map(|s| proxy_config_status(s, &[], &now)),
            ties: status.map(|s| s.ties.clone()).unwrap_or_default(),
            invalid: invalid.get(name).cloned(),
        }
    };
    let mut views: Vec<ProxyConfigView> =
        configs.iter().map(|c| view(&c.name, c.generation, Some(spec_of(c)))).collect();
    for name in invalid.keys().filter(|n| !configs.iter().any(|c| &c.name == *n)) {
        views.push(view(name, 0, None));
    }
    views
}

async fn proxy_configs(State(api): State<ApiState>) -> Response {
    axum::Json(config_views(&api.cluster)).into_response()
}

async fn proxy_config(State(api): State<ApiState>, Path(name): Path<String>) -> Result<Response, Problem> {
    let view = config_views(&api.cluster).into_iter().find(|v| v.name == name);
    let view = view.ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, format!("no ProxyConfig {name:?}")))?;
    Ok(axum::Json(view).into_response())
}

/// The problem for a change the writer could not make.
fn write_problem(e: WriteError) -> Problem {
    let status = match &e {
        WriteError::ReadOnly(_) => StatusCode::CONFLICT,
        WriteError::Refused { code: code @ (404 | 409 | 422), .. } => {
            StatusCode::from_u16(*code).unwrap_or(StatusCode::BAD_GATEWAY)
        }
        WriteError::Refused { code, .. } if *code < 500 => StatusCode::BAD_GATEWAY,
        WriteError::Refused { .. } | WriteError::Transport(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    Problem::new(status, e.to_string())
}

fn is_merge_patch(headers: &HeaderMap) -> bool {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    let ct = ct.split(';').next().unwrap_or("").trim();
    ct.eq_ignore_ascii_case("application/merge-patch+json") || ct.eq_ignore_ascii_case("application/json")
}

async fn patch_config(
    State(api): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Response> {
    let access = Access {
        verb: "patch",
        group: "tideway.io",
        resource: "proxyconfigs",
        namespace: None,
        name: Some(name.clone()),
    };
    let caller = check(api.auth.as_ref(), &headers, &access).await.map_err(IntoResponse::into_response)?;
    if !is_merge_patch(&headers) {
        let p = Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send a JSON merge patch (application/merge-patch+json)",
        );
        return Err(p.into_response());
    }
    let patch: Value = json_body(body).map_err(IntoResponse::into_response)?;
    let current = api.cluster.lock().proxy_configs().find(|c| c.name == name).cloned();
    let Some(current) = current else {
        let p = match invalid_configs(&api.cluster).get(&name) {
            Some(why) => Problem::new(
                StatusCode::CONFLICT,
                format!("ProxyConfig {name:?} is invalid ({why}); fix it where it is defined"),
            ),
            None => Problem::new(StatusCode::NOT_FOUND, format!("no ProxyConfig {name:?}")),
        };
        return Err(p.into_response());
    };
    let change = patch_proxy_config(&current, &patch)
        .map_err(|e| Problem::bad_field(e.field, e.message).into_response())?;
    api.writer.patch_proxy_config(&name, &change).await.map_err(|e| write_problem(e).into_response())?;
    tracing::info!(user = %caller.user, proxyconfig = %name, patch = %patch, "ProxyConfig changed over the REST API");
    let answer = PatchAnswer { name, based_on_generation: current.generation, spec: change.spec };
    Ok((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
}

/// What reading `path` is in RBAC terms: `list` of a collection, `get` of one object (in its
/// namespace for a Service, so that a namespaced Role may grant it).
fn read_access(path: &str) -> Access {
    let segments: Vec<&str> = path.trim_start_matches("/api/v1/").split('/').collect();
    let (group, resource, namespaced) = match segments[0] {
        "nodes" => ("tideway.io", "nodeproxystates", false),
        "services" => ("", "services", true),
        _ => ("tideway.io", "proxyconfigs", false),
    };
    let verb = if segments.len() > 1 { "get" } else { "list" };
    let name = segments.last().filter(|_| segments.len() > 1).map(|n| n.to_string());
    let namespace = segments.get(1).filter(|_| namespaced && segments.len() > 2).map(|n| n.to_string());
    Access { verb, group, resource, namespace, name }
}

/// Reads that need a token when reads are not open: every safe method (`GET`, `HEAD`,
/// `OPTIONS`) under `/api/v1/` (the PATCH handler checks its own).
pub fn read_access_of(method: &Method, path: &str) -> Option<Access> {
    (tideway_serve::auth::is_safe_method(method) && path.starts_with("/api/v1/")).then(|| read_access(path))
}

/// One node and what its agent last reported.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// The node.
    pub name: String,
    /// Its `Ready` condition.
    pub ready: bool,
    /// Its agent's report, as the NodeProxyState resource's status spells it.
    pub node_proxy_state: Option<NodeProxyStateStatus>,
}

async fn nodes(State(api): State<ApiState>) -> Response {
    let state = api.cluster.lock();
    let nodes: Vec<NodeView> = state
        .nodes()
        .map(|n| NodeView {
            name: n.name.clone(),
            ready: n.ready,
            node_proxy_state: state.node_state(&n.name).map(node_proxy_state_status),
        })
        .collect();
    axum::Json(nodes).into_response()
}

/// The OpenAPI document of this API (with the routes of [`crate::http`]).
pub fn openapi() -> Value {
    let mut doc = OpenApi::new("tideway operator");
    let config = doc.schema::<ProxyConfigView>();
    let configs = doc.schema::<Vec<ProxyConfigView>>();
    let service = doc.schema::<ServiceView>();
    let any = serde_json::json!({"type": "object"});
    let list = doc.schema::<Vec<NodeView>>();
    doc.operation(
        "get",
        "/api/v1/status",
        "the operator's status",
        vec![],
        None,
        vec![(200, "leadership, sync, reconciles, writes", Answer::Json(any))],
    );
    doc.operation(
        "get",
        "/api/v1/proxyconfigs",
        "every ProxyConfig and its rollout",
        vec![],
        None,
        vec![(200, "the configs", Answer::Json(configs))],
    );
    let name = path_parameter("name", "the ProxyConfig");
    doc.operation(
        "get",
        "/api/v1/proxyconfigs/{name}",
        "one ProxyConfig and its rollout",
        vec![name.clone()],
        None,
        vec![(200, "the config", Answer::Json(config))],
    );
    let spec = doc.schema::<ProxyConfigSpec>();
    let patch = serde_json::json!({"type": "object", "properties": {"spec": spec},
        "additionalProperties": false, "description": "a JSON merge patch of the ProxyConfig: only spec"});
    let accepted = doc.schema::<PatchAnswer>();
    doc.operation(
        "patch",
        "/api/v1/proxyconfigs/{name}",
        "change a ProxyConfig's spec (mode, settings): a JSON merge patch; needs a bearer token",
        vec![name],
        Some(patch),
        vec![(202, "accepted; the nodes follow (GET shows the rollout)", Answer::Json(accepted))],
    );
    doc.operation(
        "get",
        "/api/v1/nodes",
        "every node and its NodeProxyState",
        vec![],
        None,
        vec![(200, "the nodes", Answer::Json(list))],
    );
    let (ns, svc) =
        (path_parameter("namespace", "the Service's namespace"), path_parameter("name", "its name"));
    doc.operation(
        "get",
        "/api/v1/services/{namespace}/{name}",
        "one Service",
        vec![ns, svc],
        None,
        vec![(200, "addresses, ports, announcement, DNS names", Answer::Json(service))],
    );
    doc.build()
}

/// The API over `api`.
pub fn router(api: ApiState) -> Router {
    let router: Router = Router::new()
        .route("/api/v1/proxyconfigs", get(proxy_configs))
        .route("/api/v1/proxyconfigs/{name}", get(proxy_config).patch(patch_config))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/services/{namespace}/{name}", get(service))
        .merge(tideway_serve::openapi::router(openapi()))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(api);
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_rbac_terms() {
        let cases = [
            ("/api/v1/proxyconfigs", "list", "tideway.io", "proxyconfigs", None, None),
            ("/api/v1/proxyconfigs/default", "get", "tideway.io", "proxyconfigs", None, Some("default")),
            ("/api/v1/nodes", "list", "tideway.io", "nodeproxystates", None, None),
            ("/api/v1/services/demo/web", "get", "", "services", Some("demo"), Some("web")),
        ];
        for (path, verb, group, resource, namespace, name) in cases {
            let want = Access {
                verb,
                group,
                resource,
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
            };
            assert_eq!(read_access(path), want, "{path}");
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(read_access_of(&method, "/api/v1/nodes").is_some(), "{method}");
        }
        assert_eq!(
            read_access_of(&Method::PATCH, "/api/v1/proxyconfigs/default"),
            None,
            "checked by its handler"
        );
    }
}
