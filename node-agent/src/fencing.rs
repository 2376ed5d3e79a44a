//! Self-fencing at the edge: what the liveness gossip says this agent reaches, and whether its
//! source reaches the API server, turned into the fence the announcers follow
//! (`tideway_core::liveness::fencing` decides).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tideway_core::liveness::{Electorate, Fencing, Reach, fencing};
use tideway_sources::SharedCluster;
use tideway_sources::gossip::Members;
use tokio::sync::watch;

/// How often the fence is re-decided (the gossip's own news arrive no faster).
const EVERY: Duration = Duration::from_millis(100);

/// Sets `fence` while this agent reaches neither a strict majority of the cluster's nodes
/// (itself included; the nodes its source knows and the agents its gossip has seen, as
/// [`Electorate`] counts them) nor the API server, or while its view may be stale after the
/// server's silence ([`fencing`] decides), and wakes the agent when it changes.
pub async fn watch(cluster: SharedCluster, members: watch::Receiver<Members>, fence: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(EVERY);
    let mut electorate = Electorate::default();
    loop {
        tick.tick().await;
        let active = members.borrow().active.clone();
        let known = cluster.lock().nodes().count();
        let nodes = electorate.count(&active, known, fence.load(Ordering::Relaxed), Instant::now());
        let mut reach = Reach { reached: active.len(), nodes, api_reachable: false, view_stale: false };
        cluster.doubt_api(reach.doubts_api());
        reach.api_reachable = cluster.api_reachable();
        reach.view_stale = cluster.is_stale();
        let decided = fencing(reach);
        let fenced = decided != Fencing::Answering;
        if fence.swap(fenced, Ordering::Relaxed) != fenced {
            say(decided, reach);
            cluster.poke();
        }
    }
}

/// Logs a change of the fence to `decided`.
fn say(decided: Fencing, Reach { reached, nodes, api_reachable, .. }: Reach) {
    match decided {
        Fencing::Stale => tracing::warn!(
            "fenced: the view may be stale after the API server's silence; answering for no address until every watch has listed again"
        ),
        Fencing::Fenced => tracing::warn!(
            reached,
            nodes,
            "fenced: neither a majority of the nodes nor the API server answers; answering for no address"
        ),
        Fencing::Answering => tracing::info!(
            reached,
            nodes,
            api = api_reachable,
            "fence lifted: answering for this node's addresses again"
        ),
    }
}
