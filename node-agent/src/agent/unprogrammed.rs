//! Changes taken from the cluster but not yet in the kernel: the counts behind kube-proxy's
//! `*_changes_pending` gauges and the trigger times behind
//! `kubeproxy_network_programming_duration_seconds` (from the EndpointSlice change to the sync
//! that programmed it). A failed sync keeps them for the next; changes older than the agent
//! are not measured, as kube-proxy does not.

use std::time::{Duration, SystemTime};

use tideway_core::cluster::Changes;

/// What the syncs so far took and have not programmed.
#[derive(Debug, Clone)]
pub(super) struct Unprogrammed {
    since: SystemTime,
    service_events: u64,
    endpoint_events: u64,
    triggers: Vec<SystemTime>,
}

impl Unprogrammed {
    /// Nothing pending; trigger times before `since` (the agent's start) are not measured.
    pub(super) fn new(since: SystemTime) -> Unprogrammed {
        Unprogrammed { since, service_events: 0, endpoint_events: 0, triggers: Vec::new() }
    }

    /// A sync took `changes`.
    pub(super) fn take(&mut self, changes: &Changes) {
        self.service_events += changes.service_events;
        self.endpoint_events += changes.endpoint_events;
        self.triggers.extend(changes.trigger_times.iter().filter(|t| **t >= self.since));
    }

    /// A sync programmed everything taken, at `now`: how long each change took to reach the
    /// kernel.
    pub(super) fn programmed(&mut self, now: SystemTime) -> Vec<Duration> {
        self.service_events = 0;
        self.endpoint_events = 0;
        self.triggers.drain(..).map(|t| now.duration_since(t).unwrap_or_default()).collect()
    }

    /// (Service, EndpointSlice) events not programmed yet: those taken and those `queued`.
    pub(super) fn pending(&self, queued: &Changes) -> (u64, u64) {
        (self.service_events + queued.service_events, self.endpoint_events + queued.endpoint_events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn changes_are_pending_until_programmed() {
        let mut u = Unprogrammed::new(at(100));
        let taken = Changes {
            service_events: 2,
            endpoint_events: 3,
            trigger_times: vec![at(90), at(101), at(103)],
            ..Default::default()
        };
        u.take(&taken);
        let queued = Changes { endpoint_events: 1, ..Default::default() };
        assert_eq!(u.pending(&queued), (2, 4));
        // A failed sync: the next one takes more; nothing is lost.
        u.take(&Changes { endpoint_events: 1, trigger_times: vec![at(104)], ..Default::default() });
        assert_eq!(u.pending(&Changes::default()), (2, 4));
        let took = u.programmed(at(105));
        assert_eq!(took, [4, 2, 1].map(Duration::from_secs), "the change before the start is not measured");
        assert_eq!(u.pending(&Changes::default()), (0, 0));
        assert!(u.programmed(at(106)).is_empty());
        // A trigger time ahead of this clock counts as no wait.
        u.take(&Changes { trigger_times: vec![at(200)], ..Default::default() });
        assert_eq!(u.programmed(at(150)), [Duration::ZERO]);
    }
}
