//! The agent's BGP half: `tideway_core::bgp` decides what this node advertises to which peer
//! and renders FRR's configuration for it; this hands the text to FRR ([`Routing`]) when it
//! differs from the one applied, and reports what was applied (`/api/v1/status`, metrics).
//!
//! It runs after each sync, and on the changes that can move it alone (BGP objects, pools). A
//! configuration FRR refused is tried again at the next sync or drift check. A fenced agent
//! advertises nothing, as it answers ARP for nothing. While the agent runs, FRR's sessions are
//! read back every [`SESSION_POLL`](super::speaker::SESSION_POLL) ([`Agent::session_watch`]): established or not, and their
//! BFD. An FRR that runs none of the sessions it was given (it restarted, empty) is given its
//! configuration again at the next sync or drift check.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tideway_core::bgp::{self, NodeBgp};

use super::speaker::{Speaker, watch_sessions};
use super::status::{BgpSessionStatus, BgpStatus};
use super::{Agent, blocking};
use crate::frr::Routing;

impl Agent {
    /// The same agent, speaking BGP through `routing`.
    pub fn with_bgp(mut self, routing: Arc<dyn Routing>) -> Agent {
        self.bgp = Some(Speaker::new(routing));
        self.set_status(|s| s.bgp = Some(BgpStatus::default()));
        self
    }

    /// Reads FRR's sessions every `every` into the status and metrics while polled (none when
    /// the agent does not speak BGP).
    pub fn session_watch(&self, every: Duration) -> Option<impl Future<Output = ()> + Send + 'static> {
        let s = self.bgp.as_ref()?;
        let (status, metrics) = (self.status.clone(), self.metrics.clone());
        Some(watch_sessions(s.routing.clone(), status, metrics, every, s.lost.clone()))
    }

    /// True when this agent speaks BGP.
    /// Advertises nothing while `fence` is set (see [`crate::fencing`]); the layer-2 speaker
    /// reads the same fence.
    pub fn fenced_by(mut self, fence: Arc<std::sync::atomic::AtomicBool>) -> Agent {
        self.fence = fence;
        self
    }

    /// True when the fence changed since BGP last followed it.
    pub(crate) fn fence_changed(&self) -> bool {
        self.fence.load(Ordering::Relaxed) != self.fenced
    }

    pub(super) fn speaks_bgp(&self) -> bool {
        self.bgp.is_some()
    }

    /// Decides what this node advertises and applies it when it changed.
    pub(super) fn speak_bgp(&mut self) {
        if self.bgp.is_none() {
            return;
        }
        let decided = {
            let state = self.cluster.lock();
            bgp::decide_for(&state, &self.opts.node)
        };
        let Some(mut decided) = decided else { return };
        if self.fenced {
            decided.sessions.iter_mut().for_each(|s| s.routes.clear());
        }
        let text = bgp::frr::render(&decided);
        let speaker = self.bgp.as_mut().expect("checked above");
        if speaker.lost.swap(false, Ordering::Relaxed) {
            tracing::warn!("giving FRR its configuration again");
            speaker.applied = None;
        }
        // A node that peers with nobody leaves FRR alone until it does (FRR may not run on
        // nodes no BGPPeer selects); once it has peered, losing every peer is applied.
        if speaker.applied.as_deref() == Some(text.as_str())
            || (!speaker.given && decided.sessions.is_empty())
        {
            return self.report_bgp(&decided, Outcome::Unchanged);
        }
        let result = blocking(|| speaker.routing.apply(&text));
        match result {
            Ok(()) => {
                tracing::info!(
                    sessions = decided.sessions.len(),
                    prefixes = decided.prefixes().len(),
                    "FRR configuration applied"
                );
                speaker.given = true;
                speaker.applied = Some(text);
                self.metrics.bgp_sessions.set(decided.sessions.len() as i64);
                self.metrics.bgp_prefixes.set(decided.prefixes().len() as i64);
                self.report_bgp(&decided, Outcome::Applied);
            }
            Err(e) => {
                tracing::warn!(error = %e, "FRR configuration not applied; tried again at the next sync");
                speaker.applied = None;
                self.metrics.bgp_apply_failures.inc();
                self.report_bgp(&decided, Outcome::Failed(e.to_string()));
            }
        }
    }

    /// True when the last configuration was not applied, or FRR lost it.
    pub(super) fn bgp_failed(&self) -> bool {
        self.bgp.as_ref().is_some_and(|s| s.applied.is_none() || s.lost.load(Ordering::Relaxed))
    }

    fn report_bgp(&self, decided: &NodeBgp, outcome: Outcome) {
        let conflicts = decided.conflicts.iter().map(ToString::to_string).collect();
        self.set_status(|s| {
            let status = s.bgp.get_or_insert_with(BgpStatus::default);
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
        });
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
