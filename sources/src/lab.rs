//! The lab's exchange directory: how `tideway lab`'s control plane and the components it runs
//! (agents, DNS, operator, each its own process, most in their own network namespace) talk.
//!
//! ```text
//!  <dir>/cluster.yaml   the cluster as Kubernetes objects, rewritten (atomically) by the
//!                       control plane on every change; components read it with the file source
//!  <dir>/writes/        what components write back, one file per object, the latest content
//!                       winning (the same writes the Kubernetes edge sends as server-side apply):
//!     nodeproxystate_<node>.json        an agent's NodeProxyState
//!     ingress_<ns>_<name>.json          a Service's status.loadBalancer.ingress (operator)
//!     l2a_<ns>_<name>.json              an L2Announcement (operator; removed on withdrawal)
//!     pxcstatus_<name>.json             a ProxyConfig's status (operator)
//!     lbpstatus_<name>.json             a LoadBalancerPool's status (operator)
//!     pxcspec_<name>.json               a ProxyConfig's new spec, changed over the operator's
//!                                       REST API; the control plane adopts it and removes it
//!     events.jsonl                      Events, appended
//!  <dir>/cutoff/        the control plane's faults (`tideway lab api down`, `node NODE down`,
//!                       `partition NODE`): while `api` exists no component reaches the control
//!                       plane; while `node_<node>` exists that node's agent does not
//! ```
//! A component cut off sees what a client of an unreachable API server sees: no updates (it
//! keeps what it had) and writes that fail with a transport error.
//! No Kubernetes API is imitated: the files hold the same objects the API would, and the code
//! above [`crate::Source`], [`NodeStateSink`] and [`ClusterWriter`] does not know it is in a lab.

pub(crate) mod reach;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tideway_api::crd::{self, SpecChange};
use tideway_core::model::{NodeProxyState, ServiceName};
use tideway_core::operator::Action;

use crate::file::FileSource;
use crate::status::{ClusterWriter, NodeStateSink, WriteError};
pub use reach::Reach;

/// How often lab components look at the cluster file (a `stat` each time).
pub const POLL: Duration = Duration::from_millis(10);

/// A lab exchange directory, as one component sees it (the member decides which faults of
/// [`Reach`] cut it off).
#[derive(Debug, Clone)]
pub struct LabDir(PathBuf, Reach);

impl LabDir {
    /// The directory `path`, seen by a component on no node (the operator, the DNS).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let reach = Reach { cutoff: path.join("cutoff"), node: None };
        LabDir(path, reach)
    }

    /// The directory as seen from node `node` (its agent): cut off when that node is.
    pub fn on_node(mut self, node: &str) -> Self {
        self.1.node = Some(node.to_string());
        self
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Where the control plane's faults are flagged.
    pub fn cutoff(&self) -> PathBuf {
        self.0.join("cutoff")
    }

    /// Whether this component reaches the control plane now.
    pub fn reach(&self) -> &Reach {
        &self.1
    }

    /// The cluster file.
    pub fn cluster_file(&self) -> PathBuf {
        self.0.join("cluster.yaml")
    }

    /// Where components write.
    pub fn writes(&self) -> PathBuf {
        self.0.join("writes")
    }

    /// The source reading the cluster file.
    pub fn source(&self) -> FileSource {
        FileSource::new(self.cluster_file(), POLL).gated(self.1.clone())
    }

    /// The file a write of `kind` about `key` goes to.
    pub fn write_file(&self, kind: &str, key: &str) -> PathBuf {
        self.writes().join(format!("{kind}_{key}.json"))
    }
}

fn service_key(s: &ServiceName) -> String {
    format!("{}_{}", s.namespace, s.name)
}

/// Writes `contents` to `path` so that a reader sees the old or the new file, never a part.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("write")));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

fn io(e: std::io::Error) -> WriteError {
    WriteError::Transport(e.to_string())
}

fn json_bytes(v: &impl serde::Serialize) -> Result<Vec<u8>, WriteError> {
    serde_json::to_vec_pretty(v).map_err(|e| WriteError::Transport(e.to_string()))
}

/// An agent's report, into the lab.
#[derive(Debug, Clone)]
pub struct LabNodeStateSink(pub LabDir);

#[async_trait::async_trait]
impl NodeStateSink for LabNodeStateSink {
    async fn publish(&self, state: &NodeProxyState) -> Result<(), WriteError> {
        self.0.1.check()?;
        let obj = crd::node_proxy_state(state, None);
        write_atomically(&self.0.write_file("nodeproxystate", &state.node), &json_bytes(&obj)?).map_err(io)
    }
}

/// The operator's writes, into the lab.
#[derive(Debug, Clone)]
pub struct LabWriter(pub LabDir);

#[async_trait::async_trait]
impl ClusterWriter for LabWriter {
    async fn write(&self, action: &Action) -> Result<(), WriteError> {
        self.0.1.check()?;
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let (path, body) = match action {
            Action::SetIngress { service, ips } => {
                let ingress: Vec<_> =
                    ips.iter().map(|ip| json!({"ip": ip.to_string(), "ipMode": "VIP"})).collect();
                (self.0.write_file("ingress", &service_key(service)), json!({"ingress": ingress}))
            }
            Action::Announce(a) => (
                self.0.write_file("l2a", &service_key(&a.service)),
                serde_json::to_value(crd::l2_announcement_object(a, None))
                    .map_err(|e| WriteError::Transport(e.to_string()))?,
            ),
            Action::Withdraw(s) => {
                return match std::fs::remove_file(self.0.write_file("l2a", &service_key(s))) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
                    _ => Ok(()),
                };
            }
            Action::ProxyConfigStatus { name, status } => {
                let status = crd::proxy_config_status(status, &[], &now);
                (
                    self.0.write_file("pxcstatus", name),
                    serde_json::to_value(status).map_err(|e| WriteError::Transport(e.to_string()))?,
                )
            }
            Action::PoolStatus { name, status } => {
                let status = crd::load_balancer_pool_status(status, &[], &now);
                (
                    self.0.write_file("lbpstatus", name),
                    serde_json::to_value(status).map_err(|e| WriteError::Transport(e.to_string()))?,
                )
            }
            Action::Event(e) => {
                let line = json!({
                    "type": if e.warning { "Warning" } else { "Normal" },
                    "reason": e.reason, "message": e.message,
                    "object": {"kind": e.object.kind, "namespace": e.object.namespace, "name": e.object.name},
                });
                std::fs::create_dir_all(self.0.writes()).map_err(io)?;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.0.writes().join("events.jsonl"))
                    .map_err(io)?;
                return writeln!(f, "{line}").map_err(io);
            }
        };
        write_atomically(&path, &json_bytes(&body)?).map_err(io)
    }

    async fn patch_proxy_config(&self, name: &str, change: &SpecChange) -> Result<(), WriteError> {
        self.0.1.check()?;
        let body = json!({"spec": change.spec});
        write_atomically(&self.0.write_file("pxcspec", name), &json_bytes(&body)?).map_err(io)
    }
}
