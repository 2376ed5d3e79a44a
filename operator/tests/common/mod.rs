//! What the operator's integration tests share.

use std::sync::{Arc, RwLock};

use prometheus_client::registry::Registry;
use tideway_operator::election::Lead;
use tideway_operator::metrics::Metrics;
use tideway_operator::reconcile::{LoopOptions, OperatorStatus};
use tideway_sources::SharedCluster;
use tideway_sources::kube::KubeWriter;

/// Runs a leading operator's reconcile loop over `cluster` (which the test's own source
/// feeds), writing through `client` as `op-0`; returns its status.
pub(crate) fn spawn_reconcile(cluster: SharedCluster, client: kube::Client) -> Arc<RwLock<OperatorStatus>> {
    let status = Arc::new(RwLock::new(OperatorStatus::default()));
    let (leading, leader) = tokio::sync::watch::channel(Lead::Always);
    let run = tideway_operator::reconcile::run(
        cluster,
        Arc::new(KubeWriter::new(client, Some("op-0".into()))),
        leader,
        LoopOptions::default(),
        Arc::new(Metrics::new(&mut Registry::default())),
        status.clone(),
        std::future::pending(),
    );
    tokio::spawn(async move {
        // The leadership channel stays open as long as the loop runs.
        let _leading = leading;
        run.await
    });
    status
}
