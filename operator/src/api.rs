//! The operator's REST API (read side): each ProxyConfig with the rollout status the
//! operator computes for it, each node's `NodeProxyState`, and one Service as the cluster
//! sees it (addresses, ports, who may receive its external traffic and who announces it, its
//! DNS names). Answers are computed from the operator's cluster view on each request with the
//! same core functions the reconciler uses; errors are problem details; `/openapi.json`
//! describes the operations.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tideway_api::crd::{ProxyConfigSpec, ProxyConfigStatus, proxy_config_status, spec_of};
use tideway_api::openapi::{Answer, OpenApi, path_parameter};
use tideway_api::problem::Problem;
use tideway_core::model::ServiceName;
use tideway_core::operator::rollout::rollout;
use tideway_sources::SharedCluster;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// One ProxyConfig and how its rollout stands, spelled as the custom resource is.
#[derive(Debug, Clone, Serialize, JsonSchema)]
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

/// One Service as the cluster sees it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ServiceView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Service (type, ClusterIPs, ports, traffic policies, LoadBalancer ingress).
    pub service: Value,
    /// The LoadBalancer IPs' announcement: the announcing node and the nodes eligible under
    /// the Service's `externalTrafficPolicy` (absent when nothing is announced).
    pub announcement: Option<Value>,
    /// The names the cluster DNS answers for it (in the default `cluster.local` zone).
    pub dns_names: Vec<String>,
}

fn invalid_configs(cluster: &SharedCluster) -> BTreeMap<String, String> {
    cluster
        .invalid_objects()
        .into_iter()
        .filter(|(k, _)| k.kind == "ProxyConfig")
        .map(|(k, msg)| (k.name, msg))
        .collect()
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

async fn proxy_configs(State(cluster): State<SharedCluster>) -> Response {
    axum::Json(config_views(&cluster)).into_response()
}

async fn proxy_config(
    State(cluster): State<SharedCluster>,
    Path(name): Path<String>,
) -> Result<Response, Problem> {
    let view = config_views(&cluster).into_iter().find(|v| v.name == name);
    let view = view.ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, format!("no ProxyConfig {name:?}")))?;
    Ok(axum::Json(view).into_response())
}

async fn nodes(State(cluster): State<SharedCluster>) -> Response {
    let state = cluster.lock();
    let nodes: Vec<Value> = state
        .nodes()
        .map(|n| {
            let report = state.node_state(&n.name).and_then(|r| serde_json::to_value(r).ok());
            serde_json::json!({"name": n.name, "ready": n.ready, "nodeProxyState": report})
        })
        .collect();
    axum::Json(nodes).into_response()
}

async fn service(
    State(cluster): State<SharedCluster>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let key = ServiceName::new(&namespace, &name);
    let state = cluster.lock();
    let svc = state
        .service(&key)
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, format!("no Service {namespace}/{name}")))?;
    let base = format!("{name}.{namespace}.svc.cluster.local");
    let mut dns_names = vec![base.clone()];
    dns_names.extend(
        svc.ports
            .iter()
            .filter(|p| !p.name.is_empty())
            .map(|p| format!("_{}._{}.{base}", p.name, p.protocol.to_string().to_ascii_lowercase())),
    );
    let view = ServiceView {
        namespace: namespace.clone(),
        name: name.clone(),
        service: serde_json::to_value(svc).unwrap_or(Value::Null),
        announcement: state.announcement(&key).and_then(|a| serde_json::to_value(a).ok()),
        dns_names,
    };
    Ok(axum::Json(view).into_response())
}

/// The OpenAPI document of this API (with the routes of [`crate::http`]).
pub fn openapi() -> Value {
    let mut doc = OpenApi::new("tideway operator");
    let config = doc.schema::<ProxyConfigView>();
    let configs = doc.schema::<Vec<ProxyConfigView>>();
    let service = doc.schema::<ServiceView>();
    let any = serde_json::json!({"type": "object"});
    let list = serde_json::json!({"type": "array", "items": {"type": "object"}});
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
        vec![name],
        None,
        vec![(200, "the config", Answer::Json(config))],
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

/// The read API over `cluster`.
pub fn router(cluster: SharedCluster) -> Router {
    Router::new()
        .route("/api/v1/proxyconfigs", get(proxy_configs))
        .route("/api/v1/proxyconfigs/{name}", get(proxy_config))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/services/{namespace}/{name}", get(service))
        .merge(tideway_api::openapi::router(openapi()))
        .with_state(cluster)
}
