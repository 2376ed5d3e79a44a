//! The sync loop's schedule: syncs on relevant changes at most every `minSyncPeriod`, retries
//! with backoff, drift checks every `syncPeriod`, questions from the REST API answered
//! whenever it waits, and a stop whenever asked; an uninstall's clean-up ends the syncs.

use std::time::Duration;

use tokio::time::Instant;

use super::Agent;

/// How long the first lists may take before the agent says what it waits for.
const WAIT_GRACE: Duration = Duration::from_secs(5);

impl Agent {
    /// True when what changed can alter this node's rules (and marks an update queued for
    /// `/healthz`); other changes (reports of other nodes, pods, the announcements and the BGP
    /// objects, which the speakers follow on their own tasks) are dropped so they cost no sync
    /// and no `minSyncPeriod` wait.
    fn relevant_changes_pending(&self) -> bool {
        let mut state = self.cluster.lock();
        let changes = state.changes();
        // The node-local DNS listener's view follows the Namespaces too.
        let for_dns = self.node_dns.is_some() && changes.namespaces;
        if changes.affect_proxy(&self.opts.node) || for_dns {
            drop(state);
            self.set_pending_gauges();
            self.health.queued();
            self.metrics.last_queued.set(super::unix_now());
            return true;
        }
        state.take_changes();
        false
    }
}

impl Agent {
    /// Runs until `shutdown` resolves: waits for the source's first complete view, then syncs
    /// on every change (at most every `minSyncPeriod`), retries failures with backoff, and
    /// checks for drift every `syncPeriod`.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        // What the first complete view waits for is told after a grace period (a healthy API
        // server lists in well under it), then whenever it changes.
        let mut ticks = tokio::time::interval_at(Instant::now() + WAIT_GRACE, Duration::from_secs(1));
        let mut told = false;
        self.set_status(|s| s.waiting_for = self.cluster.waiting_for());
        loop {
            tokio::select! {
                _ = self.cluster.wait_synced() => break,
                _ = ticks.tick() => {
                    let what = self.cluster.waiting_for();
                    if !told {
                        tracing::warn!(node = %self.opts.node, waiting_for = ?what, "waiting before programming this node");
                        told = true;
                    }
                    self.set_status(|s| s.waiting_for = what);
                }
                _ = &mut shutdown => return,
            }
        }
        self.set_status(|s| s.waiting_for = Vec::new());
        let mut dirty = true;
        let mut force_full = false;
        let mut last_start: Option<Instant> = None;
        let mut retry_at: Option<Instant> = None;
        let mut backoff = Duration::from_millis(500);
        let mut next_verify = Instant::now();
        loop {
            let (min_period, sync_period) = self.periods();
            if !dirty && retry_at.is_none() {
                let wake = next_verify;
                tokio::select! {
                    _ = self.cluster.changed() => dirty = self.relevant_changes_pending(),
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = &mut shutdown => return,
                }
            }
            if let Some(at) = retry_at
                && !dirty
                && Instant::now() < at
            {
                tokio::select! {
                    _ = self.cluster.changed() => dirty = self.relevant_changes_pending(),
                    _ = tokio::time::sleep_until(at) => {}
                    _ = &mut shutdown => return,
                }
            }
            let retry_due = retry_at.is_some_and(|t| Instant::now() >= t);
            if dirty || retry_due {
                if let Some(t) = last_start {
                    let earliest = t + min_period;
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest) => {}
                        _ = &mut shutdown => return,
                    }
                }
                last_start = Some(Instant::now());
                dirty = false;
                if let Some(request) = self.cleanup_requested() {
                    return self.clean_up_and_stay(&request, shutdown).await;
                }
                match self.sync(force_full).await {
                    Ok(()) => {
                        retry_at = None;
                        force_full = false;
                        backoff = Duration::from_millis(500);
                    }
                    Err(_) => {
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(sync_period);
                    }
                }
            }
            if Instant::now() >= next_verify {
                next_verify = Instant::now() + sync_period;
                self.retire();
                if let Err(e) = self.check_drift(true).await {
                    tracing::warn!(error = %e, "drift check failed");
                    force_full = true;
                    dirty = true;
                }
            }
        }
    }
}
