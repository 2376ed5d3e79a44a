//! The agent's `NodeProxyState`, written with server-side apply.
//!
//! The first write applies the object itself (spec and an owner reference to the Node, so the
//! report goes with its node), then every write applies the status subresource. Field manager
//! `tideway-agent`, forced: the agent owns its report.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tideway_api::crd::{self, NodeProxyState};
use tideway_core::model::NodeProxyState as CoreState;
use tokio::sync::Mutex;

use crate::shared::SharedCluster;
use crate::status::{NodeStateSink, WriteError};

/// Field manager of every agent write.
pub const FIELD_MANAGER: &str = "tideway-agent";

/// Writes one node's report to the API server.
pub struct KubeNodeStateSink {
    reports: Api<NodeProxyState>,
    nodes: Api<Node>,
    created: Mutex<bool>,
    /// Told whether each write reached the API server (see [`KubeNodeStateSink::reporting_to`]).
    reach: Option<SharedCluster>,
}

impl KubeNodeStateSink {
    /// A sink over `client`.
    pub fn new(client: Client) -> Self {
        KubeNodeStateSink {
            reports: Api::all(client.clone()),
            nodes: Api::all(client),
            created: Mutex::new(false),
            reach: None,
        }
    }

    /// Also records in `cluster` whether each write reached the API server (a refused, timed
    /// out or 5xx write: unreachable; any other answer: reachable), beside what its source's
    /// watches say: self-fencing reads it.
    pub fn reporting_to(self, cluster: SharedCluster) -> Self {
        KubeNodeStateSink { reach: Some(cluster), ..self }
    }

    fn reached<T>(&self, result: &Result<T, kube::Error>) {
        if let Some(cluster) = &self.reach {
            let unreachable =
                result.as_ref().err().is_some_and(|e| super::errors::classify_request(e).unreachable());
            cluster.set_api_reachable(!unreachable);
        }
    }

    fn params() -> PatchParams {
        PatchParams::apply(FIELD_MANAGER).force()
    }

    async fn create(&self, state: &CoreState) -> Result<(), WriteError> {
        // The Node's UID makes it the owner; without it (not readable) the report still goes.
        let node = self.nodes.get(&state.node).await;
        self.reached(&node);
        let uid = match node {
            Ok(node) => node.uid(),
            Err(e) => {
                tracing::warn!(node = %state.node, error = %e, "cannot read the Node; report without owner");
                None
            }
        };
        let mut obj = crd::node_proxy_state(state, uid.as_deref());
        obj.status = None;
        let result = self.reports.patch(&state.node, &Self::params(), &Patch::Apply(&obj)).await;
        self.reached(&result);
        result.map_err(WriteError::from)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl NodeStateSink for KubeNodeStateSink {
    async fn last_report(&self, node: &str) -> Option<CoreState> {
        let report = self.reports.get_opt(node).await.ok().flatten()?;
        crd::node_state_from(&report).ok()
    }

    async fn publish(&self, state: &CoreState) -> Result<(), WriteError> {
        let mut created = self.created.lock().await;
        if !*created {
            self.create(state).await?;
            *created = true;
        }
        let body = json!({
            "apiVersion": "tideway.io/v1alpha1",
            "kind": "NodeProxyState",
            "metadata": { "name": state.node },
            "status": crd::node_proxy_state_status(state),
        });
        let result = self.reports.patch_status(&state.node, &Self::params(), &Patch::Apply(&body)).await;
        self.reached(&result);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                // Deleted behind our back (or never there): create it again next time.
                if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    *created = false;
                }
                Err(e.into())
            }
        }
    }
}
