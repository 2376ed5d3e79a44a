//! The agent's BGP speaker, on a task of its own beside the layer-2 speaker:
//! `tideway_core::bgp` decides what this node advertises to which peer and renders FRR's
//! configuration for it; this hands the text to FRR ([`Routing`]) when it differs from the one
//! applied, and reports what was applied (`/api/v1/status`, metrics).
//!
//! It is not part of the proxy's sync loop: it reads the cluster beside it
//! ([`SharedCluster::subscribe`]), so a withdrawal (an ETP Local Service's last local endpoint
//! gone, a fence raised) waits neither for `minSyncPeriod` nor for an apply in progress. Each
//! wake decides again and compares the rendered text with what FRR runs (the decision walks
//! the LoadBalancer Services only). A fenced agent, or one asked to clean up for an uninstall,
//! advertises nothing, as its layer-2 speaker answers for nothing. A configuration FRR refused
//! is tried again after a pause (2 s, doubling to 64 s). While it runs, FRR's sessions are
//! read back every [`SESSION_POLL`] ([`sessions`]); an FRR that runs none of the sessions it
//! was given (it restarted, empty) is given its configuration again at the next read.

mod sessions;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tideway_core::bgp::{self, NodeBgp};
use tideway_core::config::cleanup_requested;
use tideway_sources::SharedCluster;
use tokio::time::Instant;

pub use sessions::{SESSION_POLL, record_sessions};

use crate::agent::{AgentStatus, BgpSessionStatus, BgpStatus};
use crate::frr::Routing;
use crate::metrics::Metrics;

/// The first pause before a refused configuration is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(64);

/// The BGP speaker of one node: FRR, and the configuration it runs.
pub struct BgpSpeaker {
    node: String,
    cluster: SharedCluster,
    status: Arc<RwLock<AgentStatus>>,
    metrics: Arc<Metrics>,
    /// Set while the agent reaches neither a majority of the nodes nor the API server
    /// (`tideway_core::liveness::fencing`): it then advertises nothing.
    fence: Arc<AtomicBool>,
    routing: Arc<dyn Routing>,
    /// The text FRR runs (None before the first, or after a failure).
    applied: Option<String>,
    /// True once FRR took a configuration.
    given: bool,
    /// Set by the session watch when FRR runs none of the sessions it was given.
    lost: Arc<AtomicBool>,
    /// When a refused configuration is tried again, and the pause after that.
    retry: Option<(Instant, Duration)>,
}

impl BgpSpeaker {
    /// The speaker of `node` through `routing`, reading `cluster` and `fence`, reporting into
    /// the agent's status and metrics.
    pub fn new(
        node: &str,
        cluster: SharedCluster,
        status: Arc<RwLock<AgentStatus>>,
        metrics: Arc<Metrics>,
        fence: Arc<AtomicBool>,
        routing: Arc<dyn Routing>,
    ) -> BgpSpeaker {
        status.write().unwrap_or_else(|e| e.into_inner()).bgp = Some(BgpStatus::default());
        BgpSpeaker {
            node: node.to_string(),
            cluster,
            status,
            metrics,
            fence,
            routing,
            applied: None,
            given: false,
            lost: Arc::default(),
            retry: None,
        }
    }

