//! Leader election: every retry period read the Lease, let the [`Elector`] decide, write what
//! it says; publish whether this replica leads and until when ([`Lead`]). On shutdown the
//! leader releases the Lease so a standby takes over at once instead of waiting for it to
//! expire.
//!
//! Leadership is fenced in time. A leader's term ends at its renew deadline (the start of its
//! last successful renewal plus `renew_deadline`), which is shorter than the Lease duration a
//! standby waits before taking over. Every Lease call is bounded by the time left in the term,
//! so a hung API server cannot keep a deposed replica "leading": at the deadline the call is
//! dropped and the replica steps down, on the timer, whatever the I/O does. Writers check
//! [`Lead::write_budget`] before each write. Everything runs on tokio's clock, so paused-clock
//! tests drive it.

use std::time::Duration;

use tideway_core::operator::lease::{Elector, LeaseTimings, Step};
use tideway_sources::status::WriteError;
use tokio::sync::watch;
use tokio::time::Instant;

pub use tideway_sources::lease::{LeaseStore, MemoryLease};

/// Whether this replica may write, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead {
    /// Another replica leads, or none does yet.
    Follow,
    /// This replica leads until this instant unless it renews first.
    Until(Instant),
    /// No election: the only replica always leads.
    Always,
}

impl Lead {
    /// True when this replica leads at `now`.
    pub fn leads_at(&self, now: Instant) -> bool {
        match self {
            Lead::Follow => false,
            Lead::Until(until) => now < *until,
            Lead::Always => true,
        }
    }

    /// How long a write sent at `now` may take: `write_timeout`, when it ends within the term;
    /// None when it must not be sent (the term ends before a write could time out).
    pub fn write_budget(&self, now: Instant, write_timeout: Duration) -> Option<Duration> {
        match self {
            Lead::Follow => None,
            Lead::Until(until) => (now + write_timeout <= *until).then_some(write_timeout),
            Lead::Always => Some(write_timeout),
        }
    }

    /// The end of the term, if it has one.
    pub fn until(&self) -> Option<Instant> {
        match self {
            Lead::Until(until) => Some(*until),
            _ => None,
        }
    }
}

impl From<bool> for Lead {
    /// `true`: always leads (no election); `false`: follows.
    fn from(leads: bool) -> Self {
        if leads { Lead::Always } else { Lead::Follow }
    }
}

/// Campaigns for `lease` as `elector` until `shutdown`; `leader` says whether we lead.
pub async fn run<L: LeaseStore>(
    lease: L,
    mut elector: Elector,
    timings: LeaseTimings,
    leader: watch::Sender<Lead>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let start = Instant::now();
    let mut following: Option<String> = None;
    loop {
        // A term that ran out while waiting ends now, before the next (possibly slow) attempt.
        publish(&leader, &elector, &timings, start);
        let attempt = Instant::now();
        let now = attempt - start;
        // While leading, the attempt must end within the term; a candidate's attempt within
        // the renew deadline (a late success then leaves a term already over, never a long one).
        let budget = match elector.leading_until(&timings) {
            Some(until) if until > now => until - now,
            _ => timings.renew_deadline,
        };
        let campaign = campaign(&lease, &mut elector, &timings, now, &mut following);
        if tokio::time::timeout(budget, campaign).await.is_err() {
            tracing::warn!(waited = ?budget, "the Lease call did not complete in time; dropped");
        }
        let lead = publish(&leader, &elector, &timings, start);
        // Wake at the end of the term too, to step down on time if renewals keep failing.
        let wait = match lead.until() {
            Some(until) => (until.saturating_duration_since(Instant::now())).min(timings.retry_period),
            None => timings.retry_period,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = &mut shutdown => break,
        }
    }
    if elector.is_leader(Instant::now() - start, &timings) {
        leader.send_replace(Lead::Follow);
        let left =
            elector.leading_until(&timings).map_or(Duration::ZERO, |u| u.saturating_sub(start.elapsed()));
        if tokio::time::timeout(left, release(&lease, &elector)).await.is_err() {
            tracing::warn!("cannot release the leader Lease in time; it expires on its own");
        }
    }
}

/// One read of the Lease and the write the elector decides on.
async fn campaign<L: LeaseStore>(
    lease: &L,
    elector: &mut Elector,
    timings: &LeaseTimings,
    now: Duration,
    following: &mut Option<String>,
) {
    let current = match lease.read().await {
        Err(e) => return tracing::warn!(error = %e, "cannot read the leader Lease"),
        Ok(current) => current,
    };
    let record = current.as_ref().map(L::record);
    let me = elector.identity().to_string();
    let step = elector.step(record.as_ref(), now);
    let written = match (&step, current) {
        (Step::Create, _) => Some(lease.create(&me, timings.duration).await),
        (Step::Acquire { transitions }, Some(l)) => {
            Some(lease.take(l, &me, timings.duration, *transitions).await)
        }
        (Step::Renew, Some(l)) => Some(lease.renew(l).await),
        (Step::Follow { holder }, _) => {
            if following.as_deref() != Some(holder.as_str()) {
                tracing::info!(leader = %holder, "following");
                *following = Some(holder.clone());
            }
            elector.lost();
            None
        }
        (_, None) => None,
    };
    match written {
        Some(Ok(())) => {
            elector.succeeded(now);
            *following = None;
        }
        // A conflict: another candidate wrote first; the next read tells who.
        Some(Err(e)) => {
            tracing::debug!(error = %e, ?step, "lease write lost");
            if matches!(e, WriteError::Refused { code: 409, .. }) {
                elector.lost();
            }
        }
        None => {}
    }
}

/// Publishes the term as the elector sees it now; returns it.
fn publish(leader: &watch::Sender<Lead>, elector: &Elector, timings: &LeaseTimings, start: Instant) -> Lead {
    let lead = match elector.leading_until(timings) {
        Some(until) if start + until > Instant::now() => Lead::Until(start + until),
        _ => Lead::Follow,
    };
    leader.send_if_modified(|l| {
        if l.leads_at(Instant::now()) != lead.leads_at(Instant::now()) {
            tracing::info!(identity = %elector.identity(), leads = lead != Lead::Follow, "leadership changed");
        }
        let changed = *l != lead;
        *l = lead;
        changed
    });
    lead
}

async fn release<L: LeaseStore>(lease: &L, elector: &Elector) {
    let Ok(Some(l)) = lease.read().await else { return };
    if L::record(&l).holder.as_deref() == Some(elector.identity())
        && let Err(e) = lease.release(l).await
    {
        tracing::warn!(error = %e, "cannot release the leader Lease; it expires on its own");
    }
}
