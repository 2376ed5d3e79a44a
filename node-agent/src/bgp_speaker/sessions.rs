//! FRR's sessions read back every [`SESSION_POLL`] into the agent's status and metrics, and
//! whether FRR still runs the sessions it was given.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::agent::{AgentStatus, BgpSessionStatus};
use crate::frr::{PeerState, Routing};
use crate::metrics::Metrics;

/// How often FRR's sessions are read back.
pub const SESSION_POLL: Duration = Duration::from_secs(2);

/// Reads FRR's sessions every `every` into `status` and `metrics`, until dropped. A read that
/// fails is logged when it starts failing, and the sessions are then shown as not established;
/// a read that finds none of the applied sessions sets `lost`.
pub(super) async fn watch(
    routing: Arc<dyn Routing>,
    status: Arc<RwLock<AgentStatus>>,
    metrics: Arc<Metrics>,
    every: Duration,
    lost: Arc<AtomicBool>,
) {
    let mut tick = tokio::time::interval(every);
    let mut failing = false;
    loop {
        tick.tick().await;
        let r = routing.clone();
        let read = tokio::task::spawn_blocking(move || r.sessions()).await;
        let states = match read {
            Ok(Ok(states)) => {
                failing = false;
                states
            }
            Ok(Err(e)) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "cannot read FRR's sessions");
                }
                record_sessions(&status, &metrics, &BTreeMap::new());
                continue;
            }
            Err(_) => return,
        };
        if record_sessions(&status, &metrics, &states) && !lost.swap(true, Ordering::Relaxed) {
            tracing::warn!("FRR runs none of the sessions it was given (restarted?)");
        }
    }
}

/// Marks each session of the status with what FRR says of its peer; counts them in `metrics`.
/// True when sessions were applied but FRR knows none of their peers (it lost its
/// configuration: FRR lists every configured neighbor, established or not).
pub fn record_sessions(
    status: &RwLock<AgentStatus>,
    metrics: &Metrics,
    states: &BTreeMap<IpAddr, PeerState>,
) -> bool {
    let mut status = status.write().unwrap_or_else(|e| e.into_inner());
    let Some(bgp) = status.bgp.as_mut() else { return false };
    let forgotten = bgp.applied > 0
        && !bgp.sessions.is_empty()
        && !bgp.sessions.iter().any(|s| s.address.parse().is_ok_and(|a: IpAddr| states.contains_key(&a)));
    for s in &mut bgp.sessions {
        let state = s.address.parse().ok().and_then(|a: IpAddr| states.get(&a)).cloned().unwrap_or_default();
        s.established = state.established;
        s.bfd = state.bfd;
    }
    let count = |f: &dyn Fn(&BgpSessionStatus) -> bool| bgp.sessions.iter().filter(|s| f(s)).count() as i64;
    metrics.bgp_established.set(count(&|s| s.established));
    metrics.bfd_up.set(count(&|s| s.bfd.as_deref() == Some("up")));
    forgotten
}
