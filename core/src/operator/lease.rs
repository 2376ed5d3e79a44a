//! Leader election over a `coordination.k8s.io` Lease, as client-go does it: a candidate takes
//! the Lease when it is free, or when its record has not changed for `leaseDurationSeconds` of
//! the candidate's own clock (so clocks need not agree); the holder renews it every retry
//! period and steps down when it could not renew within the renew deadline. Time is injected:
//! a monotonic reading in, a step out; the operator crate does the API calls.

use std::time::Duration;

/// What a Lease says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `spec.holderIdentity` (None or empty: free).
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion`: every renewal changes it (compared for change only; the
    /// holder's timestamps are never compared with our clock).
    pub version: Option<String>,
}

impl LeaseRecord {
    fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease exists: create it, holding it.
    Create,
    /// The Lease is free or expired: take it (a conditional update; losing the race is fine).
    Acquire {
        /// `leaseTransitions` to write.
        transitions: i32,
    },
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a live Lease.
    Follow {
        /// The leader.
        holder: String,
    },
}

/// Timings (client-go's defaults are 15 s / 10 s / 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a Lease lasts without renewal.
    pub duration: Duration,
    /// The holder steps down when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often candidates and the holder act.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    /// 10 s / 7 s / 2 s: a new leader within about 12 s of the old one's loss.
    fn default() -> Self {
        LeaseTimings {
            duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(7),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate's view of the Lease.
#[derive(Debug, Clone)]
pub struct Elector {
    identity: String,
    observed: Option<(LeaseRecord, Duration)>,
    renewed: Option<Duration>,
}

impl Elector {
    /// A candidate called `identity` (the pod name).
    pub fn new(identity: impl Into<String>) -> Self {
        Elector { identity: identity.into(), observed: None, renewed: None }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The step for the Lease as just read (`None`: it does not exist), at monotonic time `now`.
    pub fn step(&mut self, lease: Option<&LeaseRecord>, now: Duration) -> Step {
        let Some(lease) = lease else { return Step::Create };
        if self.observed.as_ref().is_none_or(|(seen, _)| seen != lease) {
            self.observed = Some((lease.clone(), now));
        }
        let since = self.observed.as_ref().map_or(now, |(_, at)| *at);
        match lease.holder() {
            Some(h) if h == self.identity => Step::Renew,
            Some(h) if now < since + lease.duration => Step::Follow { holder: h.to_string() },
            Some(_) => Step::Acquire { transitions: lease.transitions + 1 },
            None => Step::Acquire { transitions: lease.transitions + 1 },
        }
    }

    /// Records that our create, acquire or renew succeeded at `now`.
    pub fn succeeded(&mut self, now: Duration) {
        self.renewed = Some(now);
    }

    /// Records that we lost the Lease (a conflict, or someone else's record).
    pub fn lost(&mut self) {
        self.renewed = None;
    }

    /// True while this candidate may act as leader: it renewed within the deadline.
    pub fn is_leader(&self, now: Duration, timings: &LeaseTimings) -> bool {
        self.leading_until(timings).is_some_and(|until| now < until)
    }

    /// When this candidate's leadership ends unless it renews first: its last successful
    /// attempt's start plus the renew deadline (None: it never held the Lease, or lost it).
    /// Measured from the attempt's start, so a slow renewal shortens the term, never extends it.
    pub fn leading_until(&self, timings: &LeaseTimings) -> Option<Duration> {
        self.renewed.map(|at| at + timings.renew_deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            duration: Duration::from_secs(10),
            transitions: 3,
            version: Some(renew.into()),
        }
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn create_acquire_renew_follow_and_take_over_on_our_own_clock() {
        let t = LeaseTimings::default();
        let mut a = Elector::new("op-a");
        assert_eq!(a.step(None, s(0)), Step::Create);
        a.succeeded(s(0));
        assert!(a.is_leader(s(5), &t));
        assert_eq!(a.step(Some(&lease("op-a", "t0")), s(2)), Step::Renew);

        // op-b sees op-a's Lease renewed: it follows, however old the timestamps look.
        let mut b = Elector::new("op-b");
        assert_eq!(b.step(Some(&lease("op-a", "t0")), s(100)), Step::Follow { holder: "op-a".into() });
        assert_eq!(b.step(Some(&lease("op-a", "t1")), s(108)), Step::Follow { holder: "op-a".into() });
        // op-a stops renewing: ten seconds of op-b's clock after the last change, it takes over.
        assert_eq!(b.step(Some(&lease("op-a", "t1")), s(117)), Step::Follow { holder: "op-a".into() });
        assert_eq!(b.step(Some(&lease("op-a", "t1")), s(118)), Step::Acquire { transitions: 4 });
        assert!(!b.is_leader(s(118), &t), "not before its update succeeded");
        b.succeeded(s(118));
        assert!(b.is_leader(s(119), &t));

        // op-a, cut off, steps down at its renew deadline even without reading the Lease.
        assert!(!a.is_leader(s(7), &t));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let mut b = Elector::new("op-b");
        let released =
            LeaseRecord { holder: None, duration: Duration::from_secs(1), transitions: 5, version: None };
        assert_eq!(b.step(Some(&released), s(1)), Step::Acquire { transitions: 6 });
        let mut c = Elector::new("op-c");
        assert_eq!(
            c.step(Some(&LeaseRecord { holder: Some(String::new()), ..released }), s(1)),
            Step::Acquire { transitions: 6 }
        );
        b.succeeded(s(1));
        b.lost();
        assert!(!b.is_leader(s(1), &LeaseTimings::default()));
    }
}