    /// Runs until `shutdown` resolves: waits for the source's first complete view, then
    /// follows every change, reading FRR's sessions back every [`SESSION_POLL`].
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut changed = tokio::select! {
            changed = self.cluster.subscribe_synced() => changed,
            _ = &mut shutdown => return,
        };
        let sessions = self.session_watch(SESSION_POLL);
        tokio::pin!(sessions);
        let mut check = tokio::time::interval(SESSION_POLL);
        loop {
            self.speak();
            loop {
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return } else { break },
                    _ = check.tick() => if self.due() { break },
                    () = &mut sessions => return,
                    _ = &mut shutdown => return,
                }
            }
        }
    }

    /// Reads FRR's sessions every `every` into the status and metrics while polled.
    pub fn session_watch(&self, every: Duration) -> impl Future<Output = ()> + Send + 'static {
        let (status, metrics) = (self.status.clone(), self.metrics.clone());
        sessions::watch(self.routing.clone(), status, metrics, every, self.lost.clone())
    }

    /// True when FRR lost its configuration, or a refused one's pause is over.
    fn due(&self) -> bool {
        self.lost.load(Ordering::Relaxed) || self.retry.is_some_and(|(at, _)| Instant::now() >= at)
    }

    /// Decides what this node advertises now and hands it to FRR when it changed.
    pub fn speak(&mut self) {
        let (decided, silent) = {
            let state = self.cluster.lock();
            let silent =
                self.fence.load(Ordering::Relaxed) || cleanup_requested(state.proxy_configs()).is_some();
            (bgp::decide_for(&state, &self.node), silent)
        };
        let Some(mut decided) = decided else { return };
        if silent {
            decided.sessions.iter_mut().for_each(|s| s.routes.clear());
        }
        let text = bgp::frr::render(&decided);
        if self.lost.swap(false, Ordering::Relaxed) {
            tracing::warn!("giving FRR its configuration again");
            self.applied = None;
        }
        // A node that peers with nobody leaves FRR alone until it does (FRR may not run on
        // nodes no BGPPeer selects); once it has peered, losing every peer is applied.
        if self.applied.as_deref() == Some(text.as_str()) || (!self.given && decided.sessions.is_empty()) {
            return self.report(&decided, Outcome::Unchanged);
        }
        match crate::agent::blocking(|| self.routing.apply(&text)) {
            Ok(()) => {
                tracing::info!(
                    sessions = decided.sessions.len(),
                    prefixes = decided.prefixes().len(),
                    "FRR configuration applied"
                );
                (self.given, self.applied, self.retry) = (true, Some(text), None);
                self.metrics.bgp_sessions.set(decided.sessions.len() as i64);
                self.metrics.bgp_prefixes.set(decided.prefixes().len() as i64);
                self.report(&decided, Outcome::Applied);
            }
            Err(e) => {
                let pause = self.retry.map_or(RETRY_FIRST, |(_, p)| (p * 2).min(RETRY_MAX));
                tracing::warn!(error = %e, retry_in = ?pause, "FRR configuration not applied");
                (self.applied, self.retry) = (None, Some((Instant::now() + pause, pause)));
                self.metrics.bgp_apply_failures.inc();
                self.report(&decided, Outcome::Failed(e.to_string()));
            }
        }
    }

    fn report(&self, decided: &NodeBgp, outcome: Outcome) {
        let conflicts = decided.conflicts.iter().map(ToString::to_string).collect();
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        let status = status.bgp.get_or_insert_with(BgpStatus::default);
        status.conflicts = conflicts;
        match outcome {
            Outcome::Failed(e) => status.last_error = Some(e),
            Outcome::Unchanged | Outcome::Applied => {
                status.applied += u64::from(outcome == Outcome::Applied);
                status.asn = decided.asn;
                let known = std::mem::take(&mut status.sessions);
                status.sessions = decided.sessions.iter().map(|s| session_status(s, &known)).collect();
                status.last_error = None;
            }
        }
    }
}

/// What became of a decision.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// FRR already runs it.
    Unchanged,
    /// FRR took it.
    Applied,
    /// FRR did not take it, and why.
    Failed(String),
}

/// A session as applied, with what FRR last said of its peer (from `known`).
fn session_status(s: &bgp::Session, known: &[BgpSessionStatus]) -> BgpSessionStatus {
    let address = s.peer.address.to_string();
    let before = known.iter().find(|k| k.address == address);
    BgpSessionStatus {
        peer: s.peer.name.clone(),
        prefixes: s.routes.keys().map(ToString::to_string).collect(),
        established: before.is_some_and(|b| b.established),
        bfd: before.and_then(|b| b.bfd.clone()),
        address,
    }
}
