//! Self-fencing at the edge: what the liveness gossip says this agent reaches, and whether its
//! source reaches the API server, turned into the fence the announcers follow
//! (`tideway_core::liveness::fencing` decides).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tideway_core::liveness::{Electorate, Fencing, fencing};
use tideway_sources::SharedCluster;
use tideway_sources::gossip::Members;
use tokio::sync::watch;

/// How often the fence is re-decided (the gossip's own news arrive no faster).
const EVERY: Duration = Duration::from_millis(100);

/// Sets `fence` while this agent reaches neither a strict majority of the cluster's nodes
/// (itself included; the nodes its source knows and the agents its gossip has seen, as
/// [`Electorate`] counts them) nor the API server, and wakes the agent when it changes.
pub async fn watch(cluster: SharedCluster, members: watch::Receiver<Members>, fence: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(EVERY);
    let mut electorate = Electorate::default();
    loop {
        tick.tick().await;
        let active = members.borrow().active.clone();
        let known = cluster.lock().nodes().count();
        let reached = active.len();
        let nodes = electorate.count(&active, known, fence.load(Ordering::Relaxed), Instant::now());
        // A minority may be a partition, where the API server's silence would go unnoticed
        // for minutes (a watch's connection hangs): the source asks it while in doubt.
        cluster.doubt_api(reached * 2 <= nodes);
        let api = cluster.api_reachable();
        // After the API server's silence the view may say this node announces what moved
        // away meanwhile: fenced until every watch has listed again.
        let stale = cluster.is_stale();
        let fenced = stale || fencing(reached, nodes, api) == Fencing::Fenced;
        if fence.swap(fenced, Ordering::Relaxed) != fenced {
            if fenced && stale {
                tracing::warn!(
                    "fenced: the view may be stale after the API server's silence; answering for no address until every watch has listed again"
                );
            } else if fenced {
                tracing::warn!(
                    reached,
                    nodes,
                    "fenced: neither a majority of the nodes nor the API server answers; answering for no address"
                );
            } else {
                tracing::info!(
                    reached,
                    nodes,
                    api,
                    "fence lifted: answering for this node's addresses again"
                );
            }
            cluster.poke();
        }
    }
}
