//! Whether the API server answers, as self-fencing reads it (`SharedCluster::api_reachable`).
//! Every watch, list and write of the source says so as it ends (`watch_kind`,
//! `KubeNodeStateSink::reporting_to`); but a watch re-established after an outage says nothing
//! until an object changes, so while the API server counts as unreachable the source asks it
//! for its version every second, and the first answer makes it reachable again.

use std::time::Duration;

use kube::Client;

use super::errors::classify_request;
use crate::shared::{SharedCluster, Store};

/// How often an unreachable API server is asked.
const EVERY: Duration = Duration::from_secs(1);
/// How long an answer may take.
const PATIENCE: Duration = Duration::from_secs(2);

/// Runs until dropped: while `cluster` says the API server is unreachable, asks it.
pub(super) async fn probe_while_unreachable<S: Store>(client: Client, cluster: SharedCluster<S>) {
    let mut reachable = cluster.watch_api_reachable();
    loop {
        if reachable.wait_for(|r| !*r).await.is_err() {
            return;
        }
        tokio::time::sleep(EVERY).await;
        let answered = match tokio::time::timeout(PATIENCE, client.apiserver_version()).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => !classify_request(&e).unreachable(),
            Err(_) => false,
        };
        if answered && !cluster.api_reachable() {
            tracing::info!("the API server answers again");
            cluster.set_api_reachable(true);
        }
    }
}
