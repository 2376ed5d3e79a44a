//! The agent's BGP speaker: FRR ([`Routing`]), the configuration it runs, and the watch that
//! reads its sessions back every [`SESSION_POLL`] into the status and metrics. What it is given
//! and when is the agent's ([`super::bgp`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::status::{AgentStatus, BgpSessionStatus};
use crate::frr::{PeerState, Routing};
use crate::metrics::Metrics;

/// How often FRR's sessions are read back.
pub(crate) const SESSION_POLL: Duration = Duration::from_secs(2);

/// The speaker: FRR, and the configuration it runs.
pub(crate) struct Speaker {
    pub(super) routing: Arc<dyn Routing>,
    /// The text FRR runs (None before the first, or after a failure).
    pub(super) applied: Option<String>,
    /// True once FRR took a configuration.
    pub(super) given: bool,
    /// Set by the session watch when FRR runs none of the sessions it was given.
    pub(super) lost: Arc<AtomicBool>,
}

impl Speaker {
    /// A speaker driving `routing`.
    pub(super) fn new(routing: Arc<dyn Routing>) -> Speaker {
        Speaker { routing, applied: None, given: false, lost: Arc::default() }
    }
}

/// Reads FRR's sessions every `every` into `status` and `metrics`, until dropped. A read that
/// fails is logged when it starts failing, and the sessions are then shown as not established;
/// a read that finds none of the applied sessions sets `lost`.
pub(super) async fn watch_sessions(
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
