//! Whether the API server answers, as self-fencing reads it (`SharedCluster::api_reachable`).
//! Every watch, list and write of the source says so as it ends (`watch_kind`,
//! `KubeNodeStateSink::reporting_to`); but a watch re-established after an outage says nothing
//! until an object changes, so while the API server counts as unreachable the source asks it
//! for its version every second, and the first answer makes it reachable again. The opposite
//! silence, a partition where the watches' connections hang without failing, is found the
//! same way while the consumer doubts the server ([`SharedCluster::doubt_api`]): unanswered
//! within a second, it counts as unreachable.

use std::time::Duration;

use kube::Client;

use super::errors::classify_request;
use crate::shared::{SharedCluster, Store};

/// How often an unreachable (or doubted) API server is asked.
const EVERY: Duration = Duration::from_secs(1);
/// How long an answer may take.
const PATIENCE: Duration = Duration::from_secs(2);
/// How long a doubted server's answer may take: the agent's addresses may already be answered
/// for elsewhere, so it decides sooner.
const DOUBTED_PATIENCE: Duration = Duration::from_secs(1);

/// Runs until dropped: while `cluster` says the API server is unreachable, or its consumer
/// doubts it answers ([`SharedCluster::doubt_api`]), asks it; an answer makes it reachable, a
/// doubted server's silence unreachable. Returns when the server answers after such a silence:
/// the watches' connections may have hung through it (the caller starts them again).
pub(super) async fn probe_while_unreachable<S: Store>(client: Client, cluster: SharedCluster<S>) {
    let mut reachable = cluster.watch_api_reachable();
    let mut doubted = cluster.watch_api_doubted();
    let mut back = cluster.watch_api_reachable();
    let mut last: Option<tokio::time::Instant> = None;
    let mut silenced = false;
    loop {
        // After a silence, whoever hears the server first (this probe or a watch that was not
        // hung) ends it: the caller starts every watch again.
        if silenced && cluster.api_reachable() {
            return;
        }
        let asked = tokio::select! {
            r = reachable.wait_for(|r| !*r) => r.is_ok(),
            d = doubted.wait_for(|d| *d) => d.is_ok(),
            _ = back.wait_for(|r| *r), if silenced => return,
        };
        if !asked {
            return;
        }
        // The first question at once, then one every EVERY.
        if let Some(at) = last {
            tokio::time::sleep_until(at + EVERY).await;
        }
        last = Some(tokio::time::Instant::now());
        let patience = if *doubted.borrow() { DOUBTED_PATIENCE } else { PATIENCE };
        let answered = match tokio::time::timeout(patience, client.apiserver_version()).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => !classify_request(&e).unreachable(),
            Err(_) => false,
        };
        let (was, doubt) = (cluster.api_reachable(), *doubted.borrow());
        if !was && doubt && !silenced {
            // Unreachable while doubted, whoever found it (a write or a watch that failed):
            // a silence all the same, through which other watches may have hung.
            silenced = true;
            cluster.mark_stale();
        }
        if answered && silenced {
            // Reachable again once a watch, started again, has listed: an agent stays fenced
            // until then rather than answer for what its stale view says.
            tracing::info!("the API server answers again");
            return;
        } else if answered && !was {
            tracing::info!("the API server answers again");
            cluster.set_api_reachable(true);
        } else if !answered && was && doubt {
            silenced = true;
            cluster.mark_stale();
            tracing::warn!(
                within = ?patience,
                "the API server does not answer (asked because the gossip reaches a minority of the nodes)"
            );
            cluster.set_api_reachable(false);
        }
    }
}
