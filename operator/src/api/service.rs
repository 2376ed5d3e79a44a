//! `GET /api/v1/services/{namespace}/{name}`: one Service as the cluster sees it, spelled as
//! the Kubernetes object is: addresses, ports and policies, its endpoints, who may receive its
//! external traffic and who announces it, the nodes that programmed it, its DNS names, and the
//! load-balancing algorithm each node's mode programs for it (and why, where that is not the
//! one it asks for).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tideway_core::model::{Service, ServiceName};
use tideway_serve::problem::Problem;

use super::state::ApiState;

/// One Service as the cluster sees it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Service (type, ClusterIPs, ports, traffic policies, LoadBalancer ingress).
    pub service: ServiceSummary,
    /// The LoadBalancer IPs' announcement: the announcing node and the nodes eligible under
    /// the Service's `externalTrafficPolicy` (absent when nothing is announced).
    pub announcement: Option<Value>,
    /// The names the cluster DNS answers for it (in the default `cluster.local` zone).
    pub dns_names: Vec<String>,
    /// Its endpoints, from its EndpointSlices.
    pub endpoints: Vec<EndpointView>,
    /// Nodes whose agent reports this Service's current generation programmed.
    pub programmed_on: Vec<String>,
    /// `tideway.io/load-balancing`, as written (absent: the nodes' default).
    pub load_balancing_asked: Option<String>,
    /// What the nodes program, per algorithm.
    pub load_balancing: Vec<BalancingView>,
}

/// What some nodes program for a Service.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BalancingView {
    /// `random`, `maglev (4093 buckets)`, `IPVS lc`.
    pub algorithm: String,
    /// Why it is not the one asked for (absent when it is).
    pub fallback: Option<String>,
    /// The nodes.
    pub nodes: Vec<String>,
}

fn balancing_views(
    state: &tideway_core::cluster::ClusterState,
    svc: &tideway_core::model::Service,
) -> Vec<BalancingView> {
    use tideway_core::operator::balancing;
    let backends = state.endpoint_slices_for(&svc.name).map(|s| s.endpoints.len()).sum();
    let groups = balancing::node_groups(state);
    balancing::service_balancing(svc, backends, &groups)
        .into_iter()
        .map(|nb| BalancingView { algorithm: nb.algorithm, fallback: nb.fallback, nodes: nb.nodes })
        .collect()
}

/// A Service's addresses, ports and policies, spelled as the Kubernetes object is.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSummary {
    /// `ClusterIP`, `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `spec.clusterIPs` (empty when headless or ExternalName).
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// `spec.externalIPs`.
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<String>,
    /// `status.loadBalancer.ingress[].ip`.
    #[serde(rename = "loadBalancerIPs")]
    pub load_balancer_ips: Vec<String>,
    /// Ports.
    pub ports: Vec<PortSummary>,
    /// `Cluster` or `Local`.
    pub external_traffic_policy: String,
    /// `Cluster` or `Local`.
    pub internal_traffic_policy: String,
    /// `None` or `ClientIP`.
    pub session_affinity: String,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<u16>,
    /// `spec.externalName`.
    pub external_name: Option<String>,
}

/// One Service port.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortSummary {
    /// Its name.
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The Service port.
    pub port: u16,
    /// The NodePort.
    pub node_port: Option<u16>,
}

fn policy(p: tideway_core::model::TrafficPolicy) -> String {
    format!("{p:?}")
}

fn summary(svc: &tideway_core::model::Service) -> ServiceSummary {
    use tideway_core::model::{ServiceType, SessionAffinity};
    let ips = |v: &[std::net::IpAddr]| v.iter().map(ToString::to_string).collect();
    ServiceSummary {
        kind: match svc.service_type {
            ServiceType::ClusterIp => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
            ServiceType::ExternalName => "ExternalName",
        }
        .into(),
        cluster_ips: ips(&svc.cluster_ips),
        external_ips: ips(&svc.external_ips),
        load_balancer_ips: svc
            .load_balancer_ingress
            .iter()
            .filter_map(|i| i.ip)
            .map(|ip| ip.to_string())
            .collect(),
        ports: svc
            .ports
            .iter()
            .map(|p| PortSummary {
                name: p.name.clone(),
                protocol: p.protocol.to_string().to_ascii_uppercase(),
                port: p.port,
                node_port: p.node_port,
            })
            .collect(),
        external_traffic_policy: policy(svc.external_traffic_policy),
        internal_traffic_policy: policy(svc.internal_traffic_policy),
        session_affinity: match svc.session_affinity {
            SessionAffinity::None => "None".into(),
            SessionAffinity::ClientIp { .. } => "ClientIP".into(),
        },
        health_check_node_port: svc.health_check_node_port,
        external_name: svc.external_name.clone(),
    }
}

/// One endpoint of a Service.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// Its addresses.
    pub addresses: Vec<String>,
    /// The node it runs on.
    pub node: Option<String>,
    /// Its zone.
    pub zone: Option<String>,
    /// The pod behind it.
    pub pod: Option<String>,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

fn endpoint_views(state: &tideway_core::cluster::ClusterState, key: &ServiceName) -> Vec<EndpointView> {
    state
        .endpoint_slices_for(key)
        .flat_map(|slice| slice.endpoints.iter())
        .map(|e| EndpointView {
            addresses: e.addresses.iter().map(ToString::to_string).collect(),
            node: e.node_name.as_deref().map(Into::into),
            zone: e.zone().map(Into::into),
            pod: e.pod_name.as_deref().map(Into::into),
            ready: e.ready,
            serving: e.serving,
            terminating: e.terminating,
        })
        .collect()
}

/// The nodes whose reports say `svc` is programmed as it is now.
fn programmed_on(state: &tideway_core::cluster::ClusterState, svc: &Service) -> Vec<String> {
    state.node_states().filter(|r| r.has_programmed(svc) == Some(true)).map(|r| r.node.clone()).collect()
}

/// The cluster DNS zone the names shown are in (the DNS server's default `--zone`).
const DNS_ZONE: &str = "cluster.local";

pub(super) async fn service(
    State(api): State<ApiState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let key = ServiceName::new(&namespace, &name);
    let state = api.cluster.lock();
    let svc = state
        .service(&key)
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, format!("no Service {namespace}/{name}")))?;
    let dns_names = svc.dns_names(DNS_ZONE);
    let view = ServiceView {
        namespace: namespace.clone(),
        name: name.clone(),
        service: summary(svc),
        announcement: state.announcement(&key).and_then(|a| serde_json::to_value(a).ok()),
        dns_names,
        endpoints: endpoint_views(&state, &key),
        programmed_on: programmed_on(&state, svc),
        load_balancing_asked: svc.load_balancing.clone(),
        load_balancing: balancing_views(&state, svc),
    };
    Ok(axum::Json(view).into_response())
}
