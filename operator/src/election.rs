//! Leader election: every retry period read the Lease, let the [`Elector`] decide, write what
//! it says; publish whether this replica leads. On shutdown the leader releases the Lease so a
//! standby takes over at once instead of waiting for it to expire.

use std::time::Instant;

use tideway_core::operator::lease::{Elector, LeaseTimings, Step};
use tideway_sources::kube::{KubeLease, lease_record};
use tideway_sources::status::WriteError;
use tokio::sync::watch;

/// Campaigns for `lease` as `elector` until `shutdown`; `leader` says whether we lead.
pub async fn run(
    lease: KubeLease,
    mut elector: Elector,
    timings: LeaseTimings,
    leader: watch::Sender<bool>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let start = Instant::now();
    let mut following: Option<String> = None;
    loop {
        let now = start.elapsed();
        match lease.read().await {
            Err(e) => tracing::warn!(error = %e, "cannot read the leader Lease"),
            Ok(current) => {
                let record = current.as_ref().map(lease_record);
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
                            following = Some(holder.clone());
                        }
                        elector.lost();
                        None
                    }
                    (_, None) => None,
                };
                match written {
                    Some(Ok(())) => {
                        elector.succeeded(now);
                        following = None;
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
        }
        let leads = elector.is_leader(start.elapsed(), &timings);
        leader.send_if_modified(|l| {
            let changed = *l != leads;
            if changed {
                tracing::info!(identity = %elector.identity(), leads, "leadership changed");
            }
            *l = leads;
            changed
        });
        tokio::select! {
            _ = tokio::time::sleep(timings.retry_period) => {}
            _ = &mut shutdown => break,
        }
    }
    if elector.is_leader(start.elapsed(), &timings) {
        leader.send_replace(false);
        if let Ok(Some(l)) = lease.read().await
            && l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(elector.identity())
            && let Err(e) = lease.release(l).await
        {
            tracing::warn!(error = %e, "cannot release the leader Lease; it expires on its own");
        }
    }
}
