//! Health: the proxy's own `/healthz` state (kube-proxy semantics) and one HTTP server per
//! `healthCheckNodePort`, answering 200 while the node has a ready local endpoint, within the
//! limits of every listener ([`tideway_serve::listen`]: 10 s for a request head, 256 connections).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tideway_core::model::ServiceName;
use tideway_core::plan::HealthCheck;
use tideway_serve::listen::Limits;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Whether the proxy keeps up: healthy unless a change has waited more than twice the sync
/// period (kube-proxy's rule), and the node is neither being deleted nor tainted
/// `ToBeDeletedByClusterAutoscaler` (KEP-3836).
#[derive(Debug)]
pub struct ProxyHealth {
    sync_period: Mutex<Duration>,
    last_updated: Mutex<Option<SystemTime>>,
    oldest_pending: Mutex<Option<SystemTime>>,
    node_eligible: Mutex<bool>,
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl ProxyHealth {
    /// A new state.
    pub fn new(sync_period: Duration) -> Self {
        ProxyHealth {
            sync_period: Mutex::new(sync_period),
            last_updated: Mutex::new(None),
            oldest_pending: Mutex::new(None),
            node_eligible: Mutex::new(true),
        }
    }

    /// A change is waiting to be programmed.
    pub fn queued(&self) {
        self.oldest_pending.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(SystemTime::now);
    }

    /// Everything queued was programmed.
    pub fn updated(&self) {
        *self.last_updated.lock().unwrap_or_else(|e| e.into_inner()) = Some(SystemTime::now());
        *self.oldest_pending.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Sets the sync period (from the node's ProxyConfig).
    pub fn set_sync_period(&self, d: Duration) {
        *self.sync_period.lock().unwrap_or_else(|e| e.into_inner()) = d;
    }

    /// Marks whether the node may receive traffic (false while it is being deleted or the
    /// cluster autoscaler is removing it).
    pub fn set_node_eligible(&self, eligible: bool) {
        *self.node_eligible.lock().unwrap_or_else(|e| e.into_inner()) = eligible;
    }

    /// Liveness: nothing stuck.
    pub fn live(&self) -> bool {
        let period = *self.sync_period.lock().unwrap_or_else(|e| e.into_inner());
        match *self.oldest_pending.lock().unwrap_or_else(|e| e.into_inner()) {
            None => true,
            Some(t) => t.elapsed().unwrap_or_default() < 2 * period,
        }
    }

    /// Health: live and eligible.
    pub fn healthy(&self) -> bool {
        self.live() && *self.node_eligible.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The JSON body of `/healthz` and `/livez`.
    pub fn body(&self) -> serde_json::Value {
        let last = *self.last_updated.lock().unwrap_or_else(|e| e.into_inner());
        json!({
            "lastUpdated": last.map(unix),
            "currentTime": unix(SystemTime::now()),
            "nodeEligible": *self.node_eligible.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }
}

#[derive(Debug)]
struct CheckState {
    service: RwLock<(ServiceName, usize)>,
    proxy: Arc<ProxyHealth>,
}

async fn answer(State(s): State<Arc<CheckState>>) -> Response {
    let (service, local) = s.service.read().unwrap_or_else(|e| e.into_inner()).clone();
    let healthy = s.proxy.healthy();
    let body = json!({
        "service": { "namespace": service.namespace, "name": service.name },
        "localEndpoints": local,
        "serviceProxyHealthy": healthy,
    });
    let code = if local > 0 && healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut resp = (code, axum::Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&local.to_string()) {
        resp.headers_mut().insert("X-Load-Balancing-Endpoint-Weight", v);
    }
    resp
}

struct Server {
    state: Arc<CheckState>,
    tasks: Vec<JoinHandle<()>>,
}

/// The health-check NodePort servers of this node.
pub struct HealthServers {
    proxy: Arc<ProxyHealth>,
    servers: HashMap<u16, Server>,
}

impl HealthServers {
    /// No servers yet.
    pub fn new(proxy: Arc<ProxyHealth>) -> Self {
        HealthServers { proxy, servers: HashMap::new() }
    }

    /// Starts, updates and stops servers so that exactly `checks` are served on `addresses`;
    /// returns the ports that could not be bound.
    pub async fn sync(
        &mut self,
        checks: &BTreeMap<ServiceName, HealthCheck>,
        addresses: &[IpAddr],
    ) -> Vec<String> {
        let wanted: BTreeMap<u16, &HealthCheck> = checks.values().map(|c| (c.port, c)).collect();
        self.servers.retain(|port, server| {
            let keep = wanted.contains_key(port);
            if !keep {
                server.tasks.iter().for_each(JoinHandle::abort);
            }
            keep
        });
        let mut errors = Vec::new();
        for (port, check) in wanted {
            if let Some(s) = self.servers.get(&port) {
                *s.state.service.write().unwrap_or_else(|e| e.into_inner()) =
                    (check.service.clone(), check.local_endpoints);
                continue;
            }
            let state = Arc::new(CheckState {
                service: RwLock::new((check.service.clone(), check.local_endpoints)),
                proxy: self.proxy.clone(),
            });
            let mut tasks = Vec::new();
            for ip in addresses {
                match TcpListener::bind(SocketAddr::new(*ip, port)).await {
                    Ok(listener) => {
                        let router = Router::new().fallback(answer).with_state(state.clone());
                        let (limits, stop) = (Limits::default(), std::future::pending());
                        tasks.push(tokio::spawn(async move {
                            let _ = tideway_serve::listen::serve(listener, None, router, limits, stop).await;
                        }));
                    }
                    Err(e) => {
                        errors.push(format!("health check port {ip}:{port} for {}: {e}", check.service))
                    }
                }
            }
            self.servers.insert(port, Server { state, tasks });
        }
        errors
    }

    /// Ports currently served.
    pub fn ports(&self) -> Vec<u16> {
        let mut p: Vec<u16> = self.servers.keys().copied().collect();
        p.sort_unstable();
        p
    }
}
